"""Training report from a TensorBoard folder: PNG curves and report.md beside the reference run.

``retool-report --logdir <TensorBoard dir> [--reference FILE] --output DIR`` reads every event file under
``--logdir`` (one training run; resumed runs append event files to the same folder), draws one PNG per
panel (validation accuracy, validation num_turns, reward, response length, tool use) and writes report.md
with a table of start / best / last values beside the reference run, plus report.json with the same numbers.

Tag names follow what verl 0.9.1 logs. Validation accuracy is ``val-core/<data_source>/acc/mean@N`` where N
is the number of validation samples (30 in the reference run, small in the smoke run), so tags are matched
by pattern and references are compared across N (the table says when N differs). Tags that a run did not
log are listed in the report, never silently dropped.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

# The reference run of the recipe (docs/reference.md): Qwen3-4B-Instruct-2507, SFT then GRPO.
REFERENCE_RESULTS: dict[str, Any] = {
    "name": "CANN qwen3_tool_agent: Qwen3-4B-Instruct-2507, 16 Atlas A3 dies, SFT then 130 GRPO steps",
    "metrics": {
        "val-core/aime_2025/acc/mean@30": {"start": 0.29, "end": 0.57},
        "val-aux/num_turns/mean": {"start": 7.0, "end": 5.4},
    },
}


@dataclass(frozen=True)
class Panel:
    """One PNG: the tags matching any of ``patterns``; ``better`` is "max" when higher is better, else None."""

    name: str
    title: str
    patterns: tuple[str, ...]
    better: str | None
    optional: bool = False  # not listed as missing (the SFT panel of an RL run)

    def matches(self, tag: str) -> bool:
        return any(re.search(p, tag) for p in self.patterns)


PANELS: tuple[Panel, ...] = (
    Panel("val_accuracy", "Validation accuracy (val-core/<data_source>/acc/mean@N)",
          (r"^val-core/[^/]+/acc/mean@\d+$",), "max"),
    Panel("val_num_turns", "Validation turns per trajectory (val-aux/num_turns/mean)",
          (r"^val-aux/num_turns/mean$",), None),
    Panel("rewards", "Training reward (critic/rewards/mean)", (r"^critic/rewards/mean$",), "max"),
    Panel("response_length", "Response length in tokens (response_length/mean)",
          (r"^response_length/mean$",), None),
    # verl logs num_turns/* for training batches (training/num_turns/* in its v1 trainer) and
    # tool_call_counts/* when present; reward extras with "tool" in the name land in val-aux/<ds>/.../mean@N.
    Panel("sft_loss", "SFT loss (train/loss, val/loss)", (r"^(train|val)/loss$",), None, optional=True),
    Panel("tools", "Tool use (turns and tool metrics)",
          (r"^(training/)?num_turns/mean$", r"^tool_call_counts/mean$", r"tool[^/]*/(mean|mean@\d+)$"), None),
)

_MEAN_AT = re.compile(r"mean@\d+")


@dataclass
class Series:
    """One scalar tag: steps ascending with their values."""

    tag: str
    steps: list[int]
    values: list[float]

    def summary(self, better: str | None) -> dict[str, Any]:
        start, last = (self.steps[0], self.values[0]), (self.steps[-1], self.values[-1])
        out: dict[str, Any] = {"tag": self.tag, "start": start[1], "start_step": start[0],
                               "last": last[1], "last_step": last[0], "best": None, "best_step": None}
        if better == "max":
            # First occurrence of the maximum, so ties report the earliest step; NaN never wins.
            finite = [i for i, v in enumerate(self.values) if math.isfinite(v)]
            if finite:
                index = max(finite, key=lambda i: (self.values[i], -i))
                out["best"], out["best_step"] = self.values[index], self.steps[index]
        return out


class ReportError(ValueError):
    """Bad input for the report: a missing folder, no event files, or a malformed reference file."""


def find_event_dirs(logdir: Path) -> list[Path]:
    """Folders under ``logdir`` (itself included) that hold TensorBoard event files."""
    if not logdir.is_dir():
        raise ReportError(f"--logdir {logdir} is not a folder: pass the run's TensorBoard folder "
                          "(verl writes $TENSORBOARD_DIR, default tensorboard_log/<project>/<experiment>)")
    dirs = sorted({p.parent for p in logdir.rglob("events.out.tfevents.*") if p.is_file()})
    if not dirs:
        raise ReportError(f"no TensorBoard event files (events.out.tfevents.*) under {logdir}: "
                          "was the run started with trainer.logger including 'tensorboard'?")
    return dirs


def read_event_dir(path: Path) -> dict[str, dict[int, tuple[float, float]]]:
    """tag -> step -> (wall_time, value) for one event folder; a re-logged step keeps its latest value."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.util import tensor_util

    acc = EventAccumulator(str(path), size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    out: dict[str, dict[int, tuple[float, float]]] = {}

    def put(tag: str, step: int, wall: float, value: float) -> None:
        previous = out.setdefault(tag, {}).get(step)
        if previous is None or wall >= previous[0]:
            out[tag][step] = (wall, value)

    tags = acc.Tags()
    for tag in tags.get("scalars", []):
        for event in acc.Scalars(tag):
            put(tag, event.step, event.wall_time, float(event.value))
    # Writers using the tensor-based summary API store scalars as 0-d tensors of the scalars plugin.
    for tag in tags.get("tensors", []):
        if acc.SummaryMetadata(tag).plugin_data.plugin_name != "scalars":
            continue
        for event in acc.Tensors(tag):
            array = tensor_util.make_ndarray(event.tensor_proto)
            if array.size == 1:
                put(tag, event.step, event.wall_time, float(array.reshape(())))
    return out


def read_scalars(logdir: Path) -> tuple[dict[str, Series], list[Path], list[Path]]:
    """Scalar series of one run under ``logdir``: (series, folders read, folders ignored).

    verl writes one folder per run (a resumed run appends event files to it). When ``logdir`` holds several
    (a smoke run folder has tensorboard/sft and tensorboard/dapo), the one with the most tags the report plots
    is read and the others are listed in the report as ignored; pass one of them to read it instead.
    """
    dirs = find_event_dirs(logdir)
    loaded = {path: read_event_dir(path) for path in dirs}
    chosen = max(dirs, key=lambda d: (sum(any(p.matches(t) for p in PANELS) for t in loaded[d]), len(loaded[d])))
    series = {}
    for tag, points in loaded[chosen].items():
        steps = sorted(points)
        series[tag] = Series(tag, steps, [points[s][1] for s in steps])
    return series, [chosen], [d for d in dirs if d != chosen]


def load_reference(path: Path | None) -> dict[str, Any]:
    """The reference run: the embedded one, or a YAML/JSON file {name?, metrics: {tag: {start, end}}}."""
    if path is None:
        return REFERENCE_RESULTS
    try:
        data = yaml.safe_load(path.read_text())  # JSON is YAML too
    except (OSError, yaml.YAMLError) as e:
        raise ReportError(f"--reference {path}: cannot read it as YAML/JSON ({e})") from e
    if not isinstance(data, dict):
        raise ReportError(f"--reference {path}: expected a mapping {{name, metrics: {{tag: {{start, end}}}}}}")
    metrics = data.get("metrics", data)
    if not isinstance(metrics, dict) or not metrics:
        raise ReportError(f"--reference {path}: 'metrics' must map tags to {{start, end}}")
    for tag, entry in metrics.items():
        if tag == "name":
            continue
        if not isinstance(entry, dict) or not {"start", "end"} <= set(entry):
            raise ReportError(f"--reference {path}: metric {tag!r} needs 'start' and 'end' numbers, got {entry!r}")
        for key in ("start", "end"):
            if not isinstance(entry[key], (int, float)):
                raise ReportError(f"--reference {path}: {tag}.{key} must be a number, got {entry[key]!r}")
    return {"name": str(data.get("name", path.name)),
            "metrics": {k: v for k, v in metrics.items() if k != "name"}}


def reference_for(tag: str, reference: dict[str, Any]) -> tuple[str, dict[str, float]] | None:
    """The reference entry for ``tag``, exact first, else the same tag with another mean@N."""
    metrics = reference["metrics"]
    if tag in metrics:
        return tag, metrics[tag]
    pattern = _MEAN_AT.sub("mean@N", tag)
    for ref_tag, entry in metrics.items():
        if _MEAN_AT.sub("mean@N", ref_tag) == pattern and pattern != tag:
            return ref_tag, entry
    return None


def fmt(value: float | None) -> str:
    """Four significant digits; float32 noise from TensorBoard (0.28999999) prints as 0.29."""
    if value is None:
        return "—"
    return f"{value:.4g}"


def plot_panel(panel: Panel, series: Sequence[Series], reference: dict[str, Any], path: Path) -> None:
    """One PNG with a line per tag and the reference start/end as dashed lines where one applies."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=110)
    for s in series:
        ax.plot(s.steps, s.values, marker="o" if len(s.steps) < 30 else None, markersize=3, label=s.tag)
        ref = reference_for(s.tag, reference)
        if ref is not None:
            ref_tag, entry = ref
            color = ax.lines[-1].get_color()
            ax.axhline(entry["start"], color=color, linestyle=":", linewidth=1,
                       label=f"reference start {entry['start']:g} ({ref_tag})")
            ax.axhline(entry["end"], color=color, linestyle="--", linewidth=1,
                       label=f"reference end {entry['end']:g}")
    ax.set_title(panel.title)
    ax.set_xlabel("training step")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def build_report(logdir: Path, output: Path, reference: dict[str, Any]) -> dict[str, Any]:
    """Write the PNGs, report.md and report.json into ``output``; return the report.json content."""
    scalars, dirs, ignored = read_scalars(logdir)
    output.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []
    panels: list[dict[str, Any]] = []
    for panel in PANELS:
        tags = sorted(t for t in scalars if panel.matches(t))
        entry: dict[str, Any] = {"name": panel.name, "title": panel.title, "tags": tags, "png": None,
                                 "patterns": list(panel.patterns), "optional": panel.optional}
        if tags:
            png = output / f"{panel.name}.png"
            plot_panel(panel, [scalars[t] for t in tags], reference, png)
            entry["png"] = png.name
        panels.append(entry)
        for tag in tags:
            if any(r["tag"] == tag for r in rows):
                continue  # a tag can match two panels; one table row is enough
            row = scalars[tag].summary(panel.better)
            ref = reference_for(tag, reference)
            row["reference"] = None if ref is None else {"tag": ref[0], **ref[1]}
            rows.append(row)
    unmatched_refs = [t for t in reference["metrics"]
                      if not any(r["reference"] and r["reference"]["tag"] == t for r in rows)]
    report = {"logdir": str(logdir), "event_dirs": [str(d) for d in dirs], "ignored_dirs": [str(d) for d in ignored],
              "reference_name": reference["name"],
              "rows": rows, "panels": panels, "reference_not_logged": unmatched_refs,
              "all_tags": sorted(scalars)}
    (output / "report.json").write_text(json.dumps(report, indent=2) + "\n")
    (output / "report.md").write_text(render_markdown(report))
    return report


def render_markdown(report: dict[str, Any]) -> str:
    """report.md: the table, the curves, and what was not logged."""
    lines = ["# ReTool training report", "",
             f"Run: `{report['event_dirs'][0]}` ({len(report['all_tags'])} scalar tags).",
             *([f"Other event folders under `{report['logdir']}` not read (pass one as --logdir): "
                + ", ".join(f"`{d}`" for d in report["ignored_dirs"]) + "."] if report["ignored_dirs"] else []),
             f"Reference: {report['reference_name']}.", "",
             "| metric | start (step) | best (step) | last (step) | reference start -> end |",
             "|---|---|---|---|---|"]
    for row in report["rows"]:
        ref = row["reference"]
        if ref is None:
            ref_text = "—"
        else:
            ref_text = f"{fmt(ref['start'])} -> {fmt(ref['end'])}"
            if ref["tag"] != row["tag"]:
                ref_text += f" (as `{ref['tag']}`)"
        best = "—" if row["best"] is None else f"{fmt(row['best'])} ({row['best_step']})"
        lines.append(f"| `{row['tag']}` | {fmt(row['start'])} ({row['start_step']}) | {best} | "
                     f"{fmt(row['last'])} ({row['last_step']}) | {ref_text} |")
    if not report["rows"]:
        lines.append("| (none of the report's tags were logged) | | | | |")
    lines += ["", "Best is shown for metrics where higher is better (accuracy, reward). "
              "The reference was measured with mean@30 on the full model; a smoke run uses a tiny model and a "
              "small N, so compare the shape of the curves, not the level.", "", "## Curves", ""]
    missing = []
    for panel in report["panels"]:
        if panel["png"]:
            lines += [f"### {panel['title']}", "", f"![{panel['name']}]({panel['png']})", ""]
        elif not panel["optional"]:
            missing.append(panel)
    if missing or report["reference_not_logged"]:
        lines += ["## Not logged by this run", ""]
        for panel in missing:
            pats = ", ".join(f"`{p}`" for p in panel["patterns"])
            lines.append(f"- {panel['title']}: no tag matched {pats}")
        for tag in report["reference_not_logged"]:
            lines.append(f"- reference metric `{tag}` (nor the same tag with another mean@N)")
        lines.append("")
    lines += ["How to read these curves: docs/tensorboard.md.", ""]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="retool-report",
        description="PNG curves and report.md (start/best/last beside the reference run) from a TensorBoard folder.")
    parser.add_argument("--logdir", type=Path, required=True, help="TensorBoard folder of one run")
    parser.add_argument("--reference", type=Path, default=None,
                        help="YAML/JSON {name, metrics: {tag: {start, end}}}; default: the embedded reference run")
    parser.add_argument("--output", type=Path, required=True, help="folder for report.md, report.json and PNGs")
    args = parser.parse_args(argv)
    try:
        report = build_report(args.logdir, args.output, load_reference(args.reference))
    except ReportError as e:
        print(f"retool-report: error: {e}", file=sys.stderr)
        return 2
    pngs = [p["png"] for p in report["panels"] if p["png"]]
    print(f"wrote {args.output / 'report.md'} ({len(report['rows'])} metrics, {len(pngs)} PNGs: {', '.join(pngs)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
