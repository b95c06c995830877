"""Summarise a smoke run folder: wall time and peak host memory per stage, SFT loss, RL reward, and the learning
verdict (held-out accuracy, tool use and score before vs after RL, with 95% intervals).

    python -m retool.smoke.summary --run-dir runs/smoke-...

Reads only what the run left in its folder (logs/stages.tsv, logs/memory.tsv, logs/host.json, logs/failures.jsonl,
the resolved configs, tensorboard/{sft,rl}, sandbox_health.json) and the assets' manifest.json the SFT config points to
(what pre-training the model had and its cost), and writes summary.json and summary.md there. The numbers are what the
end-to-end test asserts on, so a missing input is reported in the summary (and fails the test), never papered over.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from retool.doctor.config import dig
from retool.failures.limits import read_records, totals_sentence
from retool.failures.limits import totals as failure_totals
from retool.trainer_modes import mode_of, off_policy, off_policy_sentence

# verl's tag names, the ones users of the recipe watch.
SFT_LOSS = "train/loss"
RL_TAGS = {
    "reward_mean": "critic/rewards/mean",
    "score_mean": "critic/score/mean",
    "num_turns_mean": "num_turns/mean",
    "response_length_mean": "response_length/mean",
}
VAL_PREFIXES = ("val-core/", "val-aux/")


def read_scalars(logdir: Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar tag under ``logdir`` -> [(step, value)], sorted by step (later writes of a step win)."""
    from retool.report.events import ReportError, read_event_dirs

    try:
        series = read_event_dirs(logdir)
    except ReportError:  # no events: the summary shows the signals as missing
        return {}
    return {tag: [(step, value) for step, (_, value) in sorted(points.items())] for tag, points in series.items()}


def read_text_tags(logdir: Path) -> list[str]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    tags: set[str] = set()
    for events_file in sorted(logdir.rglob("events.out.tfevents.*")):
        acc = EventAccumulator(str(events_file), size_guidance={"tensors": 0})
        acc.Reload()
        tags.update(t for t in acc.Tags().get("tensors", []) if "text_summary" in t or "generations" in t)
    return sorted(tags)


def stage_times(run_dir: Path) -> dict[str, tuple[float, float]]:
    path = run_dir / "logs" / "stages.tsv"
    stages = {}
    if path.is_file():
        for line in path.read_text().splitlines():
            name, start, end = line.split("\t")
            stages[name] = (float(start), float(end))
    return stages


def run_date(stages: dict[str, tuple[float, float]]) -> str | None:
    """The UTC date the run started (its first stage), ISO; None when no stage was recorded."""
    import datetime

    if not stages:
        return None
    start = min(begin for begin, _ in stages.values())
    return datetime.datetime.fromtimestamp(start, datetime.timezone.utc).date().isoformat()


def rl_time(run_dir: Path, stages: dict[str, tuple[float, float]]) -> dict[str, float] | None:
    """Where the RL stage's wall time went, in seconds, from stages.tsv and verl's TensorBoard events: start-up (the
    launcher, Ray, the workers, vLLM, until verl's TensorBoard writer exists, which its file name dates), validation
    before training (until the step-0 metrics), the training steps (verl's timing_s/step, of which generation and
    actor update), validation after training (timing_s/testing) and what is left (shutdown). None without events."""
    from retool.report.events import ReportError, read_event_dirs

    logdir = run_dir / "tensorboard" / "rl"
    if "rl" not in stages or not logdir.is_dir():
        return None
    try:
        series = read_event_dirs(logdir)
    except ReportError:
        return None
    created = min(float(p.name.split(".")[3]) for p in logdir.rglob("events.out.tfevents.*"))
    step0 = [
        wall
        for tag, points in series.items()
        if tag.startswith("val-core/")
        for step, (wall, _) in points.items()
        if step == 0
    ]
    if not step0 or "timing_s/step" not in series:
        return None

    def total(tag: str) -> float:
        return sum(value for _, value in series.get(tag, {}).values())

    start, end = stages["rl"]
    testing = series.get("timing_s/testing", {})
    times = {
        "startup_s": created - start,
        "validation_before_s": max(step0) - created,
        "training_steps_s": total("timing_s/step"),
        "generation_s": total("timing_s/gen"),
        "actor_update_s": total("timing_s/update_actor"),
        "validation_after_s": testing[max(testing)][1] if testing else 0.0,
    }
    times["rest_s"] = (
        (end - start)
        - times["startup_s"]
        - times["validation_before_s"]
        - times["training_steps_s"]
        - times["validation_after_s"]
    )
    return {key: round(value, 1) for key, value in times.items()}


