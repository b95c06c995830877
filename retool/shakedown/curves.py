"""The checklist's lines about what the run logged: its steps, TensorBoard tags, validation, tool calls, reward
fields, failure records and peak memory (verl's TensorBoard events, logs/failures.jsonl, logs/launches.jsonl, the
stage logs and the smoke's logs/memory.tsv)."""

from __future__ import annotations

import math
import re
from pathlib import Path

from retool.checklist import OK, Check
from retool.doctor.config import dig
from retool.failures.causes import CAUSES
from retool.failures.limits import DEFAULTS, totals, totals_sentence
from retool.shakedown.lines import expected_steps, required_stages, span, verdict
from retool.shakedown.runfolder import Run, Stage
from retool.tool_outcomes import OUTCOME_KEYS

# retool.reward.compute_score's numeric fields: verl logs them as train-reward/<field>/mean (patch 0004)
REWARD_FIELDS = ("score", "acc", "acc_strict_box", "acc_normalized", "has_answer", "num_turns")
SFT_TAGS = ("train/loss", "train/lr", "train/grad_norm", "perf/max_memory_allocated_gb", "perf/max_memory_reserved_gb")
RL_TAGS = (
    "critic/score/mean",
    "critic/rewards/mean",
    "num_turns/mean",
    "response_length/mean",
    "actor/pg_loss",
    "actor/grad_norm",
    "timing_s/step",
    "timing_s/gen",
    "actor/perf/max_memory_allocated_gb",
    "actor/perf/max_memory_reserved_gb",
    "failures/share",
    "failures/total/all",
    *(f"failures/total/{cause}" for cause in CAUSES),
    *(f"train-reward/{key}/mean" for key in OUTCOME_KEYS),
    *(f"train-reward/{key}/mean" for key in REWARD_FIELDS),
)
MEMORY_TAGS = {"sft": "perf/max_memory_{}_gb", "rl": "actor/perf/max_memory_{}_gb"}
DEVICE_TOTAL = re.compile(rb"device memory used/total \(GB\): [0-9.]+/([0-9.]+)")


def launch_minutes(stage: Stage) -> str:
    ends = {float(r["start"]): float(r["time"]) for r in stage.ends if "start" in r and "time" in r}
    starts = [float(r["start"]) for r in stage.starts if "start" in r]
    resumed = sum(1 for r in stage.starts if r.get("resume"))
    took = sum(ends[s] - s for s in starts if s in ends)
    if not starts:
        return "launches not recorded (no logs/launches.jsonl)"
    what = f"{len(starts)} launch{'es' if len(starts) != 1 else ''}"
    if resumed:
        what += f" ({resumed} resumed)"
    return what + (f", {took / 60:.1f} min" if ends else "")


def check_stages(run: Run) -> Check:
    found = Check(OK, "stages")
    for name in required_stages(run):
        stage = run.stages.get(name)
        if stage is None:
            found.bad(f"{name}: not run in this folder (no {name}.resolved.yaml)")
            continue
        tag = "train/loss" if name == "sft" else "timing_s/step"
        logged, wanted = set(stage.events.series(tag)), expected_steps(stage)
        missing = [k for k in wanted if k not in logged]
        text = f"{name}: steps {span(logged)} of {len(wanted) or '?'} logged, {launch_minutes(stage)}"
        (found.bad if missing or not wanted else found.ok)(
            text + (f"; steps {span(missing)} missing: the stage did not finish (logs/{name}.log)" if missing else "")
        )
    return found


def check_tensorboard(run: Run) -> Check:
    found = Check(OK, "tensorboard")
    for name, stage in run.stages.items():
        tags = list(SFT_TAGS if name == "sft" else RL_TAGS)
        if name == "sft" and dig(stage.config, "data.val_files"):
            tags.append("val/loss")
        steps = expected_steps(stage)
        problems = []
        for tag in tags:
            counts = stage.events.counts(tag)
            if tag == "val/loss":
                if not counts:
                    problems.append(f"{tag} never logged")
                continue
            absent = [k for k in steps if counts[k] == 0]
            twice = [k for k in steps if counts[k] > 1]
            if absent:
                problems.append(f"{tag} missing at step{'s' if len(absent) > 1 else ''} {span(absent)}")
            if twice:
                problems.append(f"{tag} logged more than once at step {span(twice)}")
        if problems:
            found.bad(
                f"{name} ({stage.events.created and 'tensorboard/' + name or 'no event files'}): "
                + "; ".join(problems[:6])
                + (f"; and {len(problems) - 6} more" if len(problems) > 6 else "")
            )
        else:
            found.ok(
                f"{name}: {len(tags)} tags at each of steps {span(steps)}, once each "
                f"({len(stage.events.tags)} tags in all)"
            )
    return found


