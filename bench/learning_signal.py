"""Does GRPO learn on the CPU stack? A reward-goes-up benchmark with a negative control.

From the SFT'd tiny model of a smoke run, two runs of the smoke's RL stage on the synthetic tool task
(retool.smoke.learning_run): the recipe's reward, and the same reward negated (the control). Each validates on
the held-out synthetic problems before and after training; ``--steps`` and ``--val-n`` change the smoke's step
count and samples per prompt. The section it writes into
docs/performance.md gives, per run, the change of tool use, reward and accuracy with 95% intervals (paired by
prompt, retool.learning) and a PNG of the training curves; every number in it comes from this run.

    python bench/learning_signal.py [--smoke-run runs/smoke-x] [--steps N] [--val-n K]   # make bench-learning

Without ``--smoke-run`` it takes the newest runs/smoke-*/ holding a merged SFT model, or runs the smoke first.
``--from-runs DIR`` writes the section from two finished runs (DIR/grpo, DIR/negated, each with learning.json), e.g.
the ones tests/e2e/test_learning_signal.py leaves in $E2E_LEARNING_DIR.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from retool.markdown_sections import replace_section
from retool.platform.cpu_dtype import host_report
from retool.smoke import learning_run

REPO = Path(__file__).resolve().parents[1]

SECTION = "learning-signal"
RUNS = {"grpo": None, "negated": "negated"}  # run name -> learning_run control
LABELS = {"grpo": "GRPO, recipe reward", "negated": "control: reward negated"}


def find_smoke_run(explicit: Path | None) -> Path:
    """The smoke run folder whose sft_merged model to start from; runs the smoke when there is none."""
    if explicit is not None:
        if not (explicit / "sft_merged" / "config.json").is_file():
            raise SystemExit(f"error: {explicit}/sft_merged is not a merged SFT model (run ./run_smoke_cpu.sh)")
        return explicit
    found = sorted((REPO / "runs").glob("smoke-*/sft_merged/config.json"), key=lambda p: p.stat().st_mtime)
    if found:
        return found[-1].parents[1]
    run_dir = REPO / "runs" / f"smoke-bench-{datetime.datetime.now():%Y%m%d-%H%M%S}"
    print(f"[bench] no smoke run with an SFT model yet: running ./run_smoke_cpu.sh into {run_dir}", flush=True)
    subprocess.run([str(REPO / "run_smoke_cpu.sh")], cwd=REPO, env={**os.environ, "RUN_DIR": str(run_dir)},
                   check=True)
    return run_dir


def plot(results: dict[str, dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(13, 3.6))
    for name, result in results.items():
        curve = result["training_curve"]
        for ax, metric in zip(axes[:2], ("used_tool", "score")):
            steps, values = zip(*curve[metric])
            ax.plot(steps, values, marker="o", ms=3, label=LABELS[name])
        change = result["changes"]["used_tool"]
        x = [0, result["steps"]]
        axes[2].errorbar(x, [change["before"], change["after"]], fmt="o-", capsize=4, label=LABELS[name],
                         yerr=[[0, change["delta"] - change["low"]], [0, change["high"] - change["delta"]]])
    for ax, title in zip(axes, ("training: share of rollouts with a tool call", "training: mean reward",
                                "held-out: tool use before/after (95% CI of change)")):
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("GRPO step")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def render(results: dict[str, dict[str, Any]], meta: dict[str, Any]) -> str:
    host, run = meta["host"], results["grpo"]
    lines = [
        "## Learning signal (`make bench-learning`)", "",
        f"Measured {meta['date']} on {host['cpu_model']}, {host['cores']} cores (compute dtype {host['dtype']}), "
        f"from {meta['source']}. Each run: {run['steps']} GRPO steps of {run['prompts_per_step']} prompts x "
        f"n={run['n']}, lr {run['lr']:g}, validation on the same held-out synthetic problems before and after "
        f"({run['val_n']} samples each). Change = after - before, paired by prompt, 95% t interval; "
        "`rose`/`fell` only when the interval excludes 0.", "",
        "| run | metric | before | after | change | 95% CI | verdict |", "|---|---|---|---|---|---|---|",
    ]
    for name, result in results.items():
        for metric, c in result["changes"].items():
            lines.append(f"| {LABELS[name]} | {metric} | {c['before']:.3f} | {c['after']:.3f} | {c['delta']:+.3f} | "
                         f"[{c['low']:+.3f}, {c['high']:+.3f}] | {c['verdict']} |")
    lines += ["", "| run | wall time (s) | prompts | samples per validation |", "|---|---|---|---|"]
    for name, result in results.items():
        c = result["changes"]["used_tool"]
        wall = f"{result['wall_s']:.0f}" if "wall_s" in result else "not recorded"
        lines.append(f"| {LABELS[name]} | {wall} | {c['prompts']} | {c['samples_after']} |")
    rose = {name: sorted(m for m, c in r["changes"].items() if c["verdict"] == "rose") for name, r in results.items()}
    flat = {name: sorted(m for m, c in r["changes"].items() if c["verdict"] != "rose")
            for name, r in results.items()}
    lines += ["", f"What rose with the recipe's reward: {', '.join(rose['grpo']) or 'nothing'}; what did not: "
              f"{', '.join(flat['grpo']) or 'nothing'}. With the negated reward (its `score` is the negated reward that run "
              "optimises), what rose: "
              f"{', '.join(rose['negated']) or 'nothing'}.", "",
              "![training curves and held-out change](img/learning_signal.png)", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke-run", type=Path, default=None, help="a smoke run folder with sft_merged/")
    parser.add_argument("--steps", type=int, default=None, help="GRPO steps per run (default: the smoke's)")
    parser.add_argument("--val-n", type=int, default=None, help="samples per validation prompt (default: the smoke's)")
    parser.add_argument("--out", type=Path, default=None, help="run folders (default runs/learning-<time>)")
    parser.add_argument("--from-runs", type=Path, default=None, help="render finished runs instead of training")
    parser.add_argument("--output", type=Path, default=REPO / "docs" / "performance.md")
    args = parser.parse_args(argv)
    if args.from_runs is not None:
        results = {name: json.loads((args.from_runs / name / "learning.json").read_text()) for name in RUNS}
        source = f"runs in {args.from_runs.name}/ (tests/e2e/test_learning_signal.py: the smoke's RL stage and its control)"
    else:
        smoke = find_smoke_run(args.smoke_run)
        import yaml

        assets = Path(yaml.safe_load((smoke / "dapo.resolved.yaml").read_text())["data"]["train_files"]).parents[1]
        out = args.out or REPO / "runs" / f"learning-{datetime.datetime.now():%Y%m%d-%H%M%S}"
        results = {}
        for name, control in RUNS.items():
            print(f"[bench] {name}: into {out / name}", flush=True)
            results[name] = learning_run.run(smoke / "sft_merged", assets, out / name, args.steps, args.val_n, control)
            print("\n".join(results[name]["sentences"]), flush=True)
        source = f"the SFT model of `{os.path.relpath(smoke, REPO)}`"
    meta = {"date": datetime.date.today().isoformat(), "host": host_report(), "source": source}
    plot(results, args.output.parent / "img" / "learning_signal.png")
    replace_section(args.output, SECTION, render(results, meta))
    print(f"[bench] wrote the {SECTION} section of {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
