"""ReTool-SFT conversion: rows in the exact raw layout, the irregular cases, whole files, the CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from retool_data_helpers import (
    REPO,
    TOOL_SCHEMA,
    answer,
    code,
    output,
    raw_user,
    sft_row,
    two_call_row,
    write_tool_yaml,
)

from retool.data.io import ConversionError, DataSourceError
from retool.data.prompt import ANSWER_INSTRUCTION
from retool.data.sft import convert_row, main, preprocess, user_turn
from retool.tool_yaml import ToolConfigError, load_tool_schema

QUESTION = "Find the sum of all positive divisors of 36."
# The reference's user turn for raw_user(QUESTION), written out: what follows the marker with the <answer> tags
# removed and the ends stripped. The format line keeps its space before the newline and its doubled braces.
REFERENCE_FORMAT_LINE = (
    "Remember to place the final answer in the last part using the format: \n\n\\boxed{{'The final answer goes here.'}}"
)
REFERENCE_USER = f"{QUESTION}\n\n{REFERENCE_FORMAT_LINE}"


def call(snippet: str) -> list[dict]:
    return [{"type": "function", "function": {"name": "code_interpreter", "arguments": {"code": snippet}}}]


@pytest.fixture
def tool_yaml(tmp_path: Path) -> Path:
    return write_tool_yaml(tmp_path / "tool.yaml")


def raw_parquet(path: Path, rows: list[dict]) -> Path:
    """Rows stored the way the hub parquet stores them: messages = list<struct<content, role>>."""
    message = pa.struct([("content", pa.string()), ("role", pa.string())])
    pq.write_table(pa.Table.from_pylist(rows, schema=pa.schema([("messages", pa.list_(message))])), path)
    return path


# ------------------------------------------------------------------ one row


def test_two_tool_calls_become_assistant_tool_turns():
    messages = convert_row(two_call_row())
    assert messages == [
        {"role": "user", "content": REFERENCE_USER},
        {
            "role": "assistant",
            "content": "I will list the divisors with code.",
            "tool_calls": call("divs = [d for d in range(1, 37) if 36 % d == 0]\nprint(divs)"),
        },
        {"role": "tool", "content": "[1, 2, 3, 4, 6, 9, 12, 18, 36]"},
        {"role": "assistant", "content": "Now add them up.", "tool_calls": call("print(sum(divs))")},
        {"role": "tool", "content": "91"},
        {"role": "assistant", "content": "The divisors sum to 91.\n\n\\boxed{91}"},
    ]


def test_reference_user_turn_keeps_the_question_and_the_format_line_without_tags():
    user = convert_row(two_call_row())[0]["content"]  # the default style
    assert user == REFERENCE_USER
    for leftover in ("*user question:*", "<answer>", "</answer>", "<code>", "Work through"):
        assert leftover not in user
    # Only the tags go: text around them, inner whitespace and anything after the format line are kept.
    raw = "Template <answer>x</answer>\n*user question:*\n  Q <answer>1</answer> end. \n\nTail\n<answer>\n"
    assert user_turn(raw, "verl_retool") == "Q 1 end. \n\nTail"


def test_recipe_user_turn_keeps_only_the_question_and_the_boxed_instruction():
    user = convert_row(two_call_row(), prompt_style="qwen_boxed")[0]["content"]
    assert user == f"{QUESTION}\n\n{ANSWER_INSTRUCTION}"
    # The raw template, its tags and the doubled braces of the format line are gone.
    for leftover in ("*user question:*", "{{", "<answer>", "<code>", "Remember to place"):
        assert leftover not in user
    # Only the user turn depends on the style.
    assert convert_row(two_call_row(), prompt_style="qwen_boxed")[1:] == convert_row(two_call_row())[1:]


def test_unknown_prompt_style_is_rejected(tmp_path, tool_yaml):
    with pytest.raises(ValueError, match="prompt style must be one of"):
        convert_row(two_call_row(), prompt_style="mine")
    with pytest.raises(ValueError, match="prompt style must be one of"):
        preprocess(
            raw_parquet(tmp_path / "raw.parquet", [two_call_row()]),
            tmp_path / "o.parquet",
            tool_yaml,
            prompt_style="mine",
        )


def test_zero_tool_calls_is_a_plain_answer():
    messages = convert_row(sft_row("What is 2+2?", "Simple arithmetic: 2+2=4.\n\n" + answer("4")))
    assert [m["role"] for m in messages] == ["user", "assistant"]
    assert messages[1] == {"role": "assistant", "content": "Simple arithmetic: 2+2=4.\n\n\\boxed{4}"}


def test_fence_variants_without_repair():
    for body in ("```py\nprint(1)\n```", "```python\nprint(1)```", "\n```python\n\nprint(1)\n\n```\n"):
        repairs: list[str] = []
        messages = convert_row(sft_row("q?", f"<code>{body}</code>" + output("1") + answer("1")), repairs=repairs)
        assert (messages[1]["tool_calls"], repairs) == (call("print(1)"), [])


def test_interpreter_output_keeps_inner_tags_and_blank_lines():
    text = code("print('<' + 'code>')\nprint()\nprint(1)") + "\n" + output("<code>\n\n1") + "\n" + answer("1")
    messages = convert_row(sft_row("q?", text))
    assert messages[2] == {"role": "tool", "content": "<code>\n\n1"}


REPAIRS = [
    pytest.param(
        "<code>\nprint(6 * 7)\n</code>\n" + output("42") + "\n" + answer("42"),
        "code_without_fences",
        lambda m: m[1]["tool_calls"] == call("print(6 * 7)"),
        id="code-without-fences",
    ),
    pytest.param(
        "<code>\n```python\nprint(6 * 7)\n</code>\n" + output("42") + "\n" + answer("42"),
        "unclosed_code_fence",
        lambda m: m[1]["tool_calls"] == call("print(6 * 7)"),
        id="unclosed-fence",
    ),
    pytest.param(
        "Compute.\n<code>\n```python\nprint(6 * 7)\n```\n" + output("42") + "\n" + answer("42"),
        "unclosed_code_tag",
        lambda m: m[1]["tool_calls"] == call("print(6 * 7)") and m[2]["content"] == "42",
        id="unclosed-code-tag",
    ),
    pytest.param(
        "It is 42.\n\n<answer>\n\\boxed{42}\n",
        "unclosed_answer_tag",
        lambda m: m[-1]["content"] == "It is 42.\n\n\\boxed{42}",
        id="unclosed-answer",
    ),
    pytest.param(
        "It is 42.\n\n<answer>\n42\n</answer>",
        "answer_boxed_added",
        lambda m: m[-1]["content"] == "It is 42.\n\n\\boxed{42}",
        id="answer-without-boxed",
    ),
    pytest.param(
        "It is 42.\n\n" + answer("42") + "\n\nHope this helps! \\boxed{41}",
        "text_after_answer_dropped",
        lambda m: m[-1]["content"] == "It is 42.\n\n\\boxed{42}",
        id="text-after-answer",
    ),
    pytest.param(
        code("print(6 * 7)") + "\n" + output("42") + "\n\nSo the answer is \\boxed{42}.",
        "answer_without_tags",
        lambda m: m[-1]["content"] == "So the answer is \\boxed{42}.",
        id="boxed-without-tags",
    ),
]


@pytest.mark.parametrize(("assistant", "repair", "check"), REPAIRS)
def test_repairable_rows_are_fixed_and_counted(assistant, repair, check):
    repairs: list[str] = []
    messages = convert_row(sft_row("What is 6 times 7?", assistant), repairs=repairs)
    assert repairs == [repair]
    assert check(messages)


GOOD_CODE = code("print(6 * 7)") + "\n"
BROKEN = [
    pytest.param(
        sft_row("q?", GOOD_CODE + "<interpreter>\n42\n" + answer("42")), "unclosed_tag", id="unclosed-interpreter"
    ),
    pytest.param(
        sft_row("q?", "<code>\n```python\nprint(1)\n```\n" + answer("1")),
        "unclosed_tag",
        id="unclosed-code-before-answer",
    ),
    pytest.param(sft_row("q?", "<answer>\n\\boxed{1}\n" + GOOD_CODE), "unclosed_tag", id="unclosed-answer-then-code"),
    pytest.param(sft_row("q?", output("42") + answer("42")), "output_without_code", id="output-without-code"),
    pytest.param(
        sft_row("q?", GOOD_CODE + GOOD_CODE + output("42") + answer("42")), "code_without_output", id="two-codes"
    ),
    pytest.param(sft_row("q?", GOOD_CODE + answer("42")), "code_without_output", id="code-then-answer"),
    pytest.param(sft_row("q?", "Look: " + GOOD_CODE), "code_without_output", id="code-at-end"),
    pytest.param(
        sft_row("q?", GOOD_CODE + "Running it.\n" + output("42") + answer("42")),
        "text_between_code_and_output",
        id="text-between",
    ),
    pytest.param(
        sft_row("q?", "<code>\n```python\n\n```\n</code>" + output("") + answer("1")), "empty_code", id="empty-code"
    ),
    pytest.param(
        sft_row("q?", "<code>\n```python\nprint(1)\n```\nThis prints 1.\n</code>" + output("1") + answer("1")),
        "text_in_code_block",
        id="text-after-fence",
    ),
    pytest.param(sft_row("q?", "I do not know."), "no_final_answer", id="no-answer"),
    pytest.param(sft_row("q?", "<answer>\nfirst 1\nthen 2\n</answer>"), "answer_not_boxed", id="multiline-unboxed"),
    pytest.param(sft_row("q?", "<answer>\n\\boxed{}\n</answer>"), "empty_answer", id="empty-boxed"),
    pytest.param(sft_row("q?", "Done </interpreter> here.\n" + answer("1")), "stray_tag", id="stray-tag"),
    pytest.param(
        {"messages": [{"role": "user", "content": "What is 1+1?"}, {"role": "assistant", "content": answer("2")}]},
        "no_question",
        id="no-marker",
    ),
    pytest.param(
        {"messages": [{"role": "user", "content": raw_user("  ")}, {"role": "assistant", "content": answer("2")}]},
        "no_question",
        id="empty-question",
    ),
    pytest.param(
        {"messages": [{"role": "assistant", "content": answer("2")}, {"role": "user", "content": raw_user("q")}]},
        "bad_row_layout",
        id="roles-swapped",
    ),
    pytest.param({"messages": [{"role": "user", "content": raw_user("q")}]}, "bad_row_layout", id="one-message"),
    pytest.param(
        {"messages": [{"role": "user", "content": raw_user("q")}, {"role": "assistant", "content": None}]},
        "bad_row_layout",
        id="null-content",
    ),
    pytest.param({"conversations": []}, "bad_row_layout", id="no-messages-column"),
]


@pytest.mark.parametrize(("row", "kind"), BROKEN)
def test_broken_rows_raise_with_a_kind_and_reason(row, kind):
    with pytest.raises(ConversionError) as caught:
        convert_row(row)
    assert caught.value.kind == kind
    assert str(caught.value)


# ------------------------------------------------------------------ tool schema


def test_tool_schema_is_read_in_verl_key_order(tool_yaml):
    schema = load_tool_schema(tool_yaml)
    assert schema == TOOL_SCHEMA  # the unknown key is dropped
    assert list(schema) == ["type", "function"]
    assert list(schema["function"]) == ["name", "description", "parameters"]
    assert list(schema["function"]["parameters"]) == ["type", "properties", "required"]


def test_tool_yaml_without_code_interpreter_is_rejected(tmp_path):
    path = write_tool_yaml(tmp_path / "tool.yaml", name="python")
    with pytest.raises(ToolConfigError, match=r"tool\.yaml.*code_interpreter.*'python'.*CodeInterpreterTool"):
        load_tool_schema(path)
    with pytest.raises(ToolConfigError, match="not found"):
        load_tool_schema(tmp_path / "missing.yaml")
    (tmp_path / "flat.yaml").write_text("name: code_interpreter\n")
    with pytest.raises(ToolConfigError, match="top-level `tools:`"):
        load_tool_schema(tmp_path / "flat.yaml")


def test_own_tool_entry_without_schema_uses_the_tools_schema(tmp_path):
    from retool import tool_schema

    path = tmp_path / "tool.yaml"
    path.write_text("tools:\n  - class_name: retool.tool.CodeInterpreterTool\n    config: {type: native}\n")
    assert load_tool_schema(path) == tool_schema.tool_schema()


def test_repository_tool_yaml_has_the_schema():
    path = REPO / "configs" / "tool.yaml"
    assert load_tool_schema(path)["function"]["name"] == "code_interpreter"


# ------------------------------------------------------------------ whole files


def mixed_rows() -> list[dict]:
    return [
        two_call_row(),
        {"messages": [{"role": "user", "content": "no marker"}, {"role": "assistant", "content": answer("1")}]},
        sft_row("What is 6 times 7?", "<code>\nprint(6 * 7)\n</code>\n" + output("42") + "\n" + answer("42")),
        sft_row("q?", GOOD_CODE + "<interpreter>\n42\n" + answer("42")),
    ]


def test_preprocess_writes_messages_and_tools_and_reports_rows(tmp_path, tool_yaml):
    source = raw_parquet(tmp_path / "train_2000.parquet", mixed_rows())
    summary = preprocess(source, tmp_path / "out" / "sft.parquet", tool_yaml)
    assert summary["prompt_style"] == "verl_retool"
    assert (summary["rows_read"], summary["converted"], summary["skipped"]) == (4, 2, 2)
    assert [(s["row"], s["kind"]) for s in summary["skipped_rows"]] == [(1, "no_question"), (3, "unclosed_tag")]
    assert summary["skip_reasons"] == {"no_question": 1, "unclosed_tag": 1}
    assert summary["repaired_rows"] == {"code_without_fences": [2]}
    assert summary["tool_calls_per_row"] == {1: 1, 2: 1}

    table = pq.read_table(tmp_path / "out" / "sft.parquet")
    assert table.column_names == ["messages", "tools"]
    rows = table.to_pylist()
    assert rows[0]["tools"] == [TOOL_SCHEMA]
    # Parquet gives every message every key; plain turns carry tool_calls=None.
    expected = convert_row(two_call_row())
    assert [{k: v for k, v in m.items() if v is not None} for m in rows[0]["messages"]] == expected
    assert all("tool_calls" in m for m in rows[0]["messages"])


def test_on_error_fail_names_the_row_and_writes_nothing(tmp_path, tool_yaml):
    source = raw_parquet(tmp_path / "raw.parquet", mixed_rows())
    with pytest.raises(ConversionError, match=r"raw\.parquet row 1: .*\*user question:\*"):
        preprocess(source, tmp_path / "sft.parquet", tool_yaml, on_error="fail")
    assert not (tmp_path / "sft.parquet").exists()


def test_jsonl_and_snapshot_directory_inputs(tmp_path, tool_yaml):
    jsonl = tmp_path / "raw.jsonl"
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in mixed_rows()) + "\n")
    assert preprocess(jsonl, tmp_path / "a.parquet", tool_yaml)["converted"] == 2
    # A hub snapshot: data under data/, a README and a hidden cache directory beside it.
    snapshot = tmp_path / "ReTool-SFT"
    (snapshot / "data").mkdir(parents=True)
    (snapshot / ".cache").mkdir()
    (snapshot / "README.md").write_text("card")
    raw_parquet(snapshot / "data" / "train_2000.parquet", mixed_rows())
    raw_parquet(snapshot / ".cache" / "stale.parquet", mixed_rows())
    summary = preprocess(snapshot, tmp_path / "b.parquet", tool_yaml)
    assert summary["rows_read"] == 4 and "train_2000.parquet" in summary["input"]


def test_save_to_disk_directory_input(tmp_path, tool_yaml):
    import datasets

    datasets.Dataset.from_list(mixed_rows()).save_to_disk(str(tmp_path / "saved"))
    assert preprocess(tmp_path / "saved", tmp_path / "c.parquet", tool_yaml)["converted"] == 2


def test_nothing_convertible_is_an_error(tmp_path, tool_yaml):
    source = raw_parquet(tmp_path / "raw.parquet", mixed_rows()[1:2])
    with pytest.raises(DataSourceError, match="none of the 1 rows"):
        preprocess(source, tmp_path / "sft.parquet", tool_yaml)


def test_cli_summary_report_and_errors(tmp_path, tool_yaml, capsys):
    source = raw_parquet(tmp_path / "raw.parquet", mixed_rows())
    out, report = tmp_path / "sft.parquet", tmp_path / "report.json"
    code_ = main(
        ["--input", str(source), "--output", str(out), "--tool-config", str(tool_yaml), "--report", str(report)]
    )
    printed = capsys.readouterr().out
    assert code_ == 0 and out.exists()
    assert "converted 2" in printed and "row 1: [no_question]" in printed and "row 3: [unclosed_tag]" in printed
    assert json.loads(report.read_text())["skipped_rows"][1]["row"] == 3

    assert main(["--input", str(tmp_path / "nope.parquet"), "--output", str(out), "--tool-config", str(tool_yaml)]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert main(["--input", str(source), "--output", str(out), "--tool-config", str(tmp_path / "x.yaml")]) == 2
    assert "x.yaml not found" in capsys.readouterr().err
    assert (
        main(["--input", str(source), "--output", str(out), "--tool-config", str(tool_yaml), "--on-error", "fail"]) == 1
    )
    assert "row 1" in capsys.readouterr().err


def test_cli_prompt_style(tmp_path, tool_yaml, capsys):
    source = raw_parquet(tmp_path / "raw.parquet", [two_call_row()])
    for style, expected in (("verl_retool", REFERENCE_USER), ("qwen_boxed", f"{QUESTION}\n\n{ANSWER_INSTRUCTION}")):
        out = tmp_path / f"{style}.parquet"
        assert (
            main(
                ["--input", str(source), "--output", str(out), "--tool-config", str(tool_yaml), "--prompt-style", style]
            )
            == 0
        )
        assert f"prompt style {style}" in capsys.readouterr().out
        assert pq.read_table(out).to_pylist()[0]["messages"][0]["content"] == expected
    with pytest.raises(SystemExit):
        main(["--input", str(source), "--output", str(tmp_path / "x.parquet"), "--prompt-style", "other"])


def test_top_level_script_turns_an_unreachable_hub_into_advice(tmp_path, tool_yaml):
    """The real hub loading path (datasets.load_dataset), made to fail fast with the hub's offline switch."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")}
    result = subprocess.run(
        [
            sys.executable,
            str(REPO / "retool_sft_preprocess.py"),
            "--input",
            "JoeYing/ReTool-SFT",
            "--output",
            str(tmp_path / "sft.parquet"),
            "--tool-config",
            str(tool_yaml),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert result.returncode == 2, result.stderr
    assert "JoeYing/ReTool-SFT" in result.stderr
    assert "hf download JoeYing/ReTool-SFT --repo-type dataset" in result.stderr and "--input" in result.stderr
    assert "`retool-data download`" in result.stderr  # the README's command comes first


def test_bare_call_reads_the_downloaded_set_and_writes_where_the_sft_launcher_reads(tmp_path, monkeypatch, capsys):
    """The reference's habit, `python3 retool_sft_preprocess.py` with no arguments: input from data/raw/ReTool-SFT
    (retool-data download), output to data/reference/retool_sft.parquet (the SFT launcher's default DATA_DIR)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data" / "raw" / "ReTool-SFT").mkdir(parents=True)
    raw_parquet(tmp_path / "data" / "raw" / "ReTool-SFT" / "train.parquet", [two_call_row()])
    assert main([]) == 0
    printed = capsys.readouterr().out
    written = tmp_path / "data" / "reference" / "retool_sft.parquet"
    assert "data/raw/ReTool-SFT (train.parquet) -> data/reference/retool_sft.parquet" in printed
    assert f"PROFILE=reference DATA_DIR={written.parent} ./run_qwen3_4b_sft_npu.sh" in printed
    assert "retool-data prepare --profile reference" in printed
    assert pq.read_table(written).to_pylist()[0]["messages"][0]["content"] == REFERENCE_USER
    assert main(["--profile", "improved"]) == 0  # the improved profile's folder and wording
    row = pq.read_table(tmp_path / "data" / "improved" / "retool_sft.parquet").to_pylist()[0]
    assert row["messages"][0]["content"].endswith(ANSWER_INSTRUCTION)