def validation_tags(stage: Stage) -> dict[str, list[str]]:
    """data source -> its val-core accuracy tags (val-core/<source>/acc/mean@<n>)."""
    out: dict[str, list[str]] = {}
    for tag in sorted(stage.events.matching("val-core/")):
        parts = tag.split("/")
        if len(parts) >= 4 and "/mean@" in tag:
            out.setdefault(parts[1], []).append(tag)
    return out


def check_validation(run: Run) -> Check:
    stage = run.stages.get("rl")
    if stage is None:
        return verdict("validation", ["no RL stage in this folder"], [])
    by_source = validation_tags(stage)
    if not by_source:
        return verdict("validation", ["no val-core/<data source>/.../mean@<n> tag: the RL stage never validated"], [])
    evidence, failures = [], []
    val_records = {r["step"]: r for r in run.failures if r.get("partition") == "val" and "step" in r}
    for source, tags in by_source.items():
        series = stage.events.series(tags[0])
        aux = [f"val-aux/{source}/{field}/" for field in ("num_turns", "score", "tool_calls")]
        lacking = [prefix.rstrip("/") for prefix in aux if not stage.events.matching(prefix)]
        if lacking:
            failures.append(f"{source}: no {', '.join(lacking)} curves")
        values = ", ".join(f"step {k}: {v:.3f}" for k, v in series.items())
        evidence.append(f"{source}: {tags[0]} = {values}")
    for step, record in sorted(val_records.items()):
        evidence.append(f"step {step}: {record['expected']} trajectories validated (logs/failures.jsonl)")
    return verdict("validation", failures, evidence)


def rl_trajectories(stage: Stage) -> int:
    return int(dig(stage.config, "data.train_batch_size", 0)) * int(dig(stage.config, "actor_rollout_ref.rollout.n", 1))


def check_tool_calls(run: Run) -> Check:
    stage = run.stages.get("rl")
    if stage is None:
        return verdict("tool calls", ["no RL stage in this folder"], [])
    per_step = rl_trajectories(stage)
    counts = {
        key: round(sum(stage.events.series(f"train-reward/{key}/mean").values()) * per_step) for key in OUTCOME_KEYS
    }
    steps = len(stage.events.series("train-reward/tool_calls/mean"))
    mix = ", ".join(f"{key.removeprefix('tool_')} {n}" for key, n in counts.items() if key != "tool_calls")
    text = f"training: {counts['tool_calls']} calls in {steps} steps of {per_step} trajectories ({mix})"
    last_mean = {}  # data source -> calls per trajectory at its last validation
    for tag in stage.events.matching("val-aux/"):
        if re.fullmatch(r"val-aux/[^/]+/tool_calls/mean@\d+", tag):
            last_mean[tag.split("/")[1]] = list(stage.events.series(tag).values())[-1]
    val_text = "validation: " + (
        ", ".join(f"{source} {value:.2f} calls per trajectory" for source, value in sorted(last_mean.items()))
        or "no val-aux/<source>/tool_calls curve"
    )
    failures = []
    if not steps:
        failures.append("no train-reward/tool_calls/mean curve (patch 0004 logs it)")
    elif counts["tool_calls"] == 0:
        failures.append(
            "the model made no tool call in any training step: the tool, its schema in the prompt or "
            "the chat template's tool-call format is broken (see a trajectory in rollouts/ or "
            "TensorBoard's TEXT tab)"
        )
    elif counts["tool_ok"] == 0:
        failures.append("no tool call ran successfully: check the sandbox (retool-doctor --sandbox-url ...)")
    return verdict("tool calls", failures, [text, val_text])


