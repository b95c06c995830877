"""Copies of real run folders for planting defects (tests/e2e/test_shakedown*.py): the run's recorded absolute paths
(resolved configs, the shakedown's full-run configs, the merge record) point at the copy, so nothing of the original
is read through them. shutil.copytree keeps file times, which the checklist reads."""

from __future__ import annotations

import shutil
from pathlib import Path


def copy_run(source: Path, target: Path) -> Path:
    shutil.copytree(source, target, symlinks=True)
    for path in [*target.glob("*.resolved.yaml"), *target.glob("shakedown/*.yaml"), target / "logs" / "merge.json"]:
        if path.is_file():
            path.write_text(path.read_text().replace(str(source), str(target)))
    return target
