"""Run one Python program in a slot: sandbox, capped output, wall-clock kill of the tree, cleanup.

Two modes (``Executor.mode``), same contract:

``fork`` (default when the tier has dedicated uids, see ``Isolation.can_fork_runs``): each slot owns one sandbox
whose fork server forks a fresh process per program and sweeps the slot's uid clean after it
(``forkserver.ForkRun``). Setting up namespaces and starting an interpreter happen once per slot, not per request,
so a request costs a fork plus the program itself.
``fresh`` (``--fresh-sandbox-per-run``, and bwrap without root): every program gets its own sandbox, pre-started
as the slot's spare while the previous program runs (``runs.FreshRun``); slot ``s`` alternates between sandbox
numbers ``2s`` and ``2s+1`` so the spare never shares a uid with the program being swept.

Sessions (``start_session`` / ``run_cell``) are a third way, independent of the mode: a session's own sandbox and
interpreter runs its cells one after another in one namespace (``session_sandbox.SessionSandbox``);
``sessions.py`` decides when sessions start and end.

Either way the program runs as ``main.py`` in ``__main__`` (tracebacks, ``sys.argv``, ``sys.path[0]`` and
``__file__`` as with ``python main.py``) under the request's rlimits. Contract of ``Executor.run``: the timeout
clock starts when the program starts (its own report), never during start-up or queueing; on timeout the program
gets SIGINT (Python flushes its buffers and prints where it was stuck), then the whole tree is killed and the
partial output is returned as TimeLimitExceeded; stdout and stderr are read continuously into per-stream buffers
that keep the first ``max_output_bytes`` bytes and count the rest; the work dir is emptied afterwards.

Which isolation tier an executor gets, and its start-up self-test, are in ``tier_choice``.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import math
import os
import shutil
import signal
import tempfile
import time
from dataclasses import dataclass, field

from retool_sandbox import host
from retool_sandbox.forkserver import ForkRun, ForkServer
from retool_sandbox.isolation import Isolation, Limits
from retool_sandbox.plumbing import KILL_GRACE_S, START_TIMEOUT_S
from retool_sandbox.runs import FreshRun, Run
from retool_sandbox.session_sandbox import SessionCell, SessionSandbox
from retool_sandbox.session_zygote import SessionZygote

log = logging.getLogger("retool_sandbox")

PROGRAM_NAME = "main.py"
_MB = 1024 * 1024
# How long a program gets to flush after the timeout's SIGINT before SIGKILL: it normally ends at once; the margin
# is for a loaded host.
_INTERRUPT_GRACE_S = 2.0
_DRAIN_GRACE_S = 1.0
# A session's processes get this many times one run's CPU-seconds backstop over the session's whole life.
SESSION_CPU_RUNS = 10


@dataclass(frozen=True)
class RunSpec:
    """One validated request: relative file paths only, limits already clamped by the server."""

    code: str
    timeout_s: float
    memory_mb: int | None = None  # address-space limit; None = the executor's ceiling
    stdin: bytes | None = None
    files: dict[str, bytes] = field(default_factory=dict)
    fetch_files: tuple[str, ...] = ()


@dataclass
class RunOutcome:
    """SandboxFusion's run_result plus fetched files; ``status`` is Finished, TimeLimitExceeded or Error."""

    status: str
    return_code: int | None
    execution_time: float | None
    stdout: str
    stderr: str
    files: dict[str, str] = field(default_factory=dict)
    truncated: bool = False
    error: str = ""
    session: dict | None = None  # a session cell: {"id", "cell" (1 = a fresh interpreter), "lost" (why, or None)}


def _safe_relpath(path: str, what: str) -> str:
    """Normalise a client path; raise ValueError if it is absolute or leaves the work dir."""
    if not isinstance(path, str) or not path or "\x00" in path:
        raise ValueError(f"{what}: {path!r} is not a usable file name")
    norm = os.path.normpath(path)
    if os.path.isabs(norm) or norm == ".." or norm.startswith("../") or norm == ".":
        raise ValueError(f"{what}: {path!r} escapes the work dir; use a path relative to the work dir")
    return norm


