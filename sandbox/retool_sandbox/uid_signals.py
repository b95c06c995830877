"""Signal every process of a sandbox uid, cheaply: ``signal_uid(uid, sig)``.

``kill(-1, sig)`` issued as the sandbox uid reaches exactly that uid's processes, ``setsid``-detached ones included,
and nobody else's; it checks every process on the host, so it costs more with every live process (0.3 ms with 600
sessions on this host: a forked session is stopped and resumed between cells, and in the bwrap tier killed, through
its interpreter's pidfd instead, see ``session_sandbox``). A server cannot issue it itself (it would have to give up
root), so something must run as the uid for it. Spawning ``kill`` for each signal forks the whole server: its cost
grows with the server's memory. Measured on this 2-core host: 8 ms of CPU per spawned signal from a 50 MiB process,
28 ms from a 400 MiB one.

So the server keeps small root helpers (``python -I -S``, each started on first use and again if it ever dies) that
fork a child per request; the child drops to the uid (no groups, no capabilities left) and signals. A helper serves
one request at a time (about 1 ms); a request from one of the server's threads takes the first idle helper of a pool
of ``pool_size()`` (one per 16 cores, at least 2, at most 32: a cell of a session not forked from the zygote costs
three signals, and on hundreds of cores the calls' rate would keep one helper busy), so on a small host only one or
two ever start. Having the uid, the child can itself be signalled by that uid's processes: one killed (the fork
server's sweep after a run issues ``kill(-1, SIGKILL)`` as the uid, and may do so while the server signals it) is
forked again, up to ``_TRIES`` times; one that does not finish within half of ``ANSWER_TIMEOUT_S`` (a program of
that uid may stop it) is killed and the request fails, as does a helper that stops answering (it is then replaced).
"""

from __future__ import annotations

import itertools
import os
import select
import signal
import subprocess
import sys
import threading

from retool_sandbox import host

ANSWER_TIMEOUT_S = 10.0
_PASSES = {"KILL": 2, "STOP": 2}  # a second pass catches a fork that raced the first
_TRIES = 3  # a signalling child killed by a concurrent sweep of its uid (the fork server's) is forked again

# Reads "<uid> <signal number> <passes>" lines on stdin, answers "ok" or "error <why>" per line on stdout. Its
# arguments: the seconds a request may take, and how often a request whose child was killed is tried.
_HELPER = """\
import os, select, sys, time
def child(uid, signum, passes):
    try:
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
    except OSError as exc:
        os._exit(100 + min(exc.errno or 0, 99))
    for _ in range(passes):
        try:
            os.kill(-1, signum)
        except ProcessLookupError:
            break
        except OSError as exc:
            os._exit(200 + min(exc.errno or 0, 55))
    os._exit(0)
def answer(uid, code):
    if code == 0:
        return "ok"
    if 100 <= code < 200:
        return "error switching to uid %d: %s" % (uid, os.strerror(code - 100))
    if 200 <= code < 256:
        return "error signalling as uid %d: %s" % (uid, os.strerror(code - 200))
    return "error the signalling process for uid %d ended with status %d" % (uid, code)
def attempt(uid, signum, passes, deadline):
    pid = os.fork()
    if pid == 0:
        child(uid, signum, passes)
    pidfd = os.pidfd_open(pid)
    finished = bool(select.select([pidfd], [], [], max(0.0, deadline - time.monotonic()))[0])
    if not finished:
        os.kill(pid, 9)
    code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    os.close(pidfd)
    if not finished:
        return None, "error the signalling process for uid %d did not finish" % uid
    if code < 0:
        return code, "error the signalling process for uid %d was killed by signal %d" % (uid, -code)
    return code, answer(uid, code)
def serve(timeout, tries):
    for line in sys.stdin.buffer:
        uid, signum, passes = map(int, line.split())
        deadline = time.monotonic() + timeout
        for _ in range(tries):
            code, reply = attempt(uid, signum, passes, deadline)
            if code is None or code >= 0:
                break
        sys.stdout.write(reply + "\\n")
        sys.stdout.flush()
serve(float(sys.argv[1]), int(sys.argv[2]))
"""


class _Helper:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.proc: subprocess.Popen | None = None
        self.owner = os.getpid()  # a forked child must not share its parent's helper (and pipe)

    def _start(self) -> subprocess.Popen:
        # Its own session: a process-group kill aimed at a sandbox never reaches it; stdin's end makes it exit.
        return subprocess.Popen(
            [sys.executable, "-I", "-S", "-c", _HELPER, str(ANSWER_TIMEOUT_S / 2), str(_TRIES)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env={},
            cwd="/",
            close_fds=True,
            start_new_session=True,
        )

    def _stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is not None:
            proc.kill()
            proc.wait()
            proc.stdin.close()
            proc.stdout.close()

    def request(self, uid: int, signum: int, passes: int) -> str:
        """One request; the caller holds ``lock``."""
        line = b"%d %d %d\n" % (uid, signum, passes)
        if self.owner != os.getpid():
            self.proc, self.owner = None, os.getpid()
        for _ in range(2):  # a helper that died since the last request is replaced once (signals may repeat)
            if self.proc is None or self.proc.poll() is not None:
                self._stop()
                self.proc = self._start()
            try:
                self.proc.stdin.write(line)
                self.proc.stdin.flush()
            except BrokenPipeError:
                self._stop()
                continue
            if not select.select([self.proc.stdout], [], [], ANSWER_TIMEOUT_S)[0]:
                self._stop()  # wedged: the signal's fate is unknown
                return f"error the uid-signalling helper gave no answer within {ANSWER_TIMEOUT_S:.0f} s"
            reply = self.proc.stdout.readline().decode(errors="replace").strip()
            if reply:
                return reply
            self._stop()  # it ended before answering
        return "error the uid-signalling helper exits as soon as it starts"


def pool_size(cores: int) -> int:
    """Helpers for a server on ``cores`` cores: one per 16 (one helper serves the signals of ~40 busy cores' cells),
    at least 2, at most 32 (the server signals from its default thread pool, of at most 32 threads)."""
    return min(32, max(2, cores // 16))


class _Pool:
    def __init__(self, size: int) -> None:
        self.helpers = [_Helper() for _ in range(size)]
        self._next = itertools.count()

    def request(self, uid: int, signum: int, passes: int) -> str:
        for helper in self.helpers:
            if helper.lock.acquire(blocking=False):
                break
        else:  # every helper is busy: queue on one, in turn
            helper = self.helpers[next(self._next) % len(self.helpers)]
            helper.lock.acquire()
        try:
            return helper.request(uid, signum, passes)
        finally:
            helper.lock.release()


_pool = _Pool(pool_size(host.cores()))


def signal_uid(uid: int, sig: str) -> None:
    """Send ``SIG<sig>`` to every process whose real uid is ``uid`` (twice for KILL and STOP).

    RuntimeError if it could not be done (the server lacks root, the helper is broken).
    """
    reply = _pool.request(uid, signal.Signals["SIG" + sig].value, _PASSES.get(sig, 1))
    if reply != "ok":
        raise RuntimeError(f"signalling the processes of uid {uid} failed: {reply.removeprefix('error ')}")


def helper_pids() -> list[int | None]:
    """Each pooled helper's pid while it runs, else None (for tests)."""
    return [
        proc.pid if proc is not None and proc.poll() is None else None
        for proc in (helper.proc for helper in _pool.helpers)
    ]
