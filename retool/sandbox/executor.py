"""Run one Python program in a slot: pre-started sandbox, capped output, wall-clock kill of the tree, cleanup.

Each slot keeps one *spare*: a sandbox whose interpreter is already started (isolation set up, ``site`` imported)
and blocked reading a control pipe. A request takes the slot's spare, writes its files into the spare's work dir,
sends the limits over the control pipe, and the bootstrap (``BOOTSTRAP``) lowers its rlimits, reports "started"
and executes ``main.py`` as ``__main__`` (tracebacks, ``sys.argv``, ``sys.path[0]`` and ``__file__`` as with
``python main.py``). Right after, the next spare for the slot starts under the slot's other uid, so start-up cost
overlaps the run instead of adding to the next request's latency. Every program still gets a fresh process in a
fresh sandbox; nothing is reused.

Contract of ``Executor.run``: the timeout clock starts when the program starts (the bootstrap's signal), never
during start-up or queueing; on timeout the program gets SIGINT (Python flushes its buffers and prints where it
was stuck), then the whole tree is killed (tier-specific, see ``isolation``) and the partial output is returned as
TimeLimitExceeded; stdout and stderr are read continuously into per-stream buffers that keep the first
``max_output_bytes`` bytes and count the rest; the work dir is removed afterwards. No Python code runs in the child
between fork and exec (the bootstrap applies the rlimits), and exits are watched through pidfds.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import math
import os
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field

from retool.sandbox.isolation import (
    TIERS,
    Interpreter,
    Isolation,
    IsolationUnavailable,
    Limits,
    make_isolation,
)

log = logging.getLogger("retool.sandbox")

PROGRAM_NAME = "main.py"
_MB = 1024 * 1024
_START_TIMEOUT_S = 60.0
_INTERRUPT_GRACE_S = 0.5
_KILL_GRACE_S = 5.0
_DRAIN_GRACE_S = 1.0

# Runs inside the sandbox as `python -c BOOTSTRAP CTL_FD STARTED_FD`. It waits for the request's limits and the
# program path, "<as> <cpu> <nproc> <fsize> <nofile> <path>\n" (0 = leave unlimited), on CTL_FD (EOF: the server
# dropped this spare), sets them as soft and hard rlimits (no core dumps either), writes "S<monotonic time>" to
# STARTED_FD (the clock is shared with the server: no time namespace) and runs the program as __main__. Its own
# frames are hidden from tracebacks.
BOOTSTRAP = """\
import os, sys
def _retool_boot():
    ctl, started = int(sys.argv[1]), int(sys.argv[2])
    header = b""
    while not header.endswith(b"\\n"):
        chunk = os.read(ctl, 4096)
        if not chunk:
            os._exit(0)
        header += chunk
    os.close(ctl)
    *limits, path = header.decode().rstrip("\\n").split(" ", 5)
    import resource, time, types
    for name, value in zip(("AS", "CPU", "NPROC", "FSIZE", "NOFILE", "CORE"), [*map(int, limits), 0]):
        if value > 0 or name == "CORE":
            resource.setrlimit(getattr(resource, "RLIMIT_" + name), (value, value))
    main = types.ModuleType("__main__")
    main.__file__ = path
    main.__builtins__ = __builtins__
    sys.modules["__main__"] = main
    sys.argv[:] = [path]
    sys.path[0] = os.path.dirname(path)
    hook = sys.excepthook
    def excepthook(kind, value, tb):
        while tb is not None and tb.tb_frame.f_code.co_filename in ("<string>", "<retool-bootstrap>"):
            tb = tb.tb_next
        hook(kind, value.with_traceback(tb), tb)
    sys.excepthook = excepthook
    os.write(started, b"S" + repr(time.monotonic()).encode())
    os.close(started)
    with open(path, "rb") as fh:
        source = fh.read()
    return main.__dict__, compile(source, path, "exec")
_retool_scope, _retool_code = _retool_boot()
del _retool_boot
exec(_retool_code, _retool_scope)
"""
_BOOT_ARG = "exec(compile(%r, '<retool-bootstrap>', 'exec'))" % BOOTSTRAP


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


class CappedBuffer:
    """Keeps the first ``cap`` bytes of a stream and counts the dropped rest."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.data = bytearray()
        self.dropped = 0

    def feed(self, chunk: bytes) -> None:
        room = self.cap - len(self.data)
        if room > 0:
            self.data += chunk[:room]
        self.dropped += max(0, len(chunk) - max(room, 0))

    def text(self, stream: str) -> str:
        out = self.data.decode("utf-8", errors="replace")
        if self.dropped:
            out += f"\n[retool-sandbox: {stream} truncated, {self.dropped} more bytes dropped (cap {self.cap})]\n"
        return out


