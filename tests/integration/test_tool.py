"""CodeInterpreterTool against real HTTP servers on 127.0.0.1.

A small aiohttp server defined here runs code for real (a Python subprocess per request, as SandboxFusion does)
and also misbehaves on demand: 504s, hangs, dropped connections, garbage, canned timeouts, slow replies that
expose the client's concurrency. When the embedded sandbox (retool.sandbox) is available, the tool also runs
against it. The loader test reads configs/tool.yaml through verl's own tool registry.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import socket
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from aiohttp import web

pytestmark = pytest.mark.verl  # retool.tool subclasses verl's BaseTool
pytest.importorskip("verl")

from retool.tool import (  # noqa: E402
    TOOL_SCHEMA,
    CodeInterpreterTool,
    SandboxSettings,
    extract_code,
    format_run_response,
    prepare_code,
    truncate_middle,
)

REPO = Path(__file__).resolve().parents[2]
PAYLOAD_KEYS = {
    "code",
    "language",
    "compile_timeout",
    "run_timeout",
    "memory_limit_MB",
    "stdin",
    "files",
    "fetch_files",
}


# ---------------------------------------------------------------------------------------------- test server
async def _run_python(code: str, timeout: float) -> dict:
    """Run code in a fresh interpreter like SandboxFusion; on timeout kill it and keep the partial output."""
    with tempfile.TemporaryDirectory() as work:
        Path(work, "main.py").write_text(code)
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-u", "main.py", cwd=work, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
        )
        out, err = bytearray(), bytearray()

        async def drain(stream, buf):
            while chunk := await stream.read(65536):
                buf.extend(chunk)

        readers = asyncio.gather(drain(proc.stdout, out), drain(proc.stderr, err))
        started = time.monotonic()
        try:
            await asyncio.wait_for(proc.wait(), timeout)
            status, code_ = "Finished", proc.returncode
        except asyncio.TimeoutError:
            proc.kill()
            await proc.wait()
            status, code_ = "TimeLimitExceeded", None
        await readers
    return {
        "status": "Success" if status == "Finished" and code_ == 0 else "Failed",
        "message": "",
        "compile_result": None,
        "run_result": {
            "status": status,
            "execution_time": time.monotonic() - started,
            "return_code": code_,
            "stdout": out.decode(errors="replace"),
            "stderr": err.decode(errors="replace"),
        },
        "executor_pod_name": None,
        "files": {},
    }


@dataclass
class ServerState:
    """What the test server saw, and how the flaky route behaves."""

    payloads: list = field(default_factory=list)
    hits: dict = field(default_factory=dict)
    in_flight: int = 0
    max_in_flight: int = 0
    fail_first: int = 0


def _make_app(state: ServerState) -> web.Application:
    async def execute(request: web.Request) -> web.Response:
        payload = await request.json()
        state.payloads.append(payload)
        return web.json_response(await _run_python(payload["code"], payload["run_timeout"]))

    async def run(request: web.Request) -> web.Response:
        state.hits["run"] = state.hits.get("run", 0) + 1
        return await execute(request)

    async def misbehave(request: web.Request) -> web.StreamResponse:
        mode = request.match_info["mode"]
        state.hits[mode] = state.hits.get(mode, 0) + 1
        if mode == "flaky":
            if state.hits[mode] <= state.fail_first:
                return web.Response(status=504, text="gateway timeout")
            return await execute(request)
        if mode == "always504":
            return web.Response(status=504, text="gateway timeout")
        if mode == "error500":
            return web.Response(status=500, text="internal error")
        if mode == "hang":
            await asyncio.sleep(3600)
        if mode == "drop":
            request.transport.close()
            await asyncio.sleep(1)
            return web.Response()
        if mode == "garbage":
            return web.Response(text="<html>proxy error</html>", content_type="text/html")
        if mode == "badshape":
            return web.json_response({"hello": "world"})
        if mode == "tle":
            return web.json_response(
                {
                    "status": "Failed",
                    "message": "",
                    "run_result": {
                        "status": "TimeLimitExceeded",
                        "execution_time": 5.0,
                        "return_code": None,
                        "stdout": "step 1\nstep 2\n",
                        "stderr": "",
                    },
                }
            )
        if mode == "sandboxerror":
            return web.json_response({"status": "SandboxError", "message": "runner crashed", "run_result": None})
        if mode == "slow":
            state.in_flight += 1
            state.max_in_flight = max(state.max_in_flight, state.in_flight)
            try:
                await asyncio.sleep(0.2)
            finally:
                state.in_flight -= 1
            return web.json_response(await _run_python("print('ok')", 5))
        return web.Response(status=404)

    app = web.Application()
    app.router.add_post("/run_code", run)
    app.router.add_post("/{mode}/run_code", misbehave)
    return app


@pytest.fixture
async def server():
    """(base URL, ServerState) of a fresh test server on a free port."""
    state = ServerState()
    runner = web.AppRunner(_make_app(state), shutdown_timeout=0.1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}", state
    finally:
        await runner.cleanup()


def make_tool(url: str, **overrides) -> CodeInterpreterTool:
    config = {
        "type": "native",
        "sandbox_fusion_url": url,
        "default_timeout": 5,
        "max_retries": 2,
        "retry_backoff_s": 0.05,
        "http_timeout_margin_s": 1.0,
        **overrides,
    }
    return CodeInterpreterTool(config=config, tool_schema=None)


async def call(tool: CodeInterpreterTool, code) -> tuple[str, dict]:
    """One call the way verl's ToolAgentLoop makes it: create, execute, release."""
    instance_id, _ = await tool.create(create_kwargs={"ground_truth": "42"})
    try:
        response, reward, metrics = await tool.execute(instance_id, {"code": code}, agent_data=None)
    finally:
        await tool.release(instance_id)
    assert reward == 0.0
    return response.text, metrics


