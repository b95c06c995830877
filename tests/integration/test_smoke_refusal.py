"""`make smoke` (run_smoke_cpu.sh) checks its sandbox's isolation right after starting it: on a host where the
sandbox gets only the rlimit tier (no working bubblewrap) it stops with the fix before building assets or running
SFT and merge, and leaves no sandbox running."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

from retool.constants import REPO_ROOT
from ports import free_port


def test_the_smoke_refuses_a_weak_sandbox_before_its_first_stage(tmp_path, host_note):
    port = free_port()
    env = {
        **os.environ,
        "RUN_DIR": str(tmp_path / "run"),
        "SMOKE_ASSETS": str(tmp_path / "assets"),
        "PYTHON": sys.executable,
        "SANDBOX_PORT": str(port),
        # the tier a host without bubblewrap gets; it runs code as an unprivileged uid, which cannot reach a venv
        # under /root: the system python
        "SANDBOX_ARGS": "--isolation rlimit --python /usr/bin/python3 --slots 1",
    }
    for key in ("DRY_RUN", "RETOOL_ACCEPT_WEAK_ISOLATION"):
        env.pop(key, None)
    started = time.monotonic()
    proc = subprocess.run(
        [str(REPO_ROOT / "run_smoke_cpu.sh")], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    host_note(f"the smoke refused its sandbox after {time.monotonic() - started:.1f} s")
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert f"error: sandbox http://127.0.0.1:{port} has isolation 'rlimit'" in proc.stderr
    assert "install bubblewrap" in proc.stderr and "RETOOL_ACCEPT_WEAK_ISOLATION=1" in proc.stderr
    assert "error: the smoke stops before its first stage" in proc.stderr
    assert "==> [assets]" not in proc.stdout and not (tmp_path / "assets").exists()
    assert (tmp_path / "run" / "logs" / "stages.tsv").read_text() == ""  # no stage ran
    with socket.socket() as sock:
        assert sock.connect_ex(("127.0.0.1", port)) != 0, "the smoke left its sandbox running"
