"""Helpers shared by the sandbox tests: /run_code calls through retool_sandbox.client, raw HTTP for the endpoints
and bodies the client does not send, and host process inspection."""

from __future__ import annotations

import json
import os
import re
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from retool_sandbox.client import ClientPolicy, Reply, SandboxClient

SECRET = "retool-test-secret-5a1f"

# Every test call: no retries (the tests look at 504s themselves), memory_limit_MB -1 (the server's maximum, what a
# request without the field gets), and a run timeout above every test server's --max-timeout, which clamps it.
TEST_POLICY = ClientPolicy(run_timeout=60, memory_limit_mb=-1, queue_timeout_s=60, max_retries=0, reconnect_budget_s=0)


def call(base: str, code: str, **fields: Any) -> Reply:
    """One /run_code call through ``retool_sandbox.client`` (``session_id``, ``stdin``, ``files``, ``fetch_files``,
    ``run_timeout``, ``memory_limit_mb`` as ``SandboxClient.run_sync`` takes them)."""
    return SandboxClient(base, TEST_POLICY).run_sync(code, **fields)


def http_status(reply: Reply) -> int | None:
    """The HTTP status of a call: 200 when the server answered a body, else the one the client's problem names."""
    if reply.body is not None:
        return 200
    match = re.match(r"HTTP (\d+)", reply.problem)
    return int(match.group(1)) if match else None


def run(base: str, code: str, **fields: Any) -> dict:
    """Run ``code`` through /run_code and return the 200 response body."""
    reply = call(base, code, **fields)
    assert reply.body is not None, reply.problem
    return reply.body


def post(url: str, payload: Any, timeout: float = 60.0) -> tuple[int, Any]:
    """POST JSON to ``url`` as is and return (HTTP status, decoded body): for endpoints other than /run_code, and for
    /run_code bodies that the recipe's client would never send (another client's shape, invalid requests)."""
    data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read() or b"null")


def get(url: str, timeout: float = 10.0) -> Any:
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        return json.loads(resp.read())


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


def uid_processes(uids: range, zombies: bool = False) -> list[tuple[int, int]]:
    """(pid, uid) of live host processes owned by any of ``uids``; with ``zombies``, of the unreaped ones as well."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            status = (entry / "status").read_text()
        except OSError:
            continue
        uid = int(status.split("\nUid:")[1].split()[0])
        state = status.split("\nState:")[1].split()[0]
        if uid in uids and (zombies or state != "Z"):
            found.append((int(entry.name), uid))
    return found


def reachable_by_others(path: str) -> bool:
    """Whether an unprivileged user can get to ``path`` (every parent directory, symlinks resolved, has o+x)."""
    real = Path(os.path.realpath(path))
    return os.path.exists(real) and all(os.stat(parent).st_mode & 0o001 for parent in real.parents)


def unprivileged_python() -> str | None:
    """An interpreter an unprivileged uid can execute (the rlimit tier has no private filesystem)."""
    for candidate in (sys.executable, "/usr/bin/python3", "/usr/local/bin/python3"):
        if reachable_by_others(candidate):
            return candidate
    return None


def parent_pid(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def descendants(root_pid: int) -> list[int]:
    """Live (non-zombie) processes below ``root_pid``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == root_pid:
            continue
        try:
            if (entry / "status").read_text().split("\nState:")[1].split()[0] == "Z":
                continue
        except (OSError, IndexError):
            continue
        pid = ancestor = int(entry.name)
        while ancestor not in (None, 0, 1):
            ancestor = parent_pid(ancestor)
            if ancestor == root_pid:
                found.append(pid)
                break
    return found
