"""RL data preparation on the real AIME files and on DAPO rows in the exact hub layout."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from retool_data_helpers import AIME_DIR, DAPO_PREFIX, DAPO_SUFFIX, dapo_row

from retool.data.io import ConversionError, DataSourceError
from retool.data.prompt import ANSWER_INSTRUCTION
from retool.data.rl import RL_SCHEMA, aime_answer, convert_row, main, prepare

# The reference run's answer-format line, written out (appended after a newline to every RL and validation prompt).
REFERENCE_LINE = "The answer format must be: \\boxed{'The final answer goes here.'}"

AIME_FILES = [
    ("aime2025/test.jsonl", "aime_2025"),
    ("aime2024/test.jsonl", "aime_2024"),
    ("aime2024/aime_2024_problems.parquet", "aime_2024"),
]


def raw_aime(relative: str) -> list[dict]:
    """The source rows read independently of retool.data.io (answers keep their raw type: "025", 70, ...)."""
    path = AIME_DIR / relative
    if path.suffix == ".parquet":
        return pq.read_table(path).to_pylist()
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.mark.parametrize("style", ["verl_retool", "qwen_boxed"])
@pytest.mark.parametrize(("relative", "data_source"), AIME_FILES)
def test_real_aime_files_become_tool_agent_rows(tmp_path, relative, data_source, style):
    out = tmp_path / "rl.parquet"
    summary = prepare(AIME_DIR / relative, out, prompt_style=style)  # source auto-detected
    assert summary["data_source"] == data_source and summary["prompt_style"] == style
    assert (summary["rows_read"], summary["written"], summary["skipped"]) == (30, 30, 0)
    table = pq.read_table(out)
    assert table.schema.equals(RL_SCHEMA)
    rows, raws = table.to_pylist(), raw_aime(relative)
    for row, raw in zip(rows, raws, strict=True):
        problem = raw.get("problem") or raw.get("Problem")
        truth = str(int(raw.get("answer", raw.get("Answer"))))  # "025" -> "25"
        assert row["data_source"] == data_source and row["ability"] == "MATH" and row["agent_name"] == "tool_agent"
        # reference: the problem exactly as in the file, then a newline and the answer-format line
        if style == "verl_retool":
            expected = f"{problem}\n{REFERENCE_LINE}"
        else:
            expected = f"{problem.strip()}\n\n{ANSWER_INSTRUCTION}"
        assert row["prompt"] == [{"role": "user", "content": expected}]
        assert row["extra_info"]["question"] == problem.strip()
        assert row["reward_model"] == {"style": "rule", "ground_truth": truth}
        assert row["extra_info"]["index"] == str(raw.get("id", raw.get("ID")))
        assert row["extra_info"]["need_tools_kwargs"] is True
        assert row["extra_info"]["tools_kwargs"] == {"code_interpreter": {"create_kwargs": {"ground_truth": truth}}}
    assert len({r["extra_info"]["index"] for r in rows}) == 30


def test_zero_padded_answers_are_normalised():
    raw = raw_aime("aime2024/test.jsonl")
    padded = [r for r in raw if isinstance(r["answer"], str) and r["answer"].startswith("0")]
    assert padded, "the AI-MO layout stores zero-padded strings"
    row = convert_row(padded[0], "aime2024")
    assert row["reward_model"]["ground_truth"] == padded[0]["answer"].lstrip("0")


def test_both_aime_2024_layouts_agree(tmp_path):
    """Same 30 problems in two layouts: Maxwell-Jia IDs ("2024-II-4") and AoPS URLs must map to equal answers."""
    prepare(AIME_DIR / "aime2024/aime_2024_problems.parquet", tmp_path / "a.parquet")
    prepare(AIME_DIR / "aime2024/test.jsonl", tmp_path / "b.parquet")
    by_id = {
        r["extra_info"]["index"]: r["reward_model"]["ground_truth"]
        for r in pq.read_table(tmp_path / "a.parquet").to_pylist()
    }
    urls = {str(r["id"]): r["url"] for r in raw_aime("aime2024/test.jsonl")}
    by_url = {}
    for row in pq.read_table(tmp_path / "b.parquet").to_pylist():
        contest, number = re.search(r"2024_AIME_(I+)_Problems/Problem_(\d+)", urls[row["extra_info"]["index"]]).groups()
        by_url[f"2024-{contest}-{number}"] = row["reward_model"]["ground_truth"]
    assert by_url == by_id and len(by_id) == 30


def test_outputs_concatenate_like_verl_does(tmp_path):
    """verl's RLHFDataset joins its files with datasets.concatenate_datasets, which needs identical types."""
    import datasets

    parts = []
    for number, (relative, _) in enumerate(AIME_FILES):
        prepare(AIME_DIR / relative, tmp_path / f"{number}.parquet")
        parts.append(
            datasets.load_dataset(
                "parquet", data_files=str(tmp_path / f"{number}.parquet"), cache_dir=str(tmp_path / "cache")
            )["train"]
        )
    joined = datasets.concatenate_datasets(parts)
    assert len(joined) == 90
    assert sorted(set(joined["data_source"])) == ["aime_2024", "aime_2025"]


