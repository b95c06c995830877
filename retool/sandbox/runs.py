"""One program run as the executor sees it, for both ways of starting sandboxes.

``Run`` is the common face: the program's pipes (stdout/stderr drained into capped buffers, stdin, the started
report), an ``exited`` future, and how to interrupt, kill and release it. Two kinds exist:

``ForkRun`` (fork mode, the default where the tier can switch uids): each slot owns a long-lived ``ForkServer``,
a sandbox whose interpreter forks one child per program (see ``inside.FORKSERVER``). The run sends its pipe ends
over the server's control socket; the child drops to the slot's uid; after the exit the sandbox sweeps that uid
(processes, /tmp, /dev/shm, /dev/mqueue, System V IPC) before it reports, and the host empties the work dir. A
run that could not be swept clean, a lost fork server or a kill that did not land retires the whole sandbox.

``FreshRun`` (fresh mode: ``--fresh-sandbox-per-run``, and bwrap without root): a whole sandbox per run,
pre-started as the slot's *spare* while the previous run executes (see ``inside.BOOTSTRAP``).

``SessionCell`` (stateful sessions): one cell run by a ``SessionSandbox``, a session's own long-lived sandbox and
interpreter (``inside.SESSION``) under its own uid. The cell's code and files travel at the head of its stdin, so
the host never writes into a work dir that a live program controls; between cells every process of the session is
stopped (SIGSTOP), so an idle session uses no CPU, and files are fetched only while it is stopped.

No Python code runs in a child between fork and exec on the host side; exits are watched through pidfds.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import shutil
import signal
import socket
import subprocess
import time
from typing import Callable

from retool.sandbox.inside import BOOTSTRAP_ARG, FORKSERVER_ARG, SESSION_ARG
from retool.sandbox.isolation import Isolation, Launch, kill_uid, sweep_tools

log = logging.getLogger("retool.sandbox")

START_TIMEOUT_S = 60.0
KILL_GRACE_S = 5.0


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


def remove_tree(path: str, keep_root: bool = False) -> bool:
    """Delete ``path`` (only its contents with ``keep_root``); True if nothing is left."""
    if os.geteuid() != 0:  # root ignores permissions; anyone else must undo a program's `chmod 000`
        for dirpath, dirnames, _ in os.walk(path):
            for name in dirnames:
                sub = os.path.join(dirpath, name)
                if not os.path.islink(sub):  # never chmod through a planted symlink
                    with contextlib.suppress(OSError):
                        os.chmod(sub, 0o700)
    if not keep_root:
        shutil.rmtree(path, ignore_errors=True)
        return not os.path.lexists(path)
    for entry in os.scandir(path):
        if entry.is_dir(follow_symlinks=False):
            shutil.rmtree(entry.path, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                os.unlink(entry.path)
    return not os.listdir(path)


def sandbox_env(inner_workdir: str, tmpdir: str) -> dict[str, str]:
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


def _make_workdir(run_dir: str, uid: int | None) -> str:
    os.mkdir(run_dir, 0o711)  # sandbox uids must reach their own work dir, not list the parent
    workdir = os.path.join(run_dir, "work")
    os.mkdir(workdir, 0o700)
    if uid is not None:
        os.chown(workdir, uid, uid)
    return workdir


def _popen(launch: Launch, inner: str, **kwargs) -> subprocess.Popen:
    return subprocess.Popen(
        launch.argv, cwd=launch.cwd, env=sandbox_env(inner, launch.env_tmpdir or inner), close_fds=True,
        start_new_session=True, user=launch.user, group=launch.user,
        extra_groups=[] if launch.user is not None else None, **kwargs,
    )

def _start_controlled(loop: asyncio.AbstractEventLoop, launch: Launch, inner: str, stdin: int,
                      sock: socket.socket, child: socket.socket, run_dir: str
                      ) -> tuple[subprocess.Popen, CappedBuffer, _PipeReader]:
    """Start a long-lived sandbox interpreter talking over ``child`` (the server keeps ``sock``).

    Its stdout and stderr go to a capped log for error messages. ``stdin`` and ``child`` are closed here either way;
    on failure ``sock`` is closed and ``run_dir`` removed too.
    """
    log_r, log_w = os.pipe()
    try:
        proc = _popen(launch, inner, stdin=stdin, stdout=log_w, stderr=log_w, pass_fds=(child.fileno(),))
    except BaseException:
        sock.close()
        os.close(log_r)
        shutil.rmtree(run_dir, ignore_errors=True)
        raise
    finally:
        for fd in (stdin, log_w):
            os.close(fd)
        child.close()
    log_buffer = CappedBuffer(8192)
    reader = _PipeReader(loop, log_r, log_buffer)
    sock.setblocking(False)
    return proc, log_buffer, reader



class Run:
    """A program's pipes and exit. Subclasses say how it starts, ends and is released."""

    uid: int | None
    workdir: str  # on the host
    inner: str  # the work dir as the program sees it
    stdin_w: int
    started_r: int
    error = ""  # why the sandbox, not the program, failed (empty when it did not)
    writes_program_file = True  # the host writes main.py and the request's files into the work dir
    interrupt_grace_s = 0.0  # how long the timeout's SIGINT may take to end the program (0: the executor's default)

    def stdin_payload(self, code: str, files: dict[str, bytes], stdin: bytes) -> bytes:
        """What the program's stdin carries."""
        return stdin

    async def before_fetch(self) -> None:
        """Called before requested files are read back (nothing of the run may be running then)."""

    def _open_pipes(self, max_output_bytes: int) -> list[int]:
        """Make the run's pipes; returns the child ends (stdin, stdout, stderr, started)."""
        loop = asyncio.get_running_loop()
        fds = {name: os.pipe() for name in ("stdin", "stdout", "stderr", "started")}
        self.stdin_w, self.started_r = fds["stdin"][1], fds["started"][0]
        self.out = CappedBuffer(max_output_bytes)
        self.err = CappedBuffer(max_output_bytes)
        self.readers = [_PipeReader(loop, fds["stdout"][0], self.out), _PipeReader(loop, fds["stderr"][0], self.err)]
        self.exited: asyncio.Future[None] = loop.create_future()
        self.exit_time = 0.0
        return [fds["stdin"][0], fds["stdout"][1], fds["stderr"][1], fds["started"][1]]

    def _close_fds(self) -> None:
        for fd in (self.stdin_w, self.started_r):
            with contextlib.suppress(OSError):
                os.close(fd)
        self.stdin_w = self.started_r = -1
        for reader in self.readers:
            reader.close()

    def start(self, limits: str, path: str) -> None:
        """Hand the program its limits ("<as> <cpu> <nproc> <fsize> <nofile>", 0 = unlimited) and path."""
        raise NotImplementedError

    def exit_code(self) -> int | None:
        """After ``exited``: the program's exit code (negative: killed by that signal); None if unknown."""
        raise NotImplementedError

    def interrupt(self) -> None:
        """On timeout, first SIGINT the program so Python flushes its buffered output (KeyboardInterrupt)."""
        raise NotImplementedError

    def kill(self) -> None:
        """Kill the program and everything it started."""
        raise NotImplementedError

    def after_exit(self) -> None:
        """Once the program exited: make sure nothing it started survives."""

    async def close(self) -> None:
        """Release everything the run holds; the slot is free afterwards."""
        raise NotImplementedError


