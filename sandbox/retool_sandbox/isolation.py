"""Isolation tiers: how a sandbox is launched and how everything it started is killed afterwards.

A sandbox is identified by a number ``box``; with root it runs as uid ``uid_base + box`` (see ``uids.reserve_uids``).
Tiers, strongest first (the server picks the first whose self-test passes, see ``executor.choose_isolation``):

``bwrap``
    bubblewrap with new pid, network, ipc, uts (and cgroup) namespaces; a minimal read-only filesystem (/usr, the
    interpreter's prefixes, a few /etc files); private /tmp and /dev/shm; the work dir as the only writable host
    path; ``--die-with-parent``. As root, bwrap itself runs privileged (so it can mount interpreter trees under
    0700 parents such as /root) and ``setpriv`` drops the program to the sandbox uid with every capability gone.
    As non-root, bwrap runs in its own user namespace with ``--disable-userns``.
``rlimit``
    Needs root: the program runs as the sandbox uid (no /etc/passwd entry needed), in its own session, with
    resource limits. Same network, same filesystem view (as an unprivileged user) as the host.
``none``
    Only resource limits and a clean environment, as the server's own user. Only on explicit request.

Each tier can start a one-run sandbox or a session's sandbox (``launch``: the program drops to the sandbox uid
through ``setpriv`` or Popen's ``user``) or a slot's fork server (``launch_forkserver``: stays uid 0 with only
CAP_SETUID/CAP_SETGID, and forks every program of the slot, which drops to the uid itself; see ``inside``). Fork
servers need a dedicated uid to sweep with (``can_fork_runs``), so bwrap without root always starts one sandbox per
run.

Resource limits (address space, CPU seconds, processes, file size, open files, no core dumps) are applied inside
the sandbox, as the sandbox uid, before the program runs, so the server never runs Python code between fork and
exec. Dedicated uids make ``RLIMIT_NPROC`` meaningful (it is not enforced for root) and let ``kill(-1)`` issued as
that uid remove every leftover process, including ``setsid``-detached ones.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import shutil
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path

from retool_sandbox.inside import SWEEP_ARG
from retool_sandbox.proctree import programs_below
from retool_sandbox.uid_signals import signal_uid

TIERS = ("bwrap", "rlimit", "none")
BWRAP_WORKDIR = "/workspace"
ZYGOTE_RUNS = "/.retool-runs"  # where a session zygote sees the run dirs (``inside_zygote`` detaches it per session)
SANDBOX_ETC = Path(__file__).with_name("etc")  # files the bwrap tier shows at /etc in place of the host's
_MB = 1024 * 1024


class IsolationUnavailable(RuntimeError):
    """A tier cannot work on this host; the message says why and what to do."""


@dataclass(frozen=True)
class Interpreter:
    """The Python that runs user code: the path to exec and the directory trees it needs to see."""

    executable: str
    version: str
    trees: tuple[str, ...]

    @classmethod
    def probe(cls, python: str) -> Interpreter:
        """Ask ``python`` for its real executable and prefixes (resolves pyenv-style shims to the binary)."""
        code = (
            "import json, sys; print(json.dumps({'executable': sys.executable, 'version': sys.version.split()[0],"
            " 'prefixes': [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix]}))"
        )
        try:
            out = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise IsolationUnavailable(f"cannot run interpreter {python!r}: {exc}; pass --python PATH") from exc
        if out.returncode != 0:
            raise IsolationUnavailable(
                f"interpreter {python!r} failed (exit {out.returncode}): {out.stderr.strip()[-500:]}; pass --python"
            )
        info = json.loads(out.stdout.strip().splitlines()[-1])
        executable = info["executable"]
        trees = {os.path.realpath(executable).rsplit("/bin/", 1)[0]}
        for prefix in info["prefixes"]:
            trees.add(prefix)
            trees.add(os.path.realpath(prefix))
        return cls(executable=executable, version=info["version"], trees=tuple(sorted(trees)))


@dataclass(frozen=True)
class Limits:
    """Per-run resource limits. ``memory_mb=None`` means no address-space limit."""

    memory_mb: int | None
    cpu_seconds: int
    max_processes: int
    max_file_size_mb: int
    max_open_files: int = 1024


@dataclass(frozen=True)
class Launch:
    """What ``subprocess.Popen`` needs to start one run."""

    argv: list[str]
    cwd: str
    user: int | None = None
    env_tmpdir: str = ""


@functools.cache
def _tool(name: str) -> str:
    path = shutil.which(name, path="/usr/bin:/bin:/usr/sbin:/sbin")
    if path is None:
        package = {"bwrap": "bubblewrap", "rm": "coreutils", "chmod": "coreutils"}.get(name, "util-linux/procps")
        raise IsolationUnavailable(
            f"`{name}` is not installed: run scripts/install_system_packages.sh (apt-get, dnf or yum install {package})"
        )
    return path


def sweep_tools() -> list[str]:
    """Paths of rm, chmod and ipcrm, which a fork server's sweep runs as the sandbox uid (see ``inside``)."""
    return [_tool(name) for name in ("rm", "chmod", "ipcrm")]


