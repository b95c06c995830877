"""CodeInterpreterTool as verl loads and calls it, against real HTTP servers on 127.0.0.1.

The rules it applies (code preparation, reply text, settings, schema) are tested without verl in
tests/unit/test_tool_text.py, and its HTTP client in tests/unit/test_sandbox_client.py. Here: verl's own loader
builds it from the repository's tool YAMLs, it shows verl the schema the SFT data carries, it turns calls into tool
messages end to end (test server and embedded sandbox), counts outcomes into the trajectory, keeps sessions per
trajectory and never raises into the agent loop.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from retool.constants import REPO_ROOT
from retool_sandbox.client import SandboxClient
from retool_sandbox.spawn import running_sandbox
from retool.tool import SESSION_ATTRIBUTE, CodeInterpreterTool
from retool.tool_schema import tool_schema
from retool.tool_outcomes import PROBLEM_FIELD
from retool.tool_text import NO_STDOUT

pytestmark = pytest.mark.verl

TOOL_YAMLS = {
    "verl_retool": REPO_ROOT / "configs" / "tool.yaml",
    "annotated": REPO_ROOT / "configs" / "tool_annotated.yaml",
}


def make_tool(url: str, **overrides) -> CodeInterpreterTool:
    config = {
        "type": "native",
        "sandbox_fusion_url": url,
        "default_timeout": 5,
        "max_retries": 2,
        "retry_backoff_s": 0.05,
        "reconnect_budget_s": 0.2,
        "http_timeout_margin_s": 1.0,
        "behaviour": "annotated",
        **overrides,
    }
    return CodeInterpreterTool(config=config, tool_schema=None)


async def call(tool: CodeInterpreterTool, code, agent_data=None) -> tuple[str, dict]:
    """One call the way verl's ToolAgentLoop makes it: create, execute, release."""
    instance_id, _ = await tool.create(create_kwargs={"ground_truth": "42"})
    try:
        response, reward, metrics = await tool.execute(instance_id, {"code": code}, agent_data=agent_data)
    finally:
        await tool.release(instance_id)
    assert reward == 0.0
    return response.text, metrics


# ---------------------------------------------------------------------------------------------- loading by verl
@pytest.mark.parametrize("behaviour", sorted(TOOL_YAMLS))
async def test_verl_loads_each_tool_yaml_and_shows_the_schema_the_sft_data_carries(behaviour, server, monkeypatch):
    from verl.tools.tool_registry import initialize_tools_from_config

    from retool.tool_yaml import load_tool_schema

    url, seen = server
    monkeypatch.delenv("RETOOL_SANDBOX_URL", raising=False)
    (tool,) = initialize_tools_from_config(str(TOOL_YAMLS[behaviour]))
    assert tool.settings.sandbox_fusion_url == "http://127.0.0.1:8080/run_code"
    monkeypatch.setenv("RETOOL_SANDBOX_URL", url)
    (tool,) = initialize_tools_from_config(str(TOOL_YAMLS[behaviour]))
    assert isinstance(tool, CodeInterpreterTool) and tool.name == "code_interpreter"
    assert tool.settings.behaviour == behaviour and tool.settings.sandbox_fusion_url == url + "/run_code"
    shown = tool.tool_schema.model_dump(exclude_unset=True, exclude_none=True)
    assert shown == tool_schema(behaviour) == load_tool_schema(TOOL_YAMLS[behaviour])  # RL and SFT: one schema
    text, metrics = await call(tool, "2 ** 10")
    assert text == {"verl_retool": "1024\n", "annotated": "1024"}[behaviour] and metrics["status"] == "ok"
    assert seen.payloads[-1]["run_timeout"] == 30


async def test_a_per_trajectory_yaml_tells_the_model_that_state_persists(tmp_path, server):
    import yaml
    from verl.tools.tool_registry import initialize_tools_from_config

    from retool.tool_yaml import load_tool_schema

    config = yaml.safe_load(TOOL_YAMLS["annotated"].read_text())
    config["tools"][0]["config"].update(session_mode="per_trajectory", sandbox_fusion_url=server[0])
    path = tmp_path / "tool.yaml"
    path.write_text(yaml.safe_dump(config))
    (tool,) = initialize_tools_from_config(str(path))
    shown = tool.tool_schema.model_dump(exclude_unset=True, exclude_none=True)
    assert "persist" in shown["function"]["description"] and shown == load_tool_schema(path)


