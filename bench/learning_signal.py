"""Does GRPO raise accuracy on the CPU stack, and only for the right reason? Three seeds and two negative controls.

Six runs of the smoke's RL stage on the synthetic tool task (correctness-only reward), all from the SFT'd tiny model
of one smoke run: that smoke run's own RL stage (the smoke's seeds); the same stage again with seeds 2 and 3
(retool.smoke.learning_run); the same reward negated; the tool replying with every printed digit shifted by 5,
so that no tool-using answer is right unless the model computes it itself (retool.smoke.controls.WrongResultTool);
and, as a diagnostic, the former control's tool replying one too many (retool.smoke.controls.OffByOneTool), whose
run shows why that control's tool use rose (a slip of one makes an answer right, see the section). The controls keep
the smoke's seeds, so each differs from the first run in one thing only. Each run validates on the same held-out
synthetic problems before and after training. Expected: held-out accuracy rises in every seed (95% interval above 0) and
rises in neither control; under the wrong tool no training answer is right, so no group has differing rewards and the
actor's gradient is 0 at every step (the control's premise, checked), and tool use does not rise. The section it
writes into docs/performance.md gives each run's changes with their intervals, when and on which host each ran
(recorded by the run itself), the credit GRPO gave tool use in training (retool.learning.tool_credit; per step:
bench/tool_credit.py) and what it says about the wrong-tool control, and a PNG of the training and held-out accuracy.

    python bench/learning_signal.py [--smoke-run runs/smoke-x] [--steps N] [--val-n K]   # make bench-learning

Without ``--smoke-run`` it takes the newest finished runs/smoke-*/, or runs the smoke first (about 8 more minutes).
With ``--steps`` or ``--val-n`` other than the smoke's, the first run is trained again with them.
``--from-runs DIR`` writes the section from finished runs (DIR/<run>/learning.json) without training.

The asynchronous trainer modes (TRAINER_MODE colocate_async and separate_async: verl trains on data up to a batch
old) repeat the GRPO run with the same three seeds each; they get a section of their own (``learning-signal-async``)
with the staleness each run trained at. ``--runs`` picks runs by name (e.g. ``--runs colocate_async-seed2``) or group
(``sync``: the six above, ``async``: the six of the async modes); a section is rewritten only from its own runs.
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
from retool.trainer_modes import ASYNC_MODES

REPO = Path(__file__).resolve().parents[1]

SECTION = "learning-signal"
# run name -> (seed, control); seed None: the smoke's own (configs/smoke/rl.yaml)
RUNS = {
    "grpo-smoke": (None, None),
    "grpo-seed2": (2, None),
    "grpo-seed3": (3, None),
    "negated": (None, "negated"),
    "wrong_tool": (None, "wrong_tool"),
    "off_by_one_tool": (None, "off_by_one_tool"),
}
LABELS = {
    "grpo-smoke": "GRPO, the smoke's seeds",
    "grpo-seed2": "GRPO, seed 2",
    "grpo-seed3": "GRPO, seed 3",
    "negated": "control: reward negated",
    "wrong_tool": "control: tool digits all wrong",
    "off_by_one_tool": "diagnostic: tool result off by one (the former control)",
}
# the async trainer modes, GRPO with the same seeds: run name -> (trainer mode, seed)
ASYNC_RUNS = {
    f"{mode}-{name}": (mode, seed)
    for mode in ASYNC_MODES
    for name, seed in (("smoke", None), ("seed2", 2), ("seed3", 3))
}
LABELS.update(
    {
        name: f"{mode}, " + ("the smoke's seeds" if seed is None else f"seed {seed}")
        for name, (mode, seed) in ASYNC_RUNS.items()
    }
)
ASYNC_SECTION = "learning-signal-async"
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
    subprocess.run([str(REPO / "run_smoke_cpu.sh")], cwd=REPO, env={**os.environ, "RUN_DIR": str(run_dir)}, check=True)
    return run_dir


def expectations(results: dict[str, dict[str, Any]]) -> list[tuple[str, bool]]:
    """The benchmark's claims, each with whether these runs bear it out."""

    def acc(name: str) -> dict[str, Any]:
        return results[name]["changes"]["acc"]

    seeds = [name for name in results if name.startswith("grpo-")]
    claims = [
        (
            f"held-out accuracy rose in every seed ({len(seeds)}): 95% interval above 0",
            bool(seeds) and all(acc(name)["low"] > 0 for name in seeds),
        )
    ]
    for name in ("negated", "wrong_tool"):
        if name in results:
            claims.append((f"{LABELS[name]}: accuracy did not rise", acc(name)["verdict"] != "rose"))
    if "wrong_tool" in results:
        claims.append(
            (
                f"{LABELS['wrong_tool']}: no group of differing rewards and no actor gradient in training "
                "(the control's premise)",
                wrong_tool_premise(results["wrong_tool"]),
            )
        )
        claims.append(
            (
                f"{LABELS['wrong_tool']}: tool use did not rise",
                results["wrong_tool"]["changes"]["used_tool"]["verdict"] != "rose",
            )
        )
    return claims


