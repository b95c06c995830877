"""The session zygote: one preimported interpreter that forks every session's interpreter, as source text for
``python -c`` (it must not import ``retool``).

``ZYGOTE``: ``python -c ZYGOTE SOCKET_FD NAMESPACES RUNS TMPFS_BYTES PREIMPORT``. It makes itself the subreaper of
what it forks, imports the PREIMPORT modules as a fork server does (``inside.FORKING``: the garbage collector's view
frozen, still single-threaded), says ``R<report>`` and serves start requests, several at once. A request is
``N<token>\\0<uid>\\0<run dir name>\\0<limits>`` with two fds (the session's control socket end, its log). Per
request it forks the session's interpreter once, with NAMESPACES=1 (the bwrap tier, whose sandbox gave the zygote
CAP_SYS_ADMIN and CAP_NET_ADMIN for this) into a new pid namespace whose pid 1 it is (the zygote unshares the pid
namespace for its next child only and goes back to its own right after the fork: one fork per session, not a
starter that forks again, whose page-table copy and teardown were a large share of opening a session). The child

- with NAMESPACES=1 enters new mount, IPC, network and UTS namespaces; makes every mount private; binds the
  session's own work dir (``RUNS/<name>/work``) at ``/workspace`` (nosuid, nodev) and detaches RUNS, so no other
  session's directory is reachable; mounts a fresh tmpfs on ``/tmp`` and ``/dev/shm`` (mode 1777, TMPFS_BYTES each;
  what the sandbox mounted below them, such as an interpreter under /tmp, is bound into them again, read-only), a
  fresh mqueue and devpts (``/dev/ptmx`` points into it), and brings up its own loopback;
- reports ``P`` on a pipe (or ``F<reason>`` and exits);
- mounts its own ``/proc``, takes its fds (stdin /dev/null, stdout and stderr the log, the control socket as fd 3,
  every other fd closed), starts a new session, reseeds the random generators the fork copied, drops the capability
  bounding set, every group and to ``uid`` (which clears the capabilities it held), sets ``no_new_privs`` and runs
  ``inside_session``'s loop: from here on it is the session's interpreter as a fresh one would be, except that the
  preimported modules are already in ``sys.modules``.

The zygote tells the server ``P<token> <pid>`` once a session started, with a pidfd of the interpreter attached
(opened before the zygote reaps it, so it names that process and no later one with its pid; none if the kernel has
no ``pidfd_open``), ``F<token> <reason>`` if its start failed and ``X<token> <exit code>`` when its interpreter
exited (it reaps them; it is also the subreaper of whatever they leave behind). Everything a session runs is the
session's uid's. The server stops and resumes the interpreter between cells, when it is the session's only process,
through the pidfd; it kills a session through the pidfd too when the interpreter is pid 1 of its own pid namespace
(NAMESPACES=1: the namespace dies with it), else by uid, as a fresh session's. The zygote runs no code but its own
and the preimported packages' module-level code.
"""

from __future__ import annotations

from retool_sandbox.inside import COMMON, FORKING, source_arg
from retool_sandbox.inside_session import SESSION_LOOP