class _PipeReader:
    """Drains a non-blocking pipe into a CappedBuffer from the event loop; ``done`` resolves at EOF."""

    def __init__(self, loop: asyncio.AbstractEventLoop, fd: int, buffer: CappedBuffer) -> None:
        self.loop, self.fd, self.buffer = loop, fd, buffer
        self.done: asyncio.Future[None] = loop.create_future()
        os.set_blocking(fd, False)
        loop.add_reader(fd, self._on_readable)

    def _on_readable(self) -> None:
        for _ in range(16):  # bounded per callback so one chatty program cannot starve the loop
            try:
                chunk = os.read(self.fd, 1 << 16)
            except BlockingIOError:
                return
            except OSError:
                chunk = b""
            if not chunk:
                self.close()
                return
            self.buffer.feed(chunk)

    def close(self) -> None:
        if self.fd >= 0:
            self.loop.remove_reader(self.fd)
            os.close(self.fd)
            self.fd = -1
        if not self.done.done():
            self.done.set_result(None)


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


def _remove_tree(path: str) -> None:
    if os.geteuid() != 0:  # root ignores permissions; anyone else must undo a program's `chmod 000`
        for dirpath, dirnames, _ in os.walk(path):
            for name in dirnames:
                sub = os.path.join(dirpath, name)
                if not os.path.islink(sub):  # never chmod through a planted symlink
                    with contextlib.suppress(OSError):
                        os.chmod(sub, 0o700)
    shutil.rmtree(path, ignore_errors=True)


def _env(inner_workdir: str, tmpdir: str) -> dict[str, str]:
    # A clean environment: nothing from the server (secrets, proxies, PYTHON*), one BLAS thread so numpy
    # imports under an address-space limit, a non-interactive matplotlib backend.
    return {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": inner_workdir,
        "TMPDIR": tmpdir,
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "PYTHONIOENCODING": "utf-8",
        "PYTHONDONTWRITEBYTECODE": "1",
        "OPENBLAS_NUM_THREADS": "1",
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "NUMEXPR_NUM_THREADS": "1",
        "MPLBACKEND": "Agg",
    }


class _Spare:
    """A started sandbox (sandbox number ``box``) waiting for its program; used for exactly one run."""

    def __init__(self, executor: "Executor", box: int, run_dir: str) -> None:
        loop = asyncio.get_running_loop()
        iso = executor.isolation
        self.box, self.run_dir, self.isolation = box, run_dir, iso
        self.uid = iso.uid(box)
        os.mkdir(run_dir, 0o711)
        self.workdir = os.path.join(run_dir, "work")
        os.mkdir(self.workdir, 0o700)
        if self.uid is not None:
            os.chown(self.workdir, self.uid, self.uid)
        self.inner = iso.inner_workdir(self.workdir)
        fds = {name: os.pipe() for name in ("stdin", "stdout", "stderr", "ctl", "started")}
        child_ends = [fds["stdin"][0], fds["stdout"][1], fds["stderr"][1], fds["ctl"][0], fds["started"][1]]
        launch = iso.launch(box, self.workdir, ["-c", _BOOT_ARG, str(fds["ctl"][0]), str(fds["started"][1])])
        try:
            self.proc = subprocess.Popen(
                launch.argv, stdin=fds["stdin"][0], stdout=fds["stdout"][1], stderr=fds["stderr"][1],
                pass_fds=(fds["ctl"][0], fds["started"][1]), cwd=launch.cwd,
                env=_env(self.inner, launch.env_tmpdir or self.inner), close_fds=True, start_new_session=True,
                user=launch.user, group=launch.user, extra_groups=[] if launch.user is not None else None,
            )
        except BaseException:
            for fd in (fds["stdin"][1], fds["stdout"][0], fds["stderr"][0], fds["ctl"][1], fds["started"][0]):
                os.close(fd)
            shutil.rmtree(run_dir, ignore_errors=True)
            raise
        finally:
            for fd in child_ends:
                os.close(fd)
        self.stdin_w, self.ctl_w, self.started_r = fds["stdin"][1], fds["ctl"][1], fds["started"][0]
        self.out = CappedBuffer(executor.max_output_bytes)
        self.err = CappedBuffer(executor.max_output_bytes)
        self.readers = [_PipeReader(loop, fds["stdout"][0], self.out), _PipeReader(loop, fds["stderr"][0], self.err)]
        self.pidfd = os.pidfd_open(self.proc.pid)
        self.exited: asyncio.Future[None] = loop.create_future()
        self.exit_time = 0.0
        loop.add_reader(self.pidfd, self._on_exit)
        self.returncode: int | None = None
        self.cleaned = False

    def _on_exit(self) -> None:
        if not self.exited.done():
            self.exit_time = time.monotonic()
            self.exited.set_result(None)

    def dead(self) -> bool:
        return self.exited.done()

    def reap(self) -> int:
        """Exit status of the sandbox's first process (after it exited)."""
        if self.returncode is None:
            _, status = os.waitpid(self.proc.pid, 0)
            self.returncode = self.proc.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def cleanup(self) -> None:
        """After the first process exited: make sure nothing the program started survives (once)."""
        if not self.cleaned:
            self.isolation.cleanup(self.box, self.proc.pid)
            self.cleaned = True

    async def close(self) -> None:
        """Kill whatever is left of this sandbox, release its fds and remove its directory."""
        loop = asyncio.get_running_loop()
        if not self.exited.done():
            self.isolation.kill(self.box, self.proc.pid)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.shield(self.exited), _KILL_GRACE_S)
        if self.exited.done():
            self.reap()
            self.cleanup()
        loop.remove_reader(self.pidfd)
        for fd in (self.pidfd, self.stdin_w, self.ctl_w, self.started_r):
            with contextlib.suppress(OSError):
                os.close(fd)
        for reader in self.readers:
            reader.close()
        await asyncio.to_thread(_remove_tree, self.run_dir)


