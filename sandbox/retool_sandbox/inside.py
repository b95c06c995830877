"""The Python that runs *inside* a sandbox, as source text for ``python -c`` (it must not import ``retool``).

Shared steps (``COMMON``):

``_retool_enter`` turns the current process into the user's program: it sets the request's rlimits (soft = hard;
core dumps always off; the address-space limit is *added* to what the interpreter already maps at that moment, so
preimported packages do not eat into a program's memory), installs a fresh ``__main__`` module for ``main.py``
(``__file__``, ``sys.argv``, ``sys.path[0]`` as with ``python main.py``), hides its own frames from tracebacks, and
reports ``S<monotonic time>`` on the started fd (the clock is shared with the server: there is no time namespace),
so the server's timeout clock starts exactly when user code starts.

``_retool_finish`` runs the program and ends the process the way interpreter shutdown would, as far as a program
can observe it: exit status from ``SystemExit`` (an int, ``None`` = 0, anything else printed to stderr = 1), an
uncaught exception printed through ``sys.excepthook`` (exit 1; ``KeyboardInterrupt`` dies by SIGINT), non-daemon
threads joined, ``atexit`` handlers run, the program's globals released (unclosed files flushed, ``__del__`` run),
stdout/stderr flushed (a failing stdout flush = 120). Then ``os._exit``: tearing down every module of a process
that has numpy and sympy loaded costs tens of milliseconds, which would dominate short programs.

Entry programs:

``BOOTSTRAP`` (fresh mode, one sandbox per run): ``python -c BOOTSTRAP CTL_FD STARTED_FD`` waits for
``"<as> <cpu> <nproc> <fsize> <nofile> <path>\\n"`` on CTL_FD (EOF: the server dropped this spare) and enters.

``FORKSERVER`` (fork mode, one long-lived sandbox per slot): ``python -c FORKSERVER SOCKET_FD RM CHMOD IPCRM
PREIMPORT``. It first forks its *sweep helper* (below), then imports the PREIMPORT modules (comma-separated; a
``?`` prefix marks a module that is skipped when it is not installed), freezes the garbage collector's view of them
and checks that it is still single-threaded (forking a multi-threaded process is unsafe), and says
``R<imported>\\0<not installed>\\0<failures>\\0<threads>`` on the SOCK_SEQPACKET socket. Then it serves one
request at a time. A request is ``uid\\0cwd\\0limits\\0path`` plus four fds (stdin, stdout, stderr, started). It
forks; the child takes the fds as 0/1/2/3, closes every other fd (the control socket above all), starts a new
session, reseeds the random generators that a fork would otherwise copy (numpy's global one, sympy's; the
``random`` module reseeds itself), drops to ``uid`` (-1: stay) with no groups, changes to ``cwd`` and enters. The
server hears ``P<pid>`` after the fork and ``E <exit code> <exit time> <clean>`` once the program exited and was
swept. The fork server is the subreaper of what its programs leave: after a sweep it reaps every process the sweep
killed before it answers, since a zombie of the uid would count against the next program's process limit.
``clean`` is 0 when the sweep failed or a killed process had not exited 10 s later; the server then retires the
sandbox. A failed fork answers
``F<reason>``. The fork server holds only CAP_SETUID/CAP_SETGID (launched through ``setpriv``, no-new-privs); a uid
change clears them. It runs no code but its own and the preimported packages' module-level code, before any
program, with the work dir removed from ``sys.path``; every program is a fresh fork of that untouched state.

The sweep helper is forked before the preimport, so it stays a small process that is cheap to fork. Per sweep it
reads ``<uid>\\n``, forks a child that drops to ``uid`` and runs ``_retool_sweep_here`` (again, up to three times,
if something killed it: the server's own signals to the uid can), and answers ``1`` (clean) or ``0``.
``_retool_sweep_here`` (running as the uid) SIGKILLs every process of that uid (``kill(-1)``; it reaches only the
sandbox's pid namespace under bwrap, the whole host for the rlimit tier's dedicated uid), deletes what the uid left
in /tmp, /var/tmp, /dev/shm and /dev/mqueue (``chmod -R``, ``rm -rf``: any depth, no symlinks followed), and
removes its System V IPC objects with ``ipcrm``.

``SWEEP``: ``python -I -S -c SWEEP RM CHMOD IPCRM``, started as a uid, runs ``_retool_sweep_here`` for that uid
(used after a session of the rlimit tier, whose uid shares the host's /tmp and IPC namespace).

The stateful sessions' interpreter (``SESSION``) is in ``inside_session``; it shares ``COMMON``.
"""

from __future__ import annotations

