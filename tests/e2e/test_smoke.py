"""The whole recipe end to end on this CPU (run_smoke_cpu.sh): asserts the signals, not just the exit code.

The model SFT starts from must be the pre-trained asset that copies digits; SFT must lower the loss; the RL
rollouts must make tool calls that the sandbox really executed; reward, num_turns and validation curves must be in
TensorBoard under verl's tag names; the run folder must hold what users look at. The accuracy verdict of the RL
stage is test_learning_signal.py's.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from retool.smoke.summary import read_scalars, read_text_tags

pytestmark = [pytest.mark.slow, pytest.mark.verl]

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def run_dir(smoke_run_dir) -> Path:
    return smoke_run_dir


@pytest.fixture(scope="module")
def summary(run_dir) -> dict:
    data = json.loads((run_dir / "summary.json").read_text())
    print((run_dir / "summary.md").read_text())
    return data


def test_sft_started_from_a_model_pre_trained_to_copy(summary):
    pretraining = summary["pretraining"]
    assert pretraining is not None, "the SFT model path has no assets manifest with a pre-training report"
    assert pretraining["copy_after"]["digit_runs_exact"] >= 0.9 > pretraining["copy_before"]["digit_runs_exact"]


def test_sft_loss_fell(summary):
    loss = summary["sft"]["loss"]
    assert loss is not None and loss["steps"] >= 20
    assert loss["last"] < 0.5 * loss["first"], loss


def test_merged_sft_model_is_a_hugging_face_checkpoint(run_dir):
    merged = run_dir / "sft_merged"
    config = json.loads((merged / "config.json").read_text())
    assert config["architectures"] == ["Qwen3ForCausalLM"]
    assert list(merged.glob("*.safetensors")) and (merged / "tokenizer.json").is_file()


def test_rollouts_made_tool_calls_the_sandbox_executed(summary):
    counters = summary["sandbox"]["counters"]
    assert counters["requests"] > 0 and counters["success"] > 0, counters
    turns = summary["rl"]["num_turns_mean"]
    # num_turns = 2 + 2 x tool rounds: a mean above 2 means trajectories held executed tool rounds.
    assert turns is not None and turns["max"] > 2.0, turns


def test_rl_curves_are_in_tensorboard_under_verl_tags(run_dir, summary):
    scalars = read_scalars(run_dir / "tensorboard" / "rl")
    for tag in (
        "critic/rewards/mean",
        "critic/score/mean",
        "num_turns/mean",
        "response_length/mean",
        "val-aux/num_turns/mean",
    ):
        assert tag in scalars, f"{tag} missing; tags: {sorted(scalars)}"
    assert len(scalars["critic/rewards/mean"]) == summary["rl_steps"] >= 3
    val_acc = [t for t in scalars if t.startswith("val-core/") and "/acc/mean@" in t]
    assert any(t.startswith("val-core/aime_2025/") for t in val_acc), val_acc
    assert any(t.startswith("val-core/synthetic_arith/") for t in val_acc), val_acc
    # validation before training and after the last step
    assert all(len(scalars[t]) >= 2 for t in val_acc)
    assert read_text_tags(run_dir / "tensorboard" / "rl"), "validation generations (TEXT tab) missing"


def test_summary_says_where_the_rl_stage_time_went(summary):
    rl_time = summary["rl_time"]
    assert rl_time is not None and all(value >= 0 for value in rl_time.values()), rl_time
    parts = ("startup_s", "validation_before_s", "training_steps_s", "validation_after_s", "rest_s")
    assert sum(rl_time[k] for k in parts) == pytest.approx(summary["stages"]["rl"]["wall_s"], abs=1.0)
    assert rl_time["generation_s"] + rl_time["actor_update_s"] <= rl_time["training_steps_s"]


def test_summary_states_the_dtype_the_host_got_and_the_learning_verdict(run_dir, summary):
    compute = summary["compute"]
    # the dtype rule's choice is what every stage ran with: float32 on every CPU unless RETOOL_CPU_DTYPE says bf16
    assert compute["sft_dtype"] == compute["rl_dtype"] == compute["rollout_dtype"] == compute["dtype"]
    assert (
        compute["dtype"] == "float32"
        and compute["dtype_reason"].startswith("the CPU default: ")
        or compute["dtype_reason"].startswith("set by RETOOL_CPU_DTYPE")
    ), compute
    changes = summary["learning"]["changes"]
    assert set(changes) >= {"used_tool", "score", "acc"}, summary["learning"]
    for change in changes.values():
        assert change["low"] <= change["delta"] <= change["high"] and change["prompts"] == 64
    markdown = (run_dir / "summary.md").read_text()
    assert "Compute dtype" in markdown and "95% CI" in markdown and "**Verdict: held-out accuracy " in markdown


def test_tool_outcomes_reach_tensorboard(run_dir):
    scalars = read_scalars(run_dir / "tensorboard" / "rl")
    for key in ("tool_calls", "tool_ok", "tool_error", "tool_timeout", "tool_unavailable", "tool_truncated"):
        tag = f"val-aux/synthetic_arith/{key}/mean@4"
        assert tag in scalars, f"{tag} missing"
    assert max(v for _, v in scalars["val-aux/synthetic_arith/tool_calls/mean@4"]) > 0


def test_run_folder_keeps_configs_logs_and_timings(run_dir, summary):
    for name in (
        "sft.resolved.yaml",
        "rl.resolved.yaml",
        "logs/sft.log",
        "logs/rl.log",
        "summary.md",
        "report/report.md",
    ):
        assert (run_dir / name).is_file(), name
    assert set(summary["stages"]) == {"assets", "sft", "merge", "rl"}
    assert summary["peak_host_mem_gb"] and summary["peak_host_mem_gb"] > 1
    pngs = list((run_dir / "report").glob("*.png"))
    assert len(pngs) >= 4 and all(p.stat().st_size > 5000 for p in pngs), pngs


def test_failures_were_counted_at_every_step_and_none_happened(run_dir, summary):
    # the failure accounting ran (retool.failures): a record per training step and per validation batch, all zero
    failures = summary["failures"]
    assert failures["train"]["steps"] == summary["rl_steps"] and failures["val"]["steps"] >= 2, failures
    assert failures["train"]["failed"] == 0 and failures["val"]["failed"] == 0 and failures["stop"] is None, failures
    scalars = read_scalars(run_dir / "tensorboard" / "rl")
    assert len(scalars["failures/share"]) == summary["rl_steps"] and "val-failures/share" in scalars
    assert "Failures: training 0 of" in (run_dir / "summary.md").read_text()
