"""DAPO-Math-17k and AIME 2024 / 2025 -> verl RL rows for the tool agent (`retool-prepare-rl`).

Inputs: DAPO-Math-17k's layout (`prompt`, `reward_model`, `extra_info`) or an AIME layout (problem/answer/id or
Problem/Answer/ID columns). Each output row:
- `data_source`: "math_dapo", "aime_2024" or "aime_2025" (it names the validation curves,
  e.g. `val-core/aime_2025/acc/mean@30`);
- `prompt`: one user message in the chosen prompt style (retool.data.prompt). `verl_retool` (default), as the
  reference run: the source text unchanged (DAPO: the whole user message, its "Answer:" instruction included; AIME:
  the problem), a newline and "The answer format must be: \\boxed{'The final answer goes here.'}". `qwen_boxed`: the
  bare problem (DAPO's fixed prefix and suffix removed), a blank line and the `\\boxed{}` instruction;
- `ability` "MATH"; `reward_model` {style: "rule", ground_truth: str} (AIME answers as plain integers, "025" -> "25");
- `extra_info`: index (DAPO's UUID, or the AIME id, always a string), split, question (the bare problem),
  need_tools_kwargs, tools_kwargs {code_interpreter: {create_kwargs: {ground_truth}}};
- `agent_name` "tool_agent" (verl's ToolAgentLoop).

Every file is written with the same explicit arrow schema (`RL_SCHEMA`), because verl concatenates its train or
validation files with `datasets.concatenate_datasets`, which refuses files whose column types differ.

DAPO repeats each of its 17,917 problems 100 times under the same index; `dedupe=True` keeps the first row of each
index and of each problem text (whitespace-normalised) and counts what it dropped.
"""

from __future__ import annotations

import argparse
import re
from collections import Counter
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa

from retool.constants import TOOL_NAME
from retool.data.io import (
    ConversionError,
    DataSourceError,
    RowSource,
    add_conversion_arguments,
    open_rows,
    run_conversion,
    skipped_rows_lines,
    write_parquet,
)
from retool.profiles import add_profile_arguments, resolve_profile_arguments
from retool.data.prompt import (
    DEFAULT_PROMPT_STYLE,
    check_prompt_style,
    qwen_boxed_prompt,
    verl_retool_prompt,
)

AGENT_NAME = "tool_agent"
DAPO_PREFIX = (
    "Solve the following math problem step by step. The last line of your response should be of the form "
    "Answer: $Answer (without quotes) where $Answer is the answer to the problem.\n\n"
)
DAPO_SUFFIX = '\n\nRemember to put your answer on its own line after "Answer:".'
DATA_SOURCES = {"dapo": "math_dapo", "aime2024": "aime_2024", "aime2025": "aime_2025"}
SOURCES = ("auto", *DATA_SOURCES)
_SPLITS = {"dapo": "train", "aime2024": "test", "aime2025": "test"}

RL_SCHEMA = pa.schema(
    [
        ("data_source", pa.string()),
        ("prompt", pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))),
        ("ability", pa.string()),
        ("reward_model", pa.struct([("style", pa.string()), ("ground_truth", pa.string())])),
        (
            "extra_info",
            pa.struct(
                [
                    ("index", pa.string()),
                    ("split", pa.string()),
                    ("question", pa.string()),
                    ("need_tools_kwargs", pa.bool_()),
                    (
                        "tools_kwargs",
                        pa.struct(
                            [(TOOL_NAME, pa.struct([("create_kwargs", pa.struct([("ground_truth", pa.string())]))]))]
                        ),
                    ),
                ]
            ),
        ),
        ("agent_name", pa.string()),
    ]
)


# ---------------------------------------------------------------- one row