def validate_paths(files: dict[str, bytes], fetch_files: list[str]) -> tuple[dict[str, bytes], tuple[str, ...]]:
    """Check every ``files``/``fetch_files`` path (ValueError names the offending one)."""
    clean = {}
    for path, content in files.items():
        norm = _safe_relpath(path, "files")
        if norm == PROGRAM_NAME:
            raise ValueError(f"files: {path!r} is reserved for the submitted code; choose another name")
        clean[norm] = content
    for norm in clean:
        if any(other.startswith(norm + "/") for other in clean):
            raise ValueError(f"files: {norm!r} is both a file and a directory of other files")
    return clean, tuple(_safe_relpath(p, "fetch_files") for p in fetch_files)


class Executor:
    """Runs programs for one isolation tier; ``run`` must be called with a slot that no other run holds.

    ``ceiling`` holds the limits of every run; a request may only lower address space and (via its timeout) CPU
    time. ``fresh=True`` forces a new sandbox per run even where fork mode is possible.
    """

    def __init__(
        self,
        isolation: Isolation,
        ceiling: Limits,
        work_root: str | None = None,
        max_output_bytes: int = 1 << 20,
        fresh: bool = False,
        preimport: str = "",
    ) -> None:
        self.isolation = isolation
        self.ceiling = ceiling
        self.max_output_bytes = max_output_bytes
        self.mode = "fresh" if fresh or not isolation.can_fork_runs else "fork"
        self.preimport = preimport if self.mode == "fork" else ""  # a fresh interpreter per run imports on demand
        self.preimported: list[str] = []  # what the last fork server that started reported
        self.root = tempfile.mkdtemp(prefix="retool-sandbox-", dir=work_root)
        os.chmod(self.root, 0o711)  # sandbox uids must reach their own work dir, not list others
        self._spares: dict[int, FreshRun] = {}
        self._servers: dict[int, ForkServer] = {}
        self._next_box: dict[int, int] = {}
        self.sandboxes_started = 0
        self.sandboxes_retired = 0
        self._zygote: SessionZygote | None = None
        self.session_fork_failure = ""  # why sessions are no longer forked here, if a zygote could start none
        self._closing: set[asyncio.Task] = set()

    def _run_dir(self, box: int) -> str:
        self.sandboxes_started += 1
        return os.path.join(self.root, f"sandbox-{box}-{self.sandboxes_started}")

    def _spawn(self, slot: int) -> FreshRun | ForkServer:
        if self.mode == "fork":
            box = 2 * slot
            return ForkServer(self.isolation, box, self._run_dir(box), self.preimport)
        box = self._next_box.get(slot, 2 * slot)
        self._next_box[slot] = box ^ 1
        return FreshRun(self.isolation, box, self._run_dir(box), self.max_output_bytes)

    def prestart(self, slots: int) -> None:
        """Start every slot's sandbox ahead of its first request (optional: ``run`` starts one on demand)."""
        for slot in range(slots):
            self._refill(slot)

    async def warm_up(self, sessions: bool, stall_s: float = START_TIMEOUT_S) -> str:
        """Wait until every pre-started slot sandbox (fork mode: its fork server, which preimports) and, with
        ``sessions``, the session zygote have said they are ready (or failed), so the first requests and the first
        session find them started rather than racing them for the cores. Waits as long as one more of them gets
        ready within every ``stall_s``; returns what it gave up on ("" when all are done)."""
        zygote = self._session_zygote() if sessions else None
        pending = {s.ready for s in [*self._servers.values(), *filter(None, [zygote])]}
        while pending:
            done, pending = await asyncio.wait(pending, timeout=stall_s, return_when=asyncio.FIRST_COMPLETED)
            if not done:
                return (
                    f"{len(pending)} sandboxes had not started after {stall_s:g} s without progress; they are "
                    "waited for (or replaced) when a request needs them"
                )
        started = [s for s in self._servers.values() if s.ready.result()]
        if started and not self.preimported:
            self.preimported = started[0].imported
        return ""

    def _refill(self, slot: int) -> None:
        pool = self._servers if self.mode == "fork" else self._spares
        if slot not in pool:
            try:
                pool[slot] = self._spawn(slot)
            except OSError:
                log.exception("could not pre-start a sandbox for slot %d; will retry on the next request", slot)

    async def close(self) -> None:
        sandboxes = [*self._spares.values(), *self._servers.values(), *filter(None, [self._zygote])]
        self._spares, self._servers, self._zygote = {}, {}, None
        for sandbox in sandboxes:
            await sandbox.close()
        for task in list(self._closing):
            await task
        shutil.rmtree(self.root, ignore_errors=True)

    async def run(self, slot: int, spec: RunSpec) -> RunOutcome:
        if self.mode == "fork":
            return await self._run_forked(slot, spec)
        spare = self._spares.pop(slot, None)
        if spare is None or spare.exited.done():
            if spare is not None:  # died while idle (killed from outside?): start afresh
                log.warning("spare sandbox %d of slot %d died while idle (exit %s)", spare.box, slot, spare.exit_code())
                await spare.close()
            spare = self._spawn(slot)
        # The next spare starts under the slot's other uid while this program runs.
        asyncio.get_running_loop().call_soon(self._refill, slot)
        try:
            return await self._run(spare, spec)
        finally:
            await spare.close()

    async def _retire(self, slot: int, server: ForkServer) -> None:
        if self._servers.get(slot) is server:
            del self._servers[slot]
        self.sandboxes_retired += 1
        await server.close()

    async def _run_forked(self, slot: int, spec: RunSpec) -> RunOutcome:
        outcome, program_started = await self._run_forked_once(slot, spec)
        if not program_started and outcome.status == "Error":
            # A fork server that died while idle (say, the OOM killer) is noticed only when the program is handed
            # over; the program never ran then, so one retry on the replacement sandbox is safe.
            log.warning("the sandbox of slot %d was gone before the program started; retrying", slot)
            outcome, _ = await self._run_forked_once(slot, spec)
        return outcome

    async def _run_forked_once(self, slot: int, spec: RunSpec) -> tuple[RunOutcome, bool]:
        server = self._servers.get(slot)
        if server is not None and not server.healthy:
            await self._retire(slot, server)
            server = None
        if server is None:
            server = self._servers[slot] = self._spawn(slot)
        try:
            await server.wait_ready()
        except RuntimeError as exc:
            await self._retire(slot, server)
            return RunOutcome("Error", None, None, "", "", error=str(exc)), False
        if not server.reported:  # once per fork server
            server.reported = True
            self.preimported = server.imported
            for warning in server.warnings:
                log.warning("preimport skipped %s", warning)
        run = ForkRun(server, self.max_output_bytes)
        try:
            return await self._run(run, spec), run.pid is not None
        finally:
            await run.close()
            if not server.healthy:  # replace it now, so the next request finds a started sandbox
                await self._retire(slot, server)
                self._refill(slot)

    def session_limits(self, memory_mb: int | None) -> str:
        """The rlimits of a session's interpreter for its whole life (those of the request that started it)."""
        ceiling = self.ceiling
        memory = memory_mb * _MB if memory_mb else 0
        nproc = ceiling.max_processes if self.isolation.limits_processes else 0
        return (
            f"{memory} {ceiling.cpu_seconds * SESSION_CPU_RUNS} {nproc} {ceiling.max_file_size_mb * _MB} "
            f"{ceiling.max_open_files}"
        )

    @property
    def forks_sessions(self) -> bool:
        """Whether sessions are forked from a preimported session zygote (fork mode on a tier with a uid per
        session) rather than started as a sandbox and interpreter of their own."""
        return self.mode == "fork" and self.isolation.can_fork_sessions and not self.session_fork_failure

    def _session_zygote(self) -> SessionZygote | None:
        if not self.forks_sessions:
            return None
        zygote = self._zygote
        if zygote is not None and zygote.start_failure and not zygote.started:
            # This host refuses what a forked session needs (a namespace, a mount): start sessions afresh from now.
            self.session_fork_failure = zygote.start_failure
            log.error(
                "sessions cannot be forked from the session zygote here (%s); every session now starts a "
                "sandbox and interpreter of its own",
                zygote.start_failure,
            )
            zygote.healthy = False
        if zygote is not None and not zygote.healthy:
            self.sandboxes_retired += 1
            task = asyncio.ensure_future(zygote.close())  # its sessions are gone with it already
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)
            zygote = self._zygote = None
        if self.session_fork_failure:
            return None
        if zygote is None:
            self.sandboxes_started += 1
            run_dir = os.path.join(self.root, f"session-zygote-{self.sandboxes_started}")
            zygote = self._zygote = SessionZygote(self.isolation, run_dir, self.root, self.preimport)
        return zygote

    def start_session(self, box: int, memory_mb: int | None, on_exit=None) -> SessionSandbox:
        """Start a session's sandbox as sandbox number ``box`` (await its ``wait_ready``)."""
        return SessionSandbox(
            self.isolation,
            box,
            self._run_dir(box),
            self.session_limits(memory_mb),
            on_exit,
            zygote=self._session_zygote(),
        )

    async def run_cell(self, session: SessionSandbox, spec: RunSpec) -> RunOutcome:
        """Run one cell in a started session; the session is stopped again afterwards (if it still lives)."""
        await session.thaw()
        cell = SessionCell(session, self.max_output_bytes)
        try:
            return await self._run(cell, spec)
        finally:
            await cell.close()
            session.freeze_soon()

    def _write_files(self, run: Run, spec: RunSpec) -> None:
        for rel, content in [*spec.files.items(), (PROGRAM_NAME, spec.code.encode("utf-8", "surrogatepass"))]:
            path = os.path.join(run.workdir, rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "wb") as fh:
                fh.write(content)
        if run.uid is not None:
            for dirpath, _, filenames in os.walk(run.workdir):
                os.chown(dirpath, run.uid, run.uid)
                for name in filenames:
                    os.chown(os.path.join(dirpath, name), run.uid, run.uid)

    async def _run(self, run: Run, spec: RunSpec) -> RunOutcome:
        loop = asyncio.get_running_loop()
        if run.writes_program_file:
            self._write_files(run, spec)
        ceiling = self.ceiling
        memory = spec.memory_mb * _MB if spec.memory_mb else 0
        cpu = min(cpu_seconds_for(spec.timeout_s), ceiling.cpu_seconds)
        nproc = ceiling.max_processes if self.isolation.limits_processes else 0
        sent = time.monotonic()
        run.start(
            f"{memory} {cpu} {nproc} {ceiling.max_file_size_mb * _MB} {ceiling.max_open_files}",
            os.path.join(run.inner, PROGRAM_NAME),
        )
        stdin = await _feed_stdin(loop, run.stdin_w, run.stdin_payload(spec.code, spec.files, spec.stdin or b""))
        run.stdin_w = -1
        try:
            started = await _wait_started(loop, run, sent)
            if started is None:
                rc = run.exit_code()
                run.after_exit()
                reason = run.error or f"exit {rc}: {run.err.text('stderr')[-500:]}"
                return RunOutcome(
                    "Error",
                    None,
                    None,
                    run.out.text("stdout"),
                    run.err.text("stderr"),
                    error=f"the sandbox failed to start the program ({reason})",
                )
            timed_out = False
            try:
                remaining = spec.timeout_s - (time.monotonic() - started)
                await asyncio.wait_for(asyncio.shield(run.exited), max(remaining, 0.0))
            except asyncio.TimeoutError:
                timed_out = True
                run.interrupt()
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(asyncio.shield(run.exited), run.interrupt_grace_s or _INTERRUPT_GRACE_S)
                run.kill()
                await asyncio.wait_for(asyncio.shield(run.exited), KILL_GRACE_S)
            elapsed = max(0.0, run.exit_time - started)
            rc = run.exit_code()
            run.after_exit()
            # Everything is dead now; give the kernel a moment to close the last pipe ends.
            await asyncio.wait([r.done for r in run.readers], timeout=_DRAIN_GRACE_S)
        finally:
            if stdin.get_write_buffer_size():  # the program never read all of its stdin
                stdin.abort()
        if rc is None:
            return RunOutcome(
                "Error",
                None,
                None,
                run.out.text("stdout"),
                run.err.text("stderr"),
                error=run.error or "the program's exit status was lost",
            )
        # RLIMIT_CPU ends a run with SIGXCPU: that is a time limit too.
        timed_out = timed_out or rc == -signal.SIGXCPU
        files = {}
        if spec.fetch_files:
            await run.before_fetch()
            files = self._fetch(run, spec.fetch_files)
        return RunOutcome(
            status="TimeLimitExceeded" if timed_out else "Finished",
            return_code=None if timed_out else rc,
            execution_time=round(elapsed, 6),
            stdout=run.out.text("stdout"),
            stderr=run.err.text("stderr"),
            truncated=bool(run.out.dropped or run.err.dropped),
            files=files,
        )

    def _fetch(self, run: Run, paths: tuple[str, ...]) -> dict[str, str]:
        """Read back requested files; missing ones are omitted (SandboxFusion behaviour).

        A file counts only if it resolves inside the work dir, is a regular file and (with sandbox uids) belongs
        to the sandbox uid, so symlinks or hard links planted by the program cannot exfiltrate host files.
        """
        real_root = os.path.realpath(run.workdir)
        files = {}
        for rel in paths:
            real = os.path.realpath(os.path.join(run.workdir, rel))
            if not real.startswith(real_root + os.sep):
                continue
            try:
                st = os.stat(real)
            except OSError:
                continue
            if not os.path.isfile(real) or (run.uid is not None and st.st_uid != run.uid):
                continue
            with open(real, "rb") as fh:
                files[rel] = base64.b64encode(fh.read()).decode("ascii")
        return files


