"""Fast unit tests of the pure pieces: output cap, path checks, request parsing, slot pool, configuration, uid
ranges, the order of memory evictions."""

from __future__ import annotations

import asyncio
import base64
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from retool_sandbox import host
from retool_sandbox.config import ServerConfig
from retool_sandbox.executor import validate_paths
from retool_sandbox.isolation import BwrapIsolation, Interpreter, IsolationUnavailable, kill_uid
from retool_sandbox.plumbing import CappedBuffer
from retool_sandbox.protocol import RequestError, parse_run_request
from retool_sandbox.server import SlotPool
from retool_sandbox.spawn import running_sandbox
from retool_sandbox import uid_signals
from retool_sandbox.uid_signals import helper_pids, signal_uid
from retool_sandbox.uids import HIGH_UIDS, LOW_UIDS, _choose, kill_leftovers, reserve_uids


def test_capped_buffer_keeps_head_and_counts_the_rest():
    buf = CappedBuffer(10)
    for chunk in (b"12345", b"67890abc", b"def"):
        buf.feed(chunk)
    assert bytes(buf.data) == b"1234567890"
    assert buf.dropped == 6
    assert buf.text("stdout").startswith("1234567890\n[retool-sandbox: stdout truncated, 6 more bytes dropped")
    small = CappedBuffer(10)
    small.feed(b"abc")
    assert small.text("stderr") == "abc"


@pytest.mark.parametrize("path", ["../x", "/etc/passwd", "a/../../b", "", ".", "a\x00b"])
def test_escaping_paths_are_rejected(path):
    with pytest.raises(ValueError, match="files"):
        validate_paths({path: b""}, [])
    with pytest.raises(ValueError, match="fetch_files"):
        validate_paths({}, [path])


def test_a_file_cannot_also_be_a_directory():
    with pytest.raises(ValueError, match="both a file and a directory"):
        validate_paths({"a": b"", "a/b.txt": b""}, [])


def test_relative_paths_are_normalised():
    files, fetch = validate_paths({"./a//b.txt": b"x", "c/../d.txt": b"y"}, ["out/./r.txt"])
    assert files == {"a/b.txt": b"x", "d.txt": b"y"}
    assert fetch == ("out/r.txt",)


def test_parse_clamps_timeout_and_memory():
    cfg = ServerConfig(default_timeout=10, max_timeout=30, max_memory_mb=2048)
    spec = parse_run_request({"code": "1", "language": "python", "run_timeout": 999, "memory_limit_MB": 1024}, cfg)
    assert spec.timeout_s == 30 and spec.memory_mb == 1024
    spec = parse_run_request({"code": "1", "language": "python", "memory_limit_MB": -1, "stdin": None}, cfg)
    assert spec.timeout_s == 10 and spec.memory_mb == 2048 and spec.stdin is None
    spec = parse_run_request(
        {
            "code": "1",
            "language": "python",
            "memory_limit_MB": 10**6,
            "files": {"a.txt": base64.b64encode(b"hi").decode()},
        },
        cfg,
    )
    assert spec.memory_mb == 2048 and spec.files == {"a.txt": b"hi"}
    unlimited = ServerConfig(max_memory_mb=0)
    assert parse_run_request({"code": "1", "language": "python"}, unlimited).memory_mb is None


@pytest.mark.parametrize(
    "body,loc",
    [
        ([], "body"),
        ({"language": "python"}, "code"),
        ({"code": 1, "language": "python"}, "code"),
        ({"code": "1", "language": "cpp"}, "language"),
        ({"code": "1", "language": "python", "run_timeout": 0}, "run_timeout"),
        ({"code": "1", "language": "python", "run_timeout": True}, "run_timeout"),
        ({"code": "1", "language": "python", "stdin": 5}, "stdin"),
        ({"code": "1", "language": "python", "files": []}, "files"),
        ({"code": "1", "language": "python", "fetch_files": "a.txt"}, "fetch_files"),
    ],
)
def test_parse_rejects_bad_fields(body, loc):
    with pytest.raises(RequestError) as err:
        parse_run_request(body, ServerConfig())
    assert err.value.loc == loc


def test_config_validation_names_the_problem():
    with pytest.raises(ValueError, match="slots must be in 1..4096"):
        ServerConfig(slots=0)
    with pytest.raises(ValueError, match="max_sessions must be in 0..65536"):
        ServerConfig(max_sessions=-1)
    with pytest.raises(ValueError, match="not a module name"):
        ServerConfig(preimport="numpy,../x")
    with pytest.raises(ValueError, match="max_timeout must be >= default_timeout"):
        ServerConfig(default_timeout=20, max_timeout=10)


