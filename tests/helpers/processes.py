"""Host processes as /proc shows them, for tests that must leave nothing running."""

from __future__ import annotations

from pathlib import Path


def processes_with(marker: str) -> list[int]:
    """Pids of live host processes whose command line contains ``marker``."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker.encode() in (entry / "cmdline").read_bytes():
                    pids.append(int(entry.name))
            except OSError:
                pass
    return pids
