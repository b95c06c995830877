"""ReTool-SFT -> multi-turn tool-calling SFT rows (`messages` + `tools`) for verl's MultiTurnSFTDataset.

Raw layout (JoeYing/ReTool-SFT, 2,000 rows): `messages = [user, assistant]`. The user turn is a long instruction
template ending in `*user question:*`, the question, and a trailing "Remember to place the final answer ..." format
line. The assistant turn is one string interleaving free text, `<code>```python ...```</code>` blocks,
`<interpreter>output</interpreter>` blocks, and a final `<answer>\\boxed{N}</answer>`.

Converted row:
- `messages`: the user turn depends on the prompt style (retool.data.prompt). `verl_retool` (default), as the
  reference run: everything after the `*user question:*` marker with the `<answer>`/`</answer>` tags removed and
  the ends stripped, i.e. the question and the "Remember to place the final answer ... \\boxed{{...}}" line.
  `qwen_boxed`: `qwen_boxed_prompt(question)`, the question plus the boxed-answer instruction (the text of that
  style's RL and validation prompts). Either way the instruction template before the marker (it describes the old
  <code>/<interpreter> tag protocol) is dropped. Each code block becomes an assistant message (the text before it
  as `content`) with one `tool_calls` entry `{type: function, function: {name: code_interpreter, arguments:
  {"code": ...}}}`, followed by a `tool` message holding the interpreter output. The last assistant message holds
  the text before the answer and the `\\boxed{}` answer (the `<answer>` tags are removed).
- `tools`: `[schema]`, the code_interpreter tool schema read from the tool YAML, keyed in the order verl's
  `OpenAIFunctionToolSchema.model_dump(exclude_unset=True, exclude_none=True)` gives at RL time, so SFT and RL
  prompts render identically.
Tool-call `arguments` are stored as a dict (a parquet struct `{code: string}`): the chat template serialises it with
`tojson`, exactly as it does for the dicts verl's ToolAgentLoop builds.

Irregular rows: repairable cases are fixed and counted per kind (code without fences, unclosed fence, a `<code>` left
open before its `<interpreter>`, an unclosed final `<answer>`, a single-line answer without `\\boxed`, text after
`</answer>` (dropped), a final `\\boxed{}` answer without `<answer>` tags). Anything else raises ConversionError with a
`kind` and a reason; `preprocess` reports each skipped row with its index, or stops at the first with
on_error="fail".
"""

from __future__ import annotations

import argparse
import re
from collections import Counter, defaultdict
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa

from retool.constants import REPO_ROOT, TOOL_NAME
from retool.data.io import (
    ConversionError,
    DataSourceError,
    add_conversion_arguments,
    open_rows,
    run_conversion,
    skipped_rows_lines,
    write_parquet,
)
from retool.data.fetch import ASSETS
from retool.data.layout import DEFAULT_RAW, RL_TRAIN_FILE, RL_VAL_FILE, SFT_FILE, data_dir
from retool.data.prompt import DEFAULT_PROMPT_STYLE, check_prompt_style, qwen_boxed_prompt
from retool.profiles import add_profile_arguments, resolve_profile_arguments
from retool.tool_yaml import ToolConfigError, load_tool_schema

QUESTION_MARKER = "*user question:*"
DEFAULT_TOOL_CONFIG = REPO_ROOT / "configs" / "tool.yaml"  # the reference profile's

# The raw trailing format line: "Remember to place the final answer in the last part using the format: \n<answer>..."
_RAW_FORMAT_LINE = re.compile(r"\s*Remember to place the final answer in the last part using the format:.*\Z", re.S)
_OPEN_TAG = re.compile(r"<(code|interpreter|answer)>")
_ANY_TAG = re.compile(r"</?(?:code|interpreter|answer)>")
_FENCE_OPEN = re.compile(r"\A\s*```[^\n`]*\n")  # ```python, ```py, ``` python ...
_BOXED = re.compile(r"\\boxed\s*\{")
_FILLED_BOXED = re.compile(r"\\boxed\s*\{\s*[^\s}]")
_MAX_BARE_ANSWER_CHARS = 100

_TOOL_CALL_TYPE = pa.struct(
    [
        ("type", pa.string()),
        ("function", pa.struct([("name", pa.string()), ("arguments", pa.struct([("code", pa.string())]))])),
    ]
)
MESSAGES_TYPE = pa.list_(
    pa.struct([("role", pa.string()), ("content", pa.string()), ("tool_calls", pa.list_(_TOOL_CALL_TYPE))])
)


# ---------------------------------------------------------------- one row