# ---------------------------------------------------------------------------------------------- calls end to end
async def test_annotated_runs_every_block_and_prints_the_last_expression(server):
    url, seen = server
    text, metrics = await call(make_tool(url), "```python\nfrom fractions import Fraction\nFraction(3, 6)\n```")
    assert text == "Fraction(1, 2)" and metrics["status"] == "ok" and metrics["retries"] == 0
    text, metrics = await call(make_tool(url), "print('before')\ndef f(x):\n    return 1 / x\nf(0)")
    assert text.startswith("before\n[stderr]\nTraceback") and text.endswith("[exit code 1]")
    assert metrics["status"] == "error_exit"


async def test_verl_retool_sends_the_first_block_with_its_last_line_printed(server):
    url, seen = server
    code = "```python\nx = 6 * 7\nx\n```\nand also\n```python\nprint('never sent')\n```"
    text, metrics = await call(make_tool(url, behaviour="verl_retool"), code)
    assert seen.payloads[-1]["code"] == "x = 6 * 7\nprint(x)"
    assert text == "42\n" and metrics["status"] == "ok"
    text, metrics = await call(make_tool(url, behaviour="verl_retool"), "total = sum(\n    range(10)\n)")
    assert "SyntaxError" in text and "[stderr]" not in text and metrics["status"] == "error_exit"  # as it did


async def test_timeouts_outages_and_sandbox_errors_in_each_behaviour(server):
    url, _ = server
    text, metrics = await call(make_tool(url + "/tle/run_code"), "print(1)")
    assert text == "step 1\nstep 2\n[Execution timed out after 5 s; the output above is partial]"
    assert metrics["timed_out"] == 1
    text, metrics = await call(make_tool(url + "/tle/run_code", behaviour="verl_retool"), "print(1)")
    assert text == NO_STDOUT and metrics["status"] == "timeout"  # the partial output is lost, as in the reference
    text, metrics = await call(make_tool(url + "/always504/run_code"), "1")
    assert text.startswith("sandbox unavailable: HTTP 504 after 2 retries") and metrics["retries"] == 2
    text, metrics = await call(make_tool(url + "/always504/run_code", behaviour="verl_retool"), "1")
    assert text == NO_STDOUT and metrics["status"] == "unavailable"
    text, metrics = await call(make_tool(url + "/sandboxerror/run_code"), "1")
    assert "sandbox error, the code may not have run: runner crashed" in text and metrics["sandbox_error"] == 1


@pytest.mark.parametrize("parameters", [{}, {"code": 5}, {"code": "   "}, {"cmd": "print(1)"}])
async def test_bad_arguments_are_answered_without_a_request(server, parameters):
    url, seen = server
    response, _, metrics = await make_tool(url).execute("id", parameters)
    assert response.text.startswith("Error: code_interpreter needs a non-empty string argument `code`")
    assert metrics["status"] == "bad_input" and seen.payloads == []


async def test_verl_retool_runs_blank_code_as_the_reference_did(server):
    url, seen = server
    tool = make_tool(url, behaviour="verl_retool")
    text, _ = await call(tool, "   ")  # print(   )
    assert seen.payloads[-1]["code"] == "print(   )" and text == "\n"
    response, _, metrics = await tool.execute("id", {"code": 5})  # the reference raised; the message is kept
    assert response.text.startswith("Error: code_interpreter needs") and metrics["status"] == "bad_input"