# ---------------------------------------------------------------------------------------------- code preparation
@pytest.mark.parametrize(
    ("code", "expected_stdout"),
    [
        ("x = 6 * 7\nx", "42\n"),
        ("import math\nmath.factorial(5)  # 5!", "120\n"),
        ("'abc'.upper()", "'ABC'\n"),  # a shell shows repr
        ("s = {1}\ns.add(2)", ""),  # None is not shown
        ("print('hi')", "hi\n"),
        ("for i in range(2):\n    print(i)", "0\n1\n"),
        ("y = 3", ""),
        ("import sys; sys.version_info[0]", "3\n"),
        ("é = 'ü'\n(é +\n 'x')", "'üx'\n"),
        ('"a trailing note"', ""),
        ("x = 2\r\nx ** 3\r\n", "8\n"),
    ],
)
def test_prepare_code_prints_like_a_shell(code, expected_stdout, tmp_path):
    import subprocess

    prepared = prepare_code(code)
    script = tmp_path / "main.py"
    script.write_text(prepared, encoding="utf-8", newline="")
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=20)
    assert result.returncode == 0, result.stderr
    assert result.stdout == expected_stdout


def test_prepare_code_leaves_prints_statements_and_broken_code_verbatim():
    for code in ("print(1)", "x = 1", "for i in range(3):\n    i", "import os", "def f(:\n  pass", ""):
        assert prepare_code(code) == code


def test_extract_code_takes_fenced_python():
    text = "Let me compute:\n```python\nx = 2\n```\nand\n```py\nx + 1\n```\n```text\nignored\n```"
    assert extract_code(text) == "x = 2\nx + 1\n"
    assert extract_code("```\nprint(1)\n```") == "print(1)\n"
    assert extract_code("```python\nprint(1)") == "print(1)\n"  # unclosed fence
    assert extract_code("print(1)") == "print(1)"
    assert extract_code('print("```")\nx = 1') == 'print("```")\nx = 1'  # not a fence: not at a line start
    assert extract_code("Here:\n  ```python\nx = 1\n  ```") == "x = 1\n"


def test_truncate_middle_keeps_head_and_tail_within_limit():
    text = "HEAD" + "x" * 10_000 + "TAIL"
    cut_text, cut = truncate_middle(text, 300)
    assert len(cut_text) <= 300 and cut_text.startswith("HEAD") and cut_text.endswith("TAIL")
    assert f"[{cut} characters cut]" in cut_text and len(cut_text) - len(text) < 0
    assert truncate_middle("short", 300) == ("short", 0)


def test_format_run_response_rejects_wrong_shapes():
    for body in ("<html>", None, [], {"status": "Success", "run_result": "oops"}, {"x": 1}):
        text, metrics = format_run_response(body, 5, 2048)
        assert text.startswith("sandbox unavailable") and metrics["sandbox_error"] == 1


def test_settings_validation_names_the_key():
    base = {"sandbox_fusion_url": "http://127.0.0.1:1/run_code"}
    for bad, key in [
        ({"max_concurrency": 0}, "max_concurrency"),
        ({"max_retries": -1}, "max_retries"),
        ({"default_timeout": 0}, "default_timeout"),
        ({"memory_limit_mb": 0}, "memory_limit_mb"),
        ({"max_output_chars": 10}, "max_output_chars"),
        ({"max_concurency": 4}, "unknown keys"),
        ({"sandbox_fusion_url": "ftp://x/run_code"}, "sandbox_fusion_url"),
        ({"sandbox_fusion_url": ""}, "RETOOL_SANDBOX_URL"),
    ]:
        with pytest.raises(ValueError, match=key):
            SandboxSettings.from_config({**base, **bad})
    assert SandboxSettings.from_config({"sandbox_fusion_url": "http://h:1"}).sandbox_fusion_url == "http://h:1/run_code"
    assert SandboxSettings.from_config({"sandbox_fusion_url": "http://h:1/x/run_code"}).sandbox_fusion_url == (
        "http://h:1/x/run_code"
    )