def convert_row(
    raw: Mapping[str, Any], source: str, notes: list[str] | None = None, prompt_style: str = DEFAULT_PROMPT_STYLE
) -> dict[str, Any]:
    """One raw row of `source` ("dapo", "aime2024", "aime2025") -> an RL row, its prompt in `prompt_style`
    ("verl_retool" or "qwen_boxed"). Raises ConversionError (with `.kind`). Observations that do not stop the conversion
    (a DAPO prompt without its Answer: instruction) go to `notes`."""
    if source not in DATA_SOURCES:
        raise ValueError(f"source must be one of {list(DATA_SOURCES)}, got {source!r}")
    check_prompt_style(prompt_style)
    if not isinstance(raw, Mapping):
        raise ConversionError("bad_row_layout", f"a row must be a mapping, got {type(raw).__name__}")
    notes = [] if notes is None else notes
    fields = _dapo_fields(raw, notes) if source == "dapo" else _aime_fields(raw)
    source_text, problem, ground_truth, index = fields
    prompt = verl_retool_prompt(source_text) if prompt_style == "verl_retool" else qwen_boxed_prompt(problem)
    return {
        "data_source": DATA_SOURCES[source],
        "prompt": [{"role": "user", "content": prompt}],
        "ability": "MATH",
        "reward_model": {"style": "rule", "ground_truth": ground_truth},
        "extra_info": {
            "index": index,
            "split": _SPLITS[source],
            "question": problem,
            "need_tools_kwargs": True,
            "tools_kwargs": {TOOL_NAME: {"create_kwargs": {"ground_truth": ground_truth}}},
        },
        "agent_name": AGENT_NAME,
    }


def _dapo_fields(raw: Mapping[str, Any], notes: list[str]) -> tuple[str, str, str, str]:
    """(the user message as it is, the bare problem, ground truth, index)."""
    prompt = raw.get("prompt")
    users = [
        m
        for m in (prompt if isinstance(prompt, (list, tuple)) else [])
        if isinstance(m, Mapping) and m.get("role") == "user" and isinstance(m.get("content"), str)
    ]
    if len(users) != 1:
        raise ConversionError("bad_row_layout", "`prompt` must hold exactly one user message with text content")
    content = problem = users[0]["content"]
    has_prefix, has_suffix = problem.startswith(DAPO_PREFIX), problem.endswith(DAPO_SUFFIX)
    problem = problem[len(DAPO_PREFIX) if has_prefix else 0 : len(problem) - (len(DAPO_SUFFIX) if has_suffix else 0)]
    if not (has_prefix and has_suffix):
        notes.append("dapo_instruction_missing")  # kept: the boxed-answer text is still added
    problem = problem.strip()
    if not problem:
        raise ConversionError("empty_problem", "the prompt holds no problem text")
    reward_model = raw.get("reward_model")
    truth = reward_model.get("ground_truth") if isinstance(reward_model, Mapping) else None
    if isinstance(truth, bool) or not isinstance(truth, (str, int)) or not str(truth).strip():
        raise ConversionError(
            "bad_ground_truth", f"reward_model.ground_truth is {truth!r}, expected a non-empty string"
        )
    extra_info = raw.get("extra_info")
    index = extra_info.get("index") if isinstance(extra_info, Mapping) else None
    if index is None or str(index).strip() == "":
        raise ConversionError("bad_row_layout", "extra_info.index is missing")
    return content, problem, str(truth).strip(), str(index)


def _aime_fields(raw: Mapping[str, Any]) -> tuple[str, str, str, str]:
    """(the problem as it is, the problem stripped, ground truth, index)."""
    problem = _first(raw, "problem", "Problem")
    if not isinstance(problem, str) or not problem.strip():
        raise ConversionError("empty_problem", "no `problem`/`Problem` text")
    index = _first(raw, "id", "ID")
    if index is None or str(index).strip() == "":
        raise ConversionError("bad_row_layout", "no `id`/`ID`")
    return problem, problem.strip(), str(aime_answer(_first(raw, "answer", "Answer"))), str(index)


