"""CPU time and memory of a local process and everything below it, from /proc: what a sandbox server costs its host.

``CpuMeter(pid).read()`` lists the live processes below ``pid`` (itself included) with one pass over
``/proc/*/stat`` and adds up the CPU seconds the tree used. A process that exits is usually waited for by its parent,
which the kernel then charges with the child's time (``cutime``/``cstime``): a fork server's programs, a finished
fresh-mode sandbox. A session's sandbox is killed instead, and nobody in the tree waits for its interpreter, whose
time would vanish from the sum; so the meter remembers each process's last reading, and when processes are gone
without their nearest surviving ancestor having been charged as much, it keeps the difference. The time a killed
process used after the last reading is lost: read often (every second) where sessions come and go.

``pss_mib`` adds up the processes' proportional set size (shared pages split among the processes that map them), the
memory the tree holds without counting preimported libraries once per process; it reads one ``smaps_rollup`` per
process, milliseconds per hundred processes: call it now and then, not every second.

``programs_below`` finds what runs below a process except bwrap's own (how a non-root server signals a sandbox).
"""

from __future__ import annotations

import os
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

_TICKS = os.sysconf("SC_CLK_TCK")
_PAGE = os.sysconf("SC_PAGE_SIZE")


@dataclass(frozen=True)
class TreeReading:
    pids: tuple[int, ...]
    cpu_s: float  # user + system seconds of the live tree and of everything it has waited for


@dataclass(frozen=True)
class _Stat:
    parent: int
    own_s: float  # utime + stime
    children_s: float  # cutime + cstime: waited-for children


def _stats() -> dict[int, _Stat]:
    """Every process visible now."""
    out = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as fh:
                raw = fh.read()
            fields = raw[raw.rindex(b")") + 2 :].split()  # after "(comm)": field 3 (state) is fields[0]
            utime, stime, cutime, cstime = (int(value) for value in fields[11:15])
            out[int(entry.name)] = _Stat(int(fields[1]), (utime + stime) / _TICKS, (cutime + cstime) / _TICKS)
        except (OSError, ValueError, IndexError):
            continue  # it exited meanwhile
    return out


class CpuMeter:
    """CPU seconds of the tree below ``root`` (see the module docstring); ``read`` returns None once it is gone."""

    def __init__(self, root: int) -> None:
        self.root = root
        self._last: dict[int, _Stat] = {}
        self._unwaited_s = 0.0  # time of processes that ended without a surviving ancestor being charged for it

    def read(self) -> TreeReading | None:
        stats = _stats()
        if self.root not in stats:
            return None
        children: dict[int, list[int]] = defaultdict(list)
        for pid, stat in stats.items():
            children[stat.parent].append(pid)
        tree, frontier = [self.root], [self.root]
        while frontier:
            frontier = [child for pid in frontier for child in children.get(pid, ())]
            tree += frontier
        now = {pid: stats[pid] for pid in tree}
        gone = {pid: stat for pid, stat in self._last.items() if pid not in now}
        owed: dict[int, float] = defaultdict(float)  # surviving ancestor -> last readings of its gone descendants
        for stat in gone.values():
            ancestor = stat.parent
            while ancestor in gone:
                ancestor = gone[ancestor].parent
            owed[ancestor] += stat.own_s + stat.children_s
        for ancestor, seconds in owed.items():
            before, after = self._last.get(ancestor), now.get(ancestor)
            charged = after.children_s - before.children_s if before and after else 0.0
            self._unwaited_s += max(0.0, seconds - charged)
        self._last = now
        return TreeReading(tuple(tree), sum(s.own_s + s.children_s for s in now.values()) + self._unwaited_s)


def pss_mib(pids: tuple[int, ...]) -> float:
    """Proportional set size of ``pids`` together, in MiB (processes that exited meanwhile count 0)."""
    return rollup_mib(pids, ("Pss",))["Pss"]


def rollup_mib(pids: tuple[int, ...], fields: tuple[str, ...]) -> dict[str, float]:
    """``fields`` of ``smaps_rollup`` (``Pss``, ``Pss_Anon``, ``Pss_Shmem`` ...) added up over ``pids``, in MiB."""
    total_kb = dict.fromkeys(fields, 0)
    for pid in pids:
        try:
            rollup = Path(f"/proc/{pid}/smaps_rollup").read_text()
        except OSError:
            continue
        for line in rollup.splitlines():
            name, _, rest = line.partition(":")
            if name in total_kb:
                total_kb[name] += int(rest.split()[0])
    return {name: kb / 1024 for name, kb in total_kb.items()}


def rss_mib(pids: tuple[int, ...]) -> float:
    """Resident set size of ``pids`` added up, in MiB: cheap (one ``statm`` each), but pages that several of them
    map are counted once per process."""
    pages = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/statm", "rb") as fh:
                pages += int(fh.read().split()[1])
        except (OSError, ValueError, IndexError):
            continue
    return pages * _PAGE / (1 << 20)


def is_sandbox_server(pid: int) -> bool:
    """Whether ``pid`` on this host is a ``retool-sandbox serve`` (a /health pid from another host or container
    names some other process here)."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return b"serve" in argv and any(b"retool_sandbox" in arg or b"retool-sandbox" in arg for arg in argv)


def programs_below(pid: int) -> list[int]:
    """Processes descending from ``pid``, except bwrap's own: a non-root sandbox's programs as the host sees them."""
    parents: dict[int, int] = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                with open(f"/proc/{entry.name}/stat", "rb") as fh:
                    stat = fh.read()
                parents[int(entry.name)] = int(stat[stat.rindex(b")") + 2 :].split()[1])  # field 4, after (comm)
            except (OSError, ValueError, IndexError):
                continue
    found: list[int] = []
    frontier = {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier}
        found += frontier
    return [child for child in found if _comm(child) != "bwrap"]


def _comm(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm") as fh:
            return fh.read().strip()
    except OSError:
        return ""
