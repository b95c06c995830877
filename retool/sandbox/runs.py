"""One program run as the executor sees it, for both ways of starting sandboxes.

``Run`` is the common face: the program's pipes (stdout/stderr drained into capped buffers, stdin, the started
report), an ``exited`` future, and how to interrupt, kill and release it. Three kinds exist:

``ForkRun`` (fork mode, the default where the tier can switch uids): one program forked by a slot's long-lived
``forkserver.ForkServer``. The run sends its pipe ends over the server's control socket; the child drops to the
slot's uid; after the exit the sandbox sweeps that uid (processes, /tmp, /dev/shm, /dev/mqueue, System V IPC) before
it reports, and the host empties the work dir. A run that could not be swept clean, a lost fork server or a kill
that did not land retires the whole sandbox.

``FreshRun`` (fresh mode: ``--fresh-sandbox-per-run``, and bwrap without root): a whole sandbox per run,
pre-started as the slot's *spare* while the previous run executes (see ``inside.BOOTSTRAP``).

``session_sandbox.SessionCell``: one cell of a stateful session, run by the session's own interpreter.

No Python code runs in a child between fork and exec on the host side; exits are watched through pidfds.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import signal
import socket
import time
from typing import TYPE_CHECKING

from retool.sandbox.inside import BOOTSTRAP_ARG
from retool.sandbox.isolation import Isolation, kill_uid
from retool.sandbox.plumbing import KILL_GRACE_S, CappedBuffer, PipeReader, make_workdir, popen_sandbox, remove_tree

if TYPE_CHECKING:
    from retool.sandbox.forkserver import ForkServer

log = logging.getLogger("retool.sandbox")


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
        self.readers = [PipeReader(loop, fds["stdout"][0], self.out), PipeReader(loop, fds["stderr"][0], self.err)]
        self.exited: asyncio.Future[None] = loop.create_future()
        self.exit_time = 0.0
        return [fds["stdin"][0], fds["stdout"][1], fds["stderr"][1], fds["started"][1]]

    def _set_exited(self) -> None:
        """Mark the program ended, at the exit time it reported or now."""
        if not self.exited.done():
            self.exit_time = self.exit_time or time.monotonic()
            self.exited.set_result(None)

    def _close_child_ends(self) -> None:
        """Close the server's copies of the program's pipe ends (handed over, or given up)."""
        for fd in self.child_ends:
            os.close(fd)
        self.child_ends = []

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
        self.workdir = make_workdir(run_dir, self.uid)
        self.inner = iso.inner_workdir(self.workdir)
        child_ends = self._open_pipes(max_output_bytes)
        ctl_r, self.ctl_w = os.pipe()
        child_ends.append(ctl_r)
        stdin, stdout, stderr, started = child_ends[:4]
        launch = iso.launch(box, self.workdir, ["-c", BOOTSTRAP_ARG, str(ctl_r), str(started)])
        try:
            self.proc = popen_sandbox(launch, self.inner, stdin=stdin, stdout=stdout, stderr=stderr,
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
            self._close_child_ends()

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
        self._close_child_ends()
        self._close_fds()
        server = self.server
        server.current = None
        if not (self.exited.done() and self.clean and self.code is not None):
            server.healthy = False  # not swept clean, or never finished: the whole sandbox goes
        elif not await asyncio.to_thread(remove_tree, self.workdir, True):
            log.warning("could not empty the work dir of sandbox %d; retiring it", server.box)
            server.healthy = False