def convert_row(
    row: Mapping[str, Any], repairs: list[str] | None = None, prompt_style: str = DEFAULT_PROMPT_STYLE
) -> list[dict[str, Any]]:
    """Convert one raw ReTool-SFT row into chat `messages` with tool calls (see the module docstring).

    Raises ConversionError (with `.kind`) when the row cannot be converted. If `repairs` is given, the kinds of the
    repairs applied to this row are appended to it. `prompt_style` ("verl_retool" or "qwen_boxed") picks the
    user turn."""
    check_prompt_style(prompt_style)
    repairs = [] if repairs is None else repairs
    if not isinstance(row, Mapping) or row.get("messages") is None:
        raise ConversionError("bad_row_layout", "the row has no `messages` (column missing or null)")
    raw = list(row["messages"])
    roles = [m.get("role") if isinstance(m, Mapping) else None for m in raw]
    if roles != ["user", "assistant"]:
        raise ConversionError("bad_row_layout", f"expected messages with roles ['user', 'assistant'], got {roles}")
    for message in raw:
        if not isinstance(message.get("content"), str):
            raise ConversionError(
                "bad_row_layout", f"{message['role']} content is {type(message.get('content')).__name__}, not text"
            )

    messages: list[dict[str, Any]] = [{"role": "user", "content": user_turn(raw[0]["content"], prompt_style)}]
    rounds, final = _split_assistant(raw[1]["content"], repairs)
    for content, code, output in rounds:
        call = {"type": "function", "function": {"name": TOOL_NAME, "arguments": {"code": code}}}
        messages.append({"role": "assistant", "content": content, "tool_calls": [call]})
        messages.append({"role": "tool", "content": output})
    messages.append({"role": "assistant", "content": final})
    return messages


def user_turn(user_content: str, prompt_style: str = DEFAULT_PROMPT_STYLE) -> str:
    """The converted user message of a raw ReTool-SFT user turn, in `prompt_style` (module docstring).

    Raises ConversionError("no_question") when the marker is missing or no question follows it (in both styles:
    a row whose question is empty is skipped, though the reference would have kept its bare format line)."""
    question = _question(user_content)
    if check_prompt_style(prompt_style) == "qwen_boxed":
        return qwen_boxed_prompt(question)
    after_marker = user_content[user_content.index(QUESTION_MARKER) + len(QUESTION_MARKER) :]
    return after_marker.replace("<answer>", "").replace("</answer>", "").strip()


def _question(user_content: str) -> str:
    """The bare question: after the marker, without the trailing format line."""
    if QUESTION_MARKER not in user_content:
        raise ConversionError("no_question", f"the user turn lacks the {QUESTION_MARKER!r} marker")
    question = _RAW_FORMAT_LINE.sub("", user_content.rpartition(QUESTION_MARKER)[2]).strip()
    if not question:
        raise ConversionError("no_question", f"no question follows {QUESTION_MARKER!r}")
    return question


def _split_assistant(text: str, repairs: list[str]) -> tuple[list[tuple[str, str, str]], str]:
    """Split the raw assistant string into [(text before the code, code, output), ...] and the final content."""
    rounds: list[tuple[str, str, str]] = []
    pending: tuple[str, str, int] | None = None  # (text before, code, char offset) awaiting its <interpreter>
    pos = 0
    while (match := _OPEN_TAG.search(text, pos)) is not None:
        tag, start, body_start = match.group(1), match.start(), match.end()
        before, before_start = text[pos:start], pos
        close = _closing(text, tag, body_start)
        if tag == "code":
            if pending is not None:
                raise ConversionError(
                    "code_without_output",
                    f"<code> at char {pending[2]} has no <interpreter> output before the next <code> at char {start}",
                )
            if close == -1:
                follower = _OPEN_TAG.search(text, body_start)
                if follower is None or follower.group(1) != "interpreter":
                    raise ConversionError("unclosed_tag", f"<code> at char {start} is never closed")
                repairs.append("unclosed_code_tag")  # the <interpreter> that follows bounds the code
                body_end = pos = follower.start()
            else:
                body_end, pos = close, close + len("</code>")
            pending = (_text(before, before_start), _code(text[body_start:body_end], start, repairs), start)
        elif tag == "interpreter":
            if pending is None:
                raise ConversionError("output_without_code", f"<interpreter> at char {start} follows no <code> block")
            if before.strip():
                raise ConversionError(
                    "text_between_code_and_output", f"text between </code> and <interpreter> at char {start}"
                )
            if close == -1:
                raise ConversionError("unclosed_tag", f"<interpreter> at char {start} is never closed")
            rounds.append((pending[0], pending[1], text[body_start:close].strip("\n")))
            pending, pos = None, close + len("</interpreter>")
        else:
            if pending is not None:
                raise ConversionError(
                    "code_without_output", f"<code> at char {pending[2]} has no <interpreter> output before <answer>"
                )
            if close == -1:
                if _OPEN_TAG.search(text, body_start):
                    raise ConversionError("unclosed_tag", f"<answer> at char {start} is never closed")
                repairs.append("unclosed_answer_tag")
                answer, after = text[body_start:], ""
            else:
                answer, after = text[body_start:close], text[close + len("</answer>") :]
            if after.strip():
                repairs.append("text_after_answer_dropped")
            return rounds, _final(_text(before, before_start), answer, start, repairs)
    if pending is not None:
        raise ConversionError("code_without_output", f"<code> at char {pending[2]} has no <interpreter> output")
    rest = _text(text[pos:], pos)
    if _FILLED_BOXED.search(rest):
        repairs.append("answer_without_tags")
        return rounds, rest
    raise ConversionError("no_final_answer", "no <answer> block and no \\boxed{} answer after the last tool output")


