"""One program run as the executor sees it, for every way of starting sandboxes.

``Run`` is the common face: the program's pipes (stdout/stderr drained into capped buffers, stdin, the started
report), an ``exited`` future, and how to interrupt, kill and release it. Three kinds exist:

``FreshRun`` (here; fresh mode: ``--fresh-sandbox-per-run``, and bwrap without root): a whole sandbox per run,
pre-started as the slot's *spare* while the previous run executes (see ``inside.BOOTSTRAP``).

``forkserver.ForkRun`` (fork mode, the default where the tier can switch uids): one program forked by a slot's
long-lived fork server.

``session_sandbox.SessionCell``: one cell of a stateful session, run by the session's own interpreter.

The kinds import this module, never the other way round. No Python code runs in a child between fork and exec on the
host side; exits are watched through pidfds.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import time

from retool_sandbox.inside import BOOTSTRAP_ARG
from retool_sandbox.isolation import Isolation
from retool_sandbox.plumbing import KILL_GRACE_S, CappedBuffer, PipeReader, make_workdir, popen_sandbox, remove_tree


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
            self.proc = popen_sandbox(
                launch, self.inner, stdin=stdin, stdout=stdout, stderr=stderr, pass_fds=(ctl_r, started)
            )
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