# ---------------------------------------------------------------------------------------------- loading by verl
@pytest.mark.parametrize("env_url", [None, "base"])
async def test_verl_loader_builds_the_tool_from_configs_tool_yaml(env_url, server, monkeypatch):
    from verl.tools.tool_registry import initialize_tools_from_config

    url, seen = server
    if env_url is None:
        monkeypatch.delenv("RETOOL_SANDBOX_URL", raising=False)
    else:
        monkeypatch.setenv("RETOOL_SANDBOX_URL", url)
    (tool,) = initialize_tools_from_config(str(REPO / "configs" / "tool.yaml"))
    assert isinstance(tool, CodeInterpreterTool) and tool.name == "code_interpreter"
    assert tool.tool_schema.model_dump(exclude_unset=True, exclude_none=True) == TOOL_SCHEMA
    assert tool.settings.max_output_chars == 2048
    if env_url is None:
        assert tool.settings.sandbox_fusion_url == "http://127.0.0.1:8080/run_code"
    else:
        assert tool.settings.sandbox_fusion_url == url + "/run_code"
        text, metrics = await call(tool, "2 ** 10")
        assert text == "1024" and metrics["status"] == "ok"
        assert seen.payloads[-1]["run_timeout"] == 30


# ---------------------------------------------------------------------------------------------- against the test server
async def test_payload_is_verls(server):
    url, seen = server
    text, _ = await call(make_tool(url + "/run_code", memory_limit_mb=512), "print('hello')")
    assert text == "hello"
    (payload,) = seen.payloads
    assert set(payload) == PAYLOAD_KEYS
    assert payload["language"] == "python" and payload["code"] == "print('hello')"
    assert payload["compile_timeout"] == payload["run_timeout"] == 5 and isinstance(payload["run_timeout"], int)
    assert payload["memory_limit_MB"] == 512
    assert (payload["stdin"], payload["files"], payload["fetch_files"]) == (None, {}, [])


async def test_fenced_code_and_trailing_expression(server):
    url, _ = server
    text, metrics = await call(make_tool(url), "```python\nfrom fractions import Fraction\nFraction(3, 6)\n```")
    assert text == "Fraction(1, 2)" and metrics["status"] == "ok" and metrics["retries"] == 0


async def test_stdout_then_labelled_stderr_and_exit_code(server):
    url, _ = server
    text, metrics = await call(make_tool(url), "print('before')\ndef f(x):\n    return 1 / x\nf(0)")
    assert text.startswith("before\n[stderr]\nTraceback (most recent call last):")
    assert "ZeroDivisionError: division by zero" in text and text.endswith("[exit code 1]")
    assert metrics["status"] == "error_exit"


async def test_no_output_is_said(server):
    url, _ = server
    text, _ = await call(make_tool(url), "x = 1")
    assert text == "(no output)"


async def test_long_output_is_cut_in_the_middle_and_the_error_survives(server):
    url, _ = server
    code = "print('FIRST')\nfor i in range(3000):\n    print(i)\nraise ValueError('the real error')"
    text, metrics = await call(make_tool(url, max_output_chars=600), code)
    assert len(text) <= 600 and metrics["truncated_chars"] > 10_000
    assert text.startswith("FIRST") and "characters cut" in text
    assert "ValueError: the real error" in text and text.endswith("[exit code 1]")


async def test_real_timeout_returns_partial_output_and_note(server):
    url, _ = server
    code = "import time\nprint('started')\ntime.sleep(30)"
    started = time.monotonic()
    text, metrics = await call(make_tool(url, default_timeout=1), code)
    assert time.monotonic() - started < 10
    assert text.startswith("started") and "Execution timed out after 1 s" in text
    assert metrics["timed_out"] == 1 and metrics["status"] == "timeout"


async def test_canned_timeout_keeps_partial_stdout(server):
    url, _ = server
    text, metrics = await call(make_tool(url + "/tle/run_code", default_timeout=5), "print(1)")
    assert text == "step 1\nstep 2\n[Execution timed out after 5 s; the output above is partial]"
    assert metrics["timed_out"] == 1


async def test_504_is_retried_with_backoff(server):
    url, seen = server
    seen.fail_first = 2
    started = time.monotonic()
    text, metrics = await call(make_tool(url + "/flaky/run_code"), "6 * 7")
    assert text == "42" and metrics["retries"] == 2 and seen.hits["flaky"] == 3
    assert time.monotonic() - started >= 0.05 + 0.1  # backoff doubles