COMMON = """\
import os, sys, resource, time, types
def _retool_address_space():
    try:
        fd = os.open("/proc/self/statm", os.O_RDONLY)
        try:
            return int(os.read(fd, 200).split()[0]) * os.sysconf("SC_PAGE_SIZE")
        finally:
            os.close(fd)
    except (OSError, ValueError, IndexError):
        return 0
def _retool_limit(limits):
    for name, value in zip(("AS", "CPU", "NPROC", "FSIZE", "NOFILE", "CORE"), [*map(int, limits.split()), 0]):
        if name == "AS" and value > 0:
            value += _retool_address_space()
        if value > 0 or name == "CORE":
            resource.setrlimit(getattr(resource, "RLIMIT_" + name), (value, value))
def _retool_hide_frames():
    hook = sys.excepthook
    def excepthook(kind, value, tb):
        while tb is not None and tb.tb_frame.f_code.co_filename in ("<string>", "<retool-bootstrap>"):
            tb = tb.tb_next
        hook(kind, value.with_traceback(tb), tb)
    sys.excepthook = excepthook
def _retool_exit_status(exc):
    code = exc.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF if -(1 << 31) <= code < (1 << 31) else 255
    try:
        print(code, file=sys.stderr)
    except BaseException:
        pass
    return 1
def _retool_report(exc):
    try:
        sys.excepthook(type(exc), exc, exc.__traceback__)
    except BaseException:
        try:
            import traceback
            traceback.print_exception(exc)
        except BaseException:
            pass
def _retool_flush(status):
    seen = []
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        if stream is None or any(stream is other for other in seen):
            continue
        seen.append(stream)
        try:
            stream.flush()
        except BaseException:
            if stream is sys.stdout and status == 0:
                status = 120
    return status
def _retool_enter(limits, path, started):
    _retool_limit(limits)
    main = types.ModuleType("__main__")
    main.__file__ = path
    main.__builtins__ = __builtins__
    sys.modules["__main__"] = main
    sys.argv[:] = [path]
    sys.path[0] = os.path.dirname(path)
    _retool_hide_frames()
    os.write(started, b"S" + repr(time.monotonic()).encode())
    os.close(started)
    with open(path, "rb") as fh:
        source = fh.read()
    return main.__dict__, source, path
def _retool_finish(scope, source, path):
    status, interrupted = 0, False
    import signal
    # the timeout's SIGINT must raise KeyboardInterrupt (so the program flushes) even when the server was started
    # by a process that ignores SIGINT (a background job of a non-interactive shell, a trap): an ignored signal is
    # inherited through fork and exec
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        exec(compile(source, path, "exec", dont_inherit=True), scope)
    except SystemExit as exc:
        status = _retool_exit_status(exc)
    except BaseException as exc:
        interrupted = isinstance(exc, KeyboardInterrupt)
        _retool_report(exc)
        status = 1
    try:
        threading = sys.modules.get("threading")
        if threading is not None:
            threading._shutdown()
    except BaseException:
        pass
    try:
        import atexit
        atexit._run_exitfuncs()
    except BaseException:
        pass
    try:
        builtins = scope.get("__builtins__")
        scope.clear()
        scope["__builtins__"] = builtins
        import gc
        gc.collect()
    except BaseException:
        pass
    status = _retool_flush(status)
    if "ctypes" in sys.modules:
        try:
            sys.modules["ctypes"].CDLL(None).fflush(None)
        except BaseException:
            pass
    if interrupted:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
        status = 130
    os._exit(status)
"""

_SWEEP = """\
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
def _retool_sweep_here(uid, rm, chmod, ipcrm):
    for _ in range(3):  # later passes catch forks that raced an earlier one
        try:
            os.kill(-1, 9)
        except ProcessLookupError:
            break
    left = []
    for top in ("/tmp", "/var/tmp", "/dev/shm", "/dev/mqueue"):
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
    return clean
"""

BOOTSTRAP = (
    COMMON
    + """\
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
_retool_finish(*_retool_wait())
"""
)

FORKING = """\
def _retool_close_except(*keep):
    low = 3
    for fd in sorted(keep):
        os.closerange(low, fd)
        low = fd + 1
    os.closerange(low, 1 << 16)
def _retool_drop(uid):
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)
def _retool_preimport(spec):
    import importlib.util
    imported, missing, failed = [], [], []
    saved = sys.path[:]
    sys.path[:] = [entry for entry in sys.path if entry not in ("", ".", os.getcwd())]  # never the work dir
    for item in filter(None, spec.split(",")):
        name = item.lstrip("?")
        try:
            if item.startswith("?") and importlib.util.find_spec(name.split(".")[0]) is None:
                missing.append(name)
                continue
            __import__(name)
            imported.append(name)
        except BaseException as exc:
            failed.append((name + ": " + type(exc).__name__ + ": " + str(exc)).replace("\\0", " ")[:300])
    sys.path[:] = saved
    import gc
    gc.collect()
    gc.freeze()  # programs' garbage collections then skip (and do not copy-on-write) the preimported objects
    threads = len(os.listdir("/proc/self/task"))
    return "\\0".join([",".join(imported), ",".join(missing), "\\n".join(failed), str(threads)]).encode()
def _retool_reseed():
    module = sys.modules.get("numpy.random")
    if module is not None:
        try:
            module.seed()
        except BaseException:
            pass
    module = sys.modules.get("sympy.core.random")
    for name in ("rng", "_assumptions_rng"):
        try:
            getattr(module, name).seed()
        except BaseException:
            pass
"""