# ------------------------------------------------------------------ DAPO


PROBLEMS = [
    ("Let $x$ satisfy $2x + 7 = 1$. Find $x$.", "-3", "9a1f0c1e-0000-4000-8000-000000000001"),
    ("How many primes are less than $30$?", "10", "9a1f0c1e-0000-4000-8000-000000000002"),
    ("Compute $\\sum_{k=1}^{10} k^2$.", "385", "9a1f0c1e-0000-4000-8000-000000000003"),
]


def dapo_parquet(path: Path, rows: list[dict]) -> Path:
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def dapo_rows(repeats: int = 100) -> list[dict]:
    """Like the hub file: each problem `repeats` times under one UUID, plus one re-indexed copy of problem 0."""
    rows = [dapo_row(*p) for _ in range(repeats) for p in PROBLEMS]
    rows.append(dapo_row("Let $x$ satisfy  $2x + 7 = 1$.\nFind $x$.", "-3", "9a1f0c1e-0000-4000-8000-00000000000f"))
    return rows


def test_dapo_reference_prompt_keeps_the_dapo_text_and_appends_the_answer_format():
    row = convert_row(dapo_row(*PROBLEMS[0]), "dapo")  # the default style
    content = row["prompt"][0]["content"]
    assert content == f"{DAPO_PREFIX}{PROBLEMS[0][0]}{DAPO_SUFFIX}\n{REFERENCE_LINE}"
    assert row["data_source"] == "math_dapo" and row["reward_model"]["ground_truth"] == "-3"
    assert row["extra_info"]["index"] == PROBLEMS[0][2] and row["extra_info"]["question"] == PROBLEMS[0][0]
    # a row without DAPO's instruction keeps what it has, and is noted
    notes: list[str] = []
    bare = {**dapo_row(*PROBLEMS[2]), "prompt": [{"content": PROBLEMS[2][0], "role": "user"}]}
    assert convert_row(bare, "dapo", notes)["prompt"][0]["content"] == f"{PROBLEMS[2][0]}\n{REFERENCE_LINE}"
    assert notes == ["dapo_instruction_missing"]


def test_dapo_recipe_prompt_swaps_the_answer_instruction_for_the_boxed_one():
    row = convert_row(dapo_row(*PROBLEMS[0]), "dapo", prompt_style="qwen_boxed")
    content = row["prompt"][0]["content"]
    assert content == f"{PROBLEMS[0][0]}\n\n{ANSWER_INSTRUCTION}"
    assert "Answer:" not in content and DAPO_PREFIX.strip() not in content
    assert row["data_source"] == "math_dapo" and row["reward_model"]["ground_truth"] == "-3"
    assert row["extra_info"]["index"] == PROBLEMS[0][2]
    with pytest.raises(ValueError, match="prompt style must be one of"):
        convert_row(dapo_row(*PROBLEMS[0]), "dapo", prompt_style="Recipe")


def test_dapo_dedupe_by_index_and_problem_text(tmp_path):
    source = dapo_parquet(tmp_path / "dapo-math-17k.parquet", dapo_rows())
    full = prepare(source, tmp_path / "full.parquet", source="dapo")
    assert (full["rows_read"], full["written"], full["duplicates"]) == (301, 301, None)
    summary = prepare(source, tmp_path / "dedup.parquet", dedupe=True)  # auto-detects DAPO from its columns
    assert summary["source"] == "dapo"
    assert summary["written"] == 3 and summary["duplicates"] == {"by_index": 297, "by_problem": 1}
    kept = pq.read_table(tmp_path / "dedup.parquet").to_pylist()
    assert [r["extra_info"]["index"] for r in kept] == [p[2] for p in PROBLEMS]
    assert [r["reward_model"]["ground_truth"] for r in kept] == ["-3", "10", "385"]


def test_dapo_limit(tmp_path):
    source = dapo_parquet(tmp_path / "dapo.parquet", dapo_rows(repeats=5))
    summary = prepare(source, tmp_path / "out.parquet", dedupe=True, limit=2)
    assert summary["written"] == 2 and pq.read_table(tmp_path / "out.parquet").num_rows == 2


def broken_dapo_rows() -> list[dict]:
    good = dapo_row(*PROBLEMS[1])
    no_truth = {**dapo_row(*PROBLEMS[0]), "reward_model": {"style": "rule"}}
    two_users = {**dapo_row(*PROBLEMS[0]), "prompt": [dapo_row(*PROBLEMS[0])["prompt"][0]] * 2}
    no_index = {**dapo_row(*PROBLEMS[2]), "extra_info": {"index": None}}
    bare = {**dapo_row(*PROBLEMS[2]), "prompt": [{"content": PROBLEMS[2][0], "role": "user"}]}
    return [good, no_truth, two_users, no_index, bare]


