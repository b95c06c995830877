"""What the server reads about its host: the CPUs it may use and the memory left.

``cores`` sizes the default slot count (``config.default_slots``) and the CPU-seconds backstop of a run;
``mem_available_mb`` drives the eviction of idle sessions when host memory runs low (``sessions``). Callers read
them as ``host.cores()`` at the time of use, so a test can give the whole server another host's core count.
``cpu_seconds`` tells a load test how much of the host's CPU went to the kernel (page faults, process starts).
"""

from __future__ import annotations

import math
import os


def cores() -> int:
    """CPUs this process may run on: its CPU affinity (a container's cpuset), lowered to a CFS quota if one is set
    (``docker --cpus``, a Kubernetes CPU limit), which the affinity does not show."""
    try:
        count = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        count = os.cpu_count() or 1
    quota = _cpu_quota()
    return max(1, min(count, math.ceil(quota))) if quota else max(1, count)


def _cpu_quota() -> float | None:
    """CPUs' worth of the cgroup's CFS quota (cgroup v2 ``cpu.max``, else v1), None when unlimited or unknown."""
    try:
        with open("/sys/fs/cgroup/cpu.max") as fh:
            quota, period = fh.read().split()[:2]
    except (OSError, ValueError):
        try:
            with open("/sys/fs/cgroup/cpu/cpu.cfs_quota_us") as fh:
                quota = fh.read().strip()
            with open("/sys/fs/cgroup/cpu/cpu.cfs_period_us") as fh:
                period = fh.read().strip()
        except OSError:
            return None
    try:
        quota_us, period_us = int(quota), int(period)
    except ValueError:  # "max": no quota
        return None
    return quota_us / period_us if quota_us > 0 and period_us > 0 else None


def _meminfo_mb(key: str) -> int | None:
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                name, _, value = line.partition(":")
                if name == key:
                    return int(value.split()[0]) // 1024  # the kernel counts in kB
    except (OSError, ValueError, IndexError):
        pass
    return None


def mem_available_mb() -> int | None:
    """The kernel's estimate of memory available for new work without swapping (``MemAvailable``), in MiB."""
    return _meminfo_mb("MemAvailable")


def mem_total_mb() -> int | None:
    """Physical memory (``MemTotal``), in MiB."""
    return _meminfo_mb("MemTotal")


def cpu_seconds() -> tuple[float, float] | None:
    """CPU seconds the host has spent since boot in user code (nice and guest time included) and in the kernel
    (system, irq and softirq), from ``/proc/stat``."""
    try:
        with open("/proc/stat") as fh:
            fields = [int(value) for value in fh.readline().split()[1:8]]
    except (OSError, ValueError):
        return None
    if len(fields) < 7:
        return None
    user, nice, system, _idle, _iowait, irq, softirq = fields
    ticks = os.sysconf("SC_CLK_TCK")
    return (user + nice) / ticks, (system + irq + softirq) / ticks
