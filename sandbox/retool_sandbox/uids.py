"""Sandbox uids: each root server reserves its own contiguous range, so two servers on one host never overlap.

A uid sweep (``kill(-1)`` issued as a sandbox uid, the removal of what that uid left in /tmp) must never reach
another server's programs, so every server takes ``2 x slots + max_sessions`` uids that no other retool-sandbox on
the host holds: sandbox number ``box`` runs as ``first + box``. No ``/etc/passwd`` entry is needed.

Where: from ``HIGH_UIDS`` (1879048192 = 0x70000000 up), which systemd's table of uid ranges leaves unused (above
its container ranges, below its foreign-uid range and 2^31), so a thousand-session server fits many times over.
Linux uids are 32-bit; setpriv, bubblewrap and file ownership take such uids as they take small ones. A user
namespace that maps only 65536 uids (a rootless or user-namespaced container) cannot hold them; there the range
comes from ``LOW_UIDS`` (61000-65533, below ``nobody``), which has room for about four default servers.

How: a reservation is a lock file ``<first>-<count>.lock`` in ``LOCK_DIR`` (a root-only directory) that the
server holds an ``flock`` on for its life; the kernel drops the lock when the process dies, however it dies. A new
server takes the registry lock, lists the ranges whose files are still locked (unlocked ones are left-overs of
servers that exited, and are removed), picks the first free stretch of the regions its user namespace maps, and
locks its own file before it lets go of the registry. Servers in different containers do not see each other's
``/tmp``: give them different ``--uid-base`` if they share the kernel's uids (no user namespace).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import stat
import time

from retool_sandbox.isolation import IsolationUnavailable, kill_uid

HIGH_UIDS = range(0x70000000, 0x7FFE0000)
LOW_UIDS = range(61000, 65534)
LOCK_DIR = "/tmp/retool-sandbox-uids"
REGISTRY_WAIT_S = 10.0
_RANGE_FILE = re.compile(r"(\d+)-(\d+)\.lock")


def reserve_uids(count: int, base: int | None = None, lock_dir: str = LOCK_DIR) -> tuple[int, int | None]:
    """Reserve ``count`` consecutive sandbox uids for this server: (first uid, lock fd to keep open).

    ``base`` asks for the range that starts there (an error if another server holds any of it). Without root no uids
    are switched, so nothing is reserved (the lock fd is None).
    """
    if count < 1:
        raise ValueError(f"a server needs at least one sandbox uid, not {count}")
    if os.geteuid() != 0:
        return (base if base is not None else HIGH_UIDS.start), None
    _private_dir(lock_dir)
    registry = os.open(os.path.join(lock_dir, "registry.lock"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        _lock_registry(registry, lock_dir)
        first = _choose(count, base, _live_ranges(lock_dir), _mapped_ids())
        fd = os.open(os.path.join(lock_dir, f"{first}-{count}.lock"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # nobody else can be at it: we hold the registry
        return first, fd
    finally:
        os.close(registry)  # releases the registry lock


def kill_leftovers(first: int, count: int) -> list[str]:
    """Kill every process whose real uid is in ``first .. first+count-1``; returns ``"<pid> uid <uid>: <command>"``
    for each.

    Called by a server once it holds the range, so no live server owns these uids: whatever runs as them was left
    by a server that held the range before and exited while its programs lived on. Left alone they would count
    against the new server's sandboxes (RLIMIT_NPROC is per uid) and be hit by its uid sweeps mid-run.
    """
    found: list[tuple[int, str]] = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/status") as fh:
                uid = next(int(line.split()[1]) for line in fh if line.startswith("Uid:"))
            if first <= uid < first + count:
                with open(f"/proc/{entry.name}/cmdline", "rb") as fh:
                    command = fh.read().replace(b"\0", b" ").decode(errors="replace").strip()
                found.append((uid, f"{entry.name} uid {uid}: {command[:200]}"))
        except (OSError, StopIteration, ValueError, IndexError):
            continue  # it exited meanwhile
    for uid in sorted({uid for uid, _ in found}):
        kill_uid(uid)
    return [line for _, line in found]


def _private_dir(path: str) -> None:
    """Make ``path`` a directory only root can enter, and refuse one that another user could have planted."""
    with contextlib.suppress(FileExistsError):
        os.makedirs(path, mode=0o700)
    info = os.lstat(path)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != 0 or info.st_mode & 0o022:
        raise IsolationUnavailable(
            f"{path} must be a directory owned by root and writable only by it (it holds the "
            "sandbox uid reservations); remove it and start again"
        )


def _lock_registry(fd: int, lock_dir: str) -> None:
    deadline = time.monotonic() + REGISTRY_WAIT_S
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() > deadline:
                raise IsolationUnavailable(
                    f"{lock_dir}/registry.lock stayed locked for {REGISTRY_WAIT_S:g} s; is a "
                    "retool-sandbox stuck while starting?"
                ) from None
            time.sleep(0.05)


def _live_ranges(lock_dir: str) -> list[range]:
    """The uid ranges of running servers; removes the files of servers that exited."""
    live = []
    for name in os.listdir(lock_dir):
        match = _RANGE_FILE.fullmatch(name)
        if match is None:
            continue
        first, count = int(match.group(1)), int(match.group(2))
        path = os.path.join(lock_dir, name)
        try:
            fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
        except FileNotFoundError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            live.append(range(first, first + count))
        else:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)  # its server is gone
        finally:
            os.close(fd)
    return live


def _mapped_ids() -> list[range]:
    """The uids this process can switch to: those its user namespace maps, for uids and gids alike."""

    def read(path: str) -> list[range]:
        try:
            with open(path) as fh:
                rows = [line.split() for line in fh if line.strip()]
            return [range(int(inside), int(inside) + int(length)) for inside, _, length in rows]
        except (OSError, ValueError):
            return [range(2**32 - 1)]

    gids = read("/proc/self/gid_map")
    return [_overlap(u, g) for u in read("/proc/self/uid_map") for g in gids if _overlap(u, g)]


def _overlap(a: range, b: range) -> range:
    return range(max(a.start, b.start), min(a.stop, b.stop))


def _choose(count: int, base: int | None, taken: list[range], mapped: list[range]) -> int:
    """The first uid of a free range of ``count`` uids (``base``'s range if given)."""
    if base is not None:
        wanted = range(base, base + count)
        if 65534 in wanted or 65535 in wanted:
            raise IsolationUnavailable(
                f"sandbox uids {base}..{wanted[-1]} include nobody (65534) or the 16-bit -1 "
                "(65535); pick another --uid-base"
            )
        if not any(_overlap(wanted, m) == wanted for m in mapped):
            raise IsolationUnavailable(
                f"sandbox uids {base}..{wanted[-1]} are not all mapped in this user namespace "
                "(/proc/self/uid_map); pick another --uid-base"
            )
        clash = next((r for r in taken if _overlap(wanted, r)), None)
        if clash is not None:
            raise IsolationUnavailable(
                f"sandbox uids {base}..{wanted[-1]} overlap {clash[0]}..{clash[-1]} of another "
                "retool-sandbox on this host; pick another --uid-base"
            )
        return base
    for region in (HIGH_UIDS, LOW_UIDS):
        for segment in filter(None, (_overlap(region, m) for m in mapped)):
            first = segment.start
            for other in sorted(taken, key=lambda r: r.start):
                if _overlap(range(first, first + count), other):
                    first = other.stop
            if first + count <= segment.stop:
                return first
    raise IsolationUnavailable(
        f"no {count} free sandbox uids (2 x slots + max_sessions) in this user namespace: other retool-sandbox "
        "servers hold the rest, or the namespace maps too few uids; lower --slots or --max-sessions, or pass "
        "--uid-base"
    )
