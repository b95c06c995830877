"""CodeInterpreterTool against real HTTP servers on 127.0.0.1.

A small aiohttp server defined here runs code for real (a Python subprocess per request, as SandboxFusion does)
and also misbehaves on demand: 504s, hangs, dropped connections, garbage, canned timeouts, slow replies that
expose the client's concurrency. When the embedded sandbox (retool.sandbox) is available, the tool also runs
against it. The loader test reads configs/tool.yaml through verl's own tool registry.
"""

from __future__ import annotations

import asyncio
import json
import socket
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import pytest
from aiohttp import web

from retool.sandbox.testing import running_sandbox
from retool.tool import (
    NO_STDOUT,
    TOOL_SCHEMA,
    CodeInterpreterTool,
    SandboxSettings,
    extract_code,
    format_run_response,
    prepare_code,
    reference_extract_code,
    reference_prepare_code,
    reference_reply,
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
    tool = make_tool(f"{url}/{mode}/run_code", default_timeout=1, queue_timeout_s=0, http_timeout_margin_s=0.5)
    text, metrics = await call(tool, "1")
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


async def test_each_call_is_counted_into_its_trajectory_for_the_reward(server):
    url, _ = server
    tool = make_tool(url, max_output_chars=200)
    agent_data = SimpleNamespace(extra_fields={"max_global_steps": 3})  # what ToolAgentLoop hands the tool
    for code in ("print(1)", "raise SystemExit(3)", "print('x' * 5000)"):
        await tool.execute("id", {"code": code}, agent_data=agent_data)
    await tool.execute("id", {"cmd": "print(1)"}, agent_data=agent_data)
    await make_tool(url + "/sandboxerror/run_code").execute("id", {"code": "1"}, agent_data=agent_data)
    assert agent_data.extra_fields == {"max_global_steps": 3, "tool_calls": 5, "tool_ok": 2, "tool_error": 2,
                                       "tool_truncated": 1, "tool_unavailable": 1}


async def test_an_internal_bug_does_not_raise(server, monkeypatch):
    url, _ = server
    tool = make_tool(url)

    async def broken(code):
        raise RuntimeError("boom")

    monkeypatch.setattr(tool, "run_code", broken)
    response, _, metrics = await tool.execute("id", {"code": "1"})
    assert "internal tool error RuntimeError: boom" in response.text and metrics["status"] == "unavailable"


# ---------------------------------------------------------------------------------------------- the embedded sandbox
@pytest.fixture(scope="module")
def embedded_url():
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


async def test_queued_calls_get_a_deadline_that_covers_the_queue():
    # 1 slot, 4 programs of 2.5 s at once: the last one waits ~7.5 s for the slot, then runs 2.5 s.
    code = "import time\ntime.sleep(2.5)\nprint('done')"
    with running_sandbox(slots=1, default_timeout=3, max_timeout=5, queue_timeout=30) as url:
        tool = make_tool(url, default_timeout=3, http_timeout_margin_s=1, max_retries=0)  # queue_timeout_s: 30
        assert tool.settings.http_deadline() == 34
        results = await asyncio.gather(*(call(tool, code) for _ in range(4)))
        assert [(text, m["status"]) for text, m in results] == [("done", "ok")] * 4
        # control: a deadline of run timeout + margin alone (no queue allowance) gives up on the queued calls
        short = make_tool(url, default_timeout=3, http_timeout_margin_s=1, max_retries=0, queue_timeout_s=0)
        results = await asyncio.gather(*(call(short, code) for _ in range(4)))
        assert sum(m["status"] == "unavailable" for _, m in results) >= 2


def test_schema_is_json_compatible():
    assert json.loads(json.dumps(TOOL_SCHEMA)) == TOOL_SCHEMA
    assert TOOL_SCHEMA["function"]["parameters"]["required"] == ["code"]


# ---------------------------------------------------------------------------------------------- behaviour: reference
# `behaviour: reference` reproduces the reference run's tool (verl recipe/retool/retool.py CustomSandboxFusionTool
# over verl's SandboxFusionTool.execute_code) on purpose, faults included: several expectations below are broken
# code or lost output, and that is what the reference did. HTTP handling stays the recipe's.
REFERENCE_SCHEMA = {  # verl recipe/retool/sandbox_fusion_tool_config.yaml
    "type": "function",
    "function": {
        "name": "code_interpreter",
        "description": "A tool for executing code.",
        "parameters": {
            "type": "object",
            "properties": {"code": {"type": "string", "description": "The code to execute."}},
            "required": ["code"],
        },
    },
}


def reference_tool(url: str, **overrides) -> CodeInterpreterTool:
    return make_tool(url, behaviour="reference", **overrides)


def test_reference_takes_the_first_python_block_only():
    text = "First:\n```python\nx = 2\nprint(x)\n```\nthen\n```python\nprint('second')\n```"
    assert reference_extract_code(text) == "x = 2\nprint(x)"  # stripped; the second block is dropped
    # only the literal ```python opens a block; otherwise the whole argument is the code, fences and all
    assert reference_extract_code("```py\nprint(1)\n```") == "```py\nprint(1)\n```"
    assert reference_extract_code("```\nprint(1)\n```") == "```\nprint(1)\n```"
    assert reference_extract_code("```python\nprint(1)") == "```python\nprint(1)"  # unclosed: no block
    assert reference_extract_code("```python3\nprint(1)\n```") == "3\nprint(1)"  # the tag's "3" becomes code
    assert reference_extract_code("  x = 1\n") == "  x = 1\n"  # no block: not even stripped
    assert reference_extract_code('print("```python")\nx = 1') == 'print("```python")\nx = 1'  # no closing after it


@pytest.mark.parametrize(
    ("code", "sent"),
    [
        ("x = 6 * 7\nx", "x = 6 * 7\nprint(x)"),
        ("x = 6 * 7\nx\n\n", "x = 6 * 7\nprint(x)\n\n"),  # empty lines at the end are skipped
        ("'abc'.upper()", "print('abc'.upper())"),  # str, not repr as in the recipe
        ("print(1)\nprint(2)", "print(1)\nprint(2)"),  # already a print: left alone
        ("x = 3\nprint(x) if x else None", "x = 3\nprint(x) if x else None"),  # starts with "print": left alone
        ("printed = 5", "printed = 5"),  # starts with "print" too: left alone, prints nothing
        # the rest is valid code the reference broke, reproduced as it did it:
        ("x = 5", "print(x = 5)"),  # TypeError at run time
        ("total = sum(\n    range(10)\n)", "total = sum(\n    range(10)\nprint())"),  # SyntaxError
        ("for i in range(3):\n    print(i)", "for i in range(3):\nprint(    print(i))"),  # IndentationError
        ("import math", "print(import math)"),  # SyntaxError
        ("x = 1\n# done", "x = 1\nprint(# done)"),  # SyntaxError (unclosed parenthesis)
        ("x = 1\n   ", "x = 1\nprint(   )"),  # a line of spaces is not empty: prints an empty line
        ("", ""),
    ],
)
def test_reference_wraps_the_last_line_in_print(code, sent):
    assert reference_prepare_code(code) == sent
    assert reference_prepare_code(f"Run this:\n```python\n{code}\n```\n") == reference_prepare_code(code.strip())


def test_reference_reply_is_stdout_plus_stderr_only_when_finished():
    def body(status, run_status, stdout="out\n", stderr="err\n", return_code=0):
        run = {"status": run_status, "return_code": return_code, "stdout": stdout, "stderr": stderr}
        return {"status": status, "message": "", "run_result": run}

    assert reference_reply(body("Success", "Finished")) == "out\nerr\n"
    assert reference_reply(body("Failed", "Finished", return_code=1)) == "out\nerr\n"  # exit code not shown
    assert reference_reply(body("Success", "Finished", stdout="", stderr="")) == ""
    assert reference_reply(body("Success", "Finished", stdout=None, stderr="e")) == "e"
    assert reference_reply(body("Failed", "TimeLimitExceeded")) == NO_STDOUT  # partial output lost
    assert reference_reply(body("Failed", "Error")) == NO_STDOUT
    for broken in (None, "<html>", {"status": "SandboxError", "run_result": None}, {"hello": "world"}):
        assert reference_reply(broken) == NO_STDOUT


def test_settings_validate_behaviour():
    base = {"sandbox_fusion_url": "http://127.0.0.1:1/run_code"}
    assert SandboxSettings.from_config(base).behaviour == "recipe"
    assert SandboxSettings.from_config({**base, "behaviour": "reference"}).behaviour == "reference"
    for bad in ("Reference", "ref", "", None, 1, ["reference"]):
        with pytest.raises(ValueError, match=r"behaviour must be one of \['recipe', 'reference'\]"):
            SandboxSettings.from_config({**base, "behaviour": bad})


async def test_reference_loader_with_reference_schema_matches_the_sft_schema(server, tmp_path):
    import yaml
    from verl.tools.tool_registry import initialize_tools_from_config

    from retool.data.sft import load_tool_schema

    url, _ = server
    assert SandboxSettings.from_config(
        yaml.safe_load((REPO / "configs" / "tool.yaml").read_text())["tools"][0]["config"] | {"sandbox_fusion_url": url}
    ).behaviour == "recipe"  # the repository's default
    config = yaml.safe_load((REPO / "configs" / "tool.yaml").read_text())
    entry = config["tools"][0]
    entry["config"].update(behaviour="reference", sandbox_fusion_url=url)
    entry["tool_schema"] = REFERENCE_SCHEMA
    path = tmp_path / "tool_reference.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    (tool,) = initialize_tools_from_config(str(path))
    assert tool.settings.behaviour == "reference"
    shown = tool.tool_schema.model_dump(exclude_unset=True, exclude_none=True)
    assert shown == REFERENCE_SCHEMA == load_tool_schema(path)  # RL and SFT data show the same schema
    text, metrics = await call(tool, "6 * 7")
    assert text == "42\n" and metrics["status"] == "ok"


async def test_reference_sends_first_block_with_last_line_printed(server):
    url, seen = server
    code = "```python\nx = 6 * 7\nx\n```\nand also\n```python\nprint('never sent')\n```"
    text, metrics = await call(reference_tool(url), code)
    assert seen.payloads[-1]["code"] == "x = 6 * 7\nprint(x)"
    assert text == "42\n" and metrics["status"] == "ok"  # raw stdout, trailing newline kept
    text, _ = await call(reference_tool(url), "```python\nx = 3\nprint(x * 2)\n```")  # already a print
    assert seen.payloads[-1]["code"] == "x = 3\nprint(x * 2)" and text == "6\n"
    text, _ = await call(reference_tool(url), "'abc'.upper()")
    assert text == "ABC\n"  # print, not repr


async def test_reference_breaks_a_multi_line_last_statement_as_it_did(server):
    # valid code; the reference turned its closing ")" into "print())", a SyntaxError, and so does this mode
    url, seen = server
    text, metrics = await call(reference_tool(url), "total = sum(\n    range(10)\n)")
    assert seen.payloads[-1]["code"] == "total = sum(\n    range(10)\nprint())"
    assert "SyntaxError" in text and "[stderr]" not in text and "[exit code" not in text
    assert metrics["status"] == "error_exit"
    text, _ = await call(reference_tool(url), "x = 5")  # an assignment: print(x = 5)
    assert text.endswith("TypeError: 'x' is an invalid keyword argument for print()\n")


async def test_reference_nonzero_exit_is_stdout_then_stderr_unlabelled(server):
    url, _ = server
    agent_data = SimpleNamespace(extra_fields={})
    tool = reference_tool(url)
    response, _, metrics = await tool.execute("id", {"code": "print('before')\n1 / 0"}, agent_data=agent_data)
    text = response.text
    assert text.startswith("before\nTraceback (most recent call last):\n")
    assert text.endswith("ZeroDivisionError: division by zero\n") and "[exit code" not in text
    assert metrics["status"] == "error_exit" and agent_data.extra_fields["tool_error"] == 1


async def test_reference_timeouts_and_sandbox_errors_say_no_stdout_here(server):
    url, _ = server
    text, metrics = await call(reference_tool(url + "/tle/run_code"), "print(1)")
    assert text == NO_STDOUT and metrics["timed_out"] == 1  # the partial "step 1\nstep 2\n" is lost
    started = time.monotonic()
    text, metrics = await call(reference_tool(url, default_timeout=1), "import time\nprint('started')\ntime.sleep(30)")
    assert text == NO_STDOUT and metrics["status"] == "timeout" and time.monotonic() - started < 10
    text, metrics = await call(reference_tool(url + "/sandboxerror/run_code"), "1")
    assert text == NO_STDOUT and metrics["status"] == "sandbox_error"


@pytest.mark.parametrize("mode", ["error500", "garbage", "badshape", "always504", "refused"])
async def test_reference_unusable_replies_say_no_stdout_here_without_raising(server, mode):
    url, seen = server
    if mode == "refused":
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            target = f"http://127.0.0.1:{sock.getsockname()[1]}/run_code"
    else:
        target = f"{url}/{mode}/run_code"
    text, metrics = await call(reference_tool(target), "print(1)")
    assert text == NO_STDOUT and metrics["status"] == "unavailable"
    if mode == "always504":  # the recipe's retries still apply
        assert metrics["retries"] == 2 and seen.hits["always504"] == 3


async def test_reference_keeps_the_recipe_http_handling(server):
    url, seen = server
    seen.fail_first = 2
    text, metrics = await call(reference_tool(url + "/flaky/run_code"), "6 * 7")
    assert text == "42\n" and metrics["retries"] == 2
    tool = reference_tool(url + "/slow/run_code", max_concurrency=2)
    results = await asyncio.gather(*(call(tool, "print(1)") for _ in range(4)))
    assert [text for text, _ in results] == ["ok\n"] * 4 and seen.max_in_flight == 2


async def test_reference_does_not_cut_verl_does(server):
    url, _ = server
    text, metrics = await call(reference_tool(url, max_output_chars=200), "print('x' * 5000)")
    assert text == "x" * 5000 + "\n" and metrics["truncated_chars"] == 0  # max_output_chars is not used


async def test_reference_argument_checks(server):
    url, seen = server
    tool = reference_tool(url)
    text, _ = await call(tool, "   ")  # a blank string is run as the reference ran it: print(   )
    assert seen.payloads[-1]["code"] == "print(   )" and text == "\n"
    for parameters in ({}, {"code": 5}):  # the reference raised here; the recipe's message is kept
        response, _, metrics = await tool.execute("id", parameters)
        assert response.text.startswith("Error: code_interpreter needs") and metrics["status"] == "bad_input"


async def test_reference_internal_bug_says_no_stdout_here(server, monkeypatch):
    tool = reference_tool(server[0])

    async def broken(code):
        raise RuntimeError("boom")

    monkeypatch.setattr(tool, "run_code", broken)
    response, _, metrics = await tool.execute("id", {"code": "1"})
    assert response.text == NO_STDOUT and metrics["status"] == "unavailable"


async def test_embedded_sandbox_reference_behaviour(embedded_url):
    tool = make_tool(embedded_url, behaviour="reference")
    text, _ = await call(tool, "```python\nimport math\nmath.comb(10, 3)\n```\n```python\nprint('no')\n```")
    assert text == "120\n"
    text, metrics = await call(tool, "import json\nprint('a')\njson.loads('{')")
    assert text.startswith("a\nTraceback") and "JSONDecodeError" in text and metrics["status"] == "error_exit"
    code = "import time\nprint('tick', flush=True)\ntime.sleep(20)"
    text, metrics = await call(make_tool(embedded_url, behaviour="reference", default_timeout=1), code)
    assert text == NO_STDOUT and metrics["timed_out"] == 1  # the embedded sandbox kept "tick"; the reference drops it