FORKSERVER = (
    COMMON
    + _SWEEP
    + FORKING
    + """\
import socket
def _retool_sweeper(rm, chmod, ipcrm):
    requests_r, requests_w = os.pipe()
    answers_r, answers_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            _retool_close_except(requests_r, answers_w)
            while True:
                line = b""
                while not line.endswith(b"\\n"):
                    chunk = os.read(requests_r, 1)
                    if not chunk:
                        os._exit(0)
                    line += chunk
                uid = int(line)
                for _ in range(3):  # a sweep killed by the server's own signals to the uid is run again
                    child = os.fork()
                    if child == 0:
                        try:
                            _retool_drop(uid)
                            os._exit(0 if _retool_sweep_here(uid, rm, chmod, ipcrm) else 1)
                        except BaseException:
                            os._exit(1)
                    code = os.waitstatus_to_exitcode(os.waitpid(child, 0)[1])
                    if code >= 0:
                        break
                os.write(answers_w, b"1" if code == 0 else b"0")
        except BaseException:
            os._exit(1)
    os.close(requests_r)
    os.close(answers_w)
    def sweep(uid):
        try:
            os.write(requests_w, b"%d\\n" % uid)
            return int(os.read(answers_r, 1) == b"1")
        except OSError:
            return 0
    return pid, sweep
def _retool_subreaper():
    # What a program leaves becomes this process's children, not pid 1's, and is reaped before the uid is reused: a
    # zombie counts against the uid's RLIMIT_NPROC, and a container's pid 1 may reap late or never.
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(36, 1, 0, 0, 0) != 0:  # PR_SET_CHILD_SUBREAPER
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")
def _retool_reap(keep, wait_s):
    # Reaps exited children; with wait_s, waits up to that long for all but ``keep`` (the sweep helper) to be gone.
    deadline = time.monotonic() + wait_s
    while True:
        try:
            while os.waitpid(-1, os.WNOHANG)[0]:
                pass
            with open("/proc/self/task/%d/children" % os.getpid()) as fh:
                left = [pid for pid in map(int, fh.read().split()) if pid != keep]
        except (ChildProcessError, FileNotFoundError):  # none left; a kernel without CONFIG_PROC_CHILDREN
            return True
        if not left:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.002)
def _retool_serve():
    ctl = socket.socket(fileno=int(sys.argv[1]))
    sweeper, sweep = _retool_sweeper(*sys.argv[2:5])
    _retool_subreaper()
    ctl.send(b"R" + _retool_preimport(sys.argv[5] if len(sys.argv) > 5 else ""))
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
            _retool_reseed()
            if uid >= 0:
                _retool_drop(uid)
            os.chdir(cwd)
            return limits, path
        for fd in fds:
            os.close(fd)
        ctl.send(b"P%d" % pid)
        status = os.waitpid(pid, 0)[1]
        ended = time.monotonic()
        if uid >= 0:  # the sweep SIGKILLed every process of the uid: their exits are awaited
            clean = sweep(uid) and _retool_reap(sweeper, 10.0)
        else:  # no uid to sweep with: what left the process group lives on, as promised
            try:
                os.killpg(pid, 9)
            except OSError:
                pass
            _retool_reap(sweeper, 0.0)
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
_retool_finish(*_retool_child())
"""
)

SWEEP = "import os, sys\n" + _SWEEP + "os._exit(0 if _retool_sweep_here(os.getuid(), *sys.argv[1:4]) else 1)\n"


def source_arg(source: str) -> str:
    """The ``python -c`` argument that runs ``source`` with ``<retool-bootstrap>`` as its file name (hidden from
    tracebacks by ``_retool_hide_frames``)."""
    return f"exec(compile({source!r}, '<retool-bootstrap>', 'exec'))"


BOOTSTRAP_ARG = source_arg(BOOTSTRAP)
FORKSERVER_ARG = source_arg(FORKSERVER)
SWEEP_ARG = source_arg(SWEEP)
