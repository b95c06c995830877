"""scripts/keep_sandbox_up.sh, the documented way to keep the sandbox up for days: a real `retool-sandbox serve`
that crashes (SIGKILL) or is stopped by hand (SIGTERM) comes back on the same port, stopping the script stops the
server with it, and a launch whose node check falls on a restart waits for the sandbox instead of stopping."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from ports import free_port

from retool.constants import REPO_ROOT
from retool.sandbox_gate import sandbox_verdict
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


@contextlib.contextmanager
def supervised_sandbox(tmp_path: Path, pause_s: str) -> Iterator[tuple[str, subprocess.Popen, Path]]:
    """(its URL, the script, its log): scripts/keep_sandbox_up.sh on a free port; killed afterwards if still up."""
    port = free_port()
    log = tmp_path / "sandbox.log"
    env = {
        **os.environ,
        "RETOOL_SANDBOX_BIN": str(Path(sys.executable).parent / "retool-sandbox"),
        "RESTART_PAUSE_S": pause_s,
    }
    with open(log, "w") as out:
        supervisor = subprocess.Popen(
            [
                str(REPO_ROOT / "scripts" / "keep_sandbox_up.sh"),
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--slots",
                "1",
            ],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        yield f"http://127.0.0.1:{port}", supervisor, log
    finally:
        if supervisor.poll() is None:
            os.killpg(supervisor.pid, signal.SIGKILL)
            supervisor.wait()


def test_the_sandbox_comes_back_after_a_crash_and_a_stop_and_goes_with_the_script(tmp_path):
    with supervised_sandbox(tmp_path, "0.2") as (url, supervisor, log):
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


def test_a_launch_that_falls_on_a_restart_waits_for_the_sandbox(tmp_path):
    # The soak's relaunch after a kill -9 met the sandbox restarting, and the node check refused it at once.
    with supervised_sandbox(tmp_path, "3") as (url, supervisor, log):
        first = _wait_for_server(url, None, supervisor, log)["pid"]
        os.kill(first, signal.SIGKILL)
        while os.path.exists(f"/proc/{first}") and _health(url) is not None:
            time.sleep(0.05)
        assert _health(url) is None  # the gate starts inside the restart's pause: the port refuses connections
        ok, message = sandbox_verdict(url, environ={})
        assert ok, message
        assert message.endswith("ran print(6*7)") and _health(url)["pid"] != first
