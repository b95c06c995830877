"""The session zygote as the server sees it: one preimported sandbox interpreter per server that forks every
session's interpreter (``inside_zygote.ZYGOTE``), so a session starts with numpy and sympy already imported and
shares their memory with every other session, instead of importing them itself.

``SessionZygote`` starts it through the tier's ``launch_session_zygote``, hands it each session's control socket
end and log (``start``) and relays what it says about that session: started (``P``), failed to start (``F``),
exited (``X``). The zygote is trusted code (no cell runs in it), so its reports are taken as they come. If it goes
away, every session it started goes with it (they live in its sandbox): each is told, and the executor starts a
new zygote for the next session.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import signal
import socket
from collections.abc import Callable

from retool_sandbox.forkserver import read_ready_report
from retool_sandbox.inside_zygote import ZYGOTE_ARG
from retool_sandbox.isolation import Isolation
from retool_sandbox.plumbing import ControlledSandbox

log = logging.getLogger("retool_sandbox")
_MB = 1024 * 1024


# on_report(kind, value, pidfd): what the zygote said about one session (see SessionZygote.start)
ReportSink = Callable[[str, str, int | None], None]


class SessionZygote(ControlledSandbox):
    """The server's session zygote; ``runs`` is the directory that holds every sandbox's run dir."""

    log_label = "session zygote output"

    def __init__(self, iso: Isolation, run_dir: str, runs: str, preimport: str) -> None:
        super().__init__(iso, None, run_dir)
        self.namespaces = iso.name == "bwrap"  # each session in namespaces of its own, pid 1 of its pid namespace
        tmpfs = str(getattr(iso, "tmpfs_mb", 256) * _MB)
        args = [
            "-c",
            ZYGOTE_ARG,
            str(self.child_fd),
            "1" if self.namespaces else "0",
            iso.zygote_runs(runs),
            tmpfs,
            preimport,
        ]
        launch = iso.launch_session_zygote(self.workdir, runs, args)
        self.preimport = preimport
        self.start_error = ""
        stdin_r, stdin_w = os.pipe()
        os.close(stdin_w)
        self._start(launch, stdin_r)
        self.healthy = True
        self.closed = False
        self.sessions: dict[str, ReportSink] = {}  # token -> where its reports go
        self.started = 0  # sessions it started
        self.start_failure = ""  # why the first start it refused failed
        self._tokens = itertools.count(1)
        asyncio.get_running_loop().add_reader(self.sock.fileno(), self._on_message)

    def start(self, session: ControlledSandbox, limits: str, on_report: ReportSink) -> str:
        """Ask for ``session``'s interpreter; what the zygote says about it goes to ``on_report(kind, value, pidfd)``
        (``P`` started, with the interpreter's pidfd or None, which ``on_report`` then owns; ``F`` did not start or
        went away; ``X`` exited); the token naming it."""
        if not self.healthy:
            raise RuntimeError(f"the session zygote is gone: {self.start_error or self.log_tail() or 'no output'}")
        token = str(next(self._tokens))
        name = os.path.basename(session.run_dir)
        message = "\0".join(["N" + token, str(session.uid), name, limits]).encode()
        session._hand_over(lambda fds: socket.send_fds(self.sock, [message], fds))
        self.sessions[token] = on_report
        return token

    def _on_message(self) -> None:
        for data, fds in self._messages_with_fds(1):  # a P report carries the interpreter's pidfd
            pidfd = fds.pop(0) if fds and data.startswith(b"P") else None
            for stray in fds:  # only a P report carries one
                os.close(stray)
            if not data:
                self._lost("it exited")
                return
            kind, rest = data[:1], data[1:].decode(errors="replace")
            if kind == b"R" and not self.ready.done():
                _, _, warnings, self.start_error = read_ready_report(rest, self.preimport)
                for warning in warnings:
                    log.warning("the session zygote's preimport skipped %s", warning)
                self.ready.set_result(not self.start_error)
                if self.start_error:
                    self._lost(self.start_error)
                continue
            token, _, value = rest.partition(" ")
            on_report = self.sessions.get(token)
            if kind in (b"P", b"F", b"X") and on_report is not None:
                if kind == b"P":
                    self.started += 1
                else:
                    del self.sessions[token]
                if kind == b"F":
                    self.start_failure = self.start_failure or value
                on_report(kind.decode(), value, pidfd)
            else:
                if pidfd is not None:
                    os.close(pidfd)
                log.error("the session zygote said %r out of turn; retiring it", data[:200])
                self._lost("it said something out of turn")
                return

    def _lost(self, why: str) -> None:
        """Every session it started goes with it (they live in its sandbox)."""
        self.healthy = False
        with contextlib.suppress(ValueError, OSError):
            asyncio.get_running_loop().remove_reader(self.sock.fileno())
        if not self.ready.done():
            self.ready.set_result(False)
        sessions, self.sessions = list(self.sessions.values()), {}
        reason = f"its session zygote went away ({why}: {self.start_error or self.log_tail() or 'no output'})"
        if not self.started and not self.closed:
            self.start_failure = self.start_failure or reason  # it never worked here: see Executor
        for on_report in sessions:
            on_report("F", reason, None)
        if not self.closed:
            self._kill()

    def _kill(self) -> None:
        # Its process group: bwrap then tears down its namespaces and every session in them. A session of the
        # rlimit tier lives on the host, in its own process group; closing it kills it by uid.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)

    async def close(self) -> None:
        """Stop the zygote and every session still in its sandbox, and remove its directory."""
        if self.closed:
            return
        self.closed = True
        self.healthy = False
        await self._shut_down(self._kill)