def _closing(text: str, tag: str, body_start: int) -> int:
    """Offset of the tag's closing marker, or -1 if it is missing or another block opens first."""
    close = text.find(f"</{tag}>", body_start)
    if close == -1:
        return -1
    # Interpreter output may print anything except the tag itself; code and answer bodies hold no tags.
    opener = re.compile(f"<{tag}>") if tag == "interpreter" else _OPEN_TAG
    nested = opener.search(text, body_start, close)
    return -1 if nested else close


def _text(segment: str, offset: int) -> str:
    """Free assistant text: stripped, and free of stray tags (they would be trained as content)."""
    stray = _ANY_TAG.search(segment)
    if stray:
        raise ConversionError(
            "stray_tag", f"stray {stray.group(0)} in assistant text near char {offset + stray.start()}"
        )
    return segment.strip()


def _code(body: str, offset: int, repairs: list[str]) -> str:
    """The code of a <code> body: inside its ```python fence, or the bare body when the fence is missing."""
    opening = _FENCE_OPEN.match(body)
    rest = body[opening.end() :] if opening else body
    closing = rest.find("```")
    if closing == -1:
        code = rest
        repairs.append("unclosed_code_fence" if opening else "code_without_fences")
    else:
        code, after = rest[:closing], rest[closing + 3 :]
        if after.strip():
            raise ConversionError("text_in_code_block", f"text after the closing ``` inside <code> at char {offset}")
        if not opening:
            repairs.append("code_without_fences")
    code = code.strip("\n").rstrip()
    if not code.strip():
        raise ConversionError("empty_code", f"<code> block at char {offset} holds no code")
    return code


def _final(before: str, answer: str, offset: int, repairs: list[str]) -> str:
    answer = answer.strip()
    if not _BOXED.search(answer):
        if not answer or "\n" in answer or len(answer) > _MAX_BARE_ANSWER_CHARS:
            raise ConversionError("answer_not_boxed", f"<answer> at char {offset} holds no \\boxed{{}} answer")
        repairs.append("answer_boxed_added")
        answer = f"\\boxed{{{answer}}}"
    elif not _FILLED_BOXED.search(answer):
        raise ConversionError("empty_answer", f"<answer> at char {offset} holds an empty \\boxed{{}}")
    return f"{before}\n\n{answer}" if before else answer


# ---------------------------------------------------------------- whole files