def async_expectations(results: dict[str, dict[str, Any]]) -> list[tuple[str, bool]]:
    """Per async trainer mode: held-out accuracy rose in every seed, as it must in sync."""
    claims = []
    for mode in ASYNC_MODES:
        seeds = [name for name in results if name.startswith(f"{mode}-")]
        if seeds:
            claims.append(
                (
                    f"{mode}: held-out accuracy rose in every seed ({len(seeds)}): 95% interval above 0",
                    all(results[name]["changes"]["acc"]["low"] > 0 for name in seeds),
                )
            )
    return claims


def render_async(results: dict[str, dict[str, Any]], source: str) -> str:
    """The async modes' section: the sync section's tables (same runs, same rule) plus the staleness trained at."""
    lines = render(
        results,
        source,
        expected=async_expectations(results),
        title="## Learning signal in the async trainer modes (`make bench-learning`)",
        image="img/learning_signal_async.png",
    ).splitlines()
    at = lines.index("Expectations, checked on these runs:")
    staleness = [
        "| run | trainer mode | versions behind: mean / most | versions spanned: mean / most |",
        "|---|---|---|---|",
    ]
    for name, result in results.items():
        stale = result.get("off_policy") or {}
        staleness.append(
            f"| {LABELS[name]} | {result.get('trainer_mode', '?')} | "
            f"{stale.get('staleness_mean', float('nan')):.2f} / {stale.get('staleness_max', '?')} | "
            f"{stale.get('spans_mean', float('nan')):.2f} / {stale.get('spans_max', '?')} |"
        )
    return "\n".join(lines[:at] + staleness + [""] + lines[at:]) + "\n"


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
        axes[1].errorbar(
            [index - 0.15, index + 0.15],
            [change["before"], change["after"]],
            fmt="o-",
            capsize=3,
            yerr=[[0, change["delta"] - change["low"]], [0, change["high"] - change["delta"]]],
        )
    axes[0].set_title("training: accuracy of the rollouts per GRPO step", fontsize=9)
    axes[0].set_xlabel("GRPO step")
    axes[0].legend(fontsize=7)
    axes[1].set_title("held-out accuracy before -> after (bar: 95% CI of the change)", fontsize=9)
    axes[1].set_xticks(
        range(len(results)), [LABELS[n].replace(", ", "\n").replace(": ", ":\n") for n in results], fontsize=7
    )
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
    return (
        f"{measured.get('started', 'not recorded')}, {host.get('cpu_model', 'host not recorded')}"
        f"{emulated}, {host.get('dtype', '?')}, commit {measured.get('commit') or '?'}"
    )


