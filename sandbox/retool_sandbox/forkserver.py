"""A slot's long-lived sandbox whose interpreter forks every program of the slot (fork mode), and one such program.

``ForkServer`` starts the sandbox (``inside.FORKSERVER`` through the tier's ``launch_forkserver``), reads its ready
report (what it preimported, whether it stayed single-threaded), and relays the fork server's reports about the
current program (``P`` its pid, ``E`` its exit and whether the sweep was clean, ``F`` a failed fork) to that
``ForkRun``. A fork server that misbehaves or goes away is marked unhealthy; the executor retires it.

``ForkRun`` is one program forked by the slot's fork server: the run sends its pipe ends over the server's control
socket; the child drops to the slot's uid; after the exit the sandbox sweeps that uid (processes, /tmp, /dev/shm,
/dev/mqueue, System V IPC) before it reports, and the host empties the work dir. A run that could not be swept clean,
a lost fork server or a kill that did not land retires the whole sandbox.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket

from retool_sandbox.inside import FORKSERVER_ARG
from retool_sandbox.isolation import Isolation, kill_uid, sweep_tools
from retool_sandbox.plumbing import START_TIMEOUT_S, ControlledSandbox, remove_tree
from retool_sandbox.runs import Run

log = logging.getLogger("retool_sandbox")


def read_ready_report(report: str, preimport: str) -> tuple[list[str], list[str], list[str], str]:
    """A preimporting interpreter's ready report (``inside.FORKING``'s ``_retool_preimport``): what it imported, what
    was not installed, warnings about optional modules that failed, and an error (empty if it may fork)."""
    parts = report.split("\0")
    if len(parts) != 4:
        return [], [], [], f"unexpected ready report {report[:200]!r}"
    imported, missing, failed, threads = parts
    optional = {item[1:] for item in preimport.split(",") if item.startswith("?")}
    warnings, fatal = [], []
    for line in filter(None, failed.split("\n")):
        (warnings if line.split(":", 1)[0] in optional else fatal).append(line)
    error = ""
    names = [name for name in imported.split(",") if name]
    if fatal:
        error = "could not preimport " + "; ".join(fatal) + " (see --preimport)"
    elif int(threads) > 1:
        error = (
            f"after preimporting {', '.join(names)} the interpreter runs {threads} threads; forking "
            "a multi-threaded process is unsafe, so leave the module that starts threads out of --preimport"
        )
    return names, [name for name in missing.split(",") if name], warnings, error


class ForkServer(ControlledSandbox):
    """A slot's long-lived sandbox whose interpreter forks each program (``inside.FORKSERVER``).

    ``preimport`` is the module list the fork server imports before it is ready (``inside.FORKSERVER``); after
    ``wait_ready``, ``imported`` / ``missing`` / ``warnings`` say what came of it.
    """

    log_label = "fork server output"

    def __init__(self, iso: Isolation, box: int, run_dir: str, preimport: str = "") -> None:
        super().__init__(iso, box, run_dir)
        tools = sweep_tools() if self.uid is not None else ["rm", "chmod", "ipcrm"]  # unused without a uid
        launch = iso.launch_forkserver(self.workdir, ["-c", FORKSERVER_ARG, str(self.child_fd), *tools, preimport])
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
        self._start(launch, stdin_r)
        self.current: ForkRun | None = None
        self.healthy = True
        self.closed = False
        asyncio.get_running_loop().add_reader(self.sock.fileno(), self._on_message)

    def _on_message(self) -> None:
        for data in self._messages():
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
        self.imported, self.missing, self.warnings, self.start_error = read_ready_report(report, self.preimport)
        return not self.start_error

    def _lost(self) -> None:
        """The fork server closed its socket: it exited or was killed."""
        asyncio.get_running_loop().remove_reader(self.sock.fileno())
        self.healthy = False
        if not self.ready.done():
            self.ready.set_result(False)
        if self.current is not None:
            self.current.on_lost()

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
        # the process group, and the uid's processes (if any)
        await self._shut_down(lambda: self.isolation.kill(self.box, self.proc.pid))


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