class FreshRun(Run):
    """A whole sandbox started for one run (``inside.BOOTSTRAP``), waiting on its control pipe until ``start``."""

    def __init__(self, iso: Isolation, box: int, run_dir: str, max_output_bytes: int) -> None:
        self.box, self.run_dir, self.isolation = box, run_dir, iso
        self.uid = iso.uid(box)
        self.workdir = _make_workdir(run_dir, self.uid)
        self.inner = iso.inner_workdir(self.workdir)
        child_ends = self._open_pipes(max_output_bytes)
        ctl_r, self.ctl_w = os.pipe()
        child_ends.append(ctl_r)
        stdin, stdout, stderr, started = child_ends[:4]
        launch = iso.launch(box, self.workdir, ["-c", BOOTSTRAP_ARG, str(ctl_r), str(started)])
        try:
            self.proc = _popen(launch, self.inner, stdin=stdin, stdout=stdout, stderr=stderr,
                               pass_fds=(ctl_r, started))
        except BaseException:
            os.close(self.ctl_w)
            self._close_fds()
            shutil.rmtree(run_dir, ignore_errors=True)
            raise
        finally:
            for fd in child_ends:
                os.close(fd)
        loop = asyncio.get_running_loop()
        self.pidfd = os.pidfd_open(self.proc.pid)
        loop.add_reader(self.pidfd, self._on_exit)
        self.returncode: int | None = None
        self.cleaned = False

    def _on_exit(self) -> None:
        if not self.exited.done():
            self.exit_time = time.monotonic()
            self.exited.set_result(None)

    def start(self, limits: str, path: str) -> None:
        with contextlib.suppress(BrokenPipeError):  # already gone: reported as a failed start
            os.write(self.ctl_w, f"{limits} {path}\n".encode())  # far below the pipe buffer: never blocks
        os.close(self.ctl_w)
        self.ctl_w = -1

    def _reap(self) -> int:
        if self.returncode is None:
            _, status = os.waitpid(self.proc.pid, 0)
            self.returncode = self.proc.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def exit_code(self) -> int | None:
        rc = self._reap()
        if self.isolation.name == "bwrap" and 128 < rc <= 128 + 64:
            rc = -(rc - 128)  # bwrap reports "killed by signal N" as 128+N
        return rc

    def interrupt(self) -> None:
        self.isolation.interrupt(self.box, self.proc.pid)

    def kill(self) -> None:
        self.isolation.kill(self.box, self.proc.pid)

    def after_exit(self) -> None:
        if not self.cleaned:
            self.isolation.cleanup(self.box, self.proc.pid)
            self.cleaned = True

    async def close(self) -> None:
        loop = asyncio.get_running_loop()
        if not self.exited.done():
            self.kill()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.shield(self.exited), KILL_GRACE_S)
        if self.exited.done():
            self._reap()
            self.after_exit()
        loop.remove_reader(self.pidfd)
        for fd in (self.pidfd, self.ctl_w):
            with contextlib.suppress(OSError):
                os.close(fd)
        self._close_fds()
        await asyncio.to_thread(remove_tree, self.run_dir)


