"""Draw a panel as a matplotlib figure: small multiples, markers for validation, lines for training.

Colours come from a colour-blind-safe palette, one per ``Curve.colour_key`` across the figure (so a data source
keeps its colour across panels and an outcome its colour across the data sources of the tools panel). Published
figures are thin horizontal lines in their curve's colour. The legend sits outside the axes, on the right; the
curves left out because they are zero at every step are named under each axes.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Sequence
from typing import TYPE_CHECKING

from retool.report.panels import Curve, PanelSpec, Plot

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

# Okabe-Ito without its yellow (too light on white), then two darker extras.
PALETTE = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000", "#8C564B")
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")


def colours_for(plots: Sequence[Plot], sources: Sequence[str]) -> dict[str, int]:
    """colour_key -> palette index: data sources by their rank in ``sources``, other keys the lowest free index."""
    keys = list(dict.fromkeys(c.colour_key for p in plots for c in p.curves + p.zero))
    taken = {
        k: sources.index(k.removeprefix("source:"))
        for k in keys
        if k.startswith("source:") and k.removeprefix("source:") in sources
    }
    free = (i for i in range(len(keys) + len(sources)) if i not in taken.values())
    return {k: taken[k] if k in taken else next(free) for k in keys}


def smoothing_window(points: int) -> int:
    """An odd window of about a tenth of the points (at least 3): the smoothed line follows trends, not noise."""
    return max(3, round(points / 10) // 2 * 2 + 1)


def centred_mean(values: Sequence[float], window: int) -> list[float]:
    """Mean over ``window`` points centred on each point (fewer at the ends); NaNs are skipped."""
    half = window // 2
    out = []
    for i in range(len(values)):
        near = [v for v in values[max(0, i - half) : i + half + 1] if math.isfinite(v)]
        out.append(sum(near) / len(near) if near else math.nan)
    return out


def zero_note(zero: Sequence[Curve]) -> str:
    return "zero at every step (not drawn): " + ", ".join(c.label for c in zero)


def draw_curve(ax: Axes, curve: Curve, index: int, smooth: bool) -> None:
    from matplotlib.colors import to_rgba

    colour, marker = PALETTE[index % len(PALETTE)], MARKERS[index % len(MARKERS)]
    s = curve.series
    if curve.validation:
        # Half-transparent faces: a marker on top of another leaves both visible.
        ax.plot(
            s.steps,
            s.values,
            linestyle="none",
            marker=marker,
            markersize=8,
            color=colour,
            markerfacecolor=to_rgba(colour, 0.6),
            markeredgewidth=1.8,
            label=curve.label,
            gid=f"validation:{s.tag}",
            zorder=3,
        )
    elif smooth and len(s.steps) >= 8:
        window = smoothing_window(len(s.steps))
        ax.plot(
            s.steps,
            s.values,
            color=colour,
            linewidth=1,
            alpha=0.35,
            label=f"{curve.label} (raw)",
            gid=f"training:{s.tag}",
        )
        ax.plot(
            s.steps,
            centred_mean(s.values, window),
            color=colour,
            linewidth=2.2,
            label=f"{curve.label}, mean of {window} steps",
            gid=f"smoothed:{s.tag}",
        )
    else:
        # A line needs two points; a lone training point still shows as a dot.
        ax.plot(
            s.steps,
            s.values,
            color=colour,
            linewidth=1.8,
            marker=marker if len(s.steps) < 3 else None,
            label=curve.label,
            gid=f"training:{s.tag}",
        )


def draw_published(ax: Axes, curve: Curve, index: int) -> None:
    """The published start and end of ``curve`` as horizontal lines: the run's steps differ from the published."""
    colour, published = PALETTE[index % len(PALETTE)], curve.published
    end_step = f"step {published['steps']}" if published.get("steps") else "its last step"
    for value, style, when in ((published["start"], ":", "step 0"), (published["end"], "--", end_step)):
        ax.axhline(
            value,
            color=colour,
            linestyle=style,
            linewidth=1.3,
            gid=f"published:{curve.series.tag}",
            label=f"{curve.label}, published: {value:g} at {when}",
        )


