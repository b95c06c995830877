"""The checklist's lines about what the run left on disk: its config against the full run's, the checkpoints (and
which ranks wrote them), the resume of a shakedown and the merged SFT model."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from retool.checklist import OK, SKIP, Check
from retool.constants import REPO_ROOT
from retool.doctor.config import dig
from retool.resume import RESUME_FREE, config_differences, flatten
from retool.shakedown.lines import span, verdict
from retool.doctor.config import planned_steps
from retool.shakedown.relaunch import prompt_digests
from retool.shakedown.runfolder import MERGED, Run, Stage


def check_config(run: Run) -> Check:
    if run.kind != "shakedown":
        return Check(
            SKIP, "config", f"a {run.kind or 'plain'} run is its own full run: there is no other config to compare with"
        )
    found = Check(OK, "config")
    for name, stage in run.stages.items():
        if stage.full_config is None:
            found.bad(
                f"{name}: no shakedown/{name}.full.yaml (the launch writes it): cannot tell the shakedown "
                "ran the full run's config"
            )
            continue
        allowed = tuple(flatten(yaml.safe_load((REPO_ROOT / "configs" / "shakedown" / f"{name}.yaml").read_text())))
        differ = [d.split(":")[0] for d in config_differences(stage.full_config, stage.config)]
        other = [key for key in differ if not key.startswith(allowed)]
        if other:
            found.bad(
                f"{name}: differs from the full run's config beyond the shakedown's keys: " + ", ".join(other[:8])
            )
        else:
            found.ok(f"{name}: the full run's config except {', '.join(differ) or 'nothing'}")
    found.ok("(the worker environment and resume settings may differ too: " + ", ".join(RESUME_FREE) + ")")
    return found


def shard_ranks(folder: Path) -> tuple[int | None, set[int]]:
    """World size and ranks of the model shards verl's FSDP checkpoint wrote in ``folder``."""
    sizes, ranks = set(), set()
    for path in folder.glob("model_world_size_*_rank_*.pt"):
        match = re.fullmatch(r"model_world_size_(\d+)_rank_(\d+)\.pt", path.name)
        if match:
            sizes.add(int(match[1]))
            ranks.add(int(match[2]))
    return (sizes.pop() if len(sizes) == 1 else None), ranks


def model_folder(stage: Stage) -> Path | None:
    step = stage.latest_checkpoint()
    if step is None:
        return None
    folder = stage.checkpoint_dir / f"global_step_{step}"
    return folder / "actor" if stage.name == "rl" else folder


def check_devices(run: Run) -> Check:
    found = Check(OK, "devices")
    for name, stage in run.stages.items():
        nodes = int(dig(stage.config, "trainer.nnodes", 1))
        per_node = int(dig(stage.config, "trainer.n_gpus_per_node", 1))
        device, wanted = dig(stage.config, "trainer.device", "?"), nodes * per_node
        folder = model_folder(stage)
        size, ranks = shard_ranks(folder) if folder else (None, set())
        planned = f"config: {nodes} node{'s' if nodes > 1 else ''} x {per_node} {device}"
        if size is None:
            found.bad(f"{name}: no checkpoint shards to tell which ranks trained ({planned})")
        elif size != wanted or ranks != set(range(size)):
            found.bad(f"{name}: {len(ranks)} of {size} ranks wrote {folder.name} ({planned}, {wanted} expected)")
        else:
            found.ok(
                f"{name}: {size} of {size} {device} ranks wrote their shards of "
                f"{folder.relative_to(stage.checkpoint_dir)} ({planned})"
            )
    return found


def checkpoint_parts(folder: Path) -> list[str]:
    size, ranks = shard_ranks(folder)
    parts = [f"{len(ranks)} model shard{'s' if len(ranks) > 1 else ''}"] if ranks else []
    parts += [
        what
        for what, pattern in (("optimizer", "optim_world_size_*"), ("extra state", "extra_state_*"))
        if any(folder.glob(pattern))
    ]
    if (folder / "huggingface" / "config.json").is_file():
        parts.append("huggingface/")
    return parts


def folder_gb(folder: Path) -> float:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) / 1e9


def check_checkpoints(run: Run) -> Check:
    found = Check(OK, "checkpoint")
    for name, stage in run.stages.items():
        step, wanted = stage.latest_checkpoint(), planned_steps(stage.config)
        folder = model_folder(stage)
        if step is None or folder is None or not folder.is_dir():
            found.bad(
                f"{name}: no checkpoint in {stage.checkpoint_dir} (latest_checkpointed_iteration.txt "
                "names none, or its folder is gone)"
            )
            continue
        parts = checkpoint_parts(folder)
        data = [p.name for p in folder.parent.glob("data*.pt")] + [p.name for p in folder.glob("data*.pt")]
        lacking = [part for part in ("model shard", "optimizer", "extra state") if not any(part in p for p in parts)]
        if (
            name == "sft"
            and "hf_model" in (dig(stage.config, "checkpoint.save_contents") or [])
            and "huggingface/" not in parts
        ):
            lacking.append("huggingface/")
        if not data:
            lacking.append("the dataloader state (data*.pt)")
        where = f"{name}: global_step_{step}" + ("/actor" if name == "rl" else "")
        if lacking or step != wanted:
            found.bad(
                f"{where} lacks {', '.join(lacking)}"
                if lacking
                else f"{where}: the last checkpoint is step {step}, not the last step {wanted}"
            )
        else:
            found.ok(
                f"{where} ({', '.join(parts)}; {', '.join(sorted(set(data)))}; "
                f"{folder_gb(folder.parent if name == 'rl' else folder):.2f} GB)"
            )
    return found