def aime_answer(value: Any) -> int:
    """An AIME answer as an int in 0..999 (accepts 25, "25", "025", 25.0). Raises ConversionError otherwise."""
    number: int | None = None
    if isinstance(value, bool):
        number = None
    elif isinstance(value, int):
        number = value
    elif isinstance(value, float) and value.is_integer():
        number = int(value)
    elif isinstance(value, str) and re.fullmatch(r"\s*\d{1,3}\s*", value):
        number = int(value)
    if number is None or not 0 <= number <= 999:
        raise ConversionError("bad_ground_truth", f"answer {value!r} is not an AIME integer 0-999")
    return number


def _first(raw: Mapping[str, Any], *keys: str) -> Any:
    for key in keys:
        if raw.get(key) is not None:
            return raw[key]
    return None


# ---------------------------------------------------------------- detecting the source


def detect_source(rows: RowSource, hint: str) -> str:
    """ "dapo", "aime2024" or "aime2025" from the columns, the first row (year / ID / url) and `hint` (the input path
    or hub id). Raises DataSourceError asking for --source when it cannot tell."""
    columns = set(rows.columns)
    if "agent_name" in columns:
        raise DataSourceError(f"{rows.description} is already a prepared RL file (it has `agent_name`); use it as is")
    if {"prompt", "reward_model"} <= columns:
        return "dapo"
    if not ({"problem", "answer"} <= columns or {"Problem", "Answer"} <= columns):
        raise DataSourceError(
            f"{rows.description}: columns {sorted(columns)} match neither DAPO (prompt, reward_model, ...) nor an "
            f"AIME layout (problem/answer or Problem/Answer); pass --source"
        )
    first = next(iter(rows), {})
    clues = (
        (r"\A20(2[45])\Z", str(first.get("year", ""))),  # yentinglin/aime_2025: year column
        (r"\A20(2[45])-", str(_first(first, "ID", "id") or "")),  # Maxwell-Jia/AIME_2024: ID "2024-II-4"
        (r"20(2[45])_AIME", str(first.get("url", ""))),  # AoPS wiki links
        (r"(?i)aime[_\-/ ]?(?:20)?(2[45])(?!\d)", hint),  # aime2025/test.jsonl, math-ai/aime25, AIME_2024
    )
    for pattern, text in clues:
        found = re.search(pattern, text)
        if found:
            return f"aime20{found.group(1)}"
    raise DataSourceError(
        f"{rows.description} is in an AIME layout but neither its rows nor its name say 2024 or 2025; "
        f"pass --source aime2024 or --source aime2025"
    )


# ---------------------------------------------------------------- whole files


def prepare(
    input: str | Path,
    output: str | Path,
    source: str = "auto",
    dedupe: bool = False,
    limit: int | None = None,
    on_error: str = "skip",
    split: str | None = None,
    prompt_style: str = DEFAULT_PROMPT_STYLE,
) -> dict[str, Any]:
    """Convert `input` (hub id, parquet/jsonl file or dataset directory) into an RL parquet file at `output`.

    source: "auto" | "dapo" | "aime2024" | "aime2025". prompt_style: "verl_retool" (default) | "qwen_boxed" (module
    docstring). dedupe: keep one row per index and per problem text.
    limit: stop after this many written rows. on_error: "skip" (unconvertible rows are reported) or "fail" (the first
    one raises ConversionError naming its index; nothing is written). Returns a summary dict: source, data_source,
    prompt_style, rows_read, written, skipped, skip_reasons, skipped_rows [{row, kind, reason}], duplicates
    {by_index, by_problem}, notes {kind: n}."""
    if source not in SOURCES:
        raise ValueError(f"source must be one of {SOURCES}, got {source!r}")
    if on_error not in ("skip", "fail"):
        raise ValueError(f"on_error must be 'skip' or 'fail', got {on_error!r}")
    if limit is not None and limit < 1:
        raise ValueError(f"limit must be positive, got {limit}")
    check_prompt_style(prompt_style)
    rows = open_rows(input, split)
    kind = detect_source(rows, str(input)) if source == "auto" else source
    stats: dict[str, Any] = {"rows_read": 0, "skipped_rows": [], "notes": Counter(), "by_index": 0, "by_problem": 0}

    def converted() -> Iterator[dict[str, Any]]:
        seen_index: set[str] = set()
        seen_problem: set[str] = set()
        written = 0
        for number, raw in enumerate(rows):
            if limit is not None and written >= limit:
                return
            stats["rows_read"] += 1
            notes: list[str] = []
            try:
                row = convert_row(raw, kind, notes, prompt_style=prompt_style)
            except ConversionError as exc:
                if on_error == "fail":
                    raise ConversionError(exc.kind, f"{rows.description} row {number}: {exc}") from exc
                stats["skipped_rows"].append({"row": number, "kind": exc.kind, "reason": str(exc)})
                continue
            if dedupe:
                index, problem = row["extra_info"]["index"], " ".join(row["extra_info"]["question"].split())
                if index in seen_index:
                    stats["by_index"] += 1
                    continue
                if problem in seen_problem:
                    stats["by_problem"] += 1
                    continue
                seen_index.add(index)
                seen_problem.add(problem)
            stats["notes"].update(notes)
            written += 1
            yield row

    written = write_parquet(converted(), output, schema=RL_SCHEMA)
    skipped = stats["skipped_rows"]
    return {
        "input": rows.description,
        "output": str(output),
        "source": kind,
        "data_source": DATA_SOURCES[kind],
        "prompt_style": prompt_style,
        "rows_read": stats["rows_read"],
        "written": written,
        "skipped": len(skipped),
        "skip_reasons": dict(Counter(s["kind"] for s in skipped)),
        "skipped_rows": skipped,
        "duplicates": {"by_index": stats["by_index"], "by_problem": stats["by_problem"]} if dedupe else None,
        "notes": dict(stats["notes"]),
        "limit": limit,
    }


