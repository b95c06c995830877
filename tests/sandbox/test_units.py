"""Fast unit tests of the pure pieces: output cap, path checks, request parsing, slot pool, configuration."""

from __future__ import annotations

import asyncio
import base64
import sys
from pathlib import Path

import pytest

from retool.sandbox.executor import validate_paths
from retool.sandbox.runs import CappedBuffer
from retool.sandbox.isolation import BwrapIsolation, Interpreter
from retool.sandbox.server import RequestError, ServerConfig, SlotPool, parse_run_request


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
    spec = parse_run_request({"code": "1", "language": "python", "memory_limit_MB": 10**6,
                              "files": {"a.txt": base64.b64encode(b"hi").decode()}}, cfg)
    assert spec.memory_mb == 2048 and spec.files == {"a.txt": b"hi"}
    unlimited = ServerConfig(max_memory_mb=0)
    assert parse_run_request({"code": "1", "language": "python"}, unlimited).memory_mb is None


@pytest.mark.parametrize("body,loc", [
    ([], "body"),
    ({"language": "python"}, "code"),
    ({"code": 1, "language": "python"}, "code"),
    ({"code": "1", "language": "cpp"}, "language"),
    ({"code": "1", "language": "python", "run_timeout": 0}, "run_timeout"),
    ({"code": "1", "language": "python", "run_timeout": True}, "run_timeout"),
    ({"code": "1", "language": "python", "stdin": 5}, "stdin"),
    ({"code": "1", "language": "python", "files": []}, "files"),
    ({"code": "1", "language": "python", "fetch_files": "a.txt"}, "fetch_files"),
])
def test_parse_rejects_bad_fields(body, loc):
    with pytest.raises(RequestError) as err:
        parse_run_request(body, ServerConfig())
    assert err.value.loc == loc


def test_config_validation_names_the_problem():
    with pytest.raises(ValueError, match="slots must be in 1..128"):
        ServerConfig(slots=0)
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


def test_runtime_requirements_match_the_pyproject_extra():
    tomllib = pytest.importorskip("tomllib")
    root = Path(__file__).resolve().parents[2]
    extra = tomllib.loads((root / "pyproject.toml").read_text())["project"]["optional-dependencies"]["runtime"]
    lines = (root / "requirements-runtime.txt").read_text().splitlines()
    listed = [line.strip() for line in lines if line.strip() and not line.startswith("#")]
    assert sorted(listed) == sorted(extra)
