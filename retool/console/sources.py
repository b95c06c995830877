"""The files a stage writes as it runs, which the console reads instead of scraping its output.

- verl's metric stream: its ``file`` tracker (``trainer.logger`` holds ``file``) writes one JSON line per logged step,
  ``{"step": N, "data": {metric: value}}``, unbuffered, to ``VERL_FILE_LOGGER_PATH`` (scripts/launch.sh gives each
  launch its own file in ``logs/metrics/``: verl truncates the file it opens). verl opens it when training begins,
  after its workers are up and before the validation that may come first.
- verl's checkpoint marker: ``latest_checkpointed_iteration.txt`` in ``trainer.default_local_dir``, rewritten after
  each complete save (read by ``retool.resume.latest_checkpoint``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Sources:
    """Where a stage's structured records are; None: not read (the console then takes the same facts from the
    output lines, e.g. for a pipe of verl's output)."""

    metrics: Path | None = None
    checkpoints: Path | None = None


class JsonLines:
    """A JSON-lines file another process appends to: ``new()`` returns the whole lines written since the last call
    (a line still being written waits for its newline; a line that is not a JSON object is skipped)."""

    def __init__(self, path: Path):
        self.path = path
        self.offset = 0
        self._partial = b""

    def exists(self) -> bool:
        return self.path.is_file()

    def new(self) -> list[dict[str, Any]]:
        try:
            with self.path.open("rb") as handle:
                handle.seek(self.offset)
                data = handle.read()
        except OSError:  # not there yet
            return []
        self.offset += len(data)
        *complete, self._partial = (self._partial + data).split(b"\n")
        records = []
        for line in complete:
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if isinstance(record, dict):
                records.append(record)
        return records


def step_metrics(record: Mapping[str, Any]) -> tuple[int, dict[str, float]] | None:
    """(step, its numeric metrics) of a record of verl's file tracker; None if it is not one."""
    step, data = record.get("step"), record.get("data")
    if not isinstance(step, int) or not isinstance(data, dict):
        return None
    return step, {
        key: float(value)
        for key, value in data.items()
        if isinstance(value, (int, float)) and not isinstance(value, bool)
    }