def render(
    results: dict[str, dict[str, Any]],
    source: str,
    expected: list[tuple[str, bool]] | None = None,
    title: str = "## Learning signal (`make bench-learning`)",
    image: str = "img/learning_signal.png",
) -> str:
    first = next(iter(results.values()))
    lines = [
        title,
        "",
        f"From {source}. Each run: {first['steps']} GRPO steps of {first['prompts_per_step']} prompts x "
        f"n={first['n']}, lr {first['lr']:g}, reward `{first['reward']}` with tool shaping "
        f"`{first['tool_shaping']}` (+1 right, -1 wrong: right answers are the only way up), validation on the same "
        f"held-out synthetic problems before and after ({first['val_n']} samples each at temperature 1.0). "
        "Change = after - before, paired by prompt, 95% Student's t interval (scipy); `rose`/`fell` only when the "
        "interval excludes 0.",
        "",
        "| run | metric | before | after | change | 95% CI | verdict |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, result in results.items():
        for metric in METRICS:
            c = result["changes"].get(metric)
            if c:
                lines.append(
                    f"| {LABELS[name]} | {metric} | {c['before']:.3f} | {c['after']:.3f} | "
                    f"{c['delta']:+.3f} | [{c['low']:+.3f}, {c['high']:+.3f}] | {c['verdict']} |"
                )
    lines += [
        "",
        "| run | measured (start, host, dtype, commit) | wall time (s) | prompts | samples per validation |",
        "|---|---|---|---|---|",
    ]
    for name, result in results.items():
        c = result["changes"]["acc"]
        lines.append(
            f"| {LABELS[name]} | {_where(result)} | {result.get('wall_s', 'not recorded')} | "
            f"{c['prompts']} | {c['samples_after']} |"
        )
    lines += credit_lines(results) + tool_control_lines(results)
    lines += ["", "Expectations, checked on these runs:", ""]
    claims = expectations(results) if expected is None else expected
    lines += [f"- {claim}: **{'yes' if held else 'NO'}**" for claim, held in claims]
    lines += ["", f"![training and held-out accuracy]({image})", ""]
    return "\n".join(lines)


def credit_lines(results: dict[str, dict[str, Any]]) -> list[str]:
    """The table of the credit GRPO gave tool use in each run's training (retool.learning.tool_credit)."""
    rows = []
    for name, result in results.items():
        total = (result.get("tool_credit") or {}).get("total")
        if total is None:
            continue
        norms = [value for _, value in result.get("grad_norm") or []]
        zero = f"{sum(value == 0 for value in norms)} of {len(norms)}" if norms else "not recorded"
        won = total["won"]
        rows.append(
            f"| {LABELS[name]} | {total['informative_groups']} of {total['groups']} | {won['tool']} / "
            f"{won['no_tool']} / {won['both']} | {total['push']:+.3f} | {zero} | {total['right_tool']} of "
            f"{total['tool_samples']} ({total['right_tool_copied']} copied) | {total['right_no_tool']} of "
            f"{total['samples'] - total['tool_samples']} |"
        )
    if not rows:
        return []
    return [
        "",
        "Credit GRPO gave tool use in training, from each run's training samples (recomputed GRPO advantage; "
        "per step: `python bench/tool_credit.py <run folder>`). Only a group (the samples of one prompt) whose "
        "rewards differ has a gradient; it favours the tool when its tool-using samples scored higher. Push = "
        "sum over samples of advantage x used_tool per sample, summed over the steps (> 0 favours the tool). "
        "Copied: the answer is the tool's last reply verbatim.",
        "",
        "| run | groups with reward variance | won by tool / no tool / both | push on tool use | steps with "
        "actor gradient norm 0 | right answers with the tool | right answers without |",
        "|---|---|---|---|---|---|---|",
        *rows,
    ]


def tool_control_lines(results: dict[str, dict[str, Any]]) -> list[str]:
    """What the credit says about the wrong-tool control: what it proves, and why its former tool gained use."""
    credit = {
        name: r["tool_credit"]["total"] for name, r in results.items() if (r.get("tool_credit") or {}).get("total")
    }
    if "wrong_tool" not in credit:
        return []
    plain_right = sum(t["right_no_tool"] for t in credit.values())
    lines = [
        "",
        "**The wrong-tool control.** Only a right answer moves the policy here: the reward is +1 right, -1 "
        "wrong, nothing for the call; a group (the samples of one prompt) whose samples all score alike has "
        "advantage 0, and a step without a group of differing rewards has no policy gradient (masking, "
        "truncation, response length and the token-mean loss only scale advantages that are not 0). Answers "
        f"without the tool were right {plain_right} times in "
        f"{sum(t['samples'] - t['tool_samples'] for t in credit.values())} training samples of these runs"
        + (
            ": the tiny model does not compute the products itself, so each right answer used the tool and won "
            "its group for it."
            if plain_right == 0
            else "."
        ),
    ]
    t, c = credit["wrong_tool"], results["wrong_tool"]["changes"]["used_tool"]
    norms = [value for _, value in results["wrong_tool"].get("grad_norm") or []]
    premise = wrong_tool_premise(results["wrong_tool"])
    lines += [
        "",
        "The control's tool shifts every printed digit by 5 (retool.smoke.controls.WrongResultTool): no slip of "
        "one digit of the reply or of an operand in the code turns it into the right answer. In its training "
        f"{t['right_tool']} of {t['tool_samples']} tool-using answers and {t['right_no_tool']} of "
        f"{t['samples'] - t['tool_samples']} others were right, {t['informative_groups']} of {t['groups']} groups had "
        "differing rewards, and the actor's gradient norm "
        + (f"was 0 in {sum(value == 0 for value in norms)} of {len(norms)} steps" if norms else "was not recorded")
        + f"; held-out tool use changed by {c['delta']:+.3f} [{c['low']:+.3f}, {c['high']:+.3f}] ({c['verdict']}). "
        + (
            "Tool use rose although no right answer rewarded it: something other than right answers credits the call "
            "(a reward for it, a non-zero advantage of all-equal groups, another loss term), and the verdicts above "
            "do not stand until it is found."
            if premise and c["verdict"] == "rose"
            else "So a call that earns no right answer earns no credit (no reward for the call itself, advantage 0 for "
            "all-equal groups, no other loss term moving the policy), and the seeds' rise in tool use comes from the "
            "right answers the real tool gives."
            if premise
            else "The control's premise failed (a right answer, or a gradient without one): its tool use says nothing "
            "about credit for calls that earn no right answer; `python bench/tool_credit.py <run folder>` shows "
            "the steps."
        ),
    ]
    seeds = [t for name, t in credit.items() if name.startswith("grpo-")]
    if seeds:
        lines += [
            "",
            "Why the former control raised tool use: its tool added one to every printed integer "
            "(retool.smoke.controls.OffByOneTool; `python -m retool.smoke.learning_run --control off_by_one_tool` "
            "runs it). Its reply is one slip from right: copied minus one, or computed from an operand one off (`- 41` "
            "for `- 40`), it is the answer, and such an answer wins its group for the tool. GRPO then raises tool "
            "use, as it should: that tool was wrong but informative. A few such answers suffice, as Adam moves each "
            "weight by about the learning rate per step however small the gradient; none leaves the policy where it "
            "was. Tool-using answers that the real tool left exactly one below the truth, the ones that tool would "
            f"have made right: {sum(t['one_below'] for t in seeds)} of {sum(t['tool_samples'] for t in seeds)} in the "
            "seeds' training here.",
        ]
    if "off_by_one_tool" in credit:
        t, c = credit["off_by_one_tool"], results["off_by_one_tool"]["changes"]["used_tool"]
        won = t["won"]
        lines += [
            "",
            f"Measured in that tool's own run ({LABELS['off_by_one_tool']}, same seeds): {t['right_tool']} of "
            f"{t['tool_samples']} tool-using training answers were right although every reply was off by one "
            f"({t['right_tool_copied']} of them the reply copied verbatim), against {t['right_no_tool']} of "
            f"{t['samples'] - t['tool_samples']} without the tool; {t['informative_groups']} of {t['groups']} groups "
            f"had differing rewards, won by the tool / without it / both: {won['tool']} / {won['no_tool']} / "
            f"{won['both']}, push on tool use {t['push']:+.3f}; held-out tool use {c['delta']:+.3f} "
            f"[{c['low']:+.3f}, {c['high']:+.3f}] ({c['verdict']}).",
        ]
    return lines


def wrong_tool_premise(result: dict[str, Any]) -> bool:
    """Whether the wrong-tool run had what the control assumes: no group of differing rewards, no actor gradient."""
    total = (result.get("tool_credit") or {}).get("total") or {}
    norms = [value for _, value in result.get("grad_norm") or []]
    return total.get("informative_groups") == 0 and all(value == 0 for value in norms)


def selected(spec: str) -> list[str]:
    """Run names from --runs: names, or the groups ``sync`` (RUNS) and ``async`` (ASYNC_RUNS)."""
    names: list[str] = []
    for item in filter(None, spec.split(",")):
        group = {"sync": list(RUNS), "async": list(ASYNC_RUNS)}.get(item)
        if group is None and item not in RUNS and item not in ASYNC_RUNS:
            raise SystemExit(
                f"error: --runs: unknown run {item!r} (runs: {', '.join([*RUNS, *ASYNC_RUNS])}; groups: sync, async)"
            )
        names += [name for name in (group or [item]) if name not in names]
    return names


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke-run", type=Path, default=None, help="a smoke run folder with sft_merged/")
    parser.add_argument("--steps", type=int, default=None, help="GRPO steps per run (default: the smoke's)")
    parser.add_argument("--val-n", type=int, default=None, help="samples per validation prompt (default: the smoke's)")
    parser.add_argument("--out", type=Path, default=None, help="run folders (default runs/learning-<time>)")
    parser.add_argument("--from-runs", type=Path, default=None, help="render finished runs instead of training")
    parser.add_argument("--runs", default="sync,async", help="run names or groups sync, async (default %(default)s)")
    parser.add_argument("--output", type=Path, default=REPO / "docs" / "performance.md")
    args = parser.parse_args(argv)
    names = selected(args.runs)
    if args.from_runs is not None:
        results = {
            name: json.loads((args.from_runs / name / "learning.json").read_text())
            for name in names
            if (args.from_runs / name / "learning.json").is_file()
        }
        if not results:
            raise SystemExit(f"error: no <run>/learning.json under {args.from_runs} (runs: {', '.join(names)})")
        source = f"the runs in `{os.path.relpath(args.from_runs.resolve(), REPO)}/`"
    else:
        smoke = find_smoke_run(args.smoke_run)
        import yaml

        assets = Path(yaml.safe_load((smoke / "rl.resolved.yaml").read_text())["data"]["train_files"]).parents[1]
        out = args.out or REPO / "runs" / f"learning-{datetime.datetime.now():%Y%m%d-%H%M%S}"
        results = {}
        for name in names:
            if name in ASYNC_RUNS:
                mode, seed = ASYNC_RUNS[name]
                print(f"[bench] {name}: into {out / name}", flush=True)
                results[name] = learning_run.run(
                    learning_run.LearningRun(
                        smoke / "sft_merged",
                        out / name,
                        assets,
                        steps=args.steps,
                        val_n=args.val_n,
                        seed=seed,
                        trainer_mode=mode,
                    )
                )
                print("\n".join(results[name]["sentences"]), flush=True)
                continue
            seed, control = RUNS[name]
            if name == "grpo-smoke" and args.steps is None and args.val_n is None:
                print(f"[bench] {name}: the RL stage of {smoke}", flush=True)
                results[name] = learning_run.from_smoke_run(smoke, assets, out / name)
            else:
                print(f"[bench] {name}: into {out / name}", flush=True)
                results[name] = learning_run.run(
                    learning_run.LearningRun(
                        smoke / "sft_merged",
                        out / name,
                        assets,
                        steps=args.steps,
                        val_n=args.val_n,
                        seed=seed,
                        control=control,
                    )
                )
            print("\n".join(results[name]["sentences"]), flush=True)
        source = f"the SFT model of `{os.path.relpath(smoke, REPO)}`, runs in `{os.path.relpath(out, REPO)}/`"
    claims = []
    for group, section, image, write, expect in (
        (RUNS, SECTION, "learning_signal.png", render, expectations),
        (ASYNC_RUNS, ASYNC_SECTION, "learning_signal_async.png", render_async, async_expectations),
    ):
        ran = {name: result for name, result in results.items() if name in group}
        if ran:  # a section is rewritten only from runs of its own
            plot(ran, args.output.parent / "img" / image)
            replace_section(args.output, section, write(ran, source))
            claims += expect(ran)
            print(f"[bench] wrote the {section} section of {args.output}")
    for claim, held in claims:
        print(f"[bench] {claim}: {'yes' if held else 'NO'}")
    return 0 if all(held for _, held in claims) else 1


if __name__ == "__main__":
    sys.exit(main())