def read_log_line(path: Path) -> str | None:
    """A one-line log file written by run_smoke_cpu.sh, or None when it is missing or empty."""
    return (path.read_text().strip() if path.is_file() else "") or None


def _memory_samples(run_dir: Path) -> list[tuple[float, int]]:
    path = run_dir / "logs" / "memory.tsv"
    samples = []
    if path.is_file():
        for line in path.read_text().splitlines():
            parts = line.split("\t")
            if len(parts) == 2 and parts[1].strip().isdigit():
                samples.append((float(parts[0]), int(parts[1])))
    return samples


def _first_last(points: list[tuple[int, float]]) -> dict[str, float] | None:
    if not points:
        return None
    return {
        "first": points[0][1],
        "last": points[-1][1],
        "steps": len(points),
        "min": min(v for _, v in points),
        "max": max(v for _, v in points),
    }


def _resolved_configs(run_dir: Path) -> dict[str, dict[str, Any]]:
    """The run's resolved configs by stage ({} for a stage that did not get that far), each read once."""
    import yaml

    configs = {}
    for stage in ("sft", "rl"):
        path = run_dir / f"{stage}.resolved.yaml"
        configs[stage] = (yaml.safe_load(path.read_text()) or {}) if path.is_file() else {}
    return configs


def _compute(run_dir: Path, configs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The host (CPU model, flags that decide the dtype), the dtype rule's choice, and the dtypes the configs ran."""
    host_path = run_dir / "logs" / "host.json"
    compute: dict[str, Any] = json.loads(host_path.read_text()) if host_path.is_file() else {}
    compute["sft_dtype"] = dig(configs["sft"], "engine.mixed_precision.param_dtype")
    compute["rl_dtype"] = dig(configs["rl"], "actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype")
    compute["rollout_dtype"] = dig(configs["rl"], "actor_rollout_ref.rollout.dtype")
    return compute


def _pretraining(sft: dict[str, Any]) -> dict[str, Any] | None:
    """The pre-training report of the model SFT started from (retool.smoke.build's manifest beside it)."""
    model = dig(sft, "model.path")
    manifest = Path(model).parent / "manifest.json" if model else None
    if manifest is None or not manifest.is_file():
        return None
    return (json.loads(manifest.read_text()).get("model") or {}).get("pretrain")


def _learning(run_dir: Path, rl: dict[str, Any]) -> dict[str, Any]:
    """First vs last validation on the held-out synthetic set (retool.learning), or why it cannot be said."""
    from retool.learning import LearningDataError, report

    val_files = dig(rl, "data.val_files") or []
    synthetic = next(
        (
            Path(f)
            for f in ([val_files] if isinstance(val_files, str) else val_files)
            if Path(f).name == "rl_val_synthetic.parquet"
        ),
        None,
    )
    try:
        return report(run_dir / "validation", run_dir / "rollouts", synthetic)
    except LearningDataError as exc:
        return {"error": str(exc)}


def summarise(run_dir: Path) -> dict[str, Any]:
    configs = _resolved_configs(run_dir)
    stages = stage_times(run_dir)
    memory = _memory_samples(run_dir)
    baseline = memory[0][1] if memory else 0
    stage_rows = {}
    for name, (start, end) in stages.items():
        inside = [kb for t, kb in memory if start <= t <= end]
        stage_rows[name] = {
            "wall_s": round(end - start, 1),
            "peak_host_mem_gb": round(max(inside) / 2**20, 2) if inside else None,
            "peak_over_start_gb": round((max(inside) - baseline) / 2**20, 2) if inside else None,
        }

    sft = read_scalars(run_dir / "tensorboard" / "sft") if (run_dir / "tensorboard" / "sft").is_dir() else {}
    rl_dir = run_dir / "tensorboard" / "rl"
    rl = read_scalars(rl_dir) if rl_dir.is_dir() else {}
    health_path = run_dir / "sandbox_health.json"
    health = json.loads(health_path.read_text()) if health_path.is_file() else None

    summary: dict[str, Any] = {
        "run_dir": str(run_dir),
        "date": run_date(stages),
        "commit": read_log_line(run_dir / "logs" / "commit.txt"),
        "stages": stage_rows,
        "total_wall_s": round(sum(r["wall_s"] for r in stage_rows.values()), 1),
        "peak_host_mem_gb": round(max(kb for _, kb in memory) / 2**20, 2) if memory else None,
        "compute": _compute(run_dir, configs),
        "pretraining": _pretraining(configs["sft"]),
        "sft": {"loss": _first_last(sft.get(SFT_LOSS, []))},
        "rl": {key: _first_last(rl.get(tag, [])) for key, tag in RL_TAGS.items()},
        "rl_steps": max((len(rl.get(tag, [])) for tag in RL_TAGS.values()), default=0),
        "rl_time": rl_time(run_dir, stages),
        "trainer_mode": mode_of(configs["rl"]),
        "off_policy": off_policy(rl),
        "learning": _learning(run_dir, configs["rl"]),
        "validation": {tag: points for tag, points in sorted(rl.items()) if tag.startswith(VAL_PREFIXES)},
        "text_tags": read_text_tags(rl_dir) if rl_dir.is_dir() else [],
        "rl_tags": sorted(rl),
        "sandbox": health,
        "failures": failure_totals(read_records(run_dir / "logs" / "failures.jsonl")),
    }
    return summary


def _headline_validation_tag(tag: str) -> bool:
    """Accuracy mean@N per data source and the mean number of turns: the validation curves users watch."""
    leaf = tag.rsplit("/", 1)[-1]
    return (("/acc/" in tag or "/num_turns/" in tag) and leaf.startswith("mean@")) or tag == "val-aux/num_turns/mean"


def _fmt(value: Any) -> str:
    if value is None:
        return "missing"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def render_markdown(s: dict[str, Any]) -> str:
    lines = [
        f"# Smoke run summary: {s['run_dir']}",
        "",
        "| stage | wall time (s) | peak host memory in use (GB) |",
        "|---|---|---|",
    ]
    for name, row in s["stages"].items():
        lines.append(f"| {name} | {row['wall_s']} | {_fmt(row['peak_host_mem_gb'])} |")
    compute = s.get("compute") or {}
    lines += [
        f"| total | {s['total_wall_s']} | {_fmt(s['peak_host_mem_gb'])} |",
        "",
        f"Host: {compute.get('cpu_model', 'unknown CPU')}, {compute.get('cores', '?')} cores, flags "
        f"{', '.join(compute.get('flags', [])) or 'unknown'}. Compute dtype `{compute.get('dtype')}` "
        f"({compute.get('dtype_reason')}); ran SFT `{compute.get('sft_dtype')}`, RL actor "
        f"`{compute.get('rl_dtype')}`, vLLM `{compute.get('rollout_dtype')}`.",
        "",
        "| signal | first | last | min | max | points |",
        "|---|---|---|---|---|---|",
    ]
    rows = {"SFT train/loss": s["sft"]["loss"]}
    rows.update({f"RL {RL_TAGS[k]}": v for k, v in s["rl"].items()})
    for label, stats in rows.items():
        if stats is None:
            lines.append(f"| {label} | missing | | | | |")
        else:
            lines.append(
                f"| {label} | {_fmt(stats['first'])} | {_fmt(stats['last'])} | {_fmt(stats['min'])} | "
                f"{_fmt(stats['max'])} | {stats['steps']} |"
            )
    learning = s.get("learning") or {}
    lines += [
        "",
        f"**Verdict: {accuracy_verdict(learning)}**",
        "",
        "Learning signal, held-out synthetic problems, first vs last validation (paired by prompt; "
        "`rose`/`fell` only when the 95% interval excludes 0):",
        "",
    ]
    lines += [f"- {sentence}" for sentence in learning.get("sentences", [])] or [
        f"- not available: {learning.get('error', 'no validation dumps')}"
    ]
    lines += ["", "Validation (step: value):", ""]
    for tag, points in s["validation"].items():
        if _headline_validation_tag(tag):
            lines.append(f"- `{tag}`: " + ", ".join(f"{step}: {value:.3g}" for step, value in points))
    lines += [
        "",
        rl_time_sentence(s.get("rl_time")) + ".",
        "",
        off_policy_sentence(s.get("trainer_mode", "sync"), s.get("off_policy")) + ".",
        "",
        totals_sentence(s.get("failures") or {}) + ".",
    ]
    pretraining = s.get("pretraining")
    if pretraining:
        lines += ["", f"Model: {pretraining_sentence(pretraining)}"]
    health = s.get("sandbox") or {}
    if health:
        lines += [
            "",
            f"Sandbox: isolation `{health.get('isolation')}`, counters `{json.dumps(health.get('counters'))}`",
        ]
    return "\n".join(lines) + "\n"


def render_brief(s: dict[str, Any], markdown: Path) -> str:
    """The summary in a few lines: the learning verdict and its signals, failures, where the whole summary is."""
    learning = s.get("learning") or {}
    lines = [f"Verdict: {accuracy_verdict(learning)}"]
    lines += [f"  {sentence}" for sentence in learning.get("sentences", []) if not sentence.startswith("acc ")]
    lines += [totals_sentence(s.get("failures") or {}) + ".", f"The whole summary (times, memory, curves): {markdown}"]
    return "\n".join(lines)


def accuracy_verdict(learning: dict[str, Any]) -> str:
    """One line: did held-out accuracy rise under RL, with its interval (or why that cannot be said)."""
    acc = (learning.get("changes") or {}).get("acc")
    if not acc:
        return f"held-out accuracy not measured ({learning.get('error', 'no acc in the validation dumps')})"
    return (
        f"held-out accuracy {acc['verdict']}: {acc['before']:.3f} -> {acc['after']:.3f} "
        f"({acc['delta']:+.3f}, 95% CI [{acc['low']:+.3f}, {acc['high']:+.3f}], {acc['prompts']} prompts)"
    )


def rl_time_sentence(times: dict[str, float] | None) -> str:
    if not times:
        return "RL stage time: not broken down (no TensorBoard events)"
    return (
        f"RL stage time: start-up (Ray, workers, vLLM) {times['startup_s']:.0f} s, validation before training "
        f"{times['validation_before_s']:.0f} s, training steps {times['training_steps_s']:.0f} s (generation "
        f"{times['generation_s']:.0f} s, actor update {times['actor_update_s']:.0f} s), validation after "
        f"{times['validation_after_s']:.0f} s, shutdown and the rest {times['rest_s']:.0f} s"
    )


def pretraining_sentence(pretraining: dict[str, Any]) -> str:
    """What the model was pre-trained on before SFT and what that cost (once: the model ships in assets/smoke_model
    and is cached with the assets)."""
    opts, copy = pretraining["options"], pretraining["copy_after"]
    host = pretraining.get("host") or {}
    where = "shipped in assets/smoke_model" if pretraining.get("shipped") else "cached with the assets"
    return (
        f"pre-trained once ({opts['steps']} steps x {opts['batch_size']} tool-using conversations, "
        f"{pretraining['train_seconds']:.0f} s in float32 on {host.get('cpu_model', 'an unrecorded host')} with "
        f"{host.get('cores', '?')} cores, {where}); held-out digit runs copied exactly "
        f"{copy['digit_runs_exact']:.2f} (before pre-training "
        f"{pretraining['copy_before']['digit_runs_exact']:.2f})"
    )


def render_performance(s: dict[str, Any], label: str) -> str:
    """A docs/performance.md section: the host, the dtype it got, and each stage's wall time and memory, dated by the
    run itself."""
    compute = s.get("compute") or {}
    limits = compute.get("isa_limits") or {}
    emulated = f" with {', '.join(f'{k}={v}' for k, v in limits.items())}" if limits else ""
    sft_steps = (s["sft"]["loss"] or {}).get("steps")
    sft_wall = (s["stages"].get("sft") or {}).get("wall_s")
    lines = [
        f"### CPU smoke run: {label}",
        "",
        f"Measured {s.get('date') or 'on an unrecorded date'} by `./run_smoke_cpu.sh` at commit "
        f"{s.get('commit') or '(not recorded)'} on "
        f"{compute.get('cpu_model', 'unknown CPU')}, {compute.get('cores', '?')} cores{emulated}; "
        f"CPU flags that decide the dtype: {', '.join(compute.get('flags', [])) or 'none of them'}. "
        f"Compute dtype `{compute.get('dtype')}` ({compute.get('dtype_reason')}).",
        "",
        "| stage | wall time (s) | peak host memory in use (GB) |",
        "|---|---|---|",
    ]
    for name, row in s["stages"].items():
        extra = f" ({sft_steps} steps, {sft_wall / sft_steps:.2f} s/step)" if name == "sft" and sft_steps else ""
        extra = f" ({s['rl_steps']} steps + 2 validations)" if name == "rl" else extra
        lines.append(f"| {name}{extra} | {row['wall_s']} | {_fmt(row['peak_host_mem_gb'])} |")
    lines += [
        f"| total | {s['total_wall_s']} ({s['total_wall_s'] / 60:.1f} min) | {_fmt(s['peak_host_mem_gb'])} |",
        "",
        f"Its RL stage's {accuracy_verdict(s.get('learning') or {})}. {rl_time_sentence(s.get('rl_time'))}.",
        "",
    ]
    if s.get("pretraining"):
        lines += [f"Model: {pretraining_sentence(s['pretraining'])}.", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Summarise a smoke run folder (writes summary.json, summary.md)")
    parser.add_argument("--run-dir", type=Path, required=True)
    parser.add_argument(
        "--performance",
        type=Path,
        default=None,
        help="also write this run's timings as a section of this file (docs/performance.md)",
    )
    parser.add_argument("--label", default=None, help="the section's name, e.g. 'AVX2-only host' (with --performance)")
    parser.add_argument(
        "--brief",
        action="store_true",
        help="print only the verdicts and where summary.md is (the smoke's console stays short)",
    )
    args = parser.parse_args(argv)
    if args.performance is not None and not args.label:
        parser.error("--performance needs --label")
    if not args.run_dir.is_dir():
        print(f"error: run folder {args.run_dir} does not exist", file=sys.stderr)
        return 1
    summary = summarise(args.run_dir)
    (args.run_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    markdown = render_markdown(summary)
    (args.run_dir / "summary.md").write_text(markdown)
    print(render_brief(summary, args.run_dir / "summary.md") if args.brief else markdown)
    if args.performance is not None:
        from retool.markdown_sections import replace_section, slug

        replace_section(args.performance, f"smoke-{slug(args.label)}", render_performance(summary, args.label))
    return 0


if __name__ == "__main__":
    sys.exit(main())
