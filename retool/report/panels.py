"""The report's panels: one question each, answered by the series of one run stage.

Tag names follow verl 0.9.1. Validation metrics are ``val-core/<data_source>/acc/mean@N`` and
``val-aux/<data_source>/<reward field>/mean@N`` (N = validation samples per prompt: 30 in the published run, 4 in
the smoke run), so they are matched by pattern. The reward logs tool outcomes as counts per trajectory
(retool.tool_outcomes); the tools panel turns them into rates (outcome / tool_calls) so they share a 0-1 axis.
Series that are zero at every step are kept out of the curves and tables and listed in one note instead.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from retool.report.events import Series

_VAL_CORE_ACC = re.compile(r"^val-core/(?P<source>[^/]+)/acc/mean@(?P<n>\d+)$")
_VAL_AUX = re.compile(r"^val-aux/(?P<source>[^/]+)/(?P<key>[^/]+)/mean@(?P<n>\d+)$")
_MEAN_AT = re.compile(r"mean@\d+")

# Outcome counts drawn as a share of tool_calls, with what the share means and which direction is better.
OUTCOME_RATES = (
    ("tool_ok", "calls: ran OK (exit 0)", "max"),
    ("tool_error", "calls: error exit or bad arguments", "min"),
    ("tool_timeout", "calls: timed out", "min"),
    ("tool_unavailable", "calls: no sandbox result", "min"),
    ("tool_truncated", "calls: output truncated", "min"),
)


@dataclass
class Curve:
    """A series as drawn: validation series are sparse points (markers), training series lines.

    ``colour_key`` keeps one colour per data source or outcome across a figure; ``better`` ("max"/"min") picks
    the table's best value; ``published`` is {tag, start, end, steps} when a published figure applies.
    """

    series: Series
    label: str
    validation: bool
    colour_key: str
    better: str | None = None
    published: dict[str, Any] | None = None


@dataclass
class Plot:
    """One axes: the curves to draw and the ones left out because they are zero at every step."""

    title: str | None
    ylabel: str
    curves: list[Curve] = field(default_factory=list)
    zero: list[Curve] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    rate: bool = False  # a 0-1 share: fixed axis, drawn as percent
    smooth: bool = False  # noisy training lines get a smoothed line over the raw one


def make_plot(title: str | None, ylabel: str, curves: list[Curve], **options: Any) -> Plot:
    """A plot with zero-at-every-step curves moved out of ``curves`` into ``zero``."""
    return Plot(
        title,
        ylabel,
        [c for c in curves if not c.series.is_zero()],
        [c for c in curves if c.series.is_zero()],
        **options,
    )


def published_for(tag: str, published: dict[str, Any]) -> dict[str, Any] | None:
    """{tag, start, end, steps} published for ``tag``: the exact tag first, else the same tag with another mean@N."""
    metrics, pattern = published["metrics"], _MEAN_AT.sub("mean@N", tag)
    candidates = (
        [tag] if tag in metrics else [t for t in metrics if pattern != tag and _MEAN_AT.sub("mean@N", t) == pattern]
    )
    if not candidates:
        return None
    entry = metrics[candidates[0]]
    return {"tag": candidates[0], "start": entry["start"], "end": entry["end"], "steps": published.get("steps")}


def per_source(scalars: dict[str, Series], key: str) -> dict[str, Series]:
    """data source -> its ``val-aux/<source>/<key>/mean@N`` series (``acc``: the val-core one); largest N wins."""
    found: dict[str, tuple[int, Series]] = {}
    for tag, series in scalars.items():
        match = _VAL_CORE_ACC.match(tag) if key == "acc" else _VAL_AUX.match(tag)
        if match is None or (key != "acc" and match["key"] != key):
            continue
        n = int(match["n"])
        if match["source"] not in found or n > found[match["source"]][0]:
            found[match["source"]] = (n, series)
    return {source: found[source][1] for source in sorted(found)}


def data_sources(scalars: dict[str, Series]) -> list[str]:
    """Every data source with validation metrics, sorted: the order that gives each its colour."""
    return sorted({m["source"] for t in scalars for m in [_VAL_CORE_ACC.match(t) or _VAL_AUX.match(t)] if m})


def ratio(numerator: Series, denominator: Series) -> Series:
    """numerator / denominator at the steps where both were logged and the denominator is positive."""
    below = dict(zip(denominator.steps, denominator.values))
    points = [
        (s, v / below[s]) for s, v in zip(numerator.steps, numerator.values) if below.get(s, 0) > 0 and math.isfinite(v)
    ]
    return Series(f"{numerator.tag} / {denominator.tag.split('/')[-2]}", [s for s, _ in points], [v for _, v in points])


def accuracy_panel(scalars: dict[str, Series], published: dict[str, Any]) -> list[Plot] | None:
    curves = [
        Curve(s, source, True, f"source:{source}", "max", published_for(s.tag, published))
        for source, s in per_source(scalars, "acc").items()
    ]
    if not curves:
        return None
    return [make_plot(None, "accuracy", curves, rate=True)]


def tools_panel(scalars: dict[str, Series], published: dict[str, Any]) -> list[Plot] | None:
    used, calls = per_source(scalars, "used_tool"), per_source(scalars, "tool_calls")
    plots = []
    for source in sorted(set(used) | set(calls)):
        curves = []
        if source in used:
            curves.append(Curve(used[source], "trajectories that used the tool", True, "used_tool", "max"))
        notes = []
        if source in calls and not any(v > 0 for v in calls[source].values):
            notes.append("no tool call at any validation step, so no outcome rates")
        elif source in calls:
            outcomes = {key: per_source(scalars, key).get(source) for key, _, _ in OUTCOME_RATES}
            curves += [
                Curve(ratio(outcomes[key], calls[source]), label, True, key, better)
                for key, label, better in OUTCOME_RATES
                if outcomes[key] is not None
            ]
        plots.append(make_plot(source, "share", curves, rate=True, notes=notes))
    return plots or None


def turns_panel(scalars: dict[str, Series], published: dict[str, Any]) -> list[Plot] | None:
    curves = [
        Curve(s, f"{source}: tool calls (validation)", True, f"source:{source}")
        for source, s in per_source(scalars, "tool_calls").items()
    ]
    # verl's v1 trainer logs the training turns under both names; one line is enough.
    train = next((scalars[t] for t in ("num_turns/mean", "training/num_turns/mean") if t in scalars), None)
    if train is not None:
        curves.append(Curve(train, "turns, training batches", False, "train"))
    if "val-aux/num_turns/mean" in scalars:
        val = scalars["val-aux/num_turns/mean"]
        curves.append(Curve(val, "turns, validation", True, "val", published=published_for(val.tag, published)))
    if not curves:
        return None
    return [make_plot(None, "turns or calls per trajectory", curves)]


def reward_panel(scalars: dict[str, Series], published: dict[str, Any]) -> list[Plot] | None:
    curves = [
        Curve(s, f"{source} (validation)", True, f"source:{source}", "max")
        for source, s in per_source(scalars, "score").items()
    ]
    if "critic/rewards/mean" in scalars:
        curves.append(Curve(scalars["critic/rewards/mean"], "training batches", False, "train", "max"))
    if not curves:
        return None
    return [make_plot(None, "reward", curves, smooth=True)]


def response_length_panel(scalars: dict[str, Series], published: dict[str, Any]) -> list[Plot] | None:
    if "response_length/mean" not in scalars:
        return None
    return [make_plot(None, "tokens", [Curve(scalars["response_length/mean"], "mean", False, "train")])]


def sft_loss_panel(scalars: dict[str, Series], published: dict[str, Any]) -> list[Plot] | None:
    curves = []
    if "train/loss" in scalars:
        curves.append(Curve(scalars["train/loss"], "training batches", False, "train", "min"))
    if "val/loss" in scalars:
        curves.append(Curve(scalars["val/loss"], "validation", True, "val", "min"))
    if not curves:
        return None
    return [make_plot(None, "loss", curves, smooth=True)]


def failures_panel(scalars: dict[str, Series], published: dict[str, Any]) -> list[Plot] | None:
    """The failure accounting (retool.failures): the failed share of each step and validation, and training counts
    by cause. A healthy run is zero everywhere, which the figure says in its note."""
    from retool.failures.causes import CAUSES

    shares = [
        Curve(scalars[tag], label, tag.startswith("val-"), key, "min")
        for tag, label, key in (
            ("failures/share", "training steps", "train"),
            ("val-failures/share", "validations", "val"),
        )
        if tag in scalars
    ]
    counts = [
        Curve(scalars[f"failures/total/{cause}"], cause, False, cause, "min")
        for cause in CAUSES
        if f"failures/total/{cause}" in scalars
    ]
    if not shares and not counts:
        return None
    return [
        make_plot("share of the trajectories that failed", "share", shares, rate=True),
        make_plot("failed training trajectories by cause", "trajectories", counts),
    ]


def off_policy_panel(scalars: dict[str, Series], published: dict[str, Any]) -> list[Plot] | None:
    """How stale the trained trajectories were (retool.trainer_modes): zero in sync, the price of the async modes."""
    from retool.trainer_modes import EVICTED, SPANS, STALENESS, STALENESS_WORST

    behind = [
        Curve(scalars[tag], label, False, key, "min")
        for tag, label, key in (
            (f"{STALENESS}/mean", "mean, from its last token", "mean"),
            (f"{STALENESS}/max", "most, from its last token", "max"),
            (f"{STALENESS_WORST}/max", "most, from its first token", "worst"),
        )
        if tag in scalars
    ]
    spans = [
        Curve(scalars[tag], label, False, key)
        for tag, label, key in (
            (f"{SPANS}/mean", "model versions per trajectory, mean", "mean"),
            (f"{SPANS}/max", "model versions per trajectory, most", "max"),
            (EVICTED, "groups dropped as too stale", "evicted"),
        )
        if tag in scalars
    ]
    if not behind and not spans:
        return None
    return [
        make_plot("model versions between a trajectory's weights and the trained weights", "versions", behind),
        make_plot("partial rollout: versions a trajectory was generated across", "versions or groups", spans),
    ]


@dataclass(frozen=True)
class PanelSpec:
    """A figure of the report (``<name>.png``): the stage whose scalars it reads, the tags it draws, its plots."""

    name: str
    title: str
    stage: str
    tags: str
    build: Callable[[dict[str, Series], dict[str, Any]], list[Plot] | None]


PANELS = (
    PanelSpec(
        "accuracy", "Validation accuracy per data source", "rl", "val-core/<data_source>/acc/mean@N", accuracy_panel
    ),
    PanelSpec(
        "tools",
        "Tool use and tool outcomes per data source",
        "rl",
        "val-aux/<data_source>/used_tool/mean@N; tool_ok, tool_error, tool_timeout, tool_unavailable, "
        "tool_truncated / tool_calls",
        tools_panel,
    ),
    PanelSpec(
        "num_turns",
        "Turns and tool calls per trajectory",
        "rl",
        "num_turns/mean, val-aux/num_turns/mean, val-aux/<data_source>/tool_calls/mean@N",
        turns_panel,
    ),
    PanelSpec("reward", "Reward", "rl", "critic/rewards/mean, val-aux/<data_source>/score/mean@N", reward_panel),
    PanelSpec(
        "response_length",
        "Response length (tokens of model and tool output)",
        "rl",
        "response_length/mean",
        response_length_panel,
    ),
    PanelSpec(
        "failures",
        "Failed trajectories (lost or kept out of the loss)",
        "rl",
        "failures/share, val-failures/share, failures/total/<cause>",
        failures_panel,
    ),
    PanelSpec(
        "off_policy",
        "Staleness of the trained trajectories (trainer modes)",
        "rl",
        "training/off_policy/trajectory_staleness/{mean,max}, .../trajectory_staleness_worst/max, "
        ".../trajectory_spans/{mean,max}, training/off_policy/evicted_samples",
        off_policy_panel,
    ),
    PanelSpec("sft_loss", "SFT loss", "sft", "train/loss, val/loss", sft_loss_panel),
)


def build_panels(
    stages: dict[str, dict[str, Series]], published: dict[str, Any]
) -> tuple[list[tuple[PanelSpec, list[Plot]]], list[PanelSpec]]:
    """(panels to draw with their plots, panels of a stage that was read but logged none of their tags)."""
    drawn, missing = [], []
    for spec in PANELS:
        plots = spec.build(stages[spec.stage], published) if stages[spec.stage] else None
        if plots:
            drawn.append((spec, plots))
        elif stages[spec.stage]:
            missing.append(spec)
    return drawn, missing