def preprocess(
    input: str | Path,
    output: str | Path,
    tool_config: str | Path = DEFAULT_TOOL_CONFIG,
    on_error: str = "skip",
    split: str | None = None,
    prompt_style: str = DEFAULT_PROMPT_STYLE,
) -> dict[str, Any]:
    """Convert every row of `input` (hub id, parquet/jsonl file or dataset directory) and write `output` (parquet
    with `messages` and `tools`); `prompt_style` picks the user turn ("verl_retool" or "qwen_boxed", module docstring).
    Returns a summary dict: prompt_style, rows_read, converted, skipped, skip_reasons {kind: n},
    skipped_rows [{row, kind, reason}], repairs {kind: n}, repaired_rows {kind: [row indices]},
    tool_calls_per_row {calls: rows}. With on_error="fail" the first unconvertible row raises ConversionError
    naming its index and nothing is written."""
    if on_error not in ("skip", "fail"):
        raise ValueError(f"on_error must be 'skip' or 'fail', got {on_error!r}")
    check_prompt_style(prompt_style)
    schema = load_tool_schema(tool_config)
    source = open_rows(input, split)
    converted: list[list[dict[str, Any]]] = []
    skipped: list[dict[str, Any]] = []
    repaired_rows: dict[str, list[int]] = defaultdict(list)
    calls = Counter()
    rows_read = 0
    for index, raw in enumerate(source):
        rows_read += 1
        row_repairs: list[str] = []
        try:
            messages = convert_row(raw, repairs=row_repairs, prompt_style=prompt_style)
        except ConversionError as exc:
            if on_error == "fail":
                raise ConversionError(exc.kind, f"{source.description} row {index}: {exc}") from exc
            skipped.append({"row": index, "kind": exc.kind, "reason": str(exc)})
            continue
        for kind in row_repairs:
            repaired_rows[kind].append(index)
        calls[sum(1 for m in messages if m.get("tool_calls"))] += 1
        converted.append(messages)
    if not converted:
        raise DataSourceError(
            f"none of the {rows_read} rows of {source.description} could be converted; "
            f"reasons: {dict(Counter(s['kind'] for s in skipped))}"
        )

    tools_type = pa.array([[schema]]).type
    write_parquet(
        ({"messages": messages, "tools": [schema]} for messages in converted),
        output,
        schema=pa.schema([("messages", MESSAGES_TYPE), ("tools", tools_type)]),
    )
    return {
        "input": source.description,
        "output": str(output),
        "prompt_style": prompt_style,
        "rows_read": rows_read,
        "converted": len(converted),
        "skipped": len(skipped),
        "skip_reasons": dict(Counter(s["kind"] for s in skipped)),
        "skipped_rows": skipped,
        "repairs": {kind: len(rows) for kind, rows in repaired_rows.items()},
        "repaired_rows": dict(repaired_rows),
        "tool_calls_per_row": dict(sorted(calls.items())),
    }


def format_summary(summary: dict[str, Any], max_rows: int = 20) -> str:
    """Human-readable report of a preprocess summary (the first `max_rows` skipped rows listed)."""
    lines = [
        f"{summary['input']} -> {summary['output']} (prompt style {summary['prompt_style']})",
        f"rows read {summary['rows_read']}, converted {summary['converted']}, skipped {summary['skipped']}",
        f"tool calls per row: {summary['tool_calls_per_row']}",
    ]
    if summary["repairs"]:
        lines.append(f"repaired: {summary['repairs']}")
    lines += skipped_rows_lines(summary, max_rows)
    return "\n".join(lines)


def default_input() -> str:
    """Where ``retool-data download`` puts ReTool-SFT when that folder is here, else the hub id (as the reference's
    preprocessing script loaded it)."""
    local = DEFAULT_RAW / ASSETS["retool_sft"].folder
    return str(local) if local.is_dir() else ASSETS["retool_sft"].hf_id


def main(argv: list[str] | None = None) -> int:
    """`retool-sft-preprocess`: ReTool-SFT -> verl multi-turn SFT parquet."""
    parser = argparse.ArgumentParser(
        prog="retool-sft-preprocess",
        description="Convert ReTool-SFT rows into multi-turn tool-calling SFT rows (messages + tools) for verl.",
    )
    parser.add_argument(
        "--input",
        default=None,
        help="hub id (JoeYing/ReTool-SFT), a local parquet/jsonl/json file, or a dataset directory "
        f"(default: {DEFAULT_RAW / ASSETS['retool_sft'].folder}, where `retool-data download` "
        f"puts it, when it is there; else the hub id {ASSETS['retool_sft'].hf_id})",
    )
    parser.add_argument(
        "--output",
        type=Path,
        default=None,
        help=f"output .parquet file (default: data/<profile>/{SFT_FILE}, where the SFT launcher reads it)",
    )
    add_profile_arguments(parser, tool_config=True)
    add_conversion_arguments(parser)
    args = parser.parse_args(argv)
    resolve_profile_arguments(args)
    args.input = args.input or default_input()
    args.output = args.output or data_dir(args.profile) / SFT_FILE
    code = run_conversion(
        "retool-sft-preprocess",
        lambda: preprocess(
            args.input,
            args.output,
            args.tool_config,
            on_error=args.on_error,
            split=args.split,
            prompt_style=args.prompt_style,
        ),
        format_summary,
        args.report,
        input_errors=(DataSourceError, ToolConfigError),
    )
    if code == 0:
        print(
            f"\nthe SFT launcher reads it from its folder: PROFILE={args.profile} DATA_DIR="
            f"{args.output.parent.resolve()} ./run_qwen3_4b_sft_npu.sh\nRL needs {RL_TRAIN_FILE} and {RL_VAL_FILE} "
            f"beside it: `retool-data prepare --profile {args.profile}` writes all three"
        )
    return code


if __name__ == "__main__":
    raise SystemExit(main())