def format_summary(summary: dict[str, Any], max_rows: int = 20) -> str:
    """Human-readable report of a prepare summary (the first `max_rows` skipped rows listed)."""
    lines = [
        (
            f"{summary['input']} [{summary['source']}] -> {summary['output']} (data_source {summary['data_source']}, "
            f"prompt style {summary['prompt_style']})"
        ),
        f"rows read {summary['rows_read']}, written {summary['written']}, skipped {summary['skipped']}",
    ]
    if summary["duplicates"] is not None:
        lines.append(
            f"duplicates dropped: {summary['duplicates']['by_index']} by index, "
            f"{summary['duplicates']['by_problem']} by problem text"
        )
    if summary["notes"]:
        lines.append(f"notes: {summary['notes']}")
    lines += skipped_rows_lines(summary, max_rows)
    return "\n".join(lines)


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {value}")
    return value


def main(argv: list[str] | None = None) -> int:
    """`retool-prepare-rl`: DAPO-Math-17k / AIME -> verl RL parquet."""
    parser = argparse.ArgumentParser(
        prog="retool-prepare-rl",
        description="Convert DAPO-Math-17k or AIME 2024/2025 into verl RL rows for the ReTool tool agent.",
    )
    parser.add_argument(
        "--input", required=True, help="hub id, a local parquet/jsonl/json file, or a dataset directory"
    )
    parser.add_argument("--output", required=True, type=Path, help="output .parquet file")
    parser.add_argument(
        "--source",
        choices=SOURCES,
        default="auto",
        help="input layout; auto detects it from columns, rows and name (default: %(default)s)",
    )
    parser.add_argument("--dedupe", action="store_true", help="keep one row per index and per problem text")
    parser.add_argument("--limit", type=_positive_int, default=None, help="write at most this many rows")
    add_profile_arguments(parser)
    add_conversion_arguments(parser)
    args = parser.parse_args(argv)
    resolve_profile_arguments(args)
    return run_conversion(
        "retool-prepare-rl",
        lambda: prepare(
            args.input,
            args.output,
            source=args.source,
            dedupe=args.dedupe,
            limit=args.limit,
            on_error=args.on_error,
            split=args.split,
            prompt_style=args.prompt_style,
        ),
        format_summary,
        args.report,
        input_errors=(DataSourceError,),
    )


if __name__ == "__main__":
    raise SystemExit(main())
