"""The Python that runs *inside* a sandbox, as source text for ``python -c`` (it must not import ``retool``).

Two entry programs share one ``_retool_enter`` step, which turns the current process into the user's program:
it sets the request's rlimits (as soft and hard limits; core dumps always off), installs a fresh ``__main__``
module for ``main.py`` (``__file__``, ``sys.argv``, ``sys.path[0]`` as with ``python main.py``), hides its own
frames from tracebacks, and reports ``S<monotonic time>`` on the started fd (the clock is shared with the server:
there is no time namespace), so the server's timeout clock starts exactly when user code starts. The program then
runs at module level, so interpreter shutdown (atexit, non-daemon threads, flushing) is the normal one.

``BOOTSTRAP`` (fresh mode, one sandbox per run): ``python -c BOOTSTRAP CTL_FD STARTED_FD`` waits for
``"<as> <cpu> <nproc> <fsize> <nofile> <path>\\n"`` on CTL_FD (EOF: the server dropped this spare) and enters.

``FORKSERVER`` (fork mode, one long-lived sandbox per slot): ``python -c FORKSERVER SOCKET_FD RM CHMOD IPCRM``
(paths of the coreutils/util-linux tools it sweeps with) says ``R`` on the SOCK_SEQPACKET socket, then serves one
request at a time. A request is ``uid\\0cwd\\0limits\\0path`` plus four fds (stdin, stdout, stderr, started). It
forks; the child takes the fds as 0/1/2/3, closes every other fd (the control socket above all), starts a new
session, drops to ``uid`` (-1: stay) with no groups, changes to ``cwd`` and enters. The server hears ``P<pid>``
after the fork and ``E <exit code> <exit time> <clean>`` once the program exited and was swept: a child running as
``uid`` SIGKILLs every process of that uid (``kill(-1)``; it reaches only the sandbox's pid namespace under bwrap,
the whole host for the rlimit tier's dedicated uid), deletes what the uid left in /tmp, /dev/shm and /dev/mqueue
(``chmod -R``, ``rm -rf``: any depth, no symlinks followed), and removes its System V IPC objects with ``ipcrm``.
``clean`` is 0 when any of that failed; the server then retires the sandbox. A failed fork answers ``F<reason>``.
The fork server itself holds only CAP_SETUID/CAP_SETGID (launched through ``setpriv``, no-new-privs); a uid change
clears them. Imports are kept to what a fresh interpreter loads anyway plus ``socket``, because every child inherits
them.
"""

from __future__ import annotations

_ENTER = """\
import os, sys
def _retool_enter(limits, path, started):
    import resource, time, types
    for name, value in zip(("AS", "CPU", "NPROC", "FSIZE", "NOFILE", "CORE"), [*map(int, limits.split()), 0]):
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
"""

BOOTSTRAP = _ENTER + """\
def _retool_wait():
    ctl, started = int(sys.argv[1]), int(sys.argv[2])
    header = b""
    while not header.endswith(b"\\n"):
        chunk = os.read(ctl, 4096)
        if not chunk:
            os._exit(0)
        header += chunk
    os.close(ctl)
    *limits, path = header.decode().rstrip("\\n").split(" ", 5)
    return _retool_enter(" ".join(limits), path, started)
_retool_scope, _retool_code = _retool_wait()
del _retool_wait, _retool_enter
exec(_retool_code, _retool_scope)
"""

FORKSERVER = _ENTER + """\
import socket, time
def _retool_spawn(argv):
    try:
        return os.waitstatus_to_exitcode(os.waitpid(os.posix_spawn(argv[0], argv, {}), 0)[1]) == 0
    except OSError:
        return False
def _retool_own_ipc(uid):
    for kind in ("shm", "sem", "msg"):
        try:
            with open("/proc/sysvipc/" + kind) as fh:
                header, *rows = [line.split() for line in fh]
        except OSError:
            continue
        column = header.index("uid")
        if any(int(row[column]) == uid for row in rows):
            return True
    return False
def _retool_sweep(uid, rm, chmod, ipcrm):
    try:
        pid = os.fork()
    except OSError:
        return 0
    if pid == 0:
        try:
            os.setgroups([])
            os.setresgid(uid, uid, uid)
            os.setresuid(uid, uid, uid)
            for _ in range(3):  # later passes catch forks that raced an earlier one
                try:
                    os.kill(-1, 9)
                except ProcessLookupError:
                    break
            left = []
            for top in ("/tmp", "/dev/shm", "/dev/mqueue"):
                try:
                    names = os.listdir(top)
                except OSError:
                    continue
                for name in names:
                    try:
                        if os.lstat(top + "/" + name).st_uid == uid:
                            left.append(top + "/" + name)
                    except OSError:
                        pass
            if left:  # coreutils cope with any depth; chmod first undoes a program's `chmod 000`
                dirs = [path for path in left if os.path.isdir(path) and not os.path.islink(path)]
                if dirs:
                    _retool_spawn([chmod, "-R", "u+rwx", "--", *dirs])
                _retool_spawn([rm, "-rf", "--one-file-system", "--", *left])
            clean = not any(os.path.lexists(path) for path in left)
            if _retool_own_ipc(uid):
                clean = _retool_spawn([ipcrm, "--all"]) and clean
            os._exit(0 if clean else 1)
        except BaseException:
            os._exit(1)
    return int(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0)
def _retool_serve():
    ctl = socket.socket(fileno=int(sys.argv[1]))
    ctl.send(b"R")
    while True:
        try:
            message, fds, _, _ = socket.recv_fds(ctl, 65536, 4)
        except OSError:
            os._exit(0)
        if not message:
            os._exit(0)
        uid, cwd, limits, path = message.decode().split("\\0")
        uid = int(uid)
        try:
            pid = os.fork()
        except OSError as exc:
            for fd in fds:
                os.close(fd)
            ctl.send(b"F" + str(exc).encode())
            continue
        if pid == 0:
            ctl.close()
            for target, fd in enumerate(fds):
                os.dup2(fd, target)
            os.closerange(4, 1 << 16)
            os.setsid()
            if uid >= 0:
                os.setgroups([])
                os.setresgid(uid, uid, uid)
                os.setresuid(uid, uid, uid)
            os.chdir(cwd)
            return limits, path
        for fd in fds:
            os.close(fd)
        ctl.send(b"P%d" % pid)
        status = os.waitpid(pid, 0)[1]
        ended = time.monotonic()
        if uid >= 0:
            clean = _retool_sweep(uid, *sys.argv[2:5])
        else:
            try:
                os.killpg(pid, 9)
            except OSError:
                pass
            clean = 1
        ctl.send(b"E %d %r %d" % (os.waitstatus_to_exitcode(status), ended, clean))
def _retool_child():
    try:
        limits, path = _retool_serve()
        return _retool_enter(limits, path, 3)
    except BaseException:
        import traceback
        traceback.print_exc()
        os._exit(70)
_retool_scope, _retool_code = _retool_child()
exec(_retool_code, _retool_scope)
"""

BOOTSTRAP_ARG = "exec(compile(%r, '<retool-bootstrap>', 'exec'))" % BOOTSTRAP
FORKSERVER_ARG = "exec(compile(%r, '<retool-bootstrap>', 'exec'))" % FORKSERVER
