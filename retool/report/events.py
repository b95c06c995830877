"""TensorBoard event folders -> scalar series, and which folder holds which stage of a run.

``read_event_dirs`` is also used by retool/smoke/summary.py.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path


class ReportError(ValueError):
    """Bad input for the report: a missing folder, no event files, or a malformed published-results file."""


@dataclass
class Series:
    """One scalar tag: steps ascending with their values."""

    tag: str
    steps: list[int]
    values: list[float]

    def is_zero(self) -> bool:
        """True when every finite value is 0 (and there is one): nothing to see in a curve, one line in the text."""
        finite = [v for v in self.values if math.isfinite(v)]
        return bool(finite) and all(v == 0 for v in finite)


@dataclass
class Run:
    """The stages found under a logdir: RL and SFT scalars (empty when absent) and the folders read or ignored."""

    rl: dict[str, Series] = field(default_factory=dict)
    sft: dict[str, Series] = field(default_factory=dict)
    rl_dir: Path | None = None
    sft_dir: Path | None = None
    ignored: list[Path] = field(default_factory=list)

    def step_span(self, stage: str) -> tuple[int, int] | None:
        """First and last step any tag of ``stage`` logged: the x range its panels share."""
        steps = [step for series in getattr(self, stage).values() for step in series.steps]
        return (min(steps), max(steps)) if steps else None


def find_event_dirs(logdir: Path) -> list[Path]:
    """Folders under ``logdir`` (itself included) that hold TensorBoard event files."""
    if not logdir.is_dir():
        raise ReportError(
            f"--logdir {logdir} is not a folder: pass the run's TensorBoard folder "
            "(verl writes $TENSORBOARD_DIR, default tensorboard_log/<project>/<experiment>)"
        )
    dirs = sorted({p.parent for p in logdir.rglob("events.out.tfevents.*") if p.is_file()})
    if not dirs:
        raise ReportError(
            f"no TensorBoard event files (events.out.tfevents.*) under {logdir}: "
            "was the run started with trainer.logger including 'tensorboard'?"
        )
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


def read_event_dirs(logdir: Path) -> dict[str, dict[int, tuple[float, float]]]:
    """``read_event_dir`` over every event folder under ``logdir`` (a run whose resume moved its TensorBoard folder
    has several); a step logged in more than one keeps its latest value."""
    merged: dict[str, dict[int, tuple[float, float]]] = {}
    for path in find_event_dirs(logdir):
        for tag, points in read_event_dir(path).items():
            into = merged.setdefault(tag, {})
            for step, point in points.items():
                if step not in into or point[0] >= into[step][0]:
                    into[step] = point
    return merged


_RL_PREFIXES = ("critic/", "val-core/", "val-aux/", "response_length/", "actor/")
_SFT_TAGS = ("train/loss", "val/loss")


def stage_of(tags: set[str]) -> str | None:
    """ "rl" for a folder with RL trainer tags, "sft" for one with the SFT trainer's loss, else None."""
    if any(t.startswith(_RL_PREFIXES) for t in tags):
        return "rl"
    if any(t in tags for t in _SFT_TAGS):
        return "sft"
    return None


def read_run(logdir: Path) -> Run:
    """The RL and SFT stages under ``logdir``, never mixed.

    verl writes one folder per stage (a resumed run appends event files to it), so a smoke run folder has
    tensorboard/sft and tensorboard/rl (tensorboard/dapo before the rename). Per stage the folder with the most
    tags is read; other folders (a second RL run, folders with neither stage's tags) are listed as ignored.
    """
    loaded = {path: read_event_dir(path) for path in find_event_dirs(logdir)}
    run = Run()
    for stage in ("rl", "sft"):
        candidates = [d for d, tags in loaded.items() if stage_of(set(tags)) == stage]
        if not candidates:
            continue
        chosen = max(candidates, key=lambda d: len(loaded[d]))
        series = {
            tag: Series(tag, sorted(points), [points[s][1] for s in sorted(points)])
            for tag, points in loaded[chosen].items()
        }
        setattr(run, stage, series)
        setattr(run, f"{stage}_dir", chosen)
    run.ignored = [d for d in loaded if d not in (run.rl_dir, run.sft_dir)]
    if not run.rl and not run.sft:
        raise ReportError(
            f"the event folders under {logdir} ({', '.join(str(d) for d in loaded)}) hold neither RL "
            f"tags ({', '.join(_RL_PREFIXES)}...) nor the SFT loss ({', '.join(_SFT_TAGS)}): "
            "pass the run's tensorboard folder"
        )
    return run