def decorate(
    ax: Axes, plot: Plot, index: int, columns: int, count: int, share_y: bool, span: tuple[int, int] | None
) -> None:
    """Axis ranges, labels and the note of one axes (the ``index``-th of ``count`` in ``columns`` columns)."""
    from matplotlib.ticker import MaxNLocator, PercentFormatter

    if plot.rate:
        ax.set_ylim(-0.04, 1.04)
        ax.yaxis.set_major_formatter(PercentFormatter(1.0))
    if plot.title:
        ax.set_title(plot.title, fontsize=11)
    if index % columns == 0 or not share_y:
        ax.set_ylabel(plot.ylabel)
    if index + columns >= count:  # the lowest axes of its column: it carries the step axis
        ax.xaxis.set_tick_params(labelbottom=True)
        ax.set_xlabel("training step")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.grid(alpha=0.3)
    if span:  # the stage's steps, also when nothing is drawn
        pad = max(1.0, 0.03 * (span[1] - span[0]))  # 1+: integer ticks need two integers in view
        ax.set_xlim(span[0] - pad, span[1] + pad)
    notes = plot.notes + ([zero_note(plot.zero)] if plot.zero else [])
    if notes and not plot.curves:  # an empty axes says why, low, where zeros would be and away from published lines
        ax.text(
            0.5,
            0.06,
            textwrap.fill("; ".join(notes), 50),
            transform=ax.transAxes,
            ha="center",
            va="bottom",
            fontsize=10,
            color="#333333",
            gid="note",
            bbox={"boxstyle": "round", "facecolor": "white", "edgecolor": "#BBBBBB"},
        )
    elif notes:
        ax.text(
            0,
            -0.2,
            textwrap.fill("; ".join(notes), 75),
            transform=ax.transAxes,
            va="top",
            fontsize=8.5,
            color="#444444",
            gid="note",
        )


def draw(spec: PanelSpec, plots: Sequence[Plot], sources: Sequence[str], span: tuple[int, int] | None) -> Figure:
    """The figure of one panel: one axes per plot, a shared legend on the right, zero curves named below.

    ``sources`` orders the data sources for their colours; ``span`` is the stage's first and last step, so that
    the panels of a stage share their x axis."""
    from matplotlib.figure import Figure

    colours = colours_for(plots, sources)
    columns = min(len(plots), 2)
    rows = math.ceil(len(plots) / columns)
    fig = Figure(figsize=(4.6 * columns + 3.4, 3.4 * rows + 0.9), dpi=110, layout="constrained")
    share_y = all(p.rate for p in plots)
    axes = fig.subplots(rows, columns, squeeze=False, sharex=True, sharey=share_y).ravel()
    handles: dict[str, object] = {}
    for index, (ax, plot) in enumerate(zip(axes, plots)):
        for curve in plot.curves:
            draw_curve(ax, curve, colours[curve.colour_key], plot.smooth)
        # Zero curves are not drawn, but their published figures are (a zero accuracy against 0.29 -> 0.57).
        for curve in plot.curves + plot.zero:
            if curve.published:
                draw_published(ax, curve, colours[curve.colour_key])
        for line in ax.get_lines():
            handles.setdefault(line.get_label(), line)
        decorate(ax, plot, index, columns, len(plots), share_y, span)
    for ax in axes[len(plots) :]:
        ax.set_visible(False)
    # Left-aligned so that it never runs under the legend at the top right.
    fig.suptitle(spec.title, fontsize=12, x=0.01, ha="left")
    if handles:
        fig.legend(list(handles.values()), list(handles), loc="outside right upper", fontsize=8.5, frameon=False)
    return fig
