"""sync vs colocate_async vs separate_async, side by side on this machine, and a paper model of the reference run.

Runs the smoke's RL stage (its SFT'd tiny model, data, tool, sandbox and correctness reward: ``+smoke=rl``) once
per trainer mode at one config: ``--steps`` GRPO steps of 8 prompts x n=4, no validation, nothing else changed
(separate_async gives the trainer and the rollout one bookkeeping device each, which on this host are the same
cores). From verl's TensorBoard events of each run (retool.trainer_modes), skipping step 1 (the async pipelines fill
there): seconds per step, trajectories per hour, where a step's time went (generation or waiting for it, update,
weight sync, the rest) and how stale the trained data was. Then the paper model for the reference run on 16 dies
(``paper_model``): each mode's step time from the reference's shapes and per-die rates. Both go into
docs/performance.md (section ``async-modes``).

    python bench/async_modes.py [--smoke-run runs/smoke-x] [--steps 8]     # make bench-async
    python bench/async_modes.py --from-runs runs/async-modes-<time>        # render finished runs again

Without ``--smoke-run`` it takes the newest finished runs/smoke-*/ (bench/learning_signal.py's rule), or runs the
smoke first.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
from pathlib import Path
from typing import Any

from retool.constants import REPO_ROOT
from retool.markdown_sections import replace_section
from retool.smoke import learning_run
from retool.smoke.summary import read_scalars
from retool.trainer_modes import MODES, mode_of, off_policy, step_times

SECTION = "async-modes"
FIRST_STEP = 2  # step 1 fills the async pipelines (and warms every cache): left out of the per-step means

# The reference run on one node of 8 x Atlas A3 (16 dies), with where each number comes from. Rates are the same
# paper estimates as the README's wall-time estimate; no number here was measured on an NPU.
REFERENCE = {
    "dies": 16,
    "rollout_dies": 8,
    "rollout_tp": 4,  # separate_async's split (docs/training.md)
    "trajectories": 64 * 16,  # train_batch_size x rollout.n (configs/rl.yaml)
    "prompt_tokens": 600,  # estimate: a DAPO-Math question with the system prompt and tool schema
    "response_tokens": 4000,  # README's estimate of a mean RL response (model and tool tokens)
    "max_response_tokens": 16384,  # the budget (data.max_response_length): the slowest trajectory's length
    "gflop_per_token": 8.0,  # README: Qwen3-4B forward, ~2 x 4B parameters
    "die_tflops": 400.0,  # README: bf16 peak per die
    "mfu": 0.25,  # README: RL update with offload
    "decode_tokens_per_s_per_die": 2000.0,  # README: decoded tokens per second per die at full batch
    "single_stream_tokens_per_s": 50.0,  # estimate: one sequence alone on a TP-4 replica (~20 ms per token)
    "weight_sync_s": 5.0,  # estimate: 8 GB of bf16 weights, in-node (IPC when colocated, HCCL apart)
    "max_off_policy_threshold": 10,  # configs/trainer_mode/rl/*_async.yaml
}
SOURCES = {
    "dies": "one Atlas A3 node",
    "rollout_dies": "ROLLOUT_DEVICES' default, half",
    "rollout_tp": "configs/rl.yaml",
    "trajectories": "configs/rl.yaml",
    "prompt_tokens": "estimate",
    "response_tokens": "README estimate",
    "max_response_tokens": "configs/rl.yaml",
    "gflop_per_token": "README",
    "die_tflops": "README",
    "mfu": "README",
    "decode_tokens_per_s_per_die": "README",
    "single_stream_tokens_per_s": "estimate",
    "weight_sync_s": "estimate",
    "max_off_policy_threshold": "configs/trainer_mode/rl",
}


def paper_model(ref: dict[str, Any] = REFERENCE) -> dict[str, dict[str, float]]:
    """Seconds per step of each mode on ``ref["dies"]`` dies, with the parts, from these rules:

    - generation of one batch, throughput-bound: all response tokens / (dies x decode rate per die);
    - the slowest trajectory, latency-bound: max_response_tokens / single-stream rate;
    - update: 3 forward passes' FLOPs (forward + backward) over every token / (dies x peak x MFU); sync also
      recomputes the old log-probs (one more forward), the async modes train on the rollout's (bypass_mode).
    sync waits for the slowest trajectory, then updates, then syncs. colocate_async keeps a second batch in flight,
    so a step generates one batch's worth of tokens at full throughput while stragglers carry over, then updates
    on all dies. separate_async overlaps: the rollout's dies generate while the trainer's dies update and sync;
    the step is the slower of the two. With two batches in flight, each trajectory decodes at the rollout's rate
    shared by all of them; ``span_mean`` and ``span_max`` are the model versions a trajectory of the mean and of
    the budget's length spans (1 + its decode time / the rollout's running time per step), and ``tail_fits`` says
    whether the longest stays within max_off_policy_threshold; if not, the trainer waits for it (strategy wait).
    """
    tokens = ref["trajectories"] * (ref["prompt_tokens"] + ref["response_tokens"])
    per_die_flops = ref["die_tflops"] * 1e12 * ref["mfu"]

    def generate(dies: int) -> float:
        return ref["trajectories"] * ref["response_tokens"] / (dies * ref["decode_tokens_per_s_per_die"])

    def forwards(count: int, dies: int) -> float:
        return count * ref["gflop_per_token"] * 1e9 * tokens / (dies * per_die_flops)

    dies, rollout = ref["dies"], ref["rollout_dies"]
    tail = ref["max_response_tokens"] / ref["single_stream_tokens_per_s"]
    sync_s = ref["weight_sync_s"]
    modes = {
        "sync": {"generation_s": max(generate(dies), tail), "update_s": forwards(4, dies), "weight_sync_s": sync_s},
        "colocate_async": {"generation_s": generate(dies), "update_s": forwards(3, dies), "weight_sync_s": sync_s},
        "separate_async": {
            "generation_s": generate(rollout),
            "update_s": forwards(3, dies - rollout),
            "weight_sync_s": sync_s,
        },
    }
    for name, parts in modes.items():
        if name == "separate_async":
            parts["step_s"] = max(parts["generation_s"], parts["update_s"] + parts["weight_sync_s"])
            parts["idle_trainer_share"] = 1 - (parts["update_s"] + parts["weight_sync_s"]) / parts["step_s"]
        else:
            parts["step_s"] = parts["generation_s"] + parts["update_s"] + parts["weight_sync_s"]
        parts["speedup"] = modes["sync"]["step_s"] / parts["step_s"]
        if name == "sync":
            parts.update(span_mean=1.0, span_max=1.0, tail_fits=True)
            continue
        rollout_dies = rollout if name == "separate_async" else dies
        per_sequence = rollout_dies * ref["decode_tokens_per_s_per_die"] / (2 * ref["trajectories"])
        running = parts["step_s"] if name == "separate_async" else parts["generation_s"]
        parts["span_mean"] = 1 + ref["response_tokens"] / per_sequence / running
        parts["span_max"] = 1 + ref["max_response_tokens"] / per_sequence / running
        parts["tail_fits"] = parts["span_max"] <= ref["max_off_policy_threshold"]
    modes["tail_s"] = {"value": tail}
    return modes


def splits(ref: dict[str, Any] = REFERENCE) -> dict[int, float]:
    """separate_async's predicted step time for every split whose rollout share holds whole TP replicas."""
    return {
        rollout: paper_model({**ref, "rollout_dies": rollout})["separate_async"]["step_s"]
        for rollout in range(ref["rollout_tp"], ref["dies"], ref["rollout_tp"])
    }