def check_reward(run: Run) -> Check:
    stage = run.stages.get("rl")
    if stage is None:
        return verdict("reward", ["no RL stage in this folder"], [])
    failures, shown = [], {"verl": [], "reward fields": []}
    for tag in ("critic/score/mean", "num_turns/mean", *(f"train-reward/{f}/mean" for f in REWARD_FIELDS)):
        series = stage.events.series(tag)
        if not series:
            failures.append(f"{tag} missing")
        elif not all(math.isfinite(value) for value in series.values()):
            failures.append(f"{tag} is not a finite number at every step")
        else:
            where = "reward fields" if tag.startswith("train-reward/") else "verl"
            shown[where].append(
                f"{tag.removeprefix('train-reward/').removesuffix('/mean')} {list(series.values())[-1]:.3f}"
            )
    val_turns = sorted(tag for tag in stage.events.matching("val-aux/") if "/num_turns/mean@" in tag)
    if not val_turns:
        failures.append("no val-aux/<source>/num_turns/mean@<n>: validation trajectories lack num_turns")
    last = max(stage.events.series("critic/score/mean") or {0: 0})
    return verdict(
        "reward",
        failures,
        [
            f"at step {last}: "
            + "; ".join(f"{where}: {', '.join(values)}" for where, values in shown.items() if values),
            "validation: " + ", ".join(val_turns),
        ],
    )


def latest_records(records: list[dict]) -> list[dict]:
    """One record per (partition, step), the last written (a resumed step is counted again), and the stop record."""
    kept: dict[tuple, dict] = {}
    for record in records:
        kept[("stop",) if record.get("stop") else (record.get("partition"), record.get("step"))] = record
    return list(kept.values())


def check_failures(run: Run) -> Check:
    stage = run.stages.get("rl")
    if stage is None:
        return verdict("failures", ["no RL stage in this folder"], [])
    records = latest_records(run.failures)
    summed = totals(records)
    failures = []
    if not records:
        failures.append("no logs/failures.jsonl: the failure accounting did not run (configs/rl.yaml's sampler)")
    trained = {r["step"] for r in records if r.get("partition") == "train"}
    missing = [k for k in expected_steps(stage) if k not in trained]
    if records and missing:
        failures.append(f"no failure record for training step{'s' if len(missing) > 1 else ''} {span(missing)}")
    if summed["stop"]:
        message = str(summed["stop"].get("message", "")).splitlines()
        failures.append(
            f"the failure accounting stopped the run at step {summed['stop'].get('step')} "
            f"({summed['stop'].get('reason')}): " + (message[0] if message else "")
        )
    limit = float(
        dig(stage.config, "trainer.v1.sampler.sampler_kwargs.max_sustained_share", DEFAULTS["max_sustained_share"]) or 0
    )
    train = summed.get("train")
    if train and train["expected"] and limit and train["failed"] / train["expected"] > limit:
        failures.append(
            f"{train['failed']} of {train['expected']} training trajectories failed, more than "
            f"max_sustained_share {limit:g}: the full run would stop after a few steps"
        )
    shares = stage.events.series("failures/share")
    unlogged = [k for k in expected_steps(stage) if k not in shares]
    if unlogged:
        failures.append(f"TensorBoard failures/share missing at steps {span(unlogged)}")
    evidence = [
        totals_sentence(summed),
        "TensorBoard failures/share per step: " + (", ".join(f"{k}: {v:.3f}" for k, v in shares.items()) or "missing"),
    ]
    return verdict("failures", failures, evidence)


def device_total_gb(log: Path) -> float | None:
    if not log.is_file():
        return None
    totals_gb = [float(m) for m in DEVICE_TOTAL.findall(log.read_bytes())]
    return max(totals_gb) if totals_gb else None


def host_peak_gb(folder: Path) -> float | None:
    path = folder / "logs" / "memory.tsv"
    if not path.is_file():
        return None
    used = [int(line.split("\t")[1]) for line in path.read_text().splitlines() if line.count("\t") == 1]
    return max(used) / 1024**2 if used else None


def check_memory(run: Run) -> Check:
    found = Check(OK, "memory")
    for name, stage in run.stages.items():
        allocated = stage.events.series(MEMORY_TAGS[name].format("allocated"))
        reserved = stage.events.series(MEMORY_TAGS[name].format("reserved"))
        missing = [k for k in expected_steps(stage) if k not in allocated or k not in reserved]
        if not allocated or missing:
            found.bad(
                f"{name}: {MEMORY_TAGS[name].format('allocated|reserved')} missing at steps "
                f"{span(missing) if allocated else 'all'}"
            )
            continue
        total = device_total_gb(run.folder / "logs" / f"{name}.log")
        size = f"; of {total:.1f} GB" if total else ""
        found.ok(
            f"{name}: at most {max(allocated.values()):.2f} GB allocated, {max(reserved.values()):.2f} GB "
            f"reserved on a device (rank 0's, as verl reports it{size})"
        )
    host = host_peak_gb(run.folder)
    if host is not None:
        found.ok(f"host: {host:.1f} GB in use at most (logs/memory.tsv)")
    return found
