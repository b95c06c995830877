"""scripts/keep_sandbox_up.sh, the documented way to keep the sandbox up for days: a real `retool-sandbox serve`
that crashes (SIGKILL) or is stopped by hand (SIGTERM) comes back on the same port, and stopping the script stops
the server with it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from ports import free_port

from retool.constants import REPO_ROOT
from retool_sandbox.client import SandboxClient


def _health(url: str) -> dict | None:
    return SandboxClient(url).health(timeout=2)


def _wait_for_server(url: str, other_than: int | None, supervisor: subprocess.Popen, log: Path) -> dict:
    deadline = time.monotonic() + 60
    while True:
        health = _health(url)
        if health is not None and health["pid"] != other_than:
            return health
        assert supervisor.poll() is None, f"the script exited ({supervisor.returncode}):\n{log.read_text()}"
        assert time.monotonic() < deadline, f"no server on {url} within 60 s:\n{log.read_text()}"
        time.sleep(0.1)


def test_the_sandbox_comes_back_after_a_crash_and_a_stop_and_goes_with_the_script(tmp_path):
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = tmp_path / "sandbox.log"
    env = {**os.environ, "RETOOL_SANDBOX_BIN": str(Path(sys.executable).parent / "retool-sandbox"),
           "RESTART_PAUSE_S": "0.2"}
    with open(log, "w") as out:
        supervisor = subprocess.Popen([str(REPO_ROOT / "scripts" / "keep_sandbox_up.sh"), "--host", "127.0.0.1",
                                       "--port", str(port), "--slots", "1"], env=env, stdout=out,
                                      stderr=subprocess.STDOUT, start_new_session=True)
    try:
        first = _wait_for_server(url, None, supervisor, log)["pid"]
        os.kill(first, signal.SIGKILL)  # a crash, or the kernel's OOM killer
        second = _wait_for_server(url, first, supervisor, log)["pid"]
        os.kill(second, signal.SIGTERM)  # stopped by hand
        third = _wait_for_server(url, second, supervisor, log)["pid"]
        assert SandboxClient(url).run_sync("print(6 * 7)").body["run_result"]["stdout"] == "42\n"
        supervisor.send_signal(signal.SIGTERM)
        assert supervisor.wait(timeout=60) == 0
        assert not os.path.exists(f"/proc/{third}"), "the server outlived the script that was stopped"
        assert _health(url) is None
        text = log.read_text()
        assert "exited with status 137; restart 1" in text and "restart 2" in text, text
        assert "stopped after 2 restarts" in text, text
    finally:
        if supervisor.poll() is None:
            os.killpg(supervisor.pid, signal.SIGKILL)
            supervisor.wait()
