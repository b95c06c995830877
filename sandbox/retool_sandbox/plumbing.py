"""Pipes, buffers, work dirs and process starts shared by every kind of sandbox run (``runs``, ``forkserver``,
``session_sandbox``).

``CappedBuffer`` keeps the head of a stream and counts the rest; ``PipeReader`` drains a pipe into one from the event
loop, so a program that prints without end never blocks on a full pipe. ``popen_sandbox`` starts a tier's launch line
with the clean sandbox environment (no Python code runs in the child between fork and exec); ``ControlledSandbox``
is a long-lived sandbox interpreter that talks over a socket.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import socket
import subprocess
from collections.abc import Callable, Iterator

from retool_sandbox.isolation import Isolation, Launch

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


class PipeReader:
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


def make_workdir(run_dir: str, uid: int | None) -> str:
    """Make a sandbox's directory and its work dir inside (owned by ``uid``, the sandbox's user, if any)."""
    os.mkdir(run_dir, 0o711)  # sandbox uids must reach their own work dir, not list the parent
    workdir = os.path.join(run_dir, "work")
    os.mkdir(workdir, 0o700)
    if uid is not None:
        os.chown(workdir, uid, uid)
    return workdir


def popen_sandbox(launch: Launch, inner: str, **kwargs) -> subprocess.Popen:
    """Start ``launch`` in its own session with the clean sandbox environment (``inner`` is its HOME)."""
    return subprocess.Popen(
        launch.argv,
        cwd=launch.cwd,
        env=sandbox_env(inner, launch.env_tmpdir or inner),
        close_fds=True,
        start_new_session=True,
        user=launch.user,
        group=launch.user,
        extra_groups=[] if launch.user is not None else None,
        **kwargs,
    )


class ControlledSandbox:
    """A long-lived sandbox interpreter that talks to the server over a SOCK_SEQPACKET socket: a slot's fork server
    (``forkserver``) or a session's interpreter (``session_sandbox``).

    The constructor makes its directory and work dir and the socket pair; the subclass builds the launch line (its
    interpreter gets ``child_fd``) and calls ``_start``. The interpreter's stdout and stderr go to a capped log for
    error messages (``log_tail``).
    """

    log_label = "sandbox output"

    def __init__(self, iso: Isolation, box: int | None, run_dir: str) -> None:
        """``box`` None: the sandbox keeps root (a session zygote) and owns its work dir."""
        self.isolation, self.box, self.run_dir = iso, box, run_dir
        self.uid = None if box is None else iso.uid(box)
        self.workdir = make_workdir(run_dir, self.uid)
        self.inner = iso.inner_workdir(self.workdir)
        self.sock, self._child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.child_fd = self._child.fileno()

    def _start(self, launch: Launch, stdin: int) -> None:
        """Start ``launch``; ``stdin`` and the child's socket end are closed here either way, and on failure the
        server's end and the directory are removed too."""
        log_r, log_w = os.pipe()
        try:
            self.proc = popen_sandbox(
                launch, self.inner, stdin=stdin, stdout=log_w, stderr=log_w, pass_fds=(self.child_fd,)
            )
        except BaseException:
            self._abandon(log_r)
            raise
        finally:
            for fd in (stdin, log_w):
                os.close(fd)
            self._child.close()
        self._listen(log_r)

    def _hand_over(self, send: Callable[[list[int]], None]) -> None:
        """Start by handing the child's socket end and a log pipe to an interpreter that forks this one (``send``
        them, a session zygote's start request); both are closed here either way."""
        log_r, log_w = os.pipe()
        try:
            send([self.child_fd, log_w])
        except BaseException:
            self._abandon(log_r)
            raise
        finally:
            os.close(log_w)
            self._child.close()
        self._listen(log_r)

    def _abandon(self, log_r: int) -> None:
        """A start failed: the server's end, the log and the directory go."""
        self.sock.close()
        os.close(log_r)
        shutil.rmtree(self.run_dir, ignore_errors=True)

    async def _shut_down(self, kill: Callable[[], None]) -> None:
        """Stop listening, ``kill`` the sandbox, reap it and remove its directory (a fork server's or zygote's
        close)."""
        self._hang_up()
        kill()
        await asyncio.to_thread(self.proc.wait)
        self.log_reader.close()
        await asyncio.to_thread(remove_tree, self.run_dir)

    def _listen(self, log_r: int) -> None:
        loop = asyncio.get_running_loop()
        self.log = CappedBuffer(8192)
        self.log_reader = PipeReader(loop, log_r, self.log)
        self.sock.setblocking(False)
        self.ready: asyncio.Future[bool] = loop.create_future()

    def _messages(self) -> Iterator[bytes]:
        """The messages waiting on the socket, in order; an empty one means it closed (EOF or an error), and ends
        them."""
        for data, _ in self._messages_with_fds(0):
            yield data

    def _messages_with_fds(self, max_fds: int) -> Iterator[tuple[bytes, list[int]]]:
        """``_messages``, each with the fds it carried (at most ``max_fds``; the kernel closes any beyond)."""
        while True:
            try:
                data, fds, _, _ = socket.recv_fds(self.sock, 4096, max_fds)
            except BlockingIOError:
                return
            except OSError:
                data, fds = b"", []
            yield data, fds
            if not data:
                return

    def _hang_up(self) -> None:
        """Stop listening: a start not reported by now never will be; the socket is closed."""
        if not self.ready.done():
            self.ready.set_result(False)
        with contextlib.suppress(ValueError, OSError):
            asyncio.get_running_loop().remove_reader(self.sock.fileno())
        self.sock.close()

    def log_tail(self) -> str:
        return self.log.text(self.log_label)[-800:].strip()
