"""Helpers shared by the sandbox tests: raw HTTP calls and host process inspection."""

from __future__ import annotations

import json
import os
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

SECRET = "retool-test-secret-5a1f"


def post(url: str, payload: Any, timeout: float = 60.0) -> tuple[int, Any]:
    """POST JSON to ``url`` and return (HTTP status, decoded body)."""
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


def run(base: str, code: str, **fields: Any) -> dict:
    """Run ``code`` through /run_code and return the 200 response body."""
    status, body = post(base + "/run_code", {"code": code, "language": "python", **fields})
    assert status == 200, (status, body)
    return body


def uid_processes(uids: range) -> list[tuple[int, int]]:
    """(pid, uid) of live host processes owned by any of ``uids``."""
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
        if uid in uids and state != "Z":
            found.append((int(entry.name), uid))
    return found


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


def unprivileged_python() -> str | None:
    """An interpreter an unprivileged uid can execute (the rlimit tier has no private filesystem)."""
    for candidate in (sys.executable, "/usr/bin/python3", "/usr/local/bin/python3"):
        path = os.path.realpath(candidate)
        parents = Path(path).parents
        if os.path.exists(path) and all(os.stat(p).st_mode & 0o001 for p in parents):
            return candidate
    return None