def _forkserver_privileges(*extra: str) -> list[str]:
    """setpriv prefix for a fork server: stays uid 0 but keeps only CAP_SETUID/CAP_SETGID (and ``extra``
    capabilities, a session zygote's), no new privileges.

    Its children drop to a sandbox uid, which clears those capabilities as well (no keep-caps).
    """
    bounding = ",".join(["-all", "+setuid", "+setgid", *(f"+{cap}" for cap in extra)])
    return [_tool("setpriv"), "--no-new-privs", "--inh-caps=-all", f"--bounding-set={bounding}", "--"]


def kill_uid(uid: int, sig: str = "KILL") -> None:
    """Signal every process whose real uid is ``uid`` (``kill(-1)`` issued as that uid cannot reach anyone else)."""
    if uid < 1000 or uid == os.getuid():
        raise ValueError(f"refusing to signal uid {uid}: not a dedicated sandbox uid")
    signal_uid(uid, sig)


def _killpg(pid: int, sig: int = signal.SIGKILL) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


@dataclass
class Isolation:
    """Base tier: no isolation beyond rlimits, a clean environment and a process-group kill."""

    interpreter: Interpreter
    uid_base: int = 61000
    name: str = "none"

    def uid(self, box: int) -> int | None:
        """The unprivileged uid of sandbox number ``box``, or None when the tier runs code as the server's user."""
        return None

    @property
    def limits_processes(self) -> bool:
        """Whether RLIMIT_NPROC applies: only with a dedicated uid (it counts every process of the uid)."""
        return self.uid(0) is not None

    def launch(self, box: int, workdir: str, args: list[str], pid_1: bool = False) -> Launch:
        """How to start the interpreter with ``args`` in sandbox ``box`` with host work dir ``workdir``; with
        ``pid_1`` it is the sandbox's first process itself (bwrap: no reaper above it; see ``BwrapIsolation``)."""
        return Launch(argv=[self.interpreter.executable, *args], cwd=workdir, env_tmpdir=workdir)

    def launch_forkserver(self, workdir: str, args: list[str]) -> Launch:
        """How to start a slot's fork server (``inside.FORKSERVER``), which forks every program of the slot."""
        return Launch(argv=[self.interpreter.executable, *args], cwd=workdir, env_tmpdir=workdir)

    @property
    def can_fork_runs(self) -> bool:
        """Whether runs may be forked from a per-slot fork server: the sweep after each run must reach every
        process the run left, which needs a dedicated uid (or, for ``none``, is not promised anyway)."""
        return True

    @property
    def can_fork_sessions(self) -> bool:
        """Whether sessions may be forked from a preimported session zygote (``inside_zygote``): each needs its own
        uid, so that the uid-wide stop, kill and sweep reach exactly its processes."""
        return False

    def launch_session_zygote(self, workdir: str, runs: str, args: list[str]) -> Launch:
        """How to start the session zygote, which sees ``runs`` (the directory of every sandbox's run dir) at
        ``zygote_runs(runs)`` and forks every session's interpreter."""
        raise IsolationUnavailable(f"the {self.name} tier starts every session afresh")

    def zygote_runs(self, runs: str) -> str:
        return runs

    def inner_workdir(self, workdir: str) -> str:
        """The work dir as the program sees it."""
        return workdir

    def interrupt(self, box: int, pid: int) -> None:
        """On timeout, first SIGINT the program so Python flushes its buffered output (KeyboardInterrupt)."""
        self.signal_all(box, pid, "INT")

    def signal_all(self, box: int, pid: int, sig: str) -> None:
        """Send ``SIG<sig>`` to every process of sandbox ``box`` started as ``pid`` (its process group here)."""
        _killpg(pid, signal.Signals["SIG" + sig])

    def sweep_leftovers(self, box: int) -> bool:
        """After a session sandbox was killed: remove what its uid may have left outside the sandbox (processes,
        files in the host's /tmp, /var/tmp, /dev/shm, /dev/mqueue, System V IPC). True if nothing is left."""
        return True

    def kill(self, box: int, pid: int) -> None:
        """Kill the run started as ``pid`` (and whatever it started) on timeout."""
        _killpg(pid)

    def cleanup(self, box: int, pid: int) -> None:
        """After the run's main process exited: make sure nothing it started survives."""
        _killpg(pid)

    def check(self) -> None:
        """Raise IsolationUnavailable if the tier cannot work here (before the functional self-test)."""


