"""Does GRPO raise accuracy on the CPU stack, and only for the right reason? Three seeds and two negative controls.

Five runs of the smoke's RL stage on the synthetic tool task (correctness-only reward), all from the SFT'd tiny model
of one smoke run: that smoke run's own RL stage (the smoke's seeds); the same stage again with seeds 2 and 3
(retool.smoke.learning_run); the same reward negated; and the tool replying with every printed integer off by one, so
that answers copied from it score -1. The controls keep the smoke's seeds, so each differs from the first run in one
thing only. Each run validates on the same held-out synthetic problems before and after training. Expected: held-out accuracy rises
in every seed (95% interval above 0) and rises in neither control. The section it writes into docs/performance.md
gives each run's changes with their intervals, when and on which host each ran (recorded by the run itself), and a
PNG of the training and held-out accuracy.

    python bench/learning_signal.py [--smoke-run runs/smoke-x] [--steps N] [--val-n K]   # make bench-learning

Without ``--smoke-run`` it takes the newest finished runs/smoke-*/, or runs the smoke first (about 8 more minutes).
With ``--steps`` or ``--val-n`` other than the smoke's, the first run is trained again with them.
``--from-runs DIR`` writes the section from finished runs (DIR/<run>/learning.json) without training.
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
from retool.smoke import learning_run

REPO = Path(__file__).resolve().parents[1]

SECTION = "learning-signal"
# run name -> (seed, control); seed None: the smoke's own (configs/smoke/rl.yaml)
RUNS = {"grpo-smoke": (None, None), "grpo-seed2": (2, None), "grpo-seed3": (3, None), "negated": (None, "negated"),
        "wrong_tool": (None, "wrong_tool")}
LABELS = {"grpo-smoke": "GRPO, the smoke's seeds", "grpo-seed2": "GRPO, seed 2", "grpo-seed3": "GRPO, seed 3",
          "negated": "control: reward negated", "wrong_tool": "control: tool result off by one"}
METRICS = ("acc", "used_tool", "score")


def find_smoke_run(explicit: Path | None) -> Path:
    """The smoke run folder whose sft_merged model to start from; runs the smoke when there is none."""
    if explicit is not None:
        if not (explicit / "sft_merged" / "config.json").is_file():
            raise SystemExit(f"error: {explicit}/sft_merged is not a merged SFT model (run ./run_smoke_cpu.sh)")
        return explicit
    found = sorted((REPO / "runs").glob("smoke-*/summary.json"), key=lambda p: p.stat().st_mtime)
    if found:
        return found[-1].parent
    run_dir = REPO / "runs" / f"smoke-bench-{datetime.datetime.now():%Y%m%d-%H%M%S}"
    print(f"[bench] no smoke run with an SFT model yet: running ./run_smoke_cpu.sh into {run_dir}", flush=True)
    subprocess.run([str(REPO / "run_smoke_cpu.sh")], cwd=REPO, env={**os.environ, "RUN_DIR": str(run_dir)},
                   check=True)
    return run_dir


def expectations(results: dict[str, dict[str, Any]]) -> list[tuple[str, bool]]:
    """The benchmark's claims, each with whether these runs bear it out."""
    def acc(name: str) -> dict[str, Any]:
        return results[name]["changes"]["acc"]

    seeds = [name for name in results if name.startswith("grpo-")]
    claims = [(f"held-out accuracy rose in every seed ({len(seeds)}): 95% interval above 0",
               bool(seeds) and all(acc(name)["low"] > 0 for name in seeds))]
    for name in ("negated", "wrong_tool"):
        if name in results:
            claims.append((f"{LABELS[name]}: accuracy did not rise", acc(name)["verdict"] != "rose"))
    return claims


