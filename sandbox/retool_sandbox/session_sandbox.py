"""A stateful session's own sandbox and interpreter (``SessionSandbox``) and one cell run in it (``SessionCell``).

The session's interpreter (``inside_session.SESSION``) runs under the session's own uid and runs the cells itself.
A cell's code and files travel at the head of its stdin, so the host never writes into a work dir that a live
program controls; between cells the session is stopped (SIGSTOP: the interpreter, by then its only process, as it
killed whatever the cell started), so an idle session uses no CPU, and files are fetched only while it is stopped.
``sessions.SessionManager`` decides when sessions start and end.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import signal
import socket
import subprocess
import time
from typing import TYPE_CHECKING
from collections.abc import Callable

from retool_sandbox.inside_session import SESSION_ARG
from retool_sandbox.isolation import Isolation
from retool_sandbox.plumbing import KILL_GRACE_S, START_TIMEOUT_S, ControlledSandbox, remove_tree
from retool_sandbox.runs import Run

if TYPE_CHECKING:
    from retool_sandbox.session_zygote import SessionZygote

log = logging.getLogger("retool_sandbox")

# How long a closed session's sandbox gets to exit by itself once its processes are killed, before bwrap is killed.
REAP_GRACE_S = 1.0


class SessionSandbox(ControlledSandbox):
    """A session's own long-lived sandbox and interpreter (``inside_session.SESSION``), under the session's own uid.

    Everything in it is user-controlled (cells run in the interpreter itself), so its reports are checked: a
    malformed or out-of-turn message, a closed control socket or a failed signal ends the session. ``on_exit`` is
    called once the interpreter is gone, whatever the reason.
    """

    log_label = "session output"

    def __init__(
        self,
        iso: Isolation,
        box: int,
        run_dir: str,
        limits: str,
        on_exit: Callable[[SessionSandbox], None] | None = None,
        zygote: SessionZygote | None = None,
    ) -> None:
        super().__init__(iso, box, run_dir)
        loop = asyncio.get_running_loop()
        self.ended: asyncio.Future[None] = loop.create_future()
        self.returncode: int | None = None
        self.current: SessionCell | None = None
        self.problem = ""  # why the server ended the session, if it did
        self.frozen = False
        self.closed = False
        self._freezing: asyncio.Future[None] | None = None
        self._on_exit_callback = on_exit
        self.zygote = zygote  # None: a sandbox and interpreter of its own, started here
        self.pid: int | None = None  # a forked session's, once the zygote said it started
        # A forked session's interpreter, to stop and resume it between cells (and, in the bwrap tier, to kill the
        # session): a signal by uid walks every process on the host (kill(-1) checks each), three times per cell,
        # which grows with the live sessions (docs/sandbox.md, "Sessions").
        self.interpreter_pidfd: int | None = None
        if zygote is None:
            sweep = "0" if iso.name == "none" else "1"  # kill(-1) as the server's own user would hit the server
            launch = iso.launch(
                box, self.workdir, ["-c", SESSION_ARG, str(self.child_fd), limits, self.inner, sweep], pid_1=True
            )
            self._start(launch, os.open(os.devnull, os.O_RDWR))
            self.pidfd = os.pidfd_open(self.proc.pid)
            loop.add_reader(self.pidfd, self._on_exit)
        else:
            zygote.start(self, limits, self.on_zygote)
        loop.add_reader(self.sock.fileno(), self._on_message)

    @property
    def alive(self) -> bool:
        return not self.ended.done() and not self.closed

    def _on_exit(self) -> None:
        """The interpreter's own sandbox exited (a session not forked by a zygote)."""
        asyncio.get_running_loop().remove_reader(self.pidfd)
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
        self._ended(code)

    def on_zygote(self, kind: str, value: str, pidfd: int | None) -> None:
        """What the session zygote said about this session: ``P`` started (with the interpreter's pidfd, now this
        session's), ``F`` did not start, ``X`` exited."""
        if kind == "P":
            self.pid = int(value)  # in the zygote's pid namespace
            self.interpreter_pidfd = pidfd
            if self.closed or self.ended.done():  # closed while it started: nothing will signal it, or close this
                self._close_interpreter_pidfd()
        elif kind == "X":
            self._ended(int(value))
        elif kind == "F":
            self.problem = self.problem or (value if self.pid else f"it could not be started: {value}")
            self._ended(None)

    def _ended(self, code: int | None) -> None:
        if self.ended.done():
            return
        self._close_interpreter_pidfd()
        self.returncode = code
        self.ended.set_result(None)
        if not self.ready.done():
            self.ready.set_result(False)
        if self.current is not None:
            self.current.on_lost()
        if self._on_exit_callback is not None:
            self._on_exit_callback(self)

    def _on_message(self) -> None:
        for data in self._messages():
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
            self._kill_all()
        except (OSError, RuntimeError, ValueError):
            log.exception("could not kill session sandbox %d", self.box)

    def _kill_all(self) -> None:
        if self.zygote is None:
            self.isolation.kill(self.box, self.proc.pid)
        elif self._dies_with_interpreter:
            with contextlib.suppress(ProcessLookupError):  # already dead: so is its namespace
                signal.pidfd_send_signal(self.interpreter_pidfd, signal.SIGKILL)
        else:  # every process of the session runs as its uid
            self.signal_all("KILL")

    @property
    def _dies_with_interpreter(self) -> bool:
        """A forked session whose interpreter is pid 1 of a pid namespace of its own (the bwrap tier): the kernel
        kills every process of that namespace when it dies, so killing it through its pidfd kills the session."""
        return self.interpreter_pidfd is not None and self.zygote is not None and self.zygote.namespaces

    def signal_all(self, sig: str) -> None:
        # Both tiers a zygote serves signal by uid: there is no process of the server's to name.
        self.isolation.signal_all(self.box, self.proc.pid if self.zygote is None else 0, sig)

    async def _signal_idle(self, sig: str) -> None:
        """Stop or resume the session between cells. The interpreter is then its only process (it killed and reaped
        everything a cell started before it reported the cell's end), so a forked session's pidfd reaches all of it
        in one system call; otherwise every process of its uid is signalled."""
        if self.interpreter_pidfd is not None:
            signal.pidfd_send_signal(self.interpreter_pidfd, signal.Signals["SIG" + sig])
        else:
            await asyncio.to_thread(self.signal_all, sig)

    def _close_interpreter_pidfd(self) -> None:
        if self.interpreter_pidfd is not None:
            os.close(self.interpreter_pidfd)
            self.interpreter_pidfd = None

    async def _freeze(self) -> None:
        try:
            await self._signal_idle("STOP")
            self.frozen = True
        except (OSError, RuntimeError, ValueError) as exc:
            self._broken(f"stopping the idle session failed: {exc}")

    def freeze_soon(self) -> None:
        """Stop the session (off the request's path): an idle session gets no CPU."""
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
                await self._signal_idle("CONT")
            except (OSError, RuntimeError, ValueError) as exc:
                self._broken(f"resuming the session failed: {exc}")
            self.frozen = False

    async def close(self) -> bool:
        """Kill the session, remove its sandbox and work dir; True if its uid was left clean (safe to reuse)."""
        if self.closed:
            return False
        self.closed = True
        loop = asyncio.get_running_loop()
        self._hang_up()
        if self._freezing is not None:
            with contextlib.suppress(Exception):
                await self._freezing
        clean = True
        try:
            # The session's own processes first (also after the interpreter exited on its own: processes it started
            # may still live under its uid). bwrap then reaps them and exits, and the server reaps bwrap, so the
            # kernel charges the session's CPU time to the server, where a load test reads it; killing bwrap first
            # would orphan them and their time.
            if self._dies_with_interpreter:
                self._kill_all()
            else:
                await asyncio.to_thread(self.signal_all, "KILL")
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.shield(self.ended), REAP_GRACE_S)
            if not self.ended.done():
                await asyncio.to_thread(self._kill_all)
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
        self._close_interpreter_pidfd()
        if self.zygote is None:
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
            self._close_child_ends()

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
        self._close_child_ends()
        self._close_fds()
        self.session.current = None