@dataclass
class RlimitIsolation(Isolation):
    """Per-slot unprivileged uid + rlimits + session; leftovers killed by uid sweep after every run."""

    name: str = "rlimit"

    def uid(self, box: int) -> int | None:
        return self.uid_base + box

    def launch(self, box: int, workdir: str, args: list[str], pid_1: bool = False) -> Launch:
        argv = [self.interpreter.executable, *args]
        return Launch(argv=argv, cwd=workdir, user=self.uid_base + box, env_tmpdir=workdir)

    def launch_forkserver(self, workdir: str, args: list[str]) -> Launch:
        # Root on the host, but holding only what it needs to drop its children to the slot uid.
        argv = [*_forkserver_privileges(), self.interpreter.executable, *args]
        return Launch(argv=argv, cwd=workdir, env_tmpdir=workdir)

    @property
    def can_fork_sessions(self) -> bool:
        return True

    def launch_session_zygote(self, workdir: str, runs: str, args: list[str]) -> Launch:
        # Like a fork server; CAP_SETPCAP lets each session drop its capability bounding set.
        argv = [*_forkserver_privileges("setpcap"), self.interpreter.executable, *args]
        return Launch(argv=argv, cwd=workdir, env_tmpdir=workdir)

    def signal_all(self, box: int, pid: int, sig: str) -> None:
        kill_uid(self.uid_base + box, sig)

    def kill(self, box: int, pid: int) -> None:
        _killpg(pid)
        kill_uid(self.uid_base + box)

    def sweep_leftovers(self, box: int) -> bool:
        # The uid shares the host's /tmp, /dev/shm, /dev/mqueue and IPC namespace: sweep them as that uid.
        done = subprocess.run(
            [self.interpreter.executable, "-I", "-S", "-c", SWEEP_ARG, *sweep_tools()],
            user=self.uid(box),
            group=self.uid(box),
            extra_groups=[],
            env={},
            cwd="/",
            close_fds=True,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            check=False,
            timeout=60,
        )
        return done.returncode == 0

    def cleanup(self, box: int, pid: int) -> None:
        kill_uid(self.uid_base + box)

    def check(self) -> None:
        super().check()
        _tool("setpriv")
        sweep_tools()
        if os.geteuid() != 0:
            raise IsolationUnavailable("the rlimit tier needs root to switch to per-slot uids")
        blocked = _unreachable_parent(self.interpreter.executable)
        if blocked is not None:
            raise IsolationUnavailable(
                f"interpreter {self.interpreter.executable} is not reachable by an unprivileged uid: "
                f"{blocked} is not world-searchable; install bubblewrap (scripts/install_system_packages.sh) "
                "or pass --python with an interpreter outside that directory"
            )