class ForkServer:
    """A slot's long-lived sandbox whose interpreter forks each program (``inside.FORKSERVER``).

    ``preimport`` is the module list the fork server imports before it is ready (``inside.FORKSERVER``); after
    ``wait_ready``, ``imported`` / ``missing`` / ``warnings`` say what came of it.
    """

    def __init__(self, iso: Isolation, box: int, run_dir: str, preimport: str = "") -> None:
        loop = asyncio.get_running_loop()
        self.isolation, self.box, self.run_dir = iso, box, run_dir
        self.uid = iso.uid(box)
        self.workdir = _make_workdir(run_dir, self.uid)
        self.inner = iso.inner_workdir(self.workdir)
        self.sock, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        tools = sweep_tools() if self.uid is not None else ["rm", "chmod", "ipcrm"]  # unused without a uid
        launch = iso.launch_forkserver(self.workdir, ["-c", FORKSERVER_ARG, str(child.fileno()), *tools, preimport])
        self.preimport = preimport
        self.imported: list[str] = []
        self.missing: list[str] = []
        self.warnings: list[str] = []
        self.start_error = ""
        self.reported = False  # the executor has taken note of imported / warnings
        # Its standard streams are pipes, like a program's: the children inherit Python's stream objects made
        # for them. Its own output (a traceback if it ever crashes) is kept for error messages.
        stdin_r, stdin_w = os.pipe()
        os.close(stdin_w)
        self.proc, self.log, self.log_reader = _start_controlled(loop, launch, self.inner, stdin_r, self.sock,
                                                                 child, run_dir)
        self.ready: asyncio.Future[bool] = loop.create_future()
        self.current: ForkRun | None = None
        self.healthy = True
        self.closed = False
        loop.add_reader(self.sock.fileno(), self._on_message)

    def _on_message(self) -> None:
        while True:
            try:
                data = self.sock.recv(4096)
            except BlockingIOError:
                return
            except OSError:
                data = b""
            if not data:
                self._lost()
                return
            kind, rest = data[:1], data[1:].decode(errors="replace")
            if kind == b"R" and not self.ready.done():
                self.ready.set_result(self._check_preimport(rest))
            elif self.current is not None and kind in (b"P", b"E", b"F"):
                self.current.on_message(kind, rest)
            else:
                log.error("fork server of sandbox %d said %r out of turn; retiring it", self.box, data[:200])
                self.healthy = False

    def _check_preimport(self, report: str) -> bool:
        """Read the ready report; False (with ``start_error``) if a required module failed or threads were left."""
        parts = report.split("\0")
        if len(parts) != 4:
            self.start_error = f"unexpected ready report {report[:200]!r}"
            return False
        imported, missing, failed, threads = parts
        self.imported = [name for name in imported.split(",") if name]
        self.missing = [name for name in missing.split(",") if name]
        optional = {item[1:] for item in self.preimport.split(",") if item.startswith("?")}
        fatal = []
        for line in filter(None, failed.split("\n")):
            (self.warnings if line.split(":", 1)[0] in optional else fatal).append(line)
        if fatal:
            self.start_error = "could not preimport " + "; ".join(fatal) + " (see --preimport)"
        elif int(threads) > 1:
            self.start_error = (
                f"after preimporting {', '.join(self.imported)} the fork server runs {threads} threads; forking "
                "a multi-threaded process is unsafe, so leave the module that starts threads out of --preimport"
            )
        return not self.start_error

    def _lost(self) -> None:
        """The fork server closed its socket: it exited or was killed."""
        asyncio.get_running_loop().remove_reader(self.sock.fileno())
        self.healthy = False
        if not self.ready.done():
            self.ready.set_result(False)
        if self.current is not None:
            self.current.on_lost()

    def log_tail(self) -> str:
        return self.log.text("fork server output")[-800:].strip()

    async def wait_ready(self) -> None:
        """Wait until the fork server said it is ready; RuntimeError (with its log) if it never does."""
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(asyncio.shield(self.ready), START_TIMEOUT_S)
        if not (self.ready.done() and self.ready.result()):
            self.healthy = False
            reason = self.start_error or self.log_tail() or "no output"
            raise RuntimeError(f"the sandbox's fork server did not start: {reason}")

    async def close(self) -> None:
        """Stop the fork server and everything in its sandbox, and remove its directory."""
        if self.closed:
            return
        self.closed = True
        self.healthy = False
        loop = asyncio.get_running_loop()
        if not self.ready.done():
            self.ready.set_result(False)
        with contextlib.suppress(ValueError, OSError):
            loop.remove_reader(self.sock.fileno())
        self.sock.close()
        self.isolation.kill(self.box, self.proc.pid)  # the process group, and the uid's processes (if any)
        await asyncio.to_thread(self.proc.wait)
        self.log_reader.close()
        await asyncio.to_thread(remove_tree, self.run_dir)