def test_slot_pool_fifo_and_bounded_wait():
    async def scenario():
        pool = SlotPool(1)
        first = await pool.acquire(1)
        assert await pool.acquire(0.05) is None  # times out while the slot is held
        waiter = asyncio.ensure_future(pool.acquire(5))
        await asyncio.sleep(0.01)
        assert pool.queued == 1
        pool.release(first)
        assert await waiter == first
        pool.release(first)
        assert pool.in_use == 0 and pool.queued == 0

    asyncio.run(scenario())


def test_interpreter_probe_and_bwrap_parents(tmp_path):
    interp = Interpreter.probe(sys.executable)
    assert interp.executable == sys.executable
    assert any(sys.prefix == t or sys.prefix.startswith(t) for t in interp.trees)
    env = tmp_path / "x" / "env"
    env.mkdir(parents=True)
    fake = Interpreter(executable=f"{env}/bin/python", version="3", trees=(str(env), "/usr/lib"))
    text = " ".join(BwrapIsolation(interpreter=fake)._filesystem_args())
    # Parents bwrap would create are made 0755 first (so an unprivileged uid can get through), after the
    # private /tmp is mounted, and trees already under /usr are not bound twice.
    assert f"--perms 0755 --dir {tmp_path} --perms 0755 --dir {env.parent} --ro-bind {env} {env}" in text
    assert text.index("--tmpfs /tmp") < text.index(f"--ro-bind {env}")
    assert "--perms 0755 --dir /tmp " not in text and "/usr/lib /usr/lib" not in text


def test_default_preimport_is_the_runtime_extra():
    from retool_sandbox.config import DEFAULT_PREIMPORT, preimport_spec

    tomllib = pytest.importorskip("tomllib")
    pyproject = Path(__file__).resolve().parents[1] / "pyproject.toml"
    extra = tomllib.loads(pyproject.read_text())["project"]["optional-dependencies"]["runtime"]
    names = [re.split(r"[<>=!~\[; ]", line.strip(), maxsplit=1)[0] for line in extra]
    assert sorted({name.split(".")[0] for name in DEFAULT_PREIMPORT}) == sorted(names)
    assert preimport_spec(None) == ",".join("?" + name for name in DEFAULT_PREIMPORT)  # each only if installed
    assert preimport_spec("numpy, sympy") == "numpy,sympy" and preimport_spec("none") == preimport_spec("") == ""
    with pytest.raises(ValueError, match="not a module name"):
        preimport_spec("numpy;rm -rf /")


# Things that would tie the sandbox to one CPU architecture. The sandbox must run unchanged on aarch64 (Kunpeng)
# as on x86_64: it has no seccomp filter and no raw syscalls, and bwrap, setpriv, kill, rm, chmod and ipcrm are
# the distribution's own builds. Should any of these ever be needed, the file must cover aarch64 as well.
_ARCH_SPECIFIC = re.compile(
    r"x86|amd64|i[3-6]86|AUDIT_ARCH|__NR_|\bSYS_(?!ADMIN)|seccomp|syscall\(|platform\.machine|ld-linux|/lib64/ld",
    re.I,  # (CAP_)SYS_ADMIN is a capability, the same on every architecture
)


def test_no_architecture_specific_code_in_the_sandbox():
    package = Path(__file__).resolve().parents[1] / "retool_sandbox"
    offenders = {}
    for path in sorted(package.glob("*.py")):
        hits = sorted(set(_ARCH_SPECIFIC.findall(path.read_text())))
        if hits and "aarch64" not in path.read_text():
            offenders[path.name] = hits
    assert offenders == {}, f"architecture-specific code without an aarch64 counterpart: {offenders}"


def test_the_pattern_would_catch_an_x86_only_table():
    sample = "FILTER_ARCH = AUDIT_ARCH_X86_64  # seccomp\nNR_PTRACE = 101  # __NR_ptrace\nlibc.syscall(101)\n"
    assert set(_ARCH_SPECIFIC.findall(sample)) == {"AUDIT_ARCH", "X86", "seccomp", "__NR_", "syscall("}


@pytest.mark.parametrize("cores,slots", [(1, 1), (2, 2), (8, 8), (16, 8), (128, 32), (192, 48), (320, 64), (512, 64)])
def test_defaults_start_on_any_core_count_with_sessions(monkeypatch, cores, slots):
    # The host's core count as the server reads it (CPU affinity, lowered to a CFS quota): every default follows.
    monkeypatch.setattr(host, "cores", lambda: cores)
    cfg = ServerConfig()
    assert (cfg.slots, cfg.max_sessions, cfg.session_idle_timeout) == (slots, 1024, 3600.0)
    assert cfg.uid_count == 2 * slots + 1024
    assert cfg.ceiling().cpu_seconds == 60 * cores + 5  # the CPU-seconds backstop of a 60 s run on every core
    assert ServerConfig(slots=4096, max_sessions=65536).uid_count == 73728