def measure(run_dir: Path) -> dict[str, Any]:
    """One finished run's numbers (written to run_dir/async_mode.json by the bench)."""
    import yaml

    config = yaml.safe_load((run_dir / "rl.resolved.yaml").read_text())
    scalars = read_scalars(run_dir / "tensorboard" / "rl")
    times = step_times(scalars, first_step=FIRST_STEP)
    if times is None:
        raise RuntimeError(f"{run_dir}: no training step after step {FIRST_STEP - 1} in its TensorBoard events")
    trajectories = config["data"]["train_batch_size"] * config["actor_rollout_ref"]["rollout"]["n"]
    return {
        "mode": mode_of(config),
        "times": times,
        "off_policy": off_policy(scalars),
        "trajectories_per_step": trajectories,
        "trajectories_per_hour": trajectories * 3600 / times["step_s"],
        "steps": config["trainer"]["total_training_steps"],
    }


def render(results: dict[str, dict[str, Any]], source: str, measured: dict[str, Any]) -> str:
    host = measured.get("host") or {}
    sync = results.get("sync")
    lines = [
        "## Trainer modes side by side (`make bench-async`)",
        "",
        f"Measured {measured.get('started', '?')} on {host.get('cpu_model', '?')}, {host.get('cores', '?')} cores, "
        f"compute dtype {host.get('dtype', '?')}, commit {measured.get('commit') or '?'}; {source}. Each mode ran the "
        f"smoke's RL stage: {next(iter(results.values()))['steps']} GRPO steps of "
        f"{next(iter(results.values()))['trajectories_per_step']} trajectories (8 prompts x n=4), no validation. "
        f"Means over steps {FIRST_STEP} and later (step 1 fills the async pipelines). Generation: the trainer waits "
        "while the rollout generates on the same cores (sync, colocate_async); in separate_async the rollout "
        "generates beside the update the whole step, and the trainer's wait is idle time.",
        "",
        "| mode | s/step | trajectories/h | vs sync | generation (s) | waiting (s) | update (s) | weight sync (s) | "
        "rest (s) | staleness mean / max | spans mean / max |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, r in results.items():
        t, stale = r["times"], r["off_policy"] or {}
        ratio = f"{sync['times']['step_s'] / t['step_s']:.2f}x" if sync else "—"
        separate = name == "separate_async"
        generation = "beside the update" if separate else f"{t['gen_s']:.1f}"
        waiting = f"{t['gen_s']:.1f}" if separate else "—"
        lines.append(
            f"| {name} | {t['step_s']:.1f} | {r['trajectories_per_hour']:.0f} | {ratio} | {generation} | {waiting} | "
            f"{t['update_s']:.1f} | {t['weight_sync_s']:.2f} | {t['other_s']:.1f} | "
            f"{stale.get('staleness_mean', 0):.2f} / {stale.get('staleness_max', 0):g} | "
            f"{stale.get('spans_mean', 1):.2f} / {stale.get('spans_max', 1):g} |"
        )
    lines += [
        "",
        "Two shared cores run the trainer, vLLM, the agent loop, the sandbox and Ray: a mode that overlaps "
        "generation with the update gains only what the cores leave idle, so the ratios here say little about "
        "devices that really are separate. The model below is for those.",
        "",
    ]
    lines += render_model(paper_model())
    return "\n".join(lines)


def render_model(model: dict[str, dict[str, float]]) -> list[str]:
    ref = REFERENCE
    tail = model.pop("tail_s")["value"]
    lines = [
        "### Paper model: the reference run on 16 dies",
        "",
        f"Not measured: the reference's shapes ({ref['trajectories']} trajectories per step, "
        f"{ref['prompt_tokens']} + {ref['response_tokens']} tokens each, the slowest {ref['max_response_tokens']}) "
        "and per-die rates (inputs and their sources below), through the rules of `paper_model` in "
        "bench/async_modes.py. separate_async splits 8 dies for the trainer and 8 for the rollout (2 replicas of "
        "TP 4).",
        "",
        "| mode | generation (s) | update (s) | weight sync (s) | step (s) | vs sync | versions spanned: mean / "
        "longest |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, p in model.items():
        overlap = " (beside the update)" if name == "separate_async" else ""
        fits = "" if p["tail_fits"] else f" (above {ref['max_off_policy_threshold']}: the trainer waits for it)"
        lines.append(
            f"| {name} | {p['generation_s']:.0f}{overlap} | {p['update_s']:.0f} | {p['weight_sync_s']:.0f} "
            f"| {p['step_s']:.0f} ({p['step_s'] / 60:.1f} min) | {p['speedup']:.2f}x | "
            f"{p['span_mean']:.1f} / {p['span_max']:.1f}{fits} |"
        )
    other = ", ".join(f"{r} rollout dies {s:.0f} s" for r, s in splits().items())
    lines += [
        "",
        f"The slowest trajectory takes {tail:.0f} s alone; sync waits for it every step. separate_async's "
        f"trainer idles {model['separate_async']['idle_trainer_share']:.0%} of its step (the rollout is the "
        f"slower side); its other splits: {other}.",
        "",
        "Inputs: " + "; ".join(f"{key} {value:g} ({SOURCES[key]})" for key, value in ref.items()) + ".",
        "",
    ]
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke-run", type=Path, default=None, help="a smoke run folder with sft_merged/")
    parser.add_argument("--steps", type=int, default=8, help="GRPO steps per mode (default %(default)s)")
    parser.add_argument("--out", type=Path, default=None, help="run folders (default runs/async-modes-<time>)")
    parser.add_argument("--from-runs", type=Path, default=None, help="render finished runs instead of running")
    parser.add_argument("--output", type=Path, default=REPO_ROOT / "docs" / "performance.md")
    args = parser.parse_args(argv)
    if args.from_runs is not None:
        out = args.from_runs
        measured = json.loads((out / "measured.json").read_text())
    else:
        from learning_signal import find_smoke_run  # bench/ is on sys.path when this runs as a script

        smoke = find_smoke_run(args.smoke_run)
        import yaml

        assets = Path(yaml.safe_load((smoke / "rl.resolved.yaml").read_text())["data"]["train_files"]).parents[1]
        out = args.out or REPO_ROOT / "runs" / f"async-modes-{datetime.datetime.now():%Y%m%d-%H%M%S}"
        out.mkdir(parents=True, exist_ok=True)
        measured = {**learning_run.measured_now(), "smoke_run": os.path.relpath(smoke, REPO_ROOT)}
        (out / "measured.json").write_text(json.dumps(measured, indent=2) + "\n")
        overrides = [
            "+smoke=rl",
            f"trainer.total_training_steps={args.steps}",
            "trainer.val_before_train=false",
            "trainer.test_freq=-1",
            "trainer.experiment_name=async-modes",
        ]
        for mode in MODES:
            print(f"[bench] {mode}: into {out / mode}", flush=True)
            learning_run.launch(smoke / "sft_merged", assets, (out / mode).resolve(), overrides, trainer_mode=mode)
    results = {}
    for mode in MODES:
        if (out / mode / "rl.resolved.yaml").is_file():
            results[mode] = measure(out / mode)
            (out / mode / "async_mode.json").write_text(json.dumps(results[mode], indent=2) + "\n")
    if not results:
        raise SystemExit(f"error: no finished run under {out} (expected {', '.join(MODES)})")
    source = f"SFT model of `{measured.get('smoke_run', '?')}`, runs in `{os.path.relpath(out.resolve(), REPO_ROOT)}/`"
    replace_section(args.output, SECTION, render(results, source, measured))
    print(f"[bench] wrote the {SECTION} section of {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