class ForkRun(Run):
    """One program forked by a slot's ForkServer."""

    def __init__(self, server: ForkServer, max_output_bytes: int) -> None:
        self.server = server
        self.uid, self.workdir, self.inner = server.uid, server.workdir, server.inner
        self.child_ends = self._open_pipes(max_output_bytes)
        self.pid: int | None = None  # in the sandbox's pid namespace, if it has one
        self.code: int | None = None
        self.clean = False
        server.current = self

    def start(self, limits: str, path: str) -> None:
        uid = -1 if self.uid is None else self.uid
        message = "\0".join([str(uid), self.inner, limits, path]).encode()
        try:
            socket.send_fds(self.server.sock, [message], self.child_ends)
        except OSError as exc:  # the fork server is gone; reported as a failed start
            self.error = f"the sandbox's fork server is gone: {exc}"
            self.server.healthy = False
            self._set_exited()
        finally:
            for fd in self.child_ends:
                os.close(fd)
            self.child_ends = []

    def _set_exited(self) -> None:
        if not self.exited.done():
            self.exit_time = self.exit_time or time.monotonic()
            self.exited.set_result(None)

    def on_message(self, kind: bytes, rest: str) -> None:
        # The fork server is trusted code (no program runs in it), so its reports are taken as they come.
        if kind == b"P":
            self.pid = int(rest)
        elif kind == b"E":
            code, ended, clean = rest.split()
            self.code, self.exit_time, self.clean = int(code), float(ended), clean == "1"
            self._set_exited()
        else:  # F: the fork failed
            self.error = f"the sandbox could not fork the program: {rest}"
            self._set_exited()

    def on_lost(self) -> None:
        self.error = self.error or f"the sandbox's fork server exited: {self.server.log_tail() or 'no output'}"
        self._set_exited()

    def exit_code(self) -> int | None:
        return self.code

    def _signal(self, sig: signal.Signals) -> None:
        if self.uid is not None:
            kill_uid(self.uid, sig.name[3:])
        elif self.pid is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pid, sig)

    def interrupt(self) -> None:
        self._signal(signal.SIGINT)

    def kill(self) -> None:
        self._signal(signal.SIGKILL)

    async def close(self) -> None:
        for fd in self.child_ends:
            os.close(fd)
        self.child_ends = []
        self._close_fds()
        server = self.server
        server.current = None
        if not (self.exited.done() and self.clean and self.code is not None):
            server.healthy = False  # not swept clean, or never finished: the whole sandbox goes
        elif not await asyncio.to_thread(remove_tree, self.workdir, True):
            log.warning("could not empty the work dir of sandbox %d; retiring it", server.box)
            server.healthy = False


