"""A run folder as the checklist reads it: launches, stage configs, TensorBoard points, checkpoints, records.

Only files the run wrote are read, never console output (the console view is a summary; ``logs/<stage>.log`` has
verl's whole output). TensorBoard points are kept per event file and undeduplicated, so the checklist can tell a step
logged twice, or which launch logged which step.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from retool.doctor.config import dig
from retool.failures.limits import read_records
from retool.resume import event_dirs, latest_checkpoint

LAUNCHES = "logs/launches.jsonl"
MERGE_RECORD = "logs/merge.json"
RESUME_RECORD = "shakedown/resume.json"
FULL_CONFIG = "shakedown/{stage}.full.yaml"
MERGED = "sft_merged"
STAGES = ("sft", "rl")


class RunFolderError(ValueError):
    """The folder is not a run folder; the message says what is missing."""


@dataclass(frozen=True)
class Point:
    """One scalar as verl logged it: the event file, wall time, step, tag and value."""

    file: Path
    wall: float
    step: int
    tag: str
    value: float


@dataclass
class Events:
    """Every scalar point of a stage's TensorBoard folder, and when each event file was created."""

    points: list[Point] = field(default_factory=list)
    created: dict[Path, float] = field(default_factory=dict)

    @property
    def tags(self) -> set[str]:
        return {p.tag for p in self.points}

    def series(self, tag: str) -> dict[int, float]:
        """step -> value; a step logged twice keeps the later write."""
        latest: dict[int, Point] = {}
        for p in self.points:
            if p.tag == tag and (p.step not in latest or p.wall >= latest[p.step].wall):
                latest[p.step] = p
        return {step: latest[step].value for step in sorted(latest)}

    def walls(self, tag: str) -> dict[int, float]:
        """step -> wall time of the latest write of ``tag`` at that step."""
        out: dict[int, float] = {}
        for p in self.points:
            if p.tag == tag:
                out[p.step] = max(out.get(p.step, p.wall), p.wall)
        return out

    def counts(self, tag: str) -> Counter:
        """step -> how many times ``tag`` was written at that step, over every event file."""
        return Counter(p.step for p in self.points if p.tag == tag)

    def matching(self, prefix: str) -> set[str]:
        return {tag for tag in self.tags if tag.startswith(prefix)}


def read_events(folders: list[Path]) -> Events:
    """The scalars of every event file under ``folders`` (none when they are missing)."""
    from tensorboard.util import tensor_util

    from retool.resume import (  # the TFRecord reader the resume cleans event files with
        _event,
        _records,
    )

    events = Events()
    for path in sorted(p for folder in folders for p in folder.rglob("events.out.tfevents.*")):
        for record in _records(path.read_bytes()):
            event = _event(record)
            events.created.setdefault(path, event.wall_time)
            for value in event.summary.value:
                if value.HasField("simple_value"):
                    number = float(value.simple_value)
                elif value.HasField("tensor"):
                    array = tensor_util.make_ndarray(value.tensor)
                    if array.size != 1 or array.dtype.kind not in "fiub":
                        continue  # text (validation generations) and other non-scalars
                    number = float(array.reshape(()))
                else:
                    continue
                events.points.append(Point(path, event.wall_time, event.step, value.tag, number))
    return events


def read_json(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None


@dataclass
class Stage:
    """One stage of the run: its config, the full run's config (shakedowns), events and checkpoints."""

    name: str
    config: dict[str, Any]
    full_config: dict[str, Any] | None
    events: Events
    launches: list[dict[str, Any]]

    @property
    def checkpoint_dir(self) -> Path:
        return Path(dig(self.config, "trainer.default_local_dir", ""))

    def latest_checkpoint(self) -> int | None:
        return latest_checkpoint(self.checkpoint_dir, strict=False)

    @property
    def starts(self) -> list[dict[str, Any]]:
        return [r for r in self._led() if r.get("event") == "start"]

    @property
    def ends(self) -> list[dict[str, Any]]:
        return [r for r in self._led() if r.get("event") == "end"]

    def _led(self) -> list[dict[str, Any]]:
        """The launches themselves: node 0's lines. A multi-node SFT's other nodes join node 0's launch, and find
        the config it has just written, so their lines say "resume" on a first launch too."""
        return [r for r in self.launches if str(r.get("node_rank", "0")) == "0"]


@dataclass
class Run:
    folder: Path
    kind: str | None  # shakedown | smoke | run; None when the folder has no logs/launches.jsonl
    stages: dict[str, Stage]
    failures: list[dict[str, Any]]
    merge: dict[str, Any] | None
    resume: dict[str, Any] | None

    @property
    def device(self) -> str | None:
        for stage in self.stages.values():
            return dig(stage.config, "trainer.device")
        return None


def run_kind(launches: list[dict[str, Any]]) -> str | None:
    kinds = {r.get("kind") for r in launches if r.get("event") == "start"}
    if "shakedown" in kinds:
        return "shakedown"
    return next(iter(sorted(k for k in kinds if k)), None)


def read_run(folder: Path) -> Run:
    if not folder.is_dir():
        raise RunFolderError(f"{folder} is not a folder: pass a run's RUN_DIR (runs/shakedown-<time>, runs/smoke-...)")
    found = [s for s in STAGES if (folder / f"{s}.resolved.yaml").is_file()]
    if not found:
        raise RunFolderError(
            f"{folder} holds neither sft.resolved.yaml nor rl.resolved.yaml: not a run folder "
            "(scripts/launch.sh writes them when a stage starts)"
        )
    launches = read_records(folder / LAUNCHES)
    stages = {}
    for name in found:
        config = yaml.safe_load((folder / f"{name}.resolved.yaml").read_text())
        full_path = folder / FULL_CONFIG.format(stage=name)
        full = yaml.safe_load(full_path.read_text()) if full_path.is_file() else None
        stages[name] = Stage(
            name,
            config,
            full,
            read_events(event_dirs(name, folder, config)),
            [r for r in launches if r.get("stage") == name],
        )
    return Run(
        folder,
        run_kind(launches),
        stages,
        read_records(folder / "logs" / "failures.jsonl"),
        read_json(folder / MERGE_RECORD),
        read_json(folder / RESUME_RECORD),
    )