def check_resume(run: Run) -> Check:
    if run.kind != "shakedown":
        return Check(
            SKIP,
            "resume",
            f"a {run.kind or 'plain'} run is not asked to resume; a SHAKEDOWN=1 run ends "
            "its first RL launch at step 1's checkpoint, resumes from it and must",
        )
    stage, record = run.stages.get("rl"), run.resume
    if stage is None or record is None:
        return verdict(
            "resume",
            [
                "no shakedown/resume.json: the first RL launch did not end at step 1's checkpoint "
                "to be launched again (did it fail? logs/rl.log)"
            ],
            [],
        )
    found = Check(OK, "resume")
    back, at = int(record["stopped_after"]), float(record["stopped_at"])
    last = back + 1
    first = record.get("first_launch", {})
    found.ok(f"the first launch saved step {span(first.get('saved', []))} and ended")
    relaunches = [r for r in stage.starts if r.get("resume") and float(r.get("time", 0)) >= at]
    if not relaunches or not record.get("resumed"):
        found.bad("no launch resumed after it (logs/launches.jsonl), or that launch did not end well")
    log = run.folder / "logs" / "rl.log"
    resumed_from = stage.checkpoint_dir / f"global_step_{back}"
    if log.is_file() and f"Resuming from {resumed_from}".encode() in log.read_bytes():
        found.ok(f"the relaunch loaded global_step_{back} (logs/rl.log: 'Resuming from .../global_step_{back}')")
    else:
        found.bad(f"logs/rl.log never says verl resumed from {resumed_from}")
    before = {p.step for p in stage.events.points if p.tag == "timing_s/step" and stage.events.created[p.file] < at}
    after = {p.step for p in stage.events.points if p.tag == "timing_s/step" and stage.events.created[p.file] >= at}
    if before != {back} or after != {last}:
        found.bad(
            f"the first launch logged steps {span(before)} and the relaunch {span(after)}: expected step "
            f"{back}, then step {last} alone"
        )
    else:
        found.ok(f"logged step {last} alone")
    saved = stage.checkpoint_dir / f"global_step_{last}"
    if stage.latest_checkpoint() == last and saved.is_dir() and saved.stat().st_mtime >= at:
        found.ok(f"and saved global_step_{last}")
    else:
        found.bad(f"global_step_{last} was not saved by the relaunch")
    dumps = Path(dig(stage.config, "trainer.rollout_data_dir") or run.folder / "rollouts")
    now, earlier = set(prompt_digests(dumps / f"{last}.jsonl")), set(first.get("prompts", {}).get(str(back), []))
    if dig(stage.config, "trainer.v1.trainer_mode", "sync") != "sync":
        found.ok("prompts not compared: in the async trainer modes a step's trajectories come from more than one batch")
    elif now and earlier and not now & earlier:
        found.ok(
            f"its step {last} drew {len(now)} prompts, none of step {back}'s: the dataloader went on where it "
            "stopped (started afresh, verl's sampler redraws step 1's batch: it starts from the same seed)"
        )
    else:
        found.bad(
            f"the resumed step {last} drew {len(now & earlier)} of step {back}'s {len(earlier)} prompts "
            f"(rollouts/{last}.jsonl): the dataloader's state was not restored"
        )
    return found


def check_merge(run: Run) -> Check:
    if run.kind not in ("shakedown", "smoke"):
        return Check(
            SKIP, "merge", "a plain run does not merge: each SFT checkpoint keeps a Hugging Face copy (huggingface/)"
        )
    record, sft = run.merge, run.stages.get("sft")
    if record is None:
        return verdict(
            "merge",
            [
                "no logs/merge.json: the SFT checkpoint was not merged and loaded "
                "(python -m retool.shakedown.merge --run-dir RUN_DIR)"
            ],
            [],
        )
    failures = []
    if sft is not None and record.get("step") != sft.latest_checkpoint():
        failures.append(
            f"merged step {record.get('step')}, but the SFT stage's last checkpoint is {sft.latest_checkpoint()}"
        )
    if not record.get("logits_finite"):
        failures.append(f"{record.get('model')} loads, but its logits are not finite")
    evidence = [
        f"{Path(record['model']).name}/ from SFT global_step_{record.get('step')} ({record.get('merge_s')} s): "
        f"{', '.join(record.get('architectures') or ['?'])}, {record.get('parameters', 0) / 1e6:.1f} M "
        f"parameters, {record.get('dtype')}, loaded in {record.get('load_s')} s, finite logits"
    ]
    rl = run.stages.get("rl")
    if rl is not None:
        model = Path(str(dig(rl.config, "actor_rollout_ref.model.path", "")))
        if model.resolve() == (run.folder / MERGED).resolve():
            steps = rl.events.series("timing_s/step")
            if steps:
                evidence.append(f"RL started from it and trained {len(steps)} steps")
            else:
                failures.append("RL was set to start from the merge but logged no step")
        else:
            evidence.append(f"RL started from {model}, not from this merge")
    return verdict("merge", failures, evidence)
