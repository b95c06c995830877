"""``retool-report``: read a run's TensorBoard folder, write one PNG per panel, report.md and report.json."""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from retool.constants import PUBLISHED_RESULT
from retool.report.events import ReportError, read_run
from retool.report.markdown import render
from retool.report.panels import Curve, Plot, build_panels, data_sources
from retool.report.plot import draw


def load_published(path: Path | None) -> dict[str, Any]:
    """The published result (retool.constants), or a user's baseline: YAML/JSON {name, steps?, metrics:
    {tag: {start, end}}}."""
    if path is None:
        return PUBLISHED_RESULT
    try:
        data = yaml.safe_load(path.read_text())  # JSON is YAML too
    except (OSError, yaml.YAMLError) as e:
        raise ReportError(f"--published {path}: cannot read it as YAML/JSON ({e})") from e
    if not isinstance(data, dict) or not isinstance(data.get("metrics"), dict) or not data["metrics"]:
        raise ReportError(
            f"--published {path}: expected a mapping {{name, steps, metrics: {{tag: {{start, end}}}}}} "
            "with at least one metric"
        )
    for tag, entry in data["metrics"].items():
        if not isinstance(entry, dict) or not {"start", "end"} <= set(entry):
            raise ReportError(f"--published {path}: metric {tag!r} needs 'start' and 'end' numbers, got {entry!r}")
        for key in ("start", "end"):
            if not isinstance(entry[key], (int, float)):
                raise ReportError(f"--published {path}: {tag}.{key} must be a number, got {entry[key]!r}")
    steps = data.get("steps")
    if steps is not None and not isinstance(steps, int):
        raise ReportError(f"--published {path}: steps must be the number of RL steps, got {steps!r}")
    return {"name": str(data.get("name", path.name)), "steps": steps, "metrics": data["metrics"]}


def row(curve: Curve, plot: Plot) -> dict[str, Any]:
    """Start, best and last of a drawn curve; best only where a direction is better, earliest step on ties."""
    s = curve.series
    out: dict[str, Any] = {
        "series": f"{plot.title}: {curve.label}" if plot.title else curve.label,
        "tag": s.tag,
        "start": s.values[0],
        "start_step": s.steps[0],
        "last": s.values[-1],
        "last_step": s.steps[-1],
        "best": None,
        "best_step": None,
        "published": curve.published,
    }
    finite = [i for i, v in enumerate(s.values) if math.isfinite(v)]
    if curve.better and finite:
        sign = 1 if curve.better == "max" else -1
        index = max(finite, key=lambda i: (sign * s.values[i], -i))
        out["best"], out["best_step"] = s.values[index], s.steps[index]
    return out


def build_report(logdir: Path, output: Path, published: dict[str, Any]) -> dict[str, Any]:
    """Write ``<panel>.png``, report.md and report.json into ``output``; return the report.json content."""
    run = read_run(logdir)
    output.mkdir(parents=True, exist_ok=True)
    drawn, missing = build_panels({"rl": run.rl, "sft": run.sft}, published)
    sources = data_sources(run.rl)
    panels, published_seen = [], set()
    for spec, plots in drawn:
        draw(spec, plots, sources, run.step_span(spec.stage)).savefig(output / f"{spec.name}.png")
        published_seen.update(c.published["tag"] for p in plots for c in p.curves + p.zero if c.published)
        panels.append(
            {
                "name": spec.name,
                "title": spec.title,
                "tags": spec.tags,
                "png": f"{spec.name}.png",
                "rows": [row(c, p) for p in plots for c in p.curves],
                "zero": [
                    {"plot": p.title, "label": c.label, "tag": c.series.tag, "published": c.published}
                    for p in plots
                    for c in p.zero
                ],
                "notes": [f"{p.title}: {n}" if p.title else n for p in plots for n in p.notes],
            }
        )
    import retool.report.band as band  # here, not at the top: `python -m retool.report.band` imports this package first

    accuracy = run.rl.get(band.TAG)
    reproduction = (
        band.verdicts(accuracy.steps if accuracy else [], accuracy.values if accuracy else [], sorted(run.rl))
        if run.rl
        else []
    )
    report = {
        "logdir": str(logdir),
        "rl_dir": run.rl_dir and str(run.rl_dir),
        "sft_dir": run.sft_dir and str(run.sft_dir),
        "ignored_dirs": [str(d) for d in run.ignored],
        "published": {"name": published["name"], "steps": published.get("steps")},
        "reproduction": reproduction,
        "panels": panels,
        "not_logged": [{"name": s.name, "title": s.title, "tags": s.tags} for s in missing],
        "published_not_logged": [t for t in published["metrics"] if t not in published_seen],
        "all_tags": {"rl": sorted(run.rl), "sft": sorted(run.sft)},
    }
    (output / "report.json").write_text(json.dumps(report, indent=2) + "\n")
    (output / "report.md").write_text(render(report))
    return report


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="retool-report",
        description="One PNG per question (accuracy, tool use, turns, reward, response length, SFT loss), "
        "report.md and report.json from a run's TensorBoard folder.",
    )
    parser.add_argument(
        "--logdir",
        type=Path,
        required=True,
        help="TensorBoard folder of one run (its rl/ and sft/ stage folders are both read)",
    )
    parser.add_argument(
        "--published",
        type=Path,
        default=None,
        help="YAML/JSON {name, steps, metrics: {tag: {start, end}}} to draw instead of the "
        "published result (retool.constants.PUBLISHED_RESULT), e.g. your own baseline run",
    )
    parser.add_argument("--output", type=Path, required=True, help="folder for report.md, report.json and PNGs")
    args = parser.parse_args(argv)
    try:
        report = build_report(args.logdir, args.output, load_published(args.published))
    except ReportError as e:
        print(f"retool-report: error: {e}", file=sys.stderr)
        return 2
    pngs = ", ".join(p["png"] for p in report["panels"]) or "none"
    print(f"wrote {args.output / 'report.md'} (PNGs: {pngs})")
    for line in report["reproduction"]:
        print(line)
    return 0