async def test_504_forever_gives_up_after_max_retries(server):
    url, seen = server
    text, metrics = await call(make_tool(url + "/always504/run_code", max_retries=2), "1")
    assert text.startswith("sandbox unavailable: HTTP 504 after 2 retries")
    assert seen.hits["always504"] == 3 and metrics["status"] == "unavailable"


async def test_other_http_errors_are_not_retried(server):
    url, seen = server
    text, metrics = await call(make_tool(url + "/error500/run_code"), "1")
    assert text.startswith("sandbox unavailable: HTTP 500") and "internal error" in text
    assert seen.hits["error500"] == 1 and metrics["retries"] == 0


@pytest.mark.parametrize(
    ("mode", "phrase"),
    [
        ("drop", "sandbox unavailable: "),
        ("garbage", "malformed response"),
        ("badshape", "malformed response"),
        ("hang", "no reply within 1.5 s"),
    ],
)
async def test_outages_become_readable_messages(server, mode, phrase):
    url, _ = server
    started = time.monotonic()
    text, metrics = await call(make_tool(f"{url}/{mode}/run_code", default_timeout=1, http_timeout_margin_s=0.5), "1")
    assert phrase in text and "No result for this call" in text
    assert metrics["sandbox_error"] == 1 and time.monotonic() - started < 5


async def test_connection_refused_is_a_message():
    with socket.socket() as sock:  # a port that was free a moment ago and has no listener
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    text, metrics = await call(make_tool(f"http://127.0.0.1:{port}/run_code"), "1")
    assert text.startswith("sandbox unavailable: ") and metrics["status"] == "unavailable"


async def test_sandbox_error_status_is_reported(server):
    url, _ = server
    text, metrics = await call(make_tool(url + "/sandboxerror/run_code"), "1")
    assert "sandbox error, the code may not have run: runner crashed" in text and metrics["sandbox_error"] == 1


async def test_concurrency_is_bounded_per_tool(server):
    url, seen = server
    tool = make_tool(url + "/slow/run_code", max_concurrency=2)
    results = await asyncio.gather(*(call(tool, "1") for _ in range(6)))
    assert [text for text, _ in results] == ["ok"] * 6
    assert seen.max_in_flight == 2


@pytest.mark.parametrize("parameters", [{}, {"code": 5}, {"code": "   "}, {"cmd": "print(1)"}])
async def test_bad_arguments_are_answered_without_a_request(server, parameters):
    url, seen = server
    response, _, metrics = await make_tool(url).execute("id", parameters)
    assert response.text.startswith("Error: code_interpreter needs a non-empty string argument `code`")
    assert metrics["status"] == "bad_input" and seen.payloads == []


async def test_an_internal_bug_does_not_raise(server, monkeypatch):
    url, _ = server
    tool = make_tool(url)

    async def broken(code):
        raise RuntimeError("boom")

    monkeypatch.setattr(tool, "run_code", broken)
    response, _, metrics = await tool.execute("id", {"code": "1"})
    assert "internal tool error RuntimeError: boom" in response.text and metrics["status"] == "unavailable"


# ---------------------------------------------------------------------------------------------- the embedded sandbox
def _embedded_sandbox():
    testing = pytest.importorskip("retool.sandbox.testing")
    if importlib.util.find_spec("retool.sandbox.__main__") is None:
        pytest.skip("the embedded sandbox server (python -m retool.sandbox) is not there yet")
    return testing.running_sandbox


@pytest.fixture(scope="module")
def embedded_url():
    running_sandbox = _embedded_sandbox()
    with running_sandbox() as url:
        yield url


async def test_embedded_sandbox_runs_code(embedded_url):
    tool = make_tool(embedded_url)  # base URL: the tool appends /run_code
    text, metrics = await call(tool, "```python\nimport math\nmath.comb(10, 3)\n```")
    assert text == "120" and metrics["status"] == "ok"
    text, _ = await call(tool, "import json\njson.loads('{')")
    assert "[stderr]" in text and "JSONDecodeError" in text and text.endswith("[exit code 1]")


async def test_embedded_sandbox_timeout_keeps_partial_output(embedded_url):
    code = "import time\nprint('tick', flush=True)\ntime.sleep(20)"
    text, metrics = await call(make_tool(embedded_url, default_timeout=1), code)
    assert text.startswith("tick") and "Execution timed out after 1 s" in text and metrics["timed_out"] == 1


async def test_embedded_sandbox_keeps_unflushed_output_on_timeout(embedded_url):
    code = "import time\nprint('tick')\ntime.sleep(20)"  # what models write: no flush
    text, _ = await call(make_tool(embedded_url, default_timeout=1), code)
    assert text.startswith("tick")


def test_schema_is_json_compatible():
    assert json.loads(json.dumps(TOOL_SCHEMA)) == TOOL_SCHEMA
    assert TOOL_SCHEMA["function"]["parameters"]["required"] == ["code"]