def test_broken_dapo_rows_are_reported_with_their_index(tmp_path):
    rows = broken_dapo_rows()
    source = tmp_path / "dapo.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in rows))
    summary = prepare(source, tmp_path / "out.parquet", source="dapo")
    assert summary["written"] == 2
    assert [(s["row"], s["kind"]) for s in summary["skipped_rows"]] == [
        (1, "bad_ground_truth"),
        (2, "bad_row_layout"),
        (3, "bad_row_layout"),
    ]
    assert summary["notes"] == {"dapo_instruction_missing": 1}  # the bare row is kept, its prompt still boxed
    with pytest.raises(ConversionError, match=r"dapo\.jsonl row 1: reward_model\.ground_truth"):
        prepare(source, tmp_path / "fail.parquet", source="dapo", on_error="fail")
    assert not (tmp_path / "fail.parquet").exists()


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (25, 25),
        ("025", 25),
        ("7", 7),
        (0, 0),
        (999.0, 999),
        ("1000", None),
        (-1, None),
        ("2.5", None),
        ("abc", None),
        (True, None),
        (None, None),
    ],
)
def test_aime_answer_parsing(value, expected):
    if expected is None:
        with pytest.raises(ConversionError, match="not an AIME integer"):
            aime_answer(value)
    else:
        assert aime_answer(value) == expected


def test_broken_aime_rows_are_skipped(tmp_path):
    rows = [
        {"problem": "p1", "answer": 5, "id": "0"},
        {"problem": "p2", "answer": "abc", "id": "1"},
        {"problem": "", "answer": 1, "id": "2"},
        {"problem": "p4", "answer": 4},
    ]
    source = tmp_path / "aime25" / "test.jsonl"
    source.parent.mkdir()
    source.write_text("".join(json.dumps(r) + "\n" for r in rows))
    summary = prepare(source, tmp_path / "out.parquet")
    assert summary["source"] == "aime2025" and summary["written"] == 1
    assert summary["skip_reasons"] == {"bad_ground_truth": 1, "empty_problem": 1, "bad_row_layout": 1}


def test_undetectable_sources_ask_for_source(tmp_path):
    plain = tmp_path / "test.jsonl"
    plain.write_text(json.dumps({"problem": "p", "answer": 3, "id": "0"}) + "\n")
    with pytest.raises(DataSourceError, match="--source aime2024 or --source aime2025"):
        prepare(plain, tmp_path / "out.parquet")
    assert prepare(plain, tmp_path / "out.parquet", source="aime2025")["data_source"] == "aime_2025"
    prepared = tmp_path / "prepared.parquet"
    prepare(AIME_DIR / "aime2025/test.jsonl", prepared, limit=1)
    with pytest.raises(DataSourceError, match="already a prepared RL file"):
        prepare(prepared, tmp_path / "again.parquet")
    odd = tmp_path / "odd.jsonl"
    odd.write_text(json.dumps({"question": "p", "label": 3}) + "\n")
    with pytest.raises(DataSourceError, match="match neither DAPO"):
        prepare(odd, tmp_path / "out.parquet")


def test_cli_on_real_aime_2025(tmp_path, capsys):
    out, report = tmp_path / "aime_2025.parquet", tmp_path / "report.json"
    assert main(["--input", str(AIME_DIR / "aime2025/test.jsonl"), "--output", str(out), "--report", str(report)]) == 0
    assert "rows read 30, written 30, skipped 0" in capsys.readouterr().out
    assert json.loads(report.read_text())["data_source"] == "aime_2025"
    assert main(["--input", str(tmp_path / "missing.jsonl"), "--output", str(out)]) == 2
    assert "does not exist" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--input", "x", "--output", str(out), "--limit", "0"])


def test_cli_prompt_style(tmp_path, capsys):
    source = AIME_DIR / "aime2025/test.jsonl"
    first = raw_aime("aime2025/test.jsonl")[0]["problem"]
    for style, expected in (
        ("verl_retool", f"{first}\n{REFERENCE_LINE}"),
        ("qwen_boxed", f"{first.strip()}\n\n{ANSWER_INSTRUCTION}"),
    ):
        out = tmp_path / f"{style}.parquet"
        assert main(["--input", str(source), "--output", str(out), "--limit", "1", "--prompt-style", style]) == 0
        assert f"prompt style {style}" in capsys.readouterr().out
        assert pq.read_table(out).to_pylist()[0]["prompt"][0]["content"] == expected
    with pytest.raises(SystemExit):
        main(["--input", str(source), "--output", str(tmp_path / "x.parquet"), "--prompt-style", "mine"])
