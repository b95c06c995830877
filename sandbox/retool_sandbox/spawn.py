"""Start a real ``retool-sandbox`` server as a child process, for a run that needs its own (the test suites, and in
the ReTool recipe its learning runs, benchmarks and retool-eval's tests).

``running_sandbox(**opts)`` launches ``python -m retool_sandbox serve --port 0`` as a child process, waits until
it prints its ready line (its slots and session zygote have started: /health says state ready) and ``GET /v1/ping``
answers, yields the base URL (e.g. ``http://127.0.0.1:41234``) and stops the server on exit.
Keyword options become CLI flags: ``slots=2`` -> ``--slots 2``, ``isolation="rlimit"`` -> ``--isolation rlimit``;
``True`` adds a bare flag, ``None``/``False`` omit it. The POST endpoint is ``url + "/run_code"``.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from collections.abc import Iterator

from retool_sandbox.client import SandboxClient, SandboxUnreachable

# The folder that holds this package: on the server's PYTHONPATH, so a checkout that is not installed (or another
# user's interpreter, which cannot see this environment's site-packages) still finds it.
PACKAGE_PARENT = Path(__file__).resolve().parents[1]

_READY = re.compile(r"retool-sandbox ready at (http://\S+)")


def _flags(opts: dict[str, Any]) -> list[str]:
    args: list[str] = []
    for key, value in opts.items():
        if value is None or value is False:
            continue
        flag = "--" + key.replace("_", "-")
        if value is True:
            args.append(flag)
        else:
            args += [flag, str(value)]
    return args


def _answers(url: str) -> bool:
    try:
        SandboxClient(url).ping(timeout=2.0)
    except SandboxUnreachable:
        return False
    return True


@contextlib.contextmanager
def running_sandbox(
    *,
    host: str = "127.0.0.1",
    startup_timeout: float = 300.0,
    python: str | None = None,
    env: dict[str, str] | None = None,
    server: list[str] | None = None,
    **opts: Any,
) -> Iterator[str]:
    """Run a sandbox server for the duration of the ``with`` block and yield its base URL.

    ``python`` is the interpreter for user code (``--python``); the server itself runs as ``server + ["-m",
    "retool_sandbox", ...]`` (default ``[sys.executable]``; a ``setpriv`` prefix runs it as another user) with
    this process's environment plus ``env``.
    Raises RuntimeError with the server's log tail if it does not become ready within ``startup_timeout`` seconds
    (the server itself gives up waiting for a sandbox that makes no progress for a minute, so this is a backstop).
    """
    cmd = [*(server or [sys.executable]), "-m", "retool_sandbox", "serve", "--host", host, "--port", "0"]
    if python is not None:
        cmd += ["--python", python]
    cmd += _flags(opts)
    env = {**os.environ, **(env or {})}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(PACKAGE_PARENT), env.get("PYTHONPATH")) if p)
    env["PYTHONUNBUFFERED"] = "1"
    # Log to a file, never to a pipe that nobody drains (a full pipe would block the server).
    log = tempfile.NamedTemporaryFile(prefix="retool-sandbox-", suffix=".log", delete=False)
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)
    log_path = Path(log.name)
    log.close()
    try:
        url = _wait_ready(proc, log_path, startup_timeout)
        yield url
    finally:
        _stop(proc)
        with contextlib.suppress(OSError):
            log_path.unlink()


def _wait_ready(proc: subprocess.Popen, log_path: Path, timeout: float) -> str:
    deadline = time.monotonic() + timeout
    url = None
    while time.monotonic() < deadline:
        text = log_path.read_text(errors="replace")
        if url is None:
            match = _READY.search(text)
            url = match.group(1) if match else None
        if url is not None and _answers(url):
            return url
        if proc.poll() is not None:
            raise RuntimeError(
                f"retool-sandbox exited with code {proc.returncode} before it was ready; log:\n{text[-4000:]}"
            )
        time.sleep(0.05)
    _stop(proc)
    raise RuntimeError(
        f"retool-sandbox was not ready after {timeout:.0f} s; log:\n{log_path.read_text(errors='replace')[-4000:]}"
    )


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=15)
