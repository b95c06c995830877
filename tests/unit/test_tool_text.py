"""The code tool's rules without verl: code preparation and reply text of both behaviours, settings and schema.

`verl_retool` reproduces the reference run's tool (verl recipe/retool CustomSandboxFusionTool over verl's
SandboxFusionTool) on purpose, faults included: several expectations below are broken code or lost output, and that
is what the reference did. test_these_rules_hold_with_verl_unimportable runs this module again with verl blocked.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from retool_sandbox.client import Reply, classify
from retool.tool_schema import tool_schema
from retool.tool_settings import ToolSettings
from retool.tool_text import (
    NO_STDOUT,
    annotated_reply,
    first_python_block,
    join_python_blocks,
    prepare_code,
    reply_text,
    truncate_middle,
    verl_retool_reply,
)


def reply(status="Success", run_status="Finished", stdout="out\n", stderr="err\n", return_code=0, message=""):
    body = {
        "status": status,
        "message": message,
        "run_result": {"status": run_status, "return_code": return_code, "stdout": stdout, "stderr": stderr},
    }
    outcome, problem = classify(body)
    return Reply(outcome, body, problem)


def test_these_rules_hold_with_verl_unimportable():
    code = (
        "import sys; sys.modules['verl'] = None; import pytest; "
        f"sys.exit(pytest.main(['-q', '-p', 'no:cacheprovider', {__file__!r}, '-k', 'not unimportable']))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert " passed" in proc.stdout


# ---- annotated: code -----------------------------------------------------------------------------------------------
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
def test_annotated_prints_like_a_shell(code, expected_stdout, tmp_path):
    script = tmp_path / "main.py"
    script.write_text(prepare_code(code, "annotated"), encoding="utf-8", newline="")
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=20)
    assert result.returncode == 0, result.stderr
    assert result.stdout == expected_stdout


def test_annotated_leaves_prints_statements_and_broken_code_verbatim():
    for code in ("print(1)", "x = 1", "for i in range(3):\n    i", "import os", "def f(:\n  pass", ""):
        assert prepare_code(code, "annotated") == code


def test_annotated_takes_every_fenced_python_block():
    text = "Let me compute:\n```python\nx = 2\n```\nand\n```py\nx + 1\n```\n```text\nignored\n```"
    assert join_python_blocks(text) == "x = 2\nx + 1\n"
    assert join_python_blocks("```\nprint(1)\n```") == "print(1)\n"
    assert join_python_blocks("```python\nprint(1)") == "print(1)\n"  # unclosed fence
    assert join_python_blocks("print(1)") == "print(1)"
    assert join_python_blocks('print("```")\nx = 1') == 'print("```")\nx = 1'  # not a fence: not at a line start
    assert join_python_blocks("Here:\n  ```python\nx = 1\n  ```") == "x = 1\n"


# ---- annotated: reply ----------------------------------------------------------------------------------------------
def test_truncate_middle_keeps_head_and_tail_within_limit():
    text = "HEAD" + "x" * 10_000 + "TAIL"
    cut_text, cut = truncate_middle(text, 300)
    assert len(cut_text) <= 300 and cut_text.startswith("HEAD") and cut_text.endswith("TAIL")
    assert f"[{cut} characters cut]" in cut_text
    assert truncate_middle("short", 300) == ("short", 0)


def test_annotated_reply_labels_stderr_and_states_what_happened():
    assert annotated_reply(reply(stdout="42\n", stderr=""), 30, 2048) == ("42", 0)
    assert annotated_reply(reply(stdout="", stderr=""), 30, 2048) == ("(no output)", 0)
    text, _ = annotated_reply(
        reply("Failed", stdout="before\n", stderr="Traceback\nValueError: x\n", return_code=1), 30, 2048
    )
    assert text == "before\n[stderr]\nTraceback\nValueError: x\n[exit code 1]"
    text, _ = annotated_reply(reply("Failed", "Finished", stdout="", stderr="", return_code=-9), 30, 2048)
    assert text == "[exit code -9 (killed by signal 9)]"
    text, _ = annotated_reply(
        reply("Failed", "TimeLimitExceeded", stdout="step 1\n", stderr="", return_code=None), 5, 2048
    )
    assert text == "step 1\n[Execution timed out after 5 s; the output above is partial]"
    text, _ = annotated_reply(reply("SandboxError", "Error", stdout="", stderr="", message="runner crashed"), 5, 2048)
    assert text == "[sandbox error, the code may not have run: runner crashed]"


def test_annotated_reply_cuts_the_middle_and_keeps_the_note():
    body = "FIRST\n" + "\n".join(str(i) for i in range(3000)) + "\n"
    text, cut = annotated_reply(
        reply("Failed", stdout=body, stderr="ValueError: the real error\n", return_code=1), 30, 600
    )
    assert len(text) <= 600 and cut > 10_000 and "characters cut" in text
    assert text.startswith("FIRST") and "ValueError: the real error" in text and text.endswith("[exit code 1]")


@pytest.mark.parametrize(
    "body",
    [
        "<html>",
        None,
        [],
        {"status": "Success", "run_result": "oops"},
        {"x": 1},
        {"status": "Success", "run_result": {"status": "Finished", "stdout": 5}},
    ],
)
def test_replies_of_the_wrong_shape_are_unavailable(body):
    outcome, problem = classify(body)
    assert outcome == "unavailable" and "malformed" in problem
    text, _ = annotated_reply(Reply(outcome, None, problem), 5, 2048)
    assert text.startswith("sandbox unavailable: malformed") and "No result for this call" in text
    assert verl_retool_reply(Reply(outcome, None, problem)) == NO_STDOUT


def test_a_lost_session_is_said_first_in_both_behaviours():
    lost = reply(stdout="1\n", stderr="")
    lost.session_lost = "the sandbox restarted"
    assert reply_text(lost, "annotated", 30, 2048)[0] == "[session lost: the sandbox restarted]\n1"
    assert reply_text(lost, "verl_retool", 30, 2048)[0] == "[session lost: the sandbox restarted]\n1\n"


# ---- verl_retool ---------------------------------------------------------------------------------------------------
def test_verl_retool_takes_the_first_python_block_only():
    text = "First:\n```python\nx = 2\nprint(x)\n```\nthen\n```python\nprint('second')\n```"
    assert first_python_block(text) == "x = 2\nprint(x)"  # stripped; the second block is dropped
    # only the literal ```python opens a block; otherwise the whole argument is the code, fences and all
    assert first_python_block("```py\nprint(1)\n```") == "```py\nprint(1)\n```"
    assert first_python_block("```\nprint(1)\n```") == "```\nprint(1)\n```"
    assert first_python_block("```python\nprint(1)") == "```python\nprint(1)"  # unclosed: no block
    assert first_python_block("```python3\nprint(1)\n```") == "3\nprint(1)"  # the tag's "3" becomes code
    assert first_python_block("  x = 1\n") == "  x = 1\n"  # no block: not even stripped
    assert first_python_block('print("```python")\nx = 1') == 'print("```python")\nx = 1'  # no closing after it


@pytest.mark.parametrize(
    ("code", "sent"),
    [
        ("x = 6 * 7\nx", "x = 6 * 7\nprint(x)"),
        ("x = 6 * 7\nx\n\n", "x = 6 * 7\nprint(x)\n\n"),  # empty lines at the end are skipped
        ("'abc'.upper()", "print('abc'.upper())"),  # str, not repr as in the annotated tool
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
def test_verl_retool_wraps_the_last_line_in_print(code, sent):
    assert prepare_code(code, "verl_retool") == sent
    assert prepare_code(f"Run this:\n```python\n{code}\n```\n", "verl_retool") == prepare_code(
        code.strip(), "verl_retool"
    )


def test_verl_retool_reply_is_stdout_plus_stderr_only_when_finished():
    assert verl_retool_reply(reply()) == "out\nerr\n"
    assert verl_retool_reply(reply("Failed", return_code=1)) == "out\nerr\n"  # exit code not shown
    assert verl_retool_reply(reply(stdout="", stderr="")) == ""
    assert verl_retool_reply(reply(stdout=None, stderr="e")) == "e"
    assert verl_retool_reply(reply("Failed", "TimeLimitExceeded", return_code=None)) == NO_STDOUT  # partial lost
    assert verl_retool_reply(reply("SandboxError", "Error")) == NO_STDOUT
    assert verl_retool_reply(Reply("unavailable", problem="refused")) == NO_STDOUT
    assert reply_text(reply(stdout="x" * 5000, stderr=""), "verl_retool", 30, 200) == ("x" * 5000, 0)  # verl cuts


def test_unknown_behaviour_is_refused():
    with pytest.raises(ValueError, match="behaviour must be one of"):
        prepare_code("1", "reference")


# ---- settings and schema -------------------------------------------------------------------------------------------
def test_settings_validation_names_the_key():
    base = {"sandbox_fusion_url": "http://127.0.0.1:1/run_code"}
    for bad, key in [
        ({"max_concurrency": 0}, "max_concurrency"),
        ({"max_retries": -1}, "max_retries"),
        ({"default_timeout": 0}, "default_timeout"),
        ({"memory_limit_mb": 0}, "memory_limit_mb"),
        ({"max_output_chars": 10}, "max_output_chars"),
        ({"reconnect_budget_s": -1}, "reconnect_budget_s"),
        ({"max_concurency": 4}, "unknown keys"),
        ({"sandbox_fusion_url": "ftp://x/run_code"}, "sandbox_fusion_url"),
        ({"sandbox_fusion_url": ""}, "RETOOL_SANDBOX_URL"),
        ({"session_mode": "per_call"}, "session_mode"),
    ]:
        with pytest.raises(ValueError, match=key):
            ToolSettings.from_config({**base, **bad})
    assert ToolSettings.from_config({"sandbox_fusion_url": "http://h:1"}).sandbox_fusion_url == "http://h:1/run_code"
    assert ToolSettings.from_config({"sandbox_fusion_url": "http://h:1/x/run_code"}).sandbox_fusion_url == (
        "http://h:1/x/run_code"
    )


def test_settings_default_to_the_reference_tool_and_validate_behaviour():
    base = {"sandbox_fusion_url": "http://127.0.0.1:1/run_code"}
    assert ToolSettings.from_config(base).behaviour == "verl_retool"
    assert ToolSettings.from_config({**base, "behaviour": "annotated"}).behaviour == "annotated"
    for bad in ("reference", "recipe", "Annotated", "", None, 1, ["annotated"]):
        with pytest.raises(ValueError, match=r"behaviour must be one of \['verl_retool', 'annotated'\]"):
            ToolSettings.from_config({**base, "behaviour": bad})


def test_client_policy_deadline_covers_queue_run_and_margin():
    settings = ToolSettings.from_config(
        {"sandbox_fusion_url": "http://h:1", "default_timeout": 3, "queue_timeout_s": 30, "http_timeout_margin_s": 1}
    )
    assert settings.client_policy().attempt_deadline() == 34


REFERENCE_SCHEMA = {  # verl recipe/retool/sandbox_fusion_tool_config.yaml, the code_interpreter entry
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


def test_schemas_per_behaviour_and_session_mode():
    assert tool_schema() == tool_schema("verl_retool", "stateless") == REFERENCE_SCHEMA
    annotated = tool_schema("annotated")
    assert json.loads(json.dumps(annotated)) == annotated and annotated["function"]["name"] == "code_interpreter"
    assert "fresh interpreter" in annotated["function"]["description"]
    for behaviour in ("verl_retool", "annotated"):
        stateful = tool_schema(behaviour, "per_trajectory")["function"]["description"]
        assert "persist" in stateful and "fresh interpreter" not in stateful
    with pytest.raises(ValueError, match="no schema"):
        tool_schema("annotated", "per_call")