ZYGOTE = (
    COMMON
    + FORKING
    + SESSION_LOOP
    + """\
import ctypes, fcntl, selectors, struct
_retool_libc = ctypes.CDLL(None, use_errno=True)
_retool_libc.mount.argtypes = (ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p)
_retool_libc.umount2.argtypes = (ctypes.c_char_p, ctypes.c_int)
_retool_libc.unshare.argtypes = (ctypes.c_int,)
_retool_libc.setns.argtypes = (ctypes.c_int, ctypes.c_int)
_retool_libc.prctl.argtypes = (ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong)
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_NOEXEC, _MS_REMOUNT, _MS_BIND, _MS_MOVE, _MS_REC, _MS_PRIVATE = (
    1, 2, 4, 8, 32, 4096, 8192, 16384, 1 << 18)
_NEW_PID = 0x20000000
_NEW_NAMESPACES = 0x00020000 | 0x08000000 | 0x40000000 | 0x04000000  # mount, ipc, net, uts (the zygote did pid)
def _retool_check(result, what):
    if result != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, what + ": " + os.strerror(errno))
def _retool_mount(source, target, fstype, flags, data=None):
    def raw(text):
        return None if text is None else text.encode()
    _retool_check(_retool_libc.mount(raw(source), raw(target), raw(fstype), flags, raw(data)), "mount " + target)
def _retool_unmount(target):
    _retool_check(_retool_libc.umount2(target.encode(), 2), "umount " + target)  # MNT_DETACH
def _retool_mounts_below(top):
    found = set()
    with open("/proc/self/mountinfo", "rb") as fh:
        for line in fh:
            point = line.split()[4].decode("unicode_escape")  # octal escapes such as \\040
            if point.startswith(top + "/"):
                found.add(point)
    kept = []
    for point in sorted(found):
        if not any(point.startswith(outer + "/") for outer in kept):
            kept.append(point)
    return kept
def _retool_fresh_tmpfs(target, staging, tmpfs):
    # A fresh tmpfs on target that still shows what the sandbox mounted below it (the interpreter's own tree, read-only,
    # when it lives under /tmp): built on the empty staging directory, then moved over target.
    _retool_mount("tmpfs", staging, "tmpfs", _MS_NOSUID | _MS_NODEV, "mode=1777,size=" + tmpfs)
    for point in _retool_mounts_below(target):
        inside = staging + point[len(target):]
        os.makedirs(inside, mode=0o755, exist_ok=True)
        _retool_mount(point, inside, None, _MS_BIND | _MS_REC)
        _retool_mount(None, inside, None, _MS_REMOUNT | _MS_BIND | _MS_RDONLY | _MS_NOSUID | _MS_NODEV)
    _retool_mount(staging, target, None, _MS_MOVE)
def _retool_own_namespaces(work, runs, tmpfs):
    _retool_check(_retool_libc.unshare(_NEW_NAMESPACES), "unshare")
    _retool_mount(None, "/", None, _MS_REC | _MS_PRIVATE)  # nothing done here reaches the zygote
    _retool_mount(work, "/workspace", None, _MS_BIND)
    _retool_mount(None, "/workspace", None, _MS_REMOUNT | _MS_BIND | _MS_NOSUID | _MS_NODEV)
    _retool_unmount(runs)  # every other sandbox's directory goes with it
    for target in ("/tmp", "/dev/shm"):
        _retool_fresh_tmpfs(target, runs, tmpfs)
    _retool_mount("mqueue", "/dev/mqueue", "mqueue", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC)
    _retool_mount("devpts", "/dev/pts", "devpts", _MS_NOSUID | _MS_NOEXEC, "newinstance,ptmxmode=0666,mode=620")
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:  # SIOCSIFFLAGS lo: up, loopback, running
        fcntl.ioctl(probe, 0x8914, struct.pack("16sh22x", b"lo", 0x1 | 0x8 | 0x40))
def _retool_become(uid, namespaces, ctl_fd, log_fd, work):
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(log_fd, 1)
    os.dup2(log_fd, 2)
    os.dup2(ctl_fd, 3)
    _retool_close_except(3)
    if namespaces:
        _retool_unmount("/proc")
        _retool_mount("proc", "/proc", "proc", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC)
    os.setsid()
    _retool_reseed()
    os.environ["HOME"] = work
    os.environ["TMPDIR"] = "/tmp" if namespaces else work
    for cap in range(64):
        # PR_CAPBSET_DROP; EINVAL: past the last
        if _retool_libc.prctl(24, cap, 0, 0, 0) != 0 and ctypes.get_errno() != 22:
            _retool_check(-1, "dropping capability %d" % cap)
    _retool_drop(uid)
    _retool_check(_retool_libc.prctl(38, 1, 0, 0, 0), "no_new_privs")
    os.chdir(work)
def _retool_start(request, fds, report, namespaces, runs, tmpfs):
    try:
        uid, name, limits = request
        if len(fds) != 2 or "/" in name or name in ("", ".", ".."):
            raise ValueError("malformed start request")
        work = runs + "/" + name + "/work"
        if namespaces:
            _retool_own_namespaces(work, runs, tmpfs)
            work = "/workspace"
        os.write(report, b"P")
    except BaseException as exc:
        try:
            os.write(report, b"F" + repr(exc).encode()[:300])
        finally:
            os._exit(1)
    try:
        os.close(report)
        _retool_become(int(uid), namespaces, fds[0], fds[1], work)
        _retool_session(3, limits, work, True)
    except BaseException:
        import traceback
        traceback.print_exc()
    os._exit(70)
def _retool_zygote():
    ctl = socket.socket(fileno=int(sys.argv[1]))
    namespaces, runs, tmpfs = sys.argv[2] == "1", sys.argv[3], sys.argv[4]
    _retool_check(_retool_libc.prctl(36, 1, 0, 0, 0), "subreaper")  # PR_SET_CHILD_SUBREAPER
    own_pid_ns = os.open("/proc/self/ns/pid", os.O_RDONLY) if namespaces else -1
    ctl.send(b"R" + _retool_preimport(sys.argv[5]))
    wake_r, wake_w = os.pipe()
    for fd in (wake_r, wake_w):
        os.set_blocking(fd, False)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.set_wakeup_fd(wake_w)
    selector = selectors.DefaultSelector()
    selector.register(ctl, selectors.EVENT_READ)
    selector.register(wake_r, selectors.EVENT_READ)
    starting, live = {}, {}  # report pipe -> (token, pid); started interpreter's pid -> token
    def take_report(fd, reaped=False):
        try:
            data = os.read(fd, 512)
        except BlockingIOError:
            return
        token, pid = starting.pop(fd)
        selector.unregister(fd)
        os.close(fd)
        if data == b"P":
            live[pid] = token
            pidfds = []
            if not reaped:  # not yet reaped, so the pid is still this child's: the server signals it through this
                try:
                    pidfds.append(os.pidfd_open(pid))
                except OSError:
                    pass
            socket.send_fds(ctl, [b"P%s %d" % (token, pid)], pidfds)
            for pidfd in pidfds:
                os.close(pidfd)
        else:
            ctl.send(b"F%s %s" % (token, data[1:] or b"it exited before it said it started"))
    def reap():
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            for fd, (_, started) in list(starting.items()):
                if started == pid:
                    take_report(fd, reaped=True)  # it wrote whatever it had to say before it exited
            token = live.pop(pid, None)
            if token is not None:
                ctl.send(b"X%s %d" % (token, os.waitstatus_to_exitcode(status)))
    while True:
        for key, _ in selector.select():
            if key.fileobj is ctl:
                message, fds, _, _ = socket.recv_fds(ctl, 4096, 2)
                if not message:
                    os._exit(0)
                token, *request = message[1:].decode().split("\\0")
                token = token.encode()
                report_r, report_w = os.pipe()
                try:
                    if namespaces:  # for the next child only: it is pid 1 of a namespace of its own
                        _retool_check(_retool_libc.unshare(_NEW_PID), "unshare")
                    pid = os.fork()
                except OSError as exc:
                    pid, error = -1, exc
                if pid == 0:
                    signal.set_wakeup_fd(-1)
                    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                    selector.close()
                    ctl.close()
                    for fd in (wake_r, wake_w, report_r, *starting, *([own_pid_ns] if namespaces else [])):
                        os.close(fd)
                    _retool_start(request, fds, report_w, namespaces, runs, tmpfs)
                if namespaces:  # a failure here means no session could start again: the zygote exits
                    _retool_check(_retool_libc.setns(own_pid_ns, _NEW_PID), "setns")
                os.close(report_w)
                for fd in fds:
                    os.close(fd)
                if pid < 0:
                    os.close(report_r)
                    ctl.send(b"F%s %s" % (token, str(error).encode()))
                    continue
                os.set_blocking(report_r, False)
                starting[report_r] = (token, pid)
                selector.register(report_r, selectors.EVENT_READ)
            else:
                if key.fileobj == wake_r:
                    while True:
                        try:
                            if not os.read(wake_r, 512):
                                break
                        except BlockingIOError:
                            break
                for fd in list(starting):
                    take_report(fd)
                reap()
try:
    _retool_zygote()
except BaseException:
    import traceback
    traceback.print_exc()
    os._exit(70)
"""
)

ZYGOTE_ARG = source_arg(ZYGOTE)