class Executor:
    """Runs programs for one isolation tier; ``run`` must be called with a slot that no other run holds.

    ``ceiling`` holds the limits of every run; a request may only lower address space and (via its timeout) CPU
    time. Slot ``s`` alternates between sandbox numbers ``2s`` and
    ``2s+1`` (so uids ``uid_base+2s`` and ``uid_base+2s+1``): the spare never shares a uid with the running
    program, whose uid is swept after the run.
    """

    def __init__(self, isolation: Isolation, ceiling: Limits, work_root: str | None = None,
                 max_output_bytes: int = 1 << 20) -> None:
        self.isolation = isolation
        self.ceiling = ceiling
        self.max_output_bytes = max_output_bytes
        self.root = tempfile.mkdtemp(prefix="retool-sandbox-", dir=work_root)
        os.chmod(self.root, 0o711)  # sandbox uids must reach their own work dir, not list others
        self._spares: dict[int, _Spare] = {}
        self._next_box: dict[int, int] = {}
        self._spawned = 0

    def _spawn(self, slot: int) -> _Spare:
        box = self._next_box.get(slot, 2 * slot)
        self._next_box[slot] = box ^ 1
        self._spawned += 1
        return _Spare(self, box, os.path.join(self.root, f"run-{box}-{self._spawned}"))

    def prestart(self, slots: int) -> None:
        """Start a spare for every slot (optional: ``run`` starts one on demand)."""
        for slot in range(slots):
            if slot not in self._spares:
                self._spares[slot] = self._spawn(slot)

    async def close(self) -> None:
        spares, self._spares = list(self._spares.values()), {}
        for spare in spares:
            await spare.close()
        shutil.rmtree(self.root, ignore_errors=True)

    async def run(self, slot: int, spec: RunSpec) -> RunOutcome:
        spare = self._spares.pop(slot, None)
        if spare is None or spare.dead():
            if spare is not None:  # died while idle (killed from outside?): start afresh
                log.warning("spare sandbox %d of slot %d died while idle (exit %s)", spare.box, slot, spare.reap())
                await spare.close()
            spare = self._spawn(slot)
        # The next spare starts under the slot's other uid while this program runs.
        asyncio.get_running_loop().call_soon(self._refill, slot)
        try:
            return await self._run(spare, spec)
        finally:
            await spare.close()

    def _refill(self, slot: int) -> None:
        if slot not in self._spares:
            try:
                self._spares[slot] = self._spawn(slot)
            except OSError:
                log.exception("could not pre-start a sandbox for slot %d; will retry on the next request", slot)

    def _write_files(self, spare: _Spare, spec: RunSpec) -> None:
        for rel, content in [*spec.files.items(), (PROGRAM_NAME, spec.code.encode("utf-8", "surrogatepass"))]:
            path = os.path.join(spare.workdir, rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "wb") as fh:
                fh.write(content)
        if spare.uid is not None:
            for dirpath, _, filenames in os.walk(spare.workdir):
                os.chown(dirpath, spare.uid, spare.uid)
                for name in filenames:
                    os.chown(os.path.join(dirpath, name), spare.uid, spare.uid)

    async def _run(self, spare: _Spare, spec: RunSpec) -> RunOutcome:
        loop = asyncio.get_running_loop()
        self._write_files(spare, spec)
        ceiling = self.ceiling
        memory = spec.memory_mb * _MB if spec.memory_mb else 0
        cpu = min(cpu_seconds_for(spec.timeout_s), ceiling.cpu_seconds)
        nproc = ceiling.max_processes if self.isolation.limits_processes else 0
        limits = f"{memory} {cpu} {nproc} {ceiling.max_file_size_mb * _MB} {ceiling.max_open_files}"
        header = f"{limits} {os.path.join(spare.inner, PROGRAM_NAME)}\n".encode()
        try:
            os.write(spare.ctl_w, header)  # far below the pipe buffer: never blocks
        except BrokenPipeError:
            pass  # the sandbox is already gone; reported below
        os.close(spare.ctl_w)
        spare.ctl_w = -1
        stdin = await _feed_stdin(loop, spare.stdin_w, spec.stdin or b"")
        spare.stdin_w = -1
        try:
            started = await _wait_started(loop, spare)
            if started is None:
                spare.reap()
                spare.cleanup()
                return RunOutcome("Error", None, None, spare.out.text("stdout"), spare.err.text("stderr"),
                                  error=f"the sandbox failed to start the program (exit {spare.returncode}): "
                                        f"{spare.err.text('stderr')[-500:]}")
            timed_out = False
            try:
                remaining = spec.timeout_s - (time.monotonic() - started)
                await asyncio.wait_for(asyncio.shield(spare.exited), max(remaining, 0.0))
            except asyncio.TimeoutError:
                timed_out = True
                self.isolation.interrupt(spare.box, spare.proc.pid)
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(asyncio.shield(spare.exited), _INTERRUPT_GRACE_S)
                self.isolation.kill(spare.box, spare.proc.pid)
                await asyncio.wait_for(asyncio.shield(spare.exited), _KILL_GRACE_S)
            elapsed = spare.exit_time - started
            rc = spare.reap()
            spare.cleanup()
            # Everything is dead now; give the kernel a moment to close the last pipe ends.
            await asyncio.wait([r.done for r in spare.readers], timeout=_DRAIN_GRACE_S)
        finally:
            if stdin.get_write_buffer_size():  # the program never read all of its stdin
                stdin.abort()
        if self.isolation.name == "bwrap" and 128 < rc <= 128 + 64:
            rc = -(rc - 128)  # bwrap reports "killed by signal N" as 128+N
        # RLIMIT_CPU ends a run with SIGXCPU: that is a time limit too.
        timed_out = timed_out or rc == -signal.SIGXCPU
        return RunOutcome(
            status="TimeLimitExceeded" if timed_out else "Finished",
            return_code=None if timed_out else rc,
            execution_time=round(elapsed, 6),
            stdout=spare.out.text("stdout"),
            stderr=spare.err.text("stderr"),
            truncated=bool(spare.out.dropped or spare.err.dropped),
            files=self._fetch(spare, spec.fetch_files),
        )

    def _fetch(self, spare: _Spare, paths: tuple[str, ...]) -> dict[str, str]:
        """Read back requested files; missing ones are omitted (SandboxFusion behaviour).

        A file counts only if it resolves inside the work dir, is a regular file and (with sandbox uids) belongs
        to the sandbox uid, so symlinks or hard links planted by the program cannot exfiltrate host files.
        """
        real_root = os.path.realpath(spare.workdir)
        files = {}
        for rel in paths:
            real = os.path.realpath(os.path.join(spare.workdir, rel))
            if not real.startswith(real_root + os.sep):
                continue
            try:
                st = os.stat(real)
            except OSError:
                continue
            if not os.path.isfile(real) or (spare.uid is not None and st.st_uid != spare.uid):
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


