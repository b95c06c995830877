"""The server's options (``ServerConfig``), validated on construction; ``retool-sandbox serve`` builds one.

Defaults are sized for one server per node of an RL run (docs/sandbox.md, "Sizing"): slots from the host's core
count (``default_slots``), room for every trajectory of a step to keep a session (``DEFAULT_MAX_SESSIONS``), an idle
timeout that only reclaims sessions nobody closed, and a memory floor below which idle sessions give way.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field

from retool_sandbox import host
from retool_sandbox.executor import cpu_seconds_for
from retool_sandbox.isolation import Limits

# What fork mode preimports by default, each only if its package is installed: the packages of requirements-runtime.txt
# (sandbox/tests/test_units.py keeps their packages equal) and the submodules they import only when math code first
# calls numpy.random, scipy.optimize or .integrate, or sympy's solve, summation, limit or integrate. Left out, each
# session and stateless program pays that import itself, in time and private memory (docs/sandbox.md, "Preimported
# packages").
DEFAULT_PREIMPORT = (
    "numpy",
    "numpy.random",
    "scipy",
    "scipy.optimize",
    "scipy.integrate",
    "scipy.special",
    "sympy",
    "sympy.assumptions.wrapper",
    "sympy.sets.setexpr",
    "sympy.combinatorics",
    "sympy.physics.units",
    "sympy.integrals.manualintegrate",
    "sympy.integrals.risch",
    "sympy.integrals.heurisch",
    "mpmath",
)


def preimport_spec(modules: str | None) -> str:
    """The fork server's PREIMPORT argument: ``None`` = the defaults, each skipped if not installed; otherwise
    the comma-separated modules, which must import (``""`` or ``"none"`` = nothing)."""
    if modules is None:
        return ",".join("?" + name for name in DEFAULT_PREIMPORT)
    names = [name.strip() for name in modules.split(",") if name.strip()]
    if names == ["none"]:
        return ""
    for name in names:
        if not all(part.isidentifier() for part in name.split(".")):
            raise ValueError(f"preimport: {name!r} is not a module name")
    return ",".join(names)


# Slots: every core on a small host (up to SLOTS_FLOOR), a quarter of the cores on a big one, at most SLOTS_CAP.
SLOTS_FLOOR = 8
SLOTS_CORE_SHARE = 4
SLOTS_CAP = 64
MAX_SLOTS = 4096
# The reference run keeps 64 prompts x 16 samples = 1,024 trajectories in flight, each with its own session.
DEFAULT_MAX_SESSIONS = 1024
MAX_SESSIONS = 65536
DEFAULT_IDLE_TIMEOUT_S = 3600.0
# Idle sessions are evicted while MemAvailable is below this share of the host's memory (at least the minimum).
MEMORY_FLOOR_SHARE = 0.05
MEMORY_FLOOR_MIN_MB = 2048


def default_slots(cores: int | None = None) -> int:
    """Slots for a host with ``cores`` CPUs (default: this one's, ``host.cores()``)."""
    cores = host.cores() if cores is None else cores
    return max(1, min(SLOTS_CAP, max(min(cores, SLOTS_FLOOR), cores // SLOTS_CORE_SHARE)))


def default_memory_floor_mb() -> int:
    """MemAvailable (MiB) below which idle sessions are evicted: 5% of the host's memory, at least 2 GiB."""
    total = host.mem_total_mb() or 0
    return max(MEMORY_FLOOR_MIN_MB, int(total * MEMORY_FLOOR_SHARE))


@dataclass
class ServerConfig:
    """Server options (see ``retool-sandbox serve --help``); validated on construction."""

    host: str = "127.0.0.1"
    port: int = 8080
    slots: int = field(default_factory=default_slots)
    isolation: str = "auto"
    python: str = sys.executable
    default_timeout: float = 10.0
    max_timeout: float = 60.0
    queue_timeout: float = 30.0
    max_output_bytes: int = 1 << 20
    max_memory_mb: int = 4096
    max_processes: int = 128
    max_file_size_mb: int = 64
    uid_base: int | None = None  # None: the first free range (see uids.reserve_uids)
    work_root: str | None = None
    max_request_mb: int = 64
    fresh_sandbox_per_run: bool = False  # True: a new sandbox per run instead of forking runs in a slot's sandbox
    preimport: str | None = None  # fork mode: modules imported before forking programs; None = DEFAULT_PREIMPORT
    max_sessions: int = DEFAULT_MAX_SESSIONS  # sessions that may exist at once; 0 = sessions disabled
    session_idle_timeout: float = DEFAULT_IDLE_TIMEOUT_S
    session_memory_floor_mb: int | None = None  # None: default_memory_floor_mb(); 0 = never evict for memory

    @property
    def uid_count(self) -> int:
        """Sandbox uids the server reserves: two per slot (fresh mode alternates them), one per session."""
        return 2 * self.slots + self.max_sessions

    @property
    def memory_floor_mb(self) -> int:
        if self.session_memory_floor_mb is None:
            return default_memory_floor_mb()
        return self.session_memory_floor_mb

    def __post_init__(self) -> None:
        checks = [
            (1 <= self.slots <= MAX_SLOTS, f"slots must be in 1..{MAX_SLOTS}"),
            (0 <= self.port <= 65535, "port must be in 0..65535"),
            (self.default_timeout > 0, "default_timeout must be > 0"),
            (self.max_timeout >= self.default_timeout, "max_timeout must be >= default_timeout"),
            (self.queue_timeout > 0, "queue_timeout must be > 0"),
            (self.max_output_bytes >= 1024, "max_output_bytes must be >= 1024"),
            (self.max_memory_mb >= 0, "max_memory_mb must be >= 0 (0 = no limit)"),
            (self.max_processes >= 4, "max_processes must be >= 4"),
            (self.max_file_size_mb >= 1, "max_file_size_mb must be >= 1"),
            (
                self.uid_base is None or 1000 <= self.uid_base <= 2**31 - 1 - self.uid_count,
                "uid_base must be >= 1000 (an unprivileged uid range) and leave room below 2^31 for 2 x slots + "
                "max_sessions uids",
            ),
            (self.isolation in ("auto", "bwrap", "rlimit", "none"), "isolation must be auto, bwrap, rlimit or none"),
            (0 <= self.max_sessions <= MAX_SESSIONS, f"max_sessions must be in 0..{MAX_SESSIONS}"),
            (self.session_idle_timeout > 0, "session_idle_timeout must be > 0"),
            (
                self.session_memory_floor_mb is None or self.session_memory_floor_mb >= 0,
                "session_memory_floor_mb must be >= 0 (0 = never evict sessions for memory)",
            ),
        ]
        try:
            preimport_spec(self.preimport)
        except ValueError as exc:
            checks.append((False, str(exc)))
        errors = [msg for ok, msg in checks if not ok]
        if errors:
            raise ValueError("invalid sandbox configuration: " + "; ".join(errors))

    def ceiling(self) -> Limits:
        """The largest limits any run gets (requests can only lower memory and, via the timeout, CPU time)."""
        return Limits(
            memory_mb=self.max_memory_mb or None,
            cpu_seconds=cpu_seconds_for(self.max_timeout),
            max_processes=self.max_processes,
            max_file_size_mb=self.max_file_size_mb,
        )