async def test_each_call_is_counted_into_its_trajectory_for_the_reward(server):
    url, _ = server
    tool = make_tool(url, max_output_chars=200)
    agent_data = SimpleNamespace(extra_fields={"max_global_steps": 3})  # what ToolAgentLoop hands the tool
    for code in ("print(1)", "raise SystemExit(3)", "print('x' * 5000)"):
        await tool.execute("id", {"code": code}, agent_data=agent_data)
    await tool.execute("id", {"cmd": "print(1)"}, agent_data=agent_data)
    await make_tool(url + "/sandboxerror/run_code").execute("id", {"code": "1"}, agent_data=agent_data)
    assert agent_data.extra_fields == {
        "max_global_steps": 3,
        "tool_calls": 5,
        "tool_ok": 2,
        "tool_error": 2,
        "tool_truncated": 1,
        "tool_unavailable": 1,
        # why the call got no answer, for the failure ledger (retool.failures)
        PROBLEM_FIELD: "runner crashed",
    }


@pytest.mark.parametrize(
    ("behaviour", "expected"), [("annotated", "internal tool error RuntimeError: boom"), ("verl_retool", NO_STDOUT)]
)
async def test_an_internal_bug_does_not_raise_but_is_counted_with_its_traceback(
    server, monkeypatch, behaviour, expected
):
    tool = make_tool(server[0], behaviour=behaviour)

    async def broken(code, session_id=None):
        raise RuntimeError("boom")

    monkeypatch.setattr(tool.client, "run", broken)
    agent_data = SimpleNamespace(extra_fields={})
    response, _, metrics = await tool.execute("id", {"code": "1"}, agent_data=agent_data)
    assert expected in response.text and metrics["status"] == "tool_exception"
    assert agent_data.extra_fields["tool_exception"] == 1 and agent_data.extra_fields.get("tool_unavailable") is None
    assert (
        "Traceback" in agent_data.extra_fields[PROBLEM_FIELD]
        and "RuntimeError: boom" in agent_data.extra_fields[PROBLEM_FIELD]
    )


# ---------------------------------------------------------------------------------------------- the embedded sandbox
@pytest.fixture(scope="module")
def embedded_url():
    with running_sandbox() as url:
        yield url


async def test_embedded_sandbox_runs_code_in_both_behaviours(embedded_url):
    tool = make_tool(embedded_url)  # base URL: the tool appends /run_code
    text, metrics = await call(tool, "```python\nimport math\nmath.comb(10, 3)\n```")
    assert text == "120" and metrics["status"] == "ok"
    text, _ = await call(
        make_tool(embedded_url, behaviour="verl_retool"),
        "```python\nimport math\nmath.comb(10, 3)\n```\n```python\nprint('no')\n```",
    )
    assert text == "120\n"


async def test_embedded_sandbox_timeout_keeps_unflushed_partial_output(embedded_url):
    code = "import time\nprint('tick')\ntime.sleep(20)"  # what models write: no flush
    text, metrics = await call(make_tool(embedded_url, default_timeout=1), code)
    assert text.startswith("tick") and "Execution timed out after 1 s" in text and metrics["timed_out"] == 1
    text, metrics = await call(make_tool(embedded_url, behaviour="verl_retool", default_timeout=1), code)
    assert text == NO_STDOUT and metrics["timed_out"] == 1  # the sandbox kept "tick"; the reference dropped it


async def test_per_trajectory_calls_share_an_interpreter_and_close_with_release(embedded_url):
    tool = make_tool(embedded_url, session_mode="per_trajectory")
    first, second = SimpleNamespace(extra_fields={}), SimpleNamespace(extra_fields={})
    await call(tool, "x = 41", agent_data=first)
    assert (await call(tool, "x + 1", agent_data=first))[0] == "42"
    text, _ = await call(tool, "x", agent_data=second)  # another trajectory: its own interpreter
    assert "NameError" in text
    live = SandboxClient(embedded_url).health()["sessions"]["live"]
    session = getattr(first, SESSION_ATTRIBUTE)
    await tool.close_session(session)  # what the agent loop does when a trajectory ends
    assert SandboxClient(embedded_url).health()["sessions"]["live"] == live - 1
    text, _ = await call(tool, "x", agent_data=first)  # closed by its client: a new, empty session
    assert "NameError" in text and first.extra_fields.get("tool_session_lost", 0) == 0
    stateless = make_tool(embedded_url)  # a stateless tool ignores the trajectory's session
    await call(stateless, "y = 1", agent_data=second)
    assert "NameError" in (await call(stateless, "y", agent_data=second))[0]