async def _feed_stdin(loop: asyncio.AbstractEventLoop, fd: int, data: bytes) -> asyncio.WriteTransport:
    """Write ``data`` to the program's stdin without ever blocking the loop, then close it (EOF)."""
    transport, _ = await loop.connect_write_pipe(asyncio.Protocol, os.fdopen(fd, "wb", buffering=0))
    if data:
        transport.write(data)
    transport.close()  # flushes what is buffered, then closes; abort() drops it if the program never reads
    return transport


def _start_time(data: bytes, sent: float) -> float | None:
    """The reported start time, clamped to [sent, now] (a session's report comes from user-controlled code)."""
    if not data.startswith(b"S"):
        return None
    try:
        value = float(data[1:])
    except ValueError:
        return None
    if not math.isfinite(value):
        return None
    return min(max(value, sent), time.monotonic())


async def _wait_started(loop: asyncio.AbstractEventLoop, run: Run, sent: float) -> float | None:
    """The program's start time (monotonic) once it reports it; None if the sandbox exited or hung first."""
    started: asyncio.Future[float | None] = loop.create_future()

    def on_started() -> None:
        if not started.done():
            try:
                data = os.read(run.started_r, 64)
            except BlockingIOError:
                return
            except OSError:
                data = b""
            started.set_result(_start_time(data, sent))

    os.set_blocking(run.started_r, False)
    loop.add_reader(run.started_r, on_started)
    try:
        await asyncio.wait([started, run.exited], timeout=START_TIMEOUT_S, return_when=asyncio.FIRST_COMPLETED)
        if not started.done() and run.exited.done():
            on_started()  # a quick program may exit before its start report was seen: it is in the pipe
        if started.done() and started.result() is not None:
            return started.result()
        if not run.exited.done():
            run.kill()
            await asyncio.wait_for(asyncio.shield(run.exited), KILL_GRACE_S)
        return None
    finally:
        loop.remove_reader(run.started_r)


def cpu_seconds_for(timeout_s: float) -> int:
    """RLIMIT_CPU backstop: generous enough for multithreaded code, the wall-clock kill is the real limit."""
    return int(math.ceil(timeout_s)) * host.cores() + 5
