"""Host processes as /proc shows them, for tests that must leave nothing running."""

from __future__ import annotations

import os
import signal
import subprocess
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


def stop_group(proc: subprocess.Popen, timeout: float = 30) -> None:
    """SIGTERM the process group a test started (``start_new_session=True``), SIGKILL it after ``timeout`` s."""
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def environ(pid: int) -> dict[str, str]:
    """The environment a live process started with ({} once it is gone)."""
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    return dict(item.split("=", 1) for item in raw.decode(errors="replace").split("\0") if "=" in item)