def _unreachable_parent(path: str) -> str | None:
    """The first directory on the way to ``path`` (symlinks followed) that others cannot search, if any."""
    for target in {path, os.path.realpath(path)}:
        parts = Path(target).parts
        for i in range(1, len(parts)):
            parent = os.path.join(*parts[:i])
            if not os.stat(parent).st_mode & 0o001:
                return parent
    return None


@dataclass
class BwrapIsolation(Isolation):
    """bubblewrap namespaces + minimal read-only filesystem (+ per-slot uid via setpriv when root)."""

    name: str = "bwrap"
    tmpfs_mb: int = 256

    def __post_init__(self) -> None:
        self._root = os.geteuid() == 0
        self._fs = self._filesystem_args()

    def uid(self, box: int) -> int | None:
        return self.uid_base + box if self._root else None

    def inner_workdir(self, workdir: str) -> str:
        return BWRAP_WORKDIR

    def _filesystem_args(self) -> list[str]:
        args = ["--ro-bind", "/usr", "/usr"]
        for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
            if os.path.islink(top):
                args += ["--symlink", os.readlink(top), top]
            elif os.path.isdir(top):
                args += ["--ro-bind", top, top]
        # /etc: searchable, not listable, so the sandbox uid reaches these files by name; of the host's only what
        # the loader and the clock read, and the sandbox's own hosts file, so `localhost` resolves to loopback.
        args += ["--perms", "0711", "--dir", "/etc"]
        for name in ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "localtime", "alternatives"):
            path = "/etc/" + name
            if os.path.exists(path):
                args += ["--ro-bind", path, path]
        args += ["--ro-bind", str(SANDBOX_ETC / "hosts"), "/etc/hosts"]
        size = str(self.tmpfs_mb * _MB)
        args += ["--proc", "/proc", "--dev", "/dev"]
        args += ["--perms", "1777", "--size", size, "--tmpfs", "/tmp"]
        args += ["--perms", "1777", "--size", size, "--tmpfs", "/dev/shm", "--mqueue", "/dev/mqueue"]
        bound = ["/usr"]
        made = {"/tmp", "/dev", "/dev/shm", "/proc"}
        for tree in self.interpreter.trees:
            if not os.path.isdir(tree) or any(tree == b or tree.startswith(b + "/") for b in bound):
                continue
            # Parents that bwrap would create are 0700; make them 0755 so the slot uid can get through.
            for parent in reversed([str(p) for p in Path(tree).parents if str(p) != "/"]):
                if parent not in made and not any(parent == b or parent.startswith(b + "/") for b in bound):
                    args += ["--perms", "0755", "--dir", parent]
                    made.add(parent)
            args += ["--ro-bind", tree, tree]
            bound.append(tree)
        return args

    @property
    def can_fork_runs(self) -> bool:
        return self._root  # without root there is no second uid to sweep the runs' leftovers with

    def _bwrap(
        self, workdir: str, pid_1: bool = False, caps: tuple[str, ...] = (), binds: tuple[str, ...] = ()
    ) -> list[str]:
        argv = [_tool("bwrap")]
        if pid_1:
            # Without it bwrap's own pid 1 reaps the interpreter, and bwrap exits without reaping that pid 1 (killed
            # orphaned): the interpreter's CPU time would be charged to no process the server waits for.
            argv.append("--as-pid-1")
        if self._root:
            # Privileged bwrap (no user namespace) so the slot uid stays a real host uid: RLIMIT_NPROC applies.
            argv += ["--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try"]
            for cap in ("SETUID", "SETGID", "SETPCAP", *caps):
                argv += ["--cap-add", "CAP_" + cap]
        else:
            argv += ["--unshare-all", "--unshare-user", "--disable-userns"]
        argv += ["--die-with-parent", "--new-session", "--hostname", "sandbox"]
        # The root tmpfs goes read-only once everything is mounted: without root, bwrap makes it (and the /etc it
        # creates) the sandbox user's own.
        mounts = [*self._fs, "--bind", workdir, BWRAP_WORKDIR, *binds, "--remount-ro", "/"]
        return argv + mounts + ["--chdir", BWRAP_WORKDIR, "--"]

    def launch(self, box: int, workdir: str, args: list[str], pid_1: bool = False) -> Launch:
        argv = self._bwrap(workdir, pid_1)
        if self._root:
            uid = str(self.uid_base + box)
            argv += [
                _tool("setpriv"),
                f"--reuid={uid}",
                f"--regid={uid}",
                "--clear-groups",
                "--no-new-privs",
                "--inh-caps=-all",
                "--bounding-set=-all",
                "--",
            ]
        argv += [self.interpreter.executable, *args]
        return Launch(argv=argv, cwd=workdir, env_tmpdir="/tmp")

    def launch_forkserver(self, workdir: str, args: list[str]) -> Launch:
        if not self._root:
            raise IsolationUnavailable("forking runs inside bubblewrap needs root; use fresh sandboxes per run")
        argv = [*self._bwrap(workdir), *_forkserver_privileges(), self.interpreter.executable, *args]
        return Launch(argv=argv, cwd=workdir, env_tmpdir="/tmp")

    @property
    def can_fork_sessions(self) -> bool:
        return self._root

    def launch_session_zygote(self, workdir: str, runs: str, args: list[str]) -> Launch:
        if not self._root:
            raise IsolationUnavailable("forking sessions inside bubblewrap needs root; every session starts afresh")
        # CAP_SYS_ADMIN and CAP_NET_ADMIN let each session's interpreter enter new namespaces, mount its own /tmp,
        # /dev/shm, /proc and work dir and bring up its loopback; the session drops them with its uid.
        argv = self._bwrap(workdir, caps=("SYS_ADMIN", "NET_ADMIN"), binds=("--bind", runs, ZYGOTE_RUNS))
        argv += [*_forkserver_privileges("setpcap", "sys_admin", "net_admin"), self.interpreter.executable, *args]
        return Launch(argv=argv, cwd=workdir, env_tmpdir="/tmp")

    def zygote_runs(self, runs: str) -> str:
        return ZYGOTE_RUNS

    def signal_all(self, box: int, pid: int, sig: str) -> None:
        # The program runs in its own session inside bwrap: only its uid reaches it (root mode); without root it
        # shares the server's uid, so signal what runs below bwrap's own processes.
        uid = self.uid(box)
        if uid is not None:
            kill_uid(uid, sig)
            return
        for _ in range(2 if sig in ("KILL", "STOP") else 1):
            for child in programs_below(pid):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(child, signal.Signals["SIG" + sig])

    def kill(self, box: int, pid: int) -> None:
        # bwrap's pid-1 dies with bwrap (--die-with-parent), which tears down the whole pid namespace.
        _killpg(pid)
        uid = self.uid(box)
        if uid is not None:
            kill_uid(uid)

    def cleanup(self, box: int, pid: int) -> None:
        # Nothing to do: when the program exits, bwrap's pid 1 exits and the kernel kills the namespace.
        pass

    def check(self) -> None:
        super().check()
        bwrap = _tool("bwrap")
        if self._root:
            _tool("setpriv")
            sweep_tools()
        else:
            help_text = subprocess.run([bwrap, "--help"], capture_output=True, text=True).stdout
            if "--disable-userns" not in help_text:
                raise IsolationUnavailable("bubblewrap >= 0.8 is needed for --disable-userns when not root")


def make_isolation(tier: str, interpreter: Interpreter, uid_base: int) -> Isolation:
    """Build the tier object named ``tier`` (one of TIERS)."""
    classes = {"bwrap": BwrapIsolation, "rlimit": RlimitIsolation, "none": Isolation}
    if tier not in classes:
        raise ValueError(f"unknown isolation tier {tier!r}; choose one of {', '.join(TIERS)} or auto")
    return classes[tier](interpreter=interpreter, uid_base=uid_base)
