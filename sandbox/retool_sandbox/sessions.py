"""Stateful sessions: one isolated, long-lived interpreter per client-chosen ``session_id``.

A request with ``session_id`` runs its code as the next *cell* of that session: variables, imports, files in the
work dir and the cwd persist from cell to cell; nothing else does (processes a cell started are killed when it
ends). Sessions are opt-in; a request without ``session_id`` is the stateless run it always was.

Resources. Each session owns a sandbox number (box) from its own range after the slots' ones, hence its own uid
(with root) for as long as it exists, its own sandbox (for bwrap: pid, network, IPC, mount namespaces, private
/tmp), and its own work dir; with root in fork mode its interpreter is forked from the executor's preimported session
zygote (``session_zygote``). A cell needs a slot like any run, so slots still bound the CPU in use; between cells
the session's interpreter, then its only process, is stopped (SIGSTOP), so idle sessions cost memory only.

A session stays while its client may still use it: an RL trajectory's session is idle while the model writes the
next turn, and the agent loop closes it when the trajectory ends. So at most ``max_sessions`` exist, and a new one
waits for a free box (then 504) rather than evict one. Sessions end without their client's word only when
something must give: one idle for ``idle_timeout`` seconds (a leak: nobody closed it), and, while the host's
``MemAvailable`` is below ``memory_floor_mb`` (checked every second and before every new session starts), the least
recently used idle ones, one at a time until it is above again. That is what happens when more sessions are open
than the memory a node leaves the sandbox holds: the oldest idle ones give way, never a running cell, and nothing
waits for the kernel's out-of-memory killer. A session also ends when its interpreter dies (``os._exit``, a signal,
the memory or CPU-time limit), or when a cell ignores its timeout's interrupt (it is killed). Its sandbox and work
dir are then removed and its uid swept (for the rlimit tier: processes, the host's /tmp, /dev/shm, /dev/mqueue and IPC
objects of that uid) before the box is handed to another session; a box whose sweep failed is never reused.

Lost state is never silent: the manager remembers (for the last ``TOMBSTONES`` sessions) why a session ended when
the client did not close it, and the next call with that ``session_id`` runs in a new, empty session with a note
at the top of its stderr and in ``message`` saying that the earlier state is gone and why.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import time
from dataclasses import dataclass, field

from retool_sandbox import host
from retool_sandbox.executor import Executor, RunOutcome, RunSpec
from retool_sandbox.session_sandbox import SessionSandbox

log = logging.getLogger("retool_sandbox")

TOMBSTONES = 10000
_NOTE = "[retool-sandbox: {reason}]\n"


class SessionsFull(Exception):
    """No session could be started or evicted in time: the caller answers 504 (retryable)."""


class ServerStopping(Exception):
    """The server is stopping and ended (or would not start) the session a call needed: the caller answers 503, which
    clients retry, so the call runs on the restarted server instead of coming back as a failure of the code."""


@dataclass
class SessionCounters:
    started: int = 0
    cells: int = 0
    closed: int = 0
    evicted_idle: int = 0
    evicted_memory: int = 0
    died: int = 0
    lost_notices: int = 0
    boxes_quarantined: int = 0


@dataclass(eq=False)
class Session:
    id: str
    gate: asyncio.Lock = field(default_factory=asyncio.Lock)  # one cell at a time
    sandbox: SessionSandbox | None = None
    last_used: float = field(default_factory=time.monotonic)
    waiting: int = 0  # requests waiting for or holding the gate
    busy: bool = False  # a cell (or the session's start) is in progress
    closed: bool = False  # removed from the manager (no sandbox, nobody waiting); a late waiter looks the id up again
    cells: int = 0  # cells run by the current sandbox (its state holds what they left)


class SessionManager:
    """Owns every session of one server; ``run`` is called per request with a session_id."""

    def __init__(
        self, executor: Executor, *, first_box: int, max_sessions: int, idle_timeout: float, memory_floor_mb: int = 0
    ) -> None:
        self.executor = executor
        self.max_sessions = max_sessions
        self.idle_timeout = idle_timeout
        self.memory_floor_mb = memory_floor_mb  # 0: never evict for memory
        self._memory_low_told = False
        self.free_boxes = list(range(first_box + max_sessions - 1, first_box - 1, -1))  # pop() = lowest first
        self.sessions: dict[str, Session] = {}
        self.lost: collections.OrderedDict[str, str] = collections.OrderedDict()
        self.counters = SessionCounters()
        self._cleanups: set[asyncio.Task] = set()
        self._reaper: asyncio.Task | None = None
        self._box_freed = asyncio.Event()
        self.stopping = False  # close_all began: the server is going away

    # -- bookkeeping ------------------------------------------------------------------------------------------

    @property
    def live(self) -> int:
        return sum(1 for s in self.sessions.values() if s.sandbox is not None)

    def health(self) -> dict:
        return {
            "live": self.live,
            "max": self.max_sessions,
            "idle_timeout": self.idle_timeout,
            "forked": self.executor.forks_sessions,
            "memory_floor_mb": self.memory_floor_mb,
            "mem_available_mb": host.mem_available_mb(),
            "busy": sum(1 for s in self.sessions.values() if s.busy),
            "free_boxes": len(self.free_boxes),
            "counters": vars(self.counters).copy(),
        }

    def _remember(self, session_id: str, reason: str) -> None:
        self.lost[session_id] = reason
        self.lost.move_to_end(session_id)
        while len(self.lost) > TOMBSTONES:
            self.lost.popitem(last=False)

    def _release_sandbox(self, session: Session) -> asyncio.Task | None:
        """Detach the session's sandbox and clean it up in the background (the task); its box returns when that is
        done."""
        sandbox, session.sandbox = session.sandbox, None
        if sandbox is None:
            return None
        task = asyncio.ensure_future(self._cleanup(sandbox))
        self._cleanups.add(task)
        task.add_done_callback(self._cleanups.discard)
        return task

    async def _cleanup(self, sandbox: SessionSandbox) -> None:
        try:
            clean = await sandbox.close()
        except Exception:
            log.exception("closing session sandbox %d failed", sandbox.box)
            clean = False
        if clean:
            self.free_boxes.append(sandbox.box)
        else:
            self.counters.boxes_quarantined += 1
            log.error(
                "session sandbox %d (uid %s) could not be swept clean; its box is not reused", sandbox.box, sandbox.uid
            )
        self._box_freed.set()

    def _end(self, session: Session, reason: str | None) -> asyncio.Task | None:
        """End ``session``'s interpreter (a later call starts afresh); ``reason`` is told to that call unless None.
        Returns the cleanup of its sandbox, if it had one.

        A session that calls are waiting for stays registered without a sandbox: the first of them starts a new one.
        """
        if reason is not None:
            self._remember(session.id, reason)
        cleanup = self._release_sandbox(session)
        self._forget_if_unused(session)
        return cleanup

    def _forget_if_unused(self, session: Session) -> None:
        if session.sandbox is None and session.waiting == 0:
            if self.sessions.get(session.id) is session:
                del self.sessions[session.id]
            session.closed = True

    def _on_sandbox_exit(self, sandbox: SessionSandbox) -> None:
        """A session's interpreter died; if no cell was running, that happened while it was idle."""
        for session in list(self.sessions.values()):
            if session.sandbox is sandbox and not session.busy:
                self.counters.died += 1
                self._end(session, f"its interpreter ended while idle ({_how(sandbox)})")

    # -- the request path -------------------------------------------------------------------------------------

    async def run(self, session_id: str, spec: RunSpec, queue_timeout: float, slots) -> RunOutcome | None:
        """Run ``spec`` as the next cell of ``session_id``; None if no slot became free in time (answer 504).

        ``slots`` is the server's SlotPool: a cell holds one like any run. A new session first needs a free box,
        waited for without holding a slot; SessionsFull when none became free in time.
        """
        deadline = time.monotonic() + queue_timeout
        session = await self._enter(session_id, deadline)
        if session is None:
            return None
        box = None  # a box taken for a new sandbox, until _cell owns it
        try:
            if session.sandbox is None:
                box = await self._free_box(deadline)
            slot = await slots.acquire(max(0.0, deadline - time.monotonic()))
            if slot is None:
                return None
            try:
                if self.stopping:  # it waited for its slot while the server began to stop
                    raise ServerStopping("the server is stopping; retry on the next one")
                session.busy = True
                if session.sandbox is None and box is None:  # it ended while this call waited for its slot
                    box = self._free_box_now()
                new_box, box = box, None
                return await self._cell(session, spec, new_box)
            finally:
                session.busy = False
                session.last_used = time.monotonic()
                slots.release(slot)
        finally:
            if box is not None:
                self._return_box(box)
            session.waiting -= 1
            session.gate.release()
            self._forget_if_unused(session)

    async def _enter(self, session_id: str, deadline: float) -> Session | None:
        """The session for ``session_id`` with its gate held (one cell at a time); None on timeout."""
        while True:
            session = self.sessions.get(session_id)
            if session is None:
                session = self.sessions[session_id] = Session(session_id)
            session.waiting += 1
            try:
                await asyncio.wait_for(session.gate.acquire(), max(0.0, deadline - time.monotonic()))
            except asyncio.TimeoutError:
                session.waiting -= 1
                self._forget_if_unused(session)
                return None
            except BaseException:
                session.waiting -= 1
                raise
            if not session.closed:
                return session
            session.waiting -= 1  # removed meanwhile: look the id up again
            session.gate.release()

    async def _cell(self, session: Session, spec: RunSpec, box: int | None) -> RunOutcome:
        """Run the cell; ``box`` (not None when the session has no sandbox) is where its new sandbox starts."""
        note = ""
        if box is not None:
            # A new interpreter while host memory is below the floor: make room first rather than a second later,
            # so a burst of new sessions cannot outrun the reaper.
            await self.relieve_memory()
            try:
                await self._start(session, spec, box)
            except RuntimeError as exc:
                self._end(session, None)
                if self.stopping:
                    raise ServerStopping(f"the server stopped while the session started ({exc}); retry") from exc
                return RunOutcome("Error", None, None, "", "", error=str(exc))
            reason = self.lost.pop(session.id, None)
            if reason is not None:
                self.counters.lost_notices += 1
                note = (
                    f"session {session.id!r} lost its state: {reason}. This code ran in a new, empty session; "
                    "define again what it needs"
                )
        sandbox = session.sandbox
        session.cells += 1
        self.counters.cells += 1
        # Reported with every cell, so a client can tell a fresh interpreter from its own earlier state even when this
        # server cannot (it restarted, or forgot the session beyond TOMBSTONES).
        cell_report = {"id": session.id, "cell": session.cells, "lost": note or None}
        try:
            outcome = await self.executor.run_cell(sandbox, spec)
        except Exception as exc:
            log.exception("cell of session %r failed", session.id)
            sandbox.kill()
            outcome = RunOutcome("Error", None, None, "", "", error=f"sandbox failure: {exc!r}")
        if not sandbox.alive and self.stopping:
            raise ServerStopping("the server stopped during this cell and ended its session; retry")
        if not sandbox.alive:
            how = _how(sandbox)
            if session.sandbox is sandbox:  # not already ended by the client or an eviction
                self.counters.died += 1
                self._end(session, f"its interpreter ended during an earlier call ({how})")
            lost = f"the session ended during this call ({how}); its state is lost"
            outcome.error = f"{outcome.error}; {lost}" if outcome.error else lost
        elif outcome.status == "TimeLimitExceeded":
            outcome.error = outcome.error or "the code was interrupted at its timeout; the session's state is kept"
        outcome.session = cell_report
        return _with_note(outcome, note)

    async def _start(self, session: Session, spec: RunSpec, box: int) -> None:
        try:
            sandbox = self.executor.start_session(box, spec.memory_mb, self._on_sandbox_exit)
        except Exception as exc:
            self._return_box(box)
            raise RuntimeError(f"could not start the session's sandbox: {exc}") from exc
        session.sandbox = sandbox
        session.cells = 0
        self.counters.started += 1
        await sandbox.wait_ready()  # RuntimeError: _cell ends the session, which releases the box

    async def _free_box(self, deadline: float) -> int:
        """A box for a new session. Open sessions are not evicted for it (their clients may still need them): wait
        until a session is closed or reclaimed, at most until ``deadline``."""
        while True:
            if self.free_boxes or deadline <= time.monotonic():
                return self._free_box_now()
            self._box_freed.clear()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._box_freed.wait(), min(deadline - time.monotonic(), 1.0))

    def _free_box_now(self) -> int:
        if not self.free_boxes:
            raise SessionsFull(
                f"all {self.max_sessions} sessions (--max-sessions) are open and none was closed within the queue "
                "timeout; retry later (an open session is never evicted for a new one: close finished sessions, or "
                "raise --max-sessions)"
            )
        return self.free_boxes.pop()

    def _return_box(self, box: int) -> None:
        self.free_boxes.append(box)
        self._box_freed.set()

    # -- closing and eviction ---------------------------------------------------------------------------------

    def close(self, session_id: str) -> bool:
        """The client is done with ``session_id``: kill and remove it now (a running cell is killed too)."""
        self.lost.pop(session_id, None)
        session = self.sessions.get(session_id)
        if session is None:
            return False
        existed = session.sandbox is not None
        if session.sandbox is not None and session.busy:
            session.sandbox.problem = "the client closed the session while this code ran"
            session.sandbox.kill()
        self.counters.closed += existed
        self._end(session, None)
        return existed

    def evict_idle(self) -> int:
        """End every session idle for longer than ``idle_timeout``; returns how many."""
        now = time.monotonic()
        count = 0
        for session in list(self.sessions.values()):
            if session.sandbox is None:
                self._forget_if_unused(session)
                continue
            if session.busy or session.waiting or now - session.last_used <= self.idle_timeout:
                continue
            self.counters.evicted_idle += 1
            count += 1
            self._end(
                session, f"it was idle for more than {self.idle_timeout:g} s (--session-idle-timeout) and was evicted"
            )
        return count

    async def relieve_memory(self) -> int:
        """While host memory is below the floor, end the least recently used idle session and wait until its
        processes are gone (so the next reading shows what that freed); returns how many were ended."""
        count = 0
        while self.memory_floor_mb:
            available = host.mem_available_mb()
            if available is None or available >= self.memory_floor_mb:
                self._memory_low_told = False
                break
            victims = idle_by_age(self.sessions.values())
            if not victims:
                if not self._memory_low_told:  # once per spell of low memory, not every second
                    self._memory_low_told = True
                    log.warning(
                        "host memory is low (MemAvailable %d MiB < --session-memory-floor-mb %d) and no "
                        "session is idle to evict",
                        available,
                        self.memory_floor_mb,
                    )
                break
            victim = victims[0]
            self.counters.evicted_memory += 1
            count += 1
            log.warning(
                "host memory is low (MemAvailable %d MiB < --session-memory-floor-mb %d): evicting idle session %r",
                available,
                self.memory_floor_mb,
                victim.id,
            )
            cleanup = self._end(
                victim,
                (
                    f"host memory ran low (MemAvailable {available} MiB, below --session-memory-floor-mb "
                    f"{self.memory_floor_mb}) and it was the least recently used idle session, idle for "
                    f"{time.monotonic() - victim.last_used:.0f} s"
                ),
            )
            if cleanup is not None:
                await asyncio.wait([cleanup], timeout=10)
        return count

    def start(self) -> None:
        """Start the reaper (call from the running loop): idle timeouts and the memory floor."""
        if self._reaper is None:
            self._reaper = asyncio.ensure_future(self._reap())

    async def _reap(self) -> None:
        period = max(0.2, min(1.0, self.idle_timeout / 4))  # MemAvailable can fall fast: look every second
        while True:
            await asyncio.sleep(period)
            try:
                self.evict_idle()
                await self.relieve_memory()
            except Exception:
                log.exception("evicting sessions failed")

    async def close_all(self) -> None:
        """End every session: the server is stopping (calls still in flight answer ServerStopping)."""
        self.stopping = True
        if self._reaper is not None:
            self._reaper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reaper
        for session in list(self.sessions.values()):
            if session.sandbox is not None:
                session.sandbox.kill()
            self._end(session, None)
        if self._cleanups:
            await asyncio.gather(*self._cleanups, return_exceptions=True)


def idle_by_age(sessions) -> list[Session]:
    """The sessions that may be evicted for memory, least recently used first: those with a sandbox that run no cell
    and that no call is waiting for."""
    idle = [s for s in sessions if s.sandbox is not None and not s.busy and not s.waiting]
    return sorted(idle, key=lambda s: s.last_used)


def _how(sandbox: SessionSandbox) -> str:
    if sandbox.problem:
        return sandbox.problem
    code = sandbox.returncode
    if code is None:
        return "it stopped answering"
    if code < 0:
        hint = {
            -9: "SIGKILL: the memory limit, a CPU-time limit or an external kill",
            -24: "SIGXCPU: its CPU-time budget was used up",
        }.get(code, "")
        return f"killed by signal {-code}" + (f", {hint}" if hint else "")
    return f"exit code {code}"


def _with_note(outcome: RunOutcome, note: str) -> RunOutcome:
    if note:
        outcome.stderr = _NOTE.format(reason=note) + outcome.stderr
        outcome.error = f"{note}; {outcome.error}" if outcome.error else note
    return outcome
