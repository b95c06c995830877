"""The interpreter of a stateful session, as source text for ``python -c`` (it must not import ``retool``).

``SESSION``: ``python -c SESSION SOCKET_FD LIMITS WORKDIR SWEEP`` is one session's interpreter
in its own sandbox. It sets LIMITS for its whole life, sets umask 077, makes one ``__main__`` module whose
namespace every cell shares, ignores SIGINT between cells and says ``R``. A cell arrives as a message with four fds
(stdin, stdout, stderr, started); stdin starts with a header ``<code bytes> <file count>\\n``, the code, and per file
``<path bytes> <data bytes>\\n`` path data; the rest is the cell's stdin. The session writes the files into WORKDIR
(as its own uid), reports ``S<time>``, compiles the code as ``<cell N>`` (its lines registered with ``linecache`` so
tracebacks show them in later cells too) and runs it with SIGINT raising ``KeyboardInterrupt`` (the timeout's
interrupt ends the cell, not the session). ``SystemExit`` ends the cell with that status, not the session. Then it
flushes and detaches the streams, and with SWEEP=1 kills every other process of its uid (``kill(-1)`` spares the
caller) and reaps its children, and says ``E <status> <time>``. Only the interpreter's own state survives a cell:
variables, imports, files, the cwd.

It shares ``inside.COMMON`` (limits, exit status, flushing) with the one-run programs.
"""

from __future__ import annotations

from retool_sandbox.inside import COMMON, source_arg

SESSION_LOOP = """\
import io, linecache, signal, socket
def _retool_read_exact(fd, size):
    chunks = []
    while size > 0:
        chunk = os.read(fd, min(size, 1 << 20))
        if not chunk:
            raise EOFError("the cell's input ended early")
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)
def _retool_read_line(fd):
    line = b""
    while not line.endswith(b"\\n"):
        if len(line) > 64:
            raise ValueError("malformed cell header")
        line += _retool_read_exact(fd, 1)
    return line
def _retool_cell_input(fd):
    code_size, count = map(int, _retool_read_line(fd).split())
    source = _retool_read_exact(fd, code_size)
    files = []
    for _ in range(count):
        path_size, data_size = map(int, _retool_read_line(fd).split())
        path = _retool_read_exact(fd, path_size).decode("utf-8", "surrogatepass")
        files.append((path, _retool_read_exact(fd, data_size)))
    return source, files
def _retool_cell(scope, number, workdir, started):
    try:
        source, files = _retool_cell_input(0)
    except BaseException as exc:
        os.write(2, ("retool-sandbox session: bad cell input: %r\\n" % (exc,)).encode())
        os.close(started)
        return 70
    sys.stdin = sys.__stdin__ = io.open(0, "r", encoding="utf-8", closefd=False)
    sys.stdout = sys.__stdout__ = io.open(1, "w", encoding="utf-8", closefd=False)
    sys.stderr = sys.__stderr__ = io.open(2, "w", encoding="utf-8", errors="backslashreplace", closefd=False,
                                          buffering=1)
    name = "<cell %d>" % number
    status = 0
    os.write(started, b"S" + repr(time.monotonic()).encode())
    os.close(started)
    try:
        for path, data in files:
            target = os.path.join(workdir, path)
            os.makedirs(os.path.dirname(target), exist_ok=True)
            with open(target, "wb") as fh:
                fh.write(data)
        linecache.cache[name] = (len(source), None, source.decode("utf-8", "replace").splitlines(True), name)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        try:
            exec(compile(source, name, "exec", dont_inherit=True), scope)
        finally:
            signal.signal(signal.SIGINT, signal.SIG_IGN)
    except SystemExit as exc:
        status = _retool_exit_status(exc)
    except BaseException as exc:
        _retool_report(exc)
        status = 1
    return _retool_flush(status)
def _retool_session(ctl_fd, limits, workdir, sweep):
    ctl = socket.socket(fileno=ctl_fd)
    _retool_limit(limits)
    os.umask(0o077)
    main = types.ModuleType("__main__")
    main.__builtins__ = __builtins__
    sys.modules["__main__"] = main
    sys.argv[:] = [""]
    sys.path[0] = workdir
    import traceback
    sys.excepthook = traceback.print_exception  # the C default does not read linecache: no cell source lines
    _retool_hide_frames()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    null = os.open(os.devnull, os.O_RDWR)
    scope = main.__dict__
    # Bound once: a cell that replaces these functions breaks only its own session, which the server then ends.
    dup2, close, kill, waitpid, recv_fds, send = os.dup2, os.close, os.kill, os.waitpid, socket.recv_fds, ctl.send
    monotonic, WNOHANG = time.monotonic, os.WNOHANG
    send(b"R")
    number = 0
    while True:
        try:
            message, fds, _, _ = recv_fds(ctl, 1024, 4)
        except OSError:
            os._exit(0)
        if not message:
            os._exit(0)
        if len(fds) != 4:
            os._exit(70)
        number += 1
        for target, fd in enumerate(fds[:3]):
            dup2(fd, target)
            close(fd)
        status = _retool_cell(scope, number, workdir, fds[3])
        for target in (0, 1, 2):
            dup2(null, target)
        if sweep:
            for _ in range(3):
                try:
                    kill(-1, 9)
                except OSError:
                    break
        while True:
            try:
                pid = waitpid(-1, 0 if sweep else WNOHANG)[0]
            except ChildProcessError:
                break
            if pid == 0:
                break
        send(b"E %d %r" % (status, monotonic()))
"""

SESSION = (
    COMMON
    + SESSION_LOOP
    + """\
try:
    _retool_session(int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4] == "1")
except BaseException:
    import traceback
    traceback.print_exc()
    os._exit(70)
"""
)

SESSION_ARG = source_arg(SESSION)