class SessionSandbox:
    """A session's own long-lived sandbox and interpreter (``inside.SESSION``), under the session's own uid.

    Everything in it is user-controlled (cells run in the interpreter itself), so its reports are checked: a
    malformed or out-of-turn message, a closed control socket or a failed signal ends the session. ``on_exit`` is
    called once the interpreter is gone, whatever the reason.
    """

    def __init__(self, iso: Isolation, box: int, run_dir: str, limits: str,
                 on_exit: Callable[[SessionSandbox], None] | None = None) -> None:
        loop = asyncio.get_running_loop()
        self.isolation, self.box, self.run_dir = iso, box, run_dir
        self.uid = iso.uid(box)
        self.workdir = _make_workdir(run_dir, self.uid)
        self.inner = iso.inner_workdir(self.workdir)
        self.sock, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        sweep = "0" if iso.name == "none" else "1"  # kill(-1) as the server's own user would hit the server
        launch = iso.launch(box, self.workdir, ["-c", SESSION_ARG, str(child.fileno()), limits, self.inner, sweep])
        devnull = os.open(os.devnull, os.O_RDWR)
        self.proc, self.log, self.log_reader = _start_controlled(loop, launch, self.inner, devnull, self.sock,
                                                                 child, run_dir)
        self.ready: asyncio.Future[bool] = loop.create_future()
        self.ended: asyncio.Future[None] = loop.create_future()
        self.returncode: int | None = None
        self.current: SessionCell | None = None
        self.problem = ""  # why the server ended the session, if it did
        self.frozen = False
        self.closed = False
        self._freezing: asyncio.Future[None] | None = None
        self._on_exit_callback = on_exit
        self.pidfd = os.pidfd_open(self.proc.pid)
        loop.add_reader(self.pidfd, self._on_exit)
        loop.add_reader(self.sock.fileno(), self._on_message)

    @property
    def alive(self) -> bool:
        return not self.ended.done() and not self.closed

    def _on_exit(self) -> None:
        loop = asyncio.get_running_loop()
        loop.remove_reader(self.pidfd)
        if self.ended.done():
            return
        try:
            _, status = os.waitpid(self.proc.pid, 0)
            code = os.waitstatus_to_exitcode(status)
        except ChildProcessError:
            code = self.proc.returncode if self.proc.returncode is not None else -9
        self.proc.returncode = code
        if self.isolation.name == "bwrap" and 128 < code <= 128 + 64:
            code = -(code - 128)  # bwrap reports "killed by signal N" as 128+N
        self.returncode = code
        self.ended.set_result(None)
        if not self.ready.done():
            self.ready.set_result(False)
        if self.current is not None:
            self.current.on_lost()
        if self._on_exit_callback is not None:
            self._on_exit_callback(self)

    def _on_message(self) -> None:
        while True:
            try:
                data = self.sock.recv(4096)
            except BlockingIOError:
                return
            except OSError:
                data = b""
            if not data:
                # Usually the interpreter is exiting (os._exit, a signal): let its exit status tell why.
                asyncio.get_running_loop().remove_reader(self.sock.fileno())
                asyncio.get_running_loop().call_later(1.0, self._broken, "the session closed its control socket")
                return
            kind, rest = data[:1], data[1:].decode(errors="replace")
            if kind == b"R" and not self.ready.done():
                self.ready.set_result(True)
            elif kind == b"E" and self.current is not None and self.current.on_message(rest):
                pass
            else:
                self._broken(f"the session sent {data[:80]!r} out of turn")
                return

    def _broken(self, why: str) -> None:
        if self.ended.done():
            return
        with contextlib.suppress(ValueError, OSError):
            asyncio.get_running_loop().remove_reader(self.sock.fileno())
        self.problem = self.problem or why
        self.kill()

    def log_tail(self) -> str:
        return self.log.text("session output")[-800:].strip()

    async def wait_ready(self) -> None:
        """Wait until the interpreter said it is ready; RuntimeError (with its log) if it never does."""
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(asyncio.shield(self.ready), START_TIMEOUT_S)
        if not (self.ready.done() and self.ready.result()):
            self.kill()
            raise RuntimeError(f"the session's sandbox did not start: {self.log_tail() or self.problem or 'no output'}")

    def kill(self) -> None:
        """Kill the session's interpreter and everything it started (its state is lost)."""
        if self.ended.done():
            return
        try:
            self.isolation.kill(self.box, self.proc.pid)
        except (OSError, RuntimeError, ValueError):
            log.exception("could not kill session sandbox %d", self.box)

    def signal_all(self, sig: str) -> None:
        self.isolation.signal_all(self.box, self.proc.pid, sig)

    async def _freeze(self) -> None:
        try:
            await asyncio.to_thread(self.signal_all, "STOP")
            self.frozen = True
        except (OSError, RuntimeError, ValueError) as exc:
            self._broken(f"stopping the idle session failed: {exc}")

    def freeze_soon(self) -> None:
        """Stop every process of the session (off the request's path): an idle session gets no CPU."""
        if self.alive and self._freezing is None:
            self._freezing = asyncio.ensure_future(self._freeze())

    async def freeze(self) -> None:
        self.freeze_soon()
        if self._freezing is not None:
            await self._freezing

    async def thaw(self) -> None:
        """Let the session run again (before a cell)."""
        if self._freezing is not None:
            await self._freezing
            self._freezing = None
        if self.frozen and self.alive:
            try:
                await asyncio.to_thread(self.signal_all, "CONT")
            except (OSError, RuntimeError, ValueError) as exc:
                self._broken(f"resuming the session failed: {exc}")
            self.frozen = False

    async def close(self) -> bool:
        """Kill the session, remove its sandbox and work dir; True if its uid was left clean (safe to reuse)."""
        if self.closed:
            return False
        self.closed = True
        loop = asyncio.get_running_loop()
        if not self.ready.done():
            self.ready.set_result(False)
        with contextlib.suppress(ValueError, OSError):
            loop.remove_reader(self.sock.fileno())
        self.sock.close()
        if self._freezing is not None:
            with contextlib.suppress(Exception):
                await self._freezing
        clean = True
        try:
            # Also after the interpreter exited on its own: processes it started may still live under its uid.
            await asyncio.to_thread(self.isolation.kill, self.box, self.proc.pid)
        except (OSError, RuntimeError, ValueError):
            log.exception("could not kill session sandbox %d", self.box)
            clean = False
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(asyncio.shield(self.ended), KILL_GRACE_S)
        if not self.ended.done():
            log.error("session sandbox %d did not exit after SIGKILL", self.box)
            clean = False
        else:
            try:
                clean = await asyncio.to_thread(self.isolation.sweep_leftovers, self.box) and clean
            except (OSError, subprocess.SubprocessError):
                log.exception("could not sweep the uid of session sandbox %d", self.box)
                clean = False
        with contextlib.suppress(ValueError, OSError):
            loop.remove_reader(self.pidfd)
        with contextlib.suppress(OSError):
            os.close(self.pidfd)
        self.log_reader.close()
        return await asyncio.to_thread(remove_tree, self.run_dir) and clean


