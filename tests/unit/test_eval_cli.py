"""The light half of retool-eval (no vLLM): data loading, config composition, tool config, errors, metrics."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from retool.data import rl
from retool.datasets import dataset_path
from retool.eval.cli import (
    build_metrics,
    check_sandbox,
    cli_overrides,
    compose_config,
    main,
    parse_args,
    write_tool_config,
)
from retool.eval.problems import EvalError, load_problems
from ports import free_port

REPO = Path(__file__).resolve().parents[2]
AIME25 = dataset_path("aime2025")
AIME24 = dataset_path("aime2024-maxwell")


def test_load_aime_layouts_and_rl_parquet(tmp_path: Path) -> None:
    problems = load_problems([AIME25, AIME24], limit=2)
    assert [p.problem_id for p in problems[:2]] == ["aime_2025/0", "aime_2025/1"]
    assert problems[0].ground_truth == "70" and problems[0].data_source == "aime_2025"
    assert problems[2].problem_id.startswith("aime_2024/2024-")
    assert problems[0].prompt[0]["role"] == "user" and "17_b" in problems[0].prompt[0]["content"]
    assert problems[0].extra_info["tools_kwargs"]["code_interpreter"]["create_kwargs"]["ground_truth"] == "70"
    # A prepared RL parquet is used as is: same prompts as converting the raw file.
    prepared = tmp_path / "aime25.parquet"
    rl.prepare(AIME25, prepared, limit=2)
    again = load_problems([prepared])
    assert [(p.problem_id, p.prompt, p.ground_truth) for p in again] == [
        (p.problem_id, p.prompt, p.ground_truth) for p in problems[:2]
    ]


def test_raw_files_get_the_profile_s_prompt_style(tmp_path: Path) -> None:
    from retool.data.prompt import ANSWER_INSTRUCTION, VERL_RETOOL_ANSWER_FORMAT

    problem = json.loads(AIME25.read_text().splitlines()[0])["problem"]
    reference = load_problems([AIME25], limit=1)[0].prompt[0]["content"]  # the default
    boxed = load_problems([AIME25], limit=1, prompt_style="qwen_boxed")[0].prompt[0]["content"]
    assert reference == problem + VERL_RETOOL_ANSWER_FORMAT
    assert boxed == f"{problem.strip()}\n\n{ANSWER_INSTRUCTION}"
    with pytest.raises(ValueError, match="prompt style"):
        load_problems([AIME25], prompt_style="other")
    base = ["--model", "m", "--data", "d", "--sandbox-url", "u", "--output", "o"]
    args = parse_args(base)
    assert (args.profile, args.prompt_style) == ("reference", "verl_retool")
    assert parse_args([*base, "--profile", "improved"]).prompt_style == "qwen_boxed"
    assert parse_args([*base, "--profile", "improved", "--prompt-style", "verl_retool"]).prompt_style == "verl_retool"
    assert cli_overrides(parse_args([*base, "--profile", "improved"]))[0] == "profile/rl=improved"


def test_prepared_dapo_in_the_reference_style_is_used_as_is(tmp_path: Path) -> None:
    """Its prompts start with DAPO's instruction like raw DAPO rows do; its agent_name column tells them apart."""
    from retool_data_helpers import dapo_row

    raw = rl_rows(tmp_path / "dapo-math-17k.parquet", [dapo_row("What is 6*7?", "42", "u-1")])
    prepared = tmp_path / "dapo_prepared.parquet"
    rl.prepare(raw, prepared, source="dapo")
    from_raw, from_prepared = load_problems([raw]), load_problems([prepared])
    assert [(p.problem_id, p.prompt) for p in from_prepared] == [(p.problem_id, p.prompt) for p in from_raw]
    assert (
        from_raw[0].prompt[0]["content"].endswith("\nThe answer format must be: \\boxed{'The final answer goes here.'}")
    )


def rl_rows(path: Path, rows: list[dict]) -> Path:
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def row(index: str, ground_truth: str = "42") -> dict:
    return {
        "data_source": "synthetic_arith",
        "prompt": [{"role": "user", "content": "6*7?"}],
        "ability": "MATH",
        "reward_model": {"style": "rule", "ground_truth": ground_truth},
        "extra_info": {"index": index},
        "agent_name": "tool_agent",
    }


def test_bad_rows_are_named(tmp_path: Path) -> None:
    dup = rl_rows(tmp_path / "dup.parquet", [row("a"), row("b"), row("a")])
    with pytest.raises(EvalError, match=r"dup.parquet row 2: problem id synthetic_arith/a repeats .*row 0"):
        load_problems([dup])
    assert [p.problem_id for p in load_problems([dup], limit=2)] == ["synthetic_arith/a", "synthetic_arith/b"]
    empty = rl_rows(tmp_path / "empty_gt.parquet", [row("a"), row("b", ground_truth=" ")])
    with pytest.raises(EvalError, match=r"empty_gt.parquet row 1: reward_model.ground_truth is missing"):
        load_problems([empty])
    with pytest.raises(EvalError, match="--data"):
        load_problems([tmp_path / "missing.parquet"])


