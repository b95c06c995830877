"""retool-eval end to end: the smoke assets' tiny Qwen model in vLLM (CPU), verl's ToolAgentLoop, the recipe's
tool against a real embedded sandbox, the recipe's reward, then samples.jsonl and metrics.json checked
against each other and against the sandbox's own request counters.

The tiny random model rarely emits a well-formed tool call. Set RETOOL_EVAL_MODEL to the smoke run's SFT
checkpoint (a Hugging Face folder) to evaluate a model that calls the tool by itself; when the plain run made
no tool call, a second run forces the tool path with vLLM structured outputs (the same model, loop, sandbox
and reward; only the decoding is constrained).

Heavy (vLLM start-up ~30-60 s per run): run it alone, e.g.
    flock /tmp/retool-heavy.lock .venv/bin/pytest -m slow tests/integration/test_eval.py
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from retool.reward import compute_score
from retool_sandbox.client import SandboxClient
from retool_sandbox.spawn import running_sandbox

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
# Statuses that never reach the sandbox: verl rejected the call, or the tool refused empty code.
NOT_SENT = {"not_run", "bad_input"}
FORCED_REGEX = (
    r'(<tool_call>\n\{"name": "code_interpreter", "arguments": \{"code": "print\(6 \* 7\)"\}\}\n'
    r"</tool_call>|The answer is \\boxed\{42\}\.)"
)


@pytest.fixture(scope="module")
def assets(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("smoke-assets")
    # the random model (no pre-training): this test is about the evaluation path, not about what the model knows
    proc = subprocess.run(
        [sys.executable, "-m", "retool.smoke.build", "--out", str(out), "--pretrain-steps", "0"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


@pytest.fixture(scope="module")
def sandbox() -> Any:
    with running_sandbox() as url:
        yield url


def counters(url: str) -> dict[str, int]:
    return SandboxClient(url).health(timeout=10)["counters"]


def run_eval(
    model: Path, data: list[Path], out: Path, sandbox: str, n: int, limit: int, extra: list[str] = ()
) -> subprocess.CompletedProcess:
    cmd = [
        sys.executable,
        "-m",
        "retool.eval",
        "--model",
        str(model),
        "--n",
        str(n),
        "--limit",
        str(limit),
        "--sandbox-url",
        sandbox,
        "--output",
        str(out),
        "--config",
        str(REPO / "configs" / "rl.yaml"),
        "--override",
        "+smoke=rl",
        "--profile",
        "improved",
        "--device",
        "cpu",
        *extra,
    ]
    for path in data:
        cmd += ["--data", str(path)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, f"retool-eval failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-6000:]}"
    return proc


def read_rows(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]


def check_consistency(rows: list[dict[str, Any]], metrics: dict[str, Any], n: int, problems: dict[str, int]) -> None:
    """metrics.json against the JSONL, with plain arithmetic (not retool.metrics)."""
    by_problem: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        by_problem[r["problem_id"]].append(r)
    assert sorted(len(v) for v in by_problem.values()) == [n] * len(by_problem)
    assert all(sorted(r["sample"] for r in v) == list(range(n)) for v in by_problem.values())
    assert Counter(pid.split("/")[0] for pid in by_problem) == problems

    shaping = metrics["settings"]["reward_kwargs"]
    for r in rows:
        # verl's count: user turns + assistant turns + 1; one user turn per tool round.
        assert r["num_turns"] == r["user_turns"] + r["assistant_turns"] + 1
        assert r["tool_calls"] == len(r["calls"])
        assert r["tool_errors"] == sum(not c["ok"] for c in r["calls"])
        if r["correct"]:
            assert r["final_answer"] is not None
        # The reward re-applied to the transcript agrees with the row.
        text = "".join(t["text"] for t in r["transcript"])
        again = compute_score(r["data_source"], text, r["ground_truth"], {"num_turns": r["num_turns"]}, **shaping)
        assert bool(again["acc"]) == r["correct"], r["problem_id"]
        assert again["score"] == pytest.approx(r["score"])

    total = len(rows)
    calls = sum(r["tool_calls"] for r in rows)
    errors = sum(r["tool_errors"] for r in rows)
    assert metrics["counts"]["samples"] == total
    assert metrics["counts"]["problems"] == len(by_problem)
    assert metrics["counts"]["tool_calls"] == calls
    assert metrics[f"acc/mean@{n}"] == pytest.approx(sum(r["correct"] for r in rows) / total)
    assert metrics["acc/pass@1"] == pytest.approx(metrics[f"acc/mean@{n}"])
    solved = sum(any(r["correct"] for r in v) for v in by_problem.values())
    assert metrics[f"acc/pass@{n}"] == pytest.approx(solved / len(by_problem))
    assert metrics["num_turns/mean"] == pytest.approx(sum(r["num_turns"] for r in rows) / total)
    assert metrics["tool_calls/per_answer"] == pytest.approx(calls / total)
    if calls:
        assert metrics["tool/success_rate"] == pytest.approx((calls - errors) / calls)
    else:
        assert metrics["tool/success_rate"] is None
    assert metrics["counts"]["prompt_truncated"] == sum(r["prompt_truncated"] for r in rows)
    assert set(metrics["per_source"]) == set(problems)
    assert sum(metrics["stop_reasons"].values()) == total


@pytest.fixture(scope="module")
def plain_run(assets: Path, sandbox: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    model = Path(os.environ.get("RETOOL_EVAL_MODEL", assets / "model"))
    out = tmp_path_factory.mktemp("eval-plain")
    before = counters(sandbox)
    proc = run_eval(
        model,
        [assets / "data" / "rl_val_aime2025.parquet", assets / "data" / "rl_val_synthetic.parquet"],
        out,
        sandbox,
        n=2,
        limit=2,
    )
    after = counters(sandbox)
    return {
        "out": out,
        "rows": read_rows(out),
        "metrics": json.loads((out / "metrics.json").read_text()),
        "sent": after["requests"] - before["requests"],
        "stdout": proc.stdout,
    }


def test_eval_on_tiny_model(plain_run: dict[str, Any]) -> None:
    rows, metrics = plain_run["rows"], plain_run["metrics"]
    assert len(rows) == 8
    check_consistency(rows, metrics, n=2, problems={"aime_2025": 2, "synthetic_arith": 2})
    assert set(metrics) >= {
        "acc/mean@2",
        "acc/pass@1",
        "acc/pass@2",
        "acc/maj@2",
        "num_turns/mean",
        "tool_calls/per_answer",
        "tool/success_rate",
        "counts",
    }
    # Every call that reached the tool went to the sandbox exactly once (no 504s on an idle server).
    sent = sum(c["status"] not in NOT_SENT for r in rows for c in r["calls"])
    assert plain_run["sent"] == sent
    assert "acc/mean@2" in plain_run["stdout"]
    for name in ("samples.jsonl", "metrics.json", "eval_config.yaml", "tool_config.yaml"):
        assert (plain_run["out"] / name).is_file()
    # on a CPU the training's dtype rule, not the rollout config's bf16 (emulated and ~60x slower without avx512_bf16)
    from retool.platform.cpu_dtype import host_dtype

    assert yaml.safe_load((plain_run["out"] / "eval_config.yaml").read_text())["dtype"] == host_dtype()[0]


def test_tool_path_with_forced_calls(plain_run: dict[str, Any], assets: Path, sandbox: str, tmp_path: Path) -> None:
    if plain_run["metrics"]["counts"]["tool_calls"] > 0:
        pytest.skip("the plain run already executed real tool calls")
    # Problems whose answer is 42, so forced "\boxed{42}" answers score as correct.
    data = tmp_path / "forty_two.parquet"
    rows = [
        {
            "data_source": "synthetic_arith",
            "prompt": [{"role": "user", "content": f"What is {a} * {b}? Put the answer in \\boxed{{}}."}],
            "ability": "MATH",
            "reward_model": {"style": "rule", "ground_truth": "42"},
            "extra_info": {"index": f"p{a}x{b}"},
            "agent_name": "tool_agent",
        }
        for a, b in ((6, 7), (7, 6))
    ]
    pq.write_table(pa.Table.from_pylist(rows), data)
    out = tmp_path / "eval-forced"
    before = counters(sandbox)
    run_eval(assets / "model", [data], out, sandbox, n=4, limit=2, extra=["--structured-regex", FORCED_REGEX])
    after = counters(sandbox)
    samples = read_rows(out)
    metrics = json.loads((out / "metrics.json").read_text())
    check_consistency(samples, metrics, n=4, problems={"synthetic_arith": 2})
    assert metrics["counts"]["tool_calls"] > 0, "structured decoding should have produced tool calls"
    assert after["requests"] - before["requests"] == metrics["counts"]["tool_calls"]
    assert after["success"] - before["success"] == metrics["counts"]["tool_calls"]
    assert metrics["tool/success_rate"] == 1.0
    for r in samples:
        for c in r["calls"]:
            assert c["status"] == "ok" and c["output"].strip() == "42", c  # the sandbox really ran print(6 * 7)
        tools = [t["text"] for t in r["transcript"] if t["role"] == "tool"]
        assert len(tools) == r["user_turns"] == r["tool_calls"]
        assert all("<tool_response>\n42\n</tool_response>" in t for t in tools)
        if r["final_answer"] is not None:
            assert r["final_answer"] == "42" and r["correct"]
    assert metrics["acc/mean@4"] == pytest.approx(sum(r["correct"] for r in samples) / 8)
