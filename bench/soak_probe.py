"""One sample of what a long run holds on its host, for bench/soak.py: memory (PSS) and open descriptors per process
group, the sandbox's sessions and uids, the run folder's size by kind, and /dev/shm and /tmp.

Groups, from /proc (a process belongs to the run when it descends from the launch or names the run's Ray temp dir on
its command line; Ray renames its workers ``ray::<Class>...``):

- ``trainer``: the launch's driver and verl's trainer workers (TaskRunner, the FSDP worker groups);
- ``rollout``: vLLM (its HTTP server actor and engine core processes);
- ``agent_loop``: verl's agent-loop workers, which run the tool;
- ``ray``: Ray's own processes (GCS, raylet, dashboard and its agents, log monitor, idle workers);
- ``sandbox_server``: ``retool-sandbox serve`` and its root helpers (fork servers, zygote, uid signallers);
- ``sandbox_programs``: whatever runs as the sandbox's uids (session interpreters, programs).
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

from retool_sandbox.proctree import rollup_mib

GROUPS = ("trainer", "rollout", "agent_loop", "ray", "sandbox_server", "sandbox_programs")
_ROLLOUT = ("vllm", "enginecore", "engine_core")
_RAY = (
    "gcs_server",
    "raylet",
    "dashboard",
    "log_monitor",
    "ray/_private",
    "runtimeenvagent",
    "ray::idle",
    "ray/autoscaler",
    "ray.util.client",
    "bin/ray start",
)  # ray/_private holds default_worker.py: a worker
# not yet renamed for its actor
RUN_GROUPS = GROUPS[:4]
PROCESS_MIN_MB, TITLE_CHARS = 50.0, 80  # a run's processes recorded one by one: those of at least this PSS
DISK_KINDS = ("checkpoints", "rollouts", "tensorboard", "logs", "validation")


def _read(path: str) -> bytes:
    try:
        with open(path, "rb") as fh:
            return fh.read()
    except OSError:
        return b""


def processes() -> dict[int, dict]:
    """pid -> {ppid, uid, cmd (lower case), state} of every live host process."""
    table = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        status = _read(f"/proc/{name}/status").decode(errors="replace")
        if not status:
            continue
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        try:
            table[int(name)] = {
                "ppid": int(fields["PPid"]),
                "uid": int(fields["Uid"].split()[0]),
                "state": fields["State"].split()[0],
                "cmd": _read(f"/proc/{name}/cmdline").replace(b"\0", b" ").decode(errors="replace").lower(),
            }
        except (KeyError, ValueError, IndexError):
            continue
    return table


def descendants(table: dict[int, dict], roots: set[int]) -> set[int]:
    children: dict[int, list[int]] = {}
    for pid, info in table.items():
        children.setdefault(info["ppid"], []).append(pid)
    found, todo = set(), [root for root in roots if root in table]
    while todo:
        pid = todo.pop()
        if pid not in found:
            found.add(pid)
            todo.extend(children.get(pid, []))
    return found


def classify(cmd: str) -> str:
    """The group of one of the run's processes, from its command line."""
    if "agentloopworker" in cmd or "agent_loop" in cmd:
        return "agent_loop"
    if any(word in cmd for word in _ROLLOUT):
        return "rollout"
    if any(word in cmd for word in _RAY):
        return "ray"
    return "trainer"


def open_fds(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return 0


def tree_bytes(path: Path) -> int:
    total = 0
    for root, _, files in os.walk(path, onerror=lambda _: None):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                pass
    return total


def disk_by_kind(run_dir: Path) -> dict[str, int]:
    """Bytes of the run folder per kind (its top-level folders), the rest as ``other``."""
    sizes = dict.fromkeys((*DISK_KINDS, "other"), 0)
    if run_dir.is_dir():
        for entry in run_dir.iterdir():
            size = tree_bytes(entry) if entry.is_dir() and not entry.is_symlink() else entry.lstat().st_size
            sizes[entry.name if entry.name in DISK_KINDS else "other"] += size
    return sizes


def sample(
    launch_pid: int | None,
    ray_dir: str,
    run_dir: Path,
    server_pid: int | None,
    sandbox_uids: range | None,
    sandbox_health: dict | None,
) -> dict:
    """One sample (a JSON-able dict)."""
    table = processes()
    run = descendants(table, {launch_pid} if launch_pid else set())
    run |= {pid for pid, info in table.items() if ray_dir and ray_dir.lower() in info["cmd"]}
    run |= descendants(table, run)
    server = descendants(table, {server_pid} if server_pid else set())
    groups = {name: {"pss_mb": 0.0, "private_mb": 0.0, "fds": 0, "procs": 0} for name in GROUPS}
    zombies, largest = 0, {}
    for pid, info in table.items():
        if sandbox_uids is not None and info["uid"] in sandbox_uids:
            name = "sandbox_programs"
        elif pid in server:
            name = "sandbox_server"
        elif pid in run:
            name = classify(info["cmd"])
        else:
            continue
        if info["state"] == "Z":
            zombies += 1
            continue
        group, memory = groups[name], rollup_mib((pid,), ("Pss", "Pss_Anon", "Pss_Shmem"))
        pss = memory["Pss"]
        group["pss_mb"] += pss
        # without the pages of mapped files (libraries): what other processes mapping them cannot lower
        private = memory["Pss_Anon"] + memory["Pss_Shmem"]
        group["private_mb"] += private
        group["fds"] += open_fds(pid)
        group["procs"] += 1
        if name in RUN_GROUPS and pss >= PROCESS_MIN_MB:
            largest[str(pid)] = [name, info["cmd"][:TITLE_CHARS], round(pss, 1), round(private, 1)]
    for group in groups.values():
        group["pss_mb"], group["private_mb"] = round(group["pss_mb"], 1), round(group["private_mb"], 1)
    sessions = (sandbox_health or {}).get("sessions") or {}
    return {
        "t": round(time.time(), 1),
        "groups": groups,
        "processes": largest,  # pid -> [group, command, PSS MB, without mapped files MB]: which process grows
        "zombies": zombies,
        "run_processes": len(run & set(table)),
        "sandbox": {
            "up": sandbox_health is not None,
            "sessions_live": sessions.get("live"),
            "uids_in_use": len(
                {info["uid"] for info in table.values() if sandbox_uids is not None and info["uid"] in sandbox_uids}
            ),
            "server_fds": open_fds(server_pid) if server_pid else None,
        },
        "disk": disk_by_kind(run_dir),
        "shm_used_bytes": shutil.disk_usage("/dev/shm").used,  # unlinked but mapped segments count too
        "tmp_bytes": tree_bytes(Path("/tmp")),
        "ray_tmp_bytes": tree_bytes(Path(ray_dir)) if ray_dir else 0,  # Ray's session logs and sockets
    }