def test_a_sandbox_url_that_is_no_url_is_an_eval_error() -> None:
    with pytest.raises(EvalError, match="--sandbox-url: .*http"):
        check_sandbox("127.0.0.1:8080")


def test_config_composition_and_flags() -> None:
    args = parse_args(
        [
            "--model",
            "m",
            "--data",
            "d",
            "--sandbox-url",
            "http://x:1",
            "--output",
            "o",
            "--override",
            "+smoke=rl",
            "--max-turns",
            "5",
            "--max-tokens",
            "300",
            "--max-tool-response-length",
            "999",
        ]
    )
    overrides = cli_overrides(args)
    assert overrides[:2] == ["profile/rl=reference", "+smoke=rl"]  # flags come after, so they win
    cfg = compose_config(REPO / "configs" / "rl.yaml", overrides)
    rollout = cfg.actor_rollout_ref.rollout
    assert rollout.multi_turn.max_user_turns == 5 and rollout.multi_turn.max_assistant_turns == 5
    assert rollout.response_length == 300 and rollout.prompt_length == 512  # smoke prompt length kept
    assert rollout.multi_turn.max_tool_response_length == 999
    assert rollout.multi_turn.format == "hermes"
    with pytest.raises(EvalError, match="cannot compose"):
        compose_config(REPO / "configs" / "rl.yaml", ["actor_rollout_ref.no_such_key=1"])


def test_tool_config_points_at_the_sandbox(tmp_path: Path) -> None:
    path = write_tool_config(REPO / "configs" / "tool.yaml", "http://127.0.0.1:9/run_code", tmp_path)
    tools = yaml.safe_load(path.read_text())["tools"]
    assert tools[0]["config"]["sandbox_fusion_url"] == "http://127.0.0.1:9/run_code"
    assert tools[0]["class_name"] == "retool.tool.CodeInterpreterTool"
    bare = tmp_path / "bare.yaml"
    bare.write_text("tools:\n  - class_name: x.Y\n    config: {type: native}\n")
    with pytest.raises(EvalError, match="no tool has config.sandbox_fusion_url"):
        write_tool_config(bare, "http://127.0.0.1:9/run_code", tmp_path / "o")


def test_dead_sandbox_fails_before_the_model_loads(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    data = rl_rows(tmp_path / "d.parquet", [row("a")])
    port = free_port()
    code = main(
        [
            "--model",
            str(model),
            "--data",
            str(data),
            "--sandbox-url",
            f"http://127.0.0.1:{port}",
            "--output",
            str(tmp_path / "out"),
        ]
    )
    assert code == 2
    assert "does not answer GET /v1/ping" in capsys.readouterr().err
    assert (
        main(
            [
                "--model",
                str(tmp_path),
                "--data",
                str(data),
                "--sandbox-url",
                "http://x:1",
                "--output",
                str(tmp_path / "out"),
            ]
        )
        == 2
    )
    assert "has no config.json" in capsys.readouterr().err


def test_build_metrics_per_source() -> None:
    def rec(pid: str, source: str, correct: bool, calls: list[str], stop: str) -> dict:
        return {
            "problem_id": pid,
            "data_source": source,
            "correct": correct,
            "pred": "1" if correct else None,
            "num_turns": 2 + 2 * len(calls),
            "tool_calls": len(calls),
            "tool_errors": sum(s != "ok" for s in calls),
            "calls": [{"status": s} for s in calls],
            "stop_reason": stop,
        }

    records = [
        rec("a/1", "a", True, ["ok"], "answered"),
        rec("a/1", "a", False, [], "answered"),
        rec("b/1", "b", False, ["timeout", "ok"], "max_turns"),
        rec("b/1", "b", False, [], "response_length"),
    ]
    m = build_metrics(records)
    assert m["acc/mean@2"] == pytest.approx(0.25)
    assert m["per_source"]["a"]["acc/mean@2"] == pytest.approx(0.5)
    assert m["per_source"]["b"]["tool/success_rate"] == pytest.approx(0.5)
    assert m["stop_reasons"] == {"answered": 2, "max_turns": 1, "response_length": 1}
    assert m["tool/status_counts"] == {"ok": 2, "timeout": 1}


def test_cli_rejects_bad_numbers(capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit):
        parse_args(["--model", "m", "--data", "d", "--sandbox-url", "u", "--output", "o", "--n", "0"])
    assert "--n must be >= 1" in capsys.readouterr().err
    assert isinstance(
        parse_args(["--model", "m", "--data", "d", "--sandbox-url", "u", "--output", "o"]), argparse.Namespace
    )


def test_a_prepared_file_of_the_other_profile_is_refused(tmp_path: Path) -> None:
    prepared = tmp_path / "aime_reference.parquet"
    rl.prepare(AIME25, prepared, limit=2)  # the reference profile's wording
    assert len(load_problems([prepared])) == 2
    with pytest.raises(
        EvalError, match="row 0: the prompt has the verl_retool wording but this evaluation uses qwen_boxed"
    ):
        load_problems([prepared], prompt_style="qwen_boxed")
    # hand-made rows in neither wording are evaluated as they are
    assert len(load_problems([rl_rows(tmp_path / "own.parquet", [row("a")])], prompt_style="qwen_boxed")) == 1