class SessionCell(Run):
    """One cell run in a SessionSandbox; its code and files go through stdin, never through the host."""

    writes_program_file = False
    # Killing a cell that does not stop at its timeout loses the whole session's state: give the interrupt longer.
    interrupt_grace_s = 2.0

    def __init__(self, session: SessionSandbox, max_output_bytes: int) -> None:
        self.session = session
        self.uid, self.workdir, self.inner = session.uid, session.workdir, session.inner
        self.child_ends = self._open_pipes(max_output_bytes)
        self.code: int | None = None
        self.lost = False  # the session's interpreter ended during this cell
        session.current = self
        if session.ended.done():
            self.on_lost()

    def stdin_payload(self, code: str, files: dict[str, bytes], stdin: bytes) -> bytes:
        source = code.encode("utf-8", "surrogatepass")
        parts = [b"%d %d\n" % (len(source), len(files)), source]
        for path, data in files.items():
            name = path.encode("utf-8", "surrogatepass")
            parts += [b"%d %d\n" % (len(name), len(data)), name, data]
        parts.append(stdin)
        return b"".join(parts)

    def start(self, limits: str, path: str) -> None:
        try:
            if self.session.alive:
                socket.send_fds(self.session.sock, [b"C"], self.child_ends)
        except OSError as exc:
            self.error = f"the session's interpreter is gone: {exc}"
            self.session._broken(self.error)
        finally:
            for fd in self.child_ends:
                os.close(fd)
            self.child_ends = []

    def _set_exited(self) -> None:
        if not self.exited.done():
            self.exit_time = self.exit_time or time.monotonic()
            self.exited.set_result(None)

    def on_message(self, rest: str) -> bool:
        """An ``E <status> <time>`` report; False if it is malformed."""
        if self.exited.done():
            return False
        try:
            status, ended = rest.split()
            code, reported = int(status), float(ended)
        except ValueError:
            return False
        if not math.isfinite(reported) or not 0 <= code <= 255:
            return False
        self.code = code
        self.exit_time = min(reported, time.monotonic())  # the session is user code: never trust a later time
        self._set_exited()
        return True

    def on_lost(self) -> None:
        self.lost = True
        if self.code is None:
            self.code = self.session.returncode
        self._set_exited()

    def exit_code(self) -> int | None:
        return self.code

    def interrupt(self) -> None:
        with contextlib.suppress(OSError, RuntimeError, ValueError):
            self.session.signal_all("INT")

    def kill(self) -> None:
        if self.exited.done():  # the cell ended (the interrupt was enough): the session and its state stay
            return
        self.session.problem = self.session.problem or "it was killed because the cell did not stop at its timeout"
        self.session.kill()

    async def before_fetch(self) -> None:
        await self.session.freeze()

    async def close(self) -> None:
        for fd in self.child_ends:
            os.close(fd)
        self.child_ends = []
        self._close_fds()
        self.session.current = None