async def _wait_started(loop: asyncio.AbstractEventLoop, spare: _Spare) -> float | None:
    """The program's start time (monotonic) once the bootstrap reports it; None if the sandbox exited or hung."""
    started: asyncio.Future[float | None] = loop.create_future()

    def on_started() -> None:
        if not started.done():
            try:
                data = os.read(spare.started_r, 64)
            except BlockingIOError:
                return
            except OSError:
                data = b""
            started.set_result(float(data[1:]) if data.startswith(b"S") else None)

    os.set_blocking(spare.started_r, False)
    loop.add_reader(spare.started_r, on_started)
    try:
        await asyncio.wait([started, spare.exited], timeout=_START_TIMEOUT_S, return_when=asyncio.FIRST_COMPLETED)
        if not started.done() and spare.exited.done():
            on_started()  # a quick program may exit before its start report was seen: it is in the pipe
        if started.done() and started.result() is not None:
            return started.result()
        if not spare.exited.done():
            spare.isolation.kill(spare.box, spare.proc.pid)
            await asyncio.wait_for(asyncio.shield(spare.exited), _KILL_GRACE_S)
        return None
    finally:
        loop.remove_reader(spare.started_r)


PROBE = (
    "import json, os, sys\n"
    "print(json.dumps({'uid': os.getuid(), 'shadow': os.path.exists('/etc/shadow'), 'cwd': os.getcwd(),"
    " 'env': sorted(os.environ), 'python': sys.version.split()[0]}))\n"
)