@pytest.mark.parametrize("total_mb,floor_mb", [(24 * 1024, 2048), (1536 * 1024, 78643), (None, 2048)])
def test_the_memory_floor_follows_the_host(monkeypatch, total_mb, floor_mb):
    monkeypatch.setattr(host, "mem_total_mb", lambda: total_mb)
    assert ServerConfig().memory_floor_mb == floor_mb  # 5% of the host's memory, at least 2 GiB
    assert ServerConfig(session_memory_floor_mb=0).memory_floor_mb == 0


def test_uid_ranges_of_servers_never_overlap(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("uids are reserved only by a root server")
    lock_dir = str(tmp_path / "uids")
    big = ServerConfig(slots=64).uid_count  # a 320-core host's default: 1152 uids
    first, first_lock = reserve_uids(big, lock_dir=lock_dir)
    second, second_lock = reserve_uids(big, lock_dir=lock_dir)
    assert first == HIGH_UIDS.start and second == first + big  # contiguous, disjoint, both in the high region
    with pytest.raises(IsolationUnavailable, match="overlap"):
        reserve_uids(10, base=second + big - 1, lock_dir=lock_dir)
    with pytest.raises(IsolationUnavailable, match="nobody"):
        reserve_uids(10, base=65530, lock_dir=lock_dir)
    os.close(first_lock)  # that server exited: its range is free again, its lock file is cleared away
    again, again_lock = reserve_uids(big, lock_dir=lock_dir)
    assert again == first and sorted(os.listdir(lock_dir)) == sorted(
        ["registry.lock", f"{first}-{big}.lock", f"{second}-{big}.lock"]
    )
    os.close(second_lock), os.close(again_lock)


def test_a_namespace_with_65536_uids_uses_the_low_range():
    mapped = [range(65536)]  # a rootless or user-namespaced container
    assert _choose(1028, None, [], mapped) == LOW_UIDS.start
    assert _choose(1028, None, [range(61000, 62028)], mapped) == 62028
    with pytest.raises(IsolationUnavailable, match="lower --slots or --max-sessions"):
        _choose(5000, None, [], mapped)
    with pytest.raises(IsolationUnavailable, match="not all mapped"):
        _choose(10, 70000, [], mapped)


def test_memory_eviction_takes_the_least_recently_used_idle_session_first():
    from retool_sandbox.sessions import Session, idle_by_age

    def session(name, last_used, **state):
        made = Session(name, sandbox=object(), last_used=last_used)
        for key, value in state.items():
            setattr(made, key, value)
        return made

    sessions = [
        session("new", 30.0),
        session("old", 10.0),
        session("running", 1.0, busy=True),
        session("called", 2.0, waiting=1),
        session("middle", 20.0),
        Session("ended", last_used=0.0),
    ]
    assert [s.id for s in idle_by_age(sessions)] == ["old", "middle", "new"]


def test_session_ids_are_plain_tokens():
    from retool_sandbox.protocol import parse_session_id

    assert parse_session_id({}) is None and parse_session_id({"session_id": None}) is None
    assert parse_session_id({"session_id": "3f2a-9b:trajectory.1"}) == "3f2a-9b:trajectory.1"
    for bad in ("", "a/b", "a b", "x" * 201, 7, ["a"]):
        with pytest.raises(RequestError) as err:
            parse_session_id({"session_id": bad})
        assert err.value.loc == "session_id"


def test_a_session_cell_carries_code_and_files_in_its_stdin():
    from retool_sandbox.session_sandbox import SessionCell

    payload = SessionCell.stdin_payload(None, "print('é')", {"d/a.txt": b"xy", "b": b""}, b"in")
    assert payload == b"11 2\nprint('\xc3\xa9')7 2\nd/a.txt" + b"xy" + b"1 0\nb" + b"in"


def test_fork_server_ready_report_is_checked():
    from retool_sandbox.forkserver import ForkServer

    def check(preimport: str, report: str) -> ForkServer:
        server = object.__new__(ForkServer)  # only the report parsing, no sandbox
        server.preimport, server.start_error = preimport, ""
        server.imported, server.missing, server.warnings = [], [], []
        server.ok = server._check_preimport(report)
        return server

    fine = check("?numpy,?scipy,?sympy", "numpy,sympy\0scipy\0\0" + "1")
    assert fine.ok and fine.imported == ["numpy", "sympy"] and fine.missing == ["scipy"] and not fine.warnings
    optional_broken = check("?numpy,?sympy", "sympy\0\0numpy: ImportError: boom\0" + "1")
    assert optional_broken.ok and optional_broken.warnings == ["numpy: ImportError: boom"]
    required_broken = check("numpy", "\0\0numpy: ImportError: boom\0" + "1")
    assert not required_broken.ok and "could not preimport numpy: ImportError: boom" in required_broken.start_error
    threaded = check("numpy", "numpy\0\0\0" + "3")
    assert not threaded.ok and "runs 3 threads" in threaded.start_error and "unsafe" in threaded.start_error


def test_a_new_server_kills_what_an_exited_server_left_in_its_uid_range():
    if os.geteuid() != 0:
        pytest.skip("uids are reserved only by a root server")
    first = HIGH_UIDS.stop - 64  # far above the ranges that servers of this suite reserve
    orphans = [subprocess.Popen(["sleep", "300"], user=first + k, group=first + k, extra_groups=[]) for k in (3, 7)]
    outsider = subprocess.Popen(["sleep", "300"], user=first + 20, group=first + 20, extra_groups=[])
    try:
        left = kill_leftovers(first, 10)
        assert sorted(line.split()[0] for line in left) == sorted(str(p.pid) for p in orphans), left
        assert all(line.endswith(": sleep 300") for line in left), left
        assert [p.wait(timeout=10) for p in orphans] == [-9, -9]
        assert outsider.poll() is None  # a uid outside the range is not touched
        assert kill_leftovers(first, 10) == []
        # the same through a server that takes that range
        orphan = subprocess.Popen(["sleep", "300"], user=first + 5, group=first + 5, extra_groups=[])
        orphans.append(orphan)
        with running_sandbox(uid_base=first, slots=1, max_sessions=8) as url:
            assert orphan.wait(timeout=10) == -9 and url
    finally:
        for proc in (*orphans, outsider):
            proc.kill()
            proc.wait()


def _stopped(procs: list[subprocess.Popen], expected: list[bool]) -> list[bool]:
    """Whether each process is stopped, once that is ``expected`` or 5 s passed (a signal lands when its target
    is next scheduled, which on a busy host can take a while)."""

    def states() -> list[bool]:
        out = []
        for proc in procs:
            with open(f"/proc/{proc.pid}/status") as fh:
                out.append(next(line.split()[1] for line in fh if line.startswith("State:")) == "T")
        return out

    seen, deadline = states(), time.monotonic() + 5
    while seen != expected and time.monotonic() < deadline:
        time.sleep(0.05)
        seen = states()
    time.sleep(0.1)  # and nothing else follows: the other uid's process stays as it was
    return states()


def test_the_signal_helpers_grow_with_the_host():
    assert [uid_signals.pool_size(cores) for cores in (1, 2, 16, 64, 192, 320, 1024)] == [2, 2, 2, 4, 12, 20, 32]


def test_a_uid_is_signalled_through_the_helper_and_no_other_uid_is():
    if os.geteuid() != 0:
        pytest.skip("only root signals as another uid")
    target, other = HIGH_UIDS.stop - 100, HIGH_UIDS.stop - 99
    procs = [
        subprocess.Popen(["sleep", "300"], user=uid, group=uid, extra_groups=[]) for uid in (target, target, other)
    ]
    try:
        signal_uid(target, "STOP")
        assert _stopped(procs, [True, True, False]) == [True, True, False]
        signal_uid(target, "CONT")
        assert _stopped(procs, [False, False, False]) == [False, False, False]
        helper = helper_pids()[0]
        os.kill(helper, 9)  # a helper that died is replaced at the next request
        signal_uid(target, "STOP")
        assert _stopped(procs, [True, True, False]) == [True, True, False]
        assert helper_pids()[0] not in (None, helper)
        # While the first helper is busy (its lock held), a request is served by the next one, not queued.
        with uid_signals._pool.helpers[0].lock:
            signal_uid(target, "KILL")
        assert [p.wait(timeout=10) for p in procs[:2]] == [-9, -9] and procs[2].poll() is None
        assert helper_pids()[1] is not None
        signal_uid(target, "KILL")  # nothing left to signal is not an error
        for uid in (0, os.getuid(), 999):
            with pytest.raises(ValueError, match="not a dedicated sandbox uid"):
                kill_uid(uid)
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


def test_the_ready_line_names_the_preimported_packages_and_counts_their_submodules():
    from retool_sandbox.server import _packages

    modules = ["numpy", "numpy.random", "scipy", "scipy.optimize", "sympy"]
    assert _packages(modules) == "numpy,scipy,sympy (+2 submodules)"
    assert _packages(["scipy.optimize", "numpy"]) == "scipy.optimize,numpy"  # a submodule whose package is not listed
    assert _packages([]) == "none"