def plot(results: dict[str, dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
    for index, (name, result) in enumerate(results.items()):
        curve = result["training_curve"].get("acc") or []
        if curve:
            steps, values = zip(*curve)
            axes[0].plot(steps, values, marker="o", ms=2, label=LABELS[name])
        change = result["changes"]["acc"]
        axes[1].errorbar([index - 0.15, index + 0.15], [change["before"], change["after"]], fmt="o-", capsize=3,
                         yerr=[[0, change["delta"] - change["low"]], [0, change["high"] - change["delta"]]])
    axes[0].set_title("training: accuracy of the rollouts per GRPO step", fontsize=9)
    axes[0].set_xlabel("GRPO step")
    axes[0].legend(fontsize=7)
    axes[1].set_title("held-out accuracy before -> after (bar: 95% CI of the change)", fontsize=9)
    axes[1].set_xticks(range(len(results)), [LABELS[n].replace(", ", "\n").replace(": ", ":\n") for n in results],
                       fontsize=7)
    for ax in axes:
        ax.grid(alpha=0.3)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _where(result: dict[str, Any]) -> str:
    measured = result.get("measured") or {}
    host = measured.get("host") or {}
    limits = host.get("isa_limits") or {}
    emulated = f" with {', '.join(f'{k}={v}' for k, v in limits.items())}" if limits else ""
    return (f"{measured.get('started', 'not recorded')}, {host.get('cpu_model', 'host not recorded')}"
            f"{emulated}, {host.get('dtype', '?')}, commit {measured.get('commit') or '?'}")


def render(results: dict[str, dict[str, Any]], source: str) -> str:
    first = next(iter(results.values()))
    lines = [
        "## Learning signal (`make bench-learning`)", "",
        f"From {source}. Each run: {first['steps']} GRPO steps of {first['prompts_per_step']} prompts x "
        f"n={first['n']}, lr {first['lr']:g}, reward `{first['reward']}` with tool shaping "
        f"`{first['tool_shaping']}` (+1 right, -1 wrong: right answers are the only way up), validation on the same "
        f"held-out synthetic problems before and after ({first['val_n']} samples each at temperature 1.0). "
        "Change = after - before, paired by prompt, 95% Student's t interval (scipy); `rose`/`fell` only when the "
        "interval excludes 0.", "",
        "| run | metric | before | after | change | 95% CI | verdict |", "|---|---|---|---|---|---|---|",
    ]
    for name, result in results.items():
        for metric in METRICS:
            c = result["changes"].get(metric)
            if c:
                lines.append(f"| {LABELS[name]} | {metric} | {c['before']:.3f} | {c['after']:.3f} | "
                             f"{c['delta']:+.3f} | [{c['low']:+.3f}, {c['high']:+.3f}] | {c['verdict']} |")
    lines += ["", "| run | measured (start, host, dtype, commit) | wall time (s) | prompts | samples per validation |",
              "|---|---|---|---|---|"]
    for name, result in results.items():
        c = result["changes"]["acc"]
        lines.append(f"| {LABELS[name]} | {_where(result)} | {result.get('wall_s', 'not recorded')} | "
                     f"{c['prompts']} | {c['samples_after']} |")
    lines += ["", "Expectations, checked on these runs:", ""]
    lines += [f"- {claim}: **{'yes' if held else 'NO'}**" for claim, held in expectations(results)]
    lines += ["", "![training and held-out accuracy](img/learning_signal.png)", ""]
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
        results = {name: json.loads((args.from_runs / name / "learning.json").read_text()) for name in RUNS
                   if (args.from_runs / name / "learning.json").is_file()}
        if not results:
            raise SystemExit(f"error: no <run>/learning.json under {args.from_runs} (runs: {', '.join(RUNS)})")
        source = f"the runs in `{os.path.relpath(args.from_runs.resolve(), REPO)}/`"
    else:
        smoke = find_smoke_run(args.smoke_run)
        import yaml

        assets = Path(yaml.safe_load((smoke / "rl.resolved.yaml").read_text())["data"]["train_files"]).parents[1]
        out = args.out or REPO / "runs" / f"learning-{datetime.datetime.now():%Y%m%d-%H%M%S}"
        results = {}
        for name, (seed, control) in RUNS.items():
            if name == "grpo-smoke" and args.steps is None and args.val_n is None:
                print(f"[bench] {name}: the RL stage of {smoke}", flush=True)
                results[name] = learning_run.from_smoke_run(smoke, assets, out / name)
            else:
                print(f"[bench] {name}: into {out / name}", flush=True)
                results[name] = learning_run.run(smoke / "sft_merged", assets, out / name, args.steps, args.val_n,
                                                 control, seed)
            print("\n".join(results[name]["sentences"]), flush=True)
        source = f"the SFT model of `{os.path.relpath(smoke, REPO)}`, runs in `{os.path.relpath(out, REPO)}/`"
    plot(results, args.output.parent / "img" / "learning_signal.png")
    replace_section(args.output, SECTION, render(results, source))
    for claim, held in expectations(results):
        print(f"[bench] {claim}: {'yes' if held else 'NO'}")
    print(f"[bench] wrote the {SECTION} section of {args.output}")
    return 0 if all(held for _, held in expectations(results)) else 1


if __name__ == "__main__":
    sys.exit(main())
