"""report.md from the report's content (the dict written as report.json): per panel its PNG, a start / best /
last table of the drawn series and one line naming the series that are zero at every step."""

from __future__ import annotations

from typing import Any


def fmt(value: float | None) -> str:
    """Four significant digits; float32 noise from TensorBoard (0.28999999) prints as 0.29."""
    return "—" if value is None else f"{value:.4g}"


def published_text(published: dict[str, Any] | None, tag: str) -> str:
    if published is None:
        return "—"
    text = f"{fmt(published['start'])} -> {fmt(published['end'])}"
    return text if published["tag"] == tag else f"{text} (as `{published['tag']}`)"


def table(rows: list[dict[str, Any]]) -> list[str]:
    """The rows of one panel; the published column only where a published figure applies."""
    with_published = any(r["published"] for r in rows)
    columns = ["series", "tag", "start (step)", "best (step)", "last (step)"]
    lines = [
        "| " + " | ".join(columns + ["published start -> end"] * with_published) + " |",
        "|" + "---|" * (len(columns) + with_published),
    ]
    for r in rows:
        cells = [
            r["series"],
            f"`{r['tag']}`",
            f"{fmt(r['start'])} ({r['start_step']})",
            "—" if r["best"] is None else f"{fmt(r['best'])} ({r['best_step']})",
            f"{fmt(r['last'])} ({r['last_step']})",
        ]
        cells += [published_text(r["published"], r["tag"])] * with_published
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def zero_line(zero: list[dict[str, Any]]) -> str:
    """One line for all zero series of a panel, grouped by plot (data source) when the panel has several."""
    groups: dict[str | None, list[str]] = {}
    for z in zero:
        label, published = z["label"], z["published"]
        if published:
            label += f" (published {fmt(published['start'])} -> {fmt(published['end'])} as `{published['tag']}`)"
        groups.setdefault(z["plot"], []).append(label)
    parts = [", ".join(labels) if plot is None else f"{plot}: {', '.join(labels)}" for plot, labels in groups.items()]
    return "Zero at every step (tags in report.json), so neither drawn nor tabled: " + "; ".join(parts) + "."


def render(report: dict[str, Any]) -> str:
    """The whole report.md."""
    lines = ["# ReTool training report", ""]
    for stage, label in (("rl_dir", "RL run"), ("sft_dir", "SFT run")):
        if report[stage]:
            lines.append(f"{label}: `{report[stage]}` ({len(report['all_tags'][stage[:-4]])} scalar tags).")
    if report["ignored_dirs"]:
        lines.append(
            "Other event folders, not read (pass one as --logdir to read it): "
            + ", ".join(f"`{d}`" for d in report["ignored_dirs"])
            + "."
        )
    lines += [
        f"Published: {report['published']['name']}.",
        "",
        (
            "Validation series are sparse (before training and every `trainer.test_freq` steps) and drawn as "
            "markers; training series as lines. Where the published figures come from another model or N "
            "(the published result is mean@30 on Qwen3-4B; a smoke run is a tiny model with mean@4), compare "
            "the shape of the curves, not the level."
        ),
        "",
    ]
    if report["reproduction"]:
        lines += ["## Reproduction band", ""] + [f"- {line}" for line in report["reproduction"]]
        lines += [
            "",
            'The band, how it is computed and what to check outside it: docs/reference.md, "The reproduction band".',
            "",
        ]
    for panel in report["panels"]:
        lines += [f"## {panel['title']}", "", f"![{panel['name']}]({panel['png']})", "", f"From {panel['tags']}.", ""]
        lines += table(panel["rows"]) if panel["rows"] else ["No series of this panel moved from zero."]
        lines.append("")
        if panel["notes"]:
            lines += [f"Note: {note}." for note in panel["notes"]] + [""]
        if panel["zero"]:
            lines += [zero_line(panel["zero"]), ""]
    if report["not_logged"] or report["published_not_logged"]:
        lines += ["## Not logged by this run", ""]
        lines += [f"- {p['title']}: no tag among {p['tags']}" for p in report["not_logged"]]
        lines += [
            f"- published metric `{t}` (nor the same tag with another mean@N)" for t in report["published_not_logged"]
        ]
        lines.append("")
    lines += ["How to read these curves: docs/tensorboard.md.", ""]
    return "\n".join(lines)