async def self_test(executor: Executor) -> str | None:
    """Run a probe program through the full path; return None if the tier works, else the reason."""
    iso = executor.isolation
    try:
        iso.check()
        out = await executor.run(0, RunSpec(code=PROBE, timeout_s=30, memory_mb=1024))
    except (IsolationUnavailable, OSError) as exc:
        return str(exc)
    if out.status != "Finished" or out.return_code != 0:
        return f"probe program failed ({out.status}, exit {out.return_code}): {(out.stderr or out.error)[-800:]}"
    try:
        info = json.loads(out.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return f"probe program printed unexpected output: {out.stdout[-300:]!r}"
    expected_uid = iso.uid(0)  # slot 0's first sandbox
    if expected_uid is not None and info["uid"] != expected_uid:
        return f"probe ran as uid {info['uid']}, expected the sandbox uid {expected_uid}"
    if iso.name == "bwrap" and info["shadow"]:
        return "probe could see /etc/shadow inside bubblewrap"
    return None


async def try_tier(
    tier: str, interpreter: Interpreter, *, ceiling: Limits, uid_base: int, work_root: str | None,
    max_output_bytes: int,
) -> tuple[Executor | None, str | None]:
    """An executor for ``tier`` if its checks and self-test pass, else (None, the reason)."""
    if tier not in TIERS:
        raise IsolationUnavailable(f"unknown isolation tier {tier!r}; choose auto, {', '.join(TIERS)}")
    try:
        executor = Executor(make_isolation(tier, interpreter, uid_base), ceiling, work_root, max_output_bytes)
    except IsolationUnavailable as exc:
        return None, str(exc)
    reason = await self_test(executor)
    if reason is not None:
        await executor.close()
        return None, reason
    return executor, None


async def choose_isolation(
    requested: str, interpreter: Interpreter, *, ceiling: Limits, uid_base: int, work_root: str | None,
    max_output_bytes: int,
) -> tuple[Executor, list[str]]:
    """Build the executor for ``requested`` ('auto' = strongest tier whose self-test passes; 'none' only if named).

    Returns the executor and notes on tiers that were skipped. Raises IsolationUnavailable if nothing usable.
    """
    notes: list[str] = []
    for tier in ["bwrap", "rlimit"] if requested == "auto" else [requested]:
        executor, reason = await try_tier(
            tier, interpreter, ceiling=ceiling, uid_base=uid_base, work_root=work_root,
            max_output_bytes=max_output_bytes,
        )
        if executor is not None:
            return executor, notes
        notes.append(f"{tier}: {reason}")
    raise IsolationUnavailable(
        "no usable isolation tier:\n  " + "\n  ".join(notes)
        + "\nInstall bubblewrap (scripts/install_system_packages.sh) or, for trusted code only, --isolation none."
    )


def cpu_seconds_for(timeout_s: float) -> int:
    """RLIMIT_CPU backstop: generous enough for multithreaded code, the wall-clock kill is the real limit."""
    return int(math.ceil(timeout_s)) * max(1, os.cpu_count() or 1) + 5
