"""A plain clone needs nothing beside it: no file of the repository names a path outside it."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# the folder next to the clone that development machines have, and their checkout path
OUTSIDE = re.compile(r"\.\./shared\b|(?<![\w.])shared/(?:data|docs)\b|/work/\w")


def test_no_tracked_file_names_a_path_outside_the_repository():
    files = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split("\0")
    offenders = []
    for name in filter(None, files):
        path = REPO / name
        if not path.is_file() or path.suffix in (".parquet", ".png", ".safetensors"):
            continue
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        offenders += [
            f"{name}:{n}: {line.strip()[:120]}"
            for n, line in enumerate(text.splitlines(), 1)
            if OUTSIDE.search(line) and name != "tests/unit/test_self_contained.py"
        ]
    assert not offenders, "paths outside the repository:\n" + "\n".join(offenders)
