"""Every setting of the reference run that this recipe reproduces (docs/reference.md), checked where it ends up: the
fully resolved verl configs of the NPU launchers (DRY_RUN=1, no device needed), the reward as verl calls it with the
resolved reward_kwargs, and the prompts the converters write by default. A value the recipe deliberately changes
is asserted as the recipe's value, with the reason beside it; docs/reference.md lists both."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from test_launchers import resolved  # the launchers' DRY_RUN helper (same directory)

pytestmark = pytest.mark.verl

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "unit"))  # retool_data_helpers: raw rows in the hub layouts

SFT_ROWS = 2000  # JoeYing/ReTool-SFT
REFERENCE_ANSWER_FORMAT = "\nThe answer format must be: \\boxed{'The final answer goes here.'}"


@pytest.fixture(scope="module")
def sft() -> dict:
    return resolved("run_qwen3_4b_sft_npu.sh")


@pytest.fixture(scope="module")
def dapo() -> dict:
    return resolved("run_qwen3_4b_dapo_npu.sh")


# ------------------------------------------------------------------ SFT


def test_sft_data_batch_and_parallelism(sft):
    assert sft["trainer"]["device"] == "npu" and sft["trainer"]["nnodes"] * sft["trainer"]["n_gpus_per_node"] == 16
    data = sft["data"]
    assert data["max_length"] == 16384
    assert data["train_batch_size"] == 64 and data["micro_batch_size_per_gpu"] == 8
    assert data["use_dynamic_bsz"] is False  # the reference's fsdp_sft_trainer had fixed micro-batches
    assert (data["messages_key"], data["tools_key"]) == ("messages", "tools")
    assert sft["engine"]["ulysses_sequence_parallel_size"] == 4
    assert sft["model"]["use_remove_padding"] is True
    assert sft["model"]["enable_gradient_checkpointing"] is True
    assert sft["trainer"]["total_epochs"] == 6
    assert (SFT_ROWS // data["train_batch_size"]) * sft["trainer"]["total_epochs"] == 186  # global_step_186
    assert "tensorboard" in sft["trainer"]["logger"]


def test_sft_optimizer_is_the_reference_verl_default(sft):
    """The reference launcher set no optim key: verl's fsdp_sft_trainer defaults at 95470480 applied."""
    optim = sft["optim"]
    assert optim["optimizer"] == "AdamW" and optim["optimizer_impl"] == "torch.optim"
    assert optim["lr"] == pytest.approx(1e-5)
    assert list(optim["betas"]) == [0.9, 0.95]
    assert optim["weight_decay"] == pytest.approx(0.01)
    assert optim["lr_warmup_steps_ratio"] == pytest.approx(0.1) and optim["lr_warmup_steps"] <= 0
    assert int(186 * optim["lr_warmup_steps_ratio"]) == 18  # warmup steps, as int(total_steps * ratio) gave there
    assert optim["clip_grad"] == pytest.approx(1.0)
    assert optim["lr_scheduler_type"] == "cosine"
    assert (optim["min_lr_ratio"], optim["num_cycles"]) == (0.0, 0.5)  # cosine down to 0, half a period


# ------------------------------------------------------------------ RL


def test_rl_algorithm(dapo):
    algorithm, actor = dapo["algorithm"], dapo["actor_rollout_ref"]["actor"]
    assert algorithm["adv_estimator"] == "grpo"
    assert algorithm["use_kl_in_reward"] is False and actor["use_kl_loss"] is False
    assert (actor["clip_ratio_low"], actor["clip_ratio_high"], actor["clip_ratio_c"]) == (0.2, 0.28, 10.0)
    assert actor["loss_agg_mode"] == "token-mean" and actor["entropy_coeff"] == 0
    assert actor["ppo_epochs"] == 1


def test_rl_actor_optimizer_and_batches(dapo):
    actor = dapo["actor_rollout_ref"]["actor"]
    optim = actor["optim"]
    assert optim["lr"] == pytest.approx(1e-6)
    # not set by the reference: verl's actor defaults, the same then and in 0.9.1
    assert list(optim["betas"]) == [0.9, 0.999] and optim["weight_decay"] == pytest.approx(0.01)
    assert optim["lr_warmup_steps_ratio"] == 0.0 and optim["lr_scheduler_type"] == "constant"
    assert optim["clip_grad"] == pytest.approx(1.0)
    assert dapo["data"]["train_batch_size"] == 64 and actor["ppo_mini_batch_size"] == 16
    assert dapo["actor_rollout_ref"]["rollout"]["n"] == 16
    assert actor["use_dynamic_bsz"] is True
    assert actor["ppo_max_token_len_per_gpu"] == 2048 + 16384  # (max_prompt + max_response) x 1


def test_rl_lengths_and_data(dapo):
    data = dapo["data"]
    assert (data["max_prompt_length"], data["max_response_length"]) == (2048, 16384)
    assert data["filter_overlong_prompts"] is True and data["truncation"] == "error"
    assert data["return_raw_chat"] is True


def test_rl_parallelism_offload_and_torch_compile(dapo):
    assert dapo["trainer"]["device"] == "npu" and dapo["trainer"]["nnodes"] * dapo["trainer"]["n_gpus_per_node"] == 16
    ref_model = dapo["actor_rollout_ref"]
    actor, rollout = ref_model["actor"], ref_model["rollout"]
    assert actor["ulysses_sequence_parallel_size"] == 4
    assert rollout["tensor_model_parallel_size"] == 4
    assert actor["fsdp_config"]["param_offload"] is True and actor["fsdp_config"]["optimizer_offload"] is True
    assert ref_model["model"]["use_remove_padding"] is True
    assert ref_model["model"]["enable_gradient_checkpointing"] is True
    # actor.use_torch_compile=False in the reference; verl 0.9.1's FSDP engine reads fsdp_config.use_torch_compile
    assert actor["use_torch_compile"] is False and actor["fsdp_config"]["use_torch_compile"] is False
    ref = ref_model["ref"]
    assert ref["use_torch_compile"] is False and ref["fsdp_config"]["use_torch_compile"] is False


def test_rl_rollout_and_tool_loop(dapo):
    rollout = dapo["actor_rollout_ref"]["rollout"]
    assert rollout["name"] == "vllm" and rollout["mode"] == "async"
    assert rollout["gpu_memory_utilization"] == 0.8
    assert rollout["temperature"] == 1.0  # training samples: verl's default, not set by the reference
    assert rollout["agent"]["num_workers"] == 16
    multi_turn = rollout["multi_turn"]
    assert multi_turn["enable"] is True and multi_turn["format"] == "hermes"
    assert (multi_turn["max_user_turns"], multi_turn["max_assistant_turns"]) == (16, 16)
    assert multi_turn["tool_response_truncate_side"] == "middle"
    # Deliberate difference: the reference kept verl's 256-character cut; the recipe's tool cuts its own output
    # (max_output_chars in configs/tool.yaml) and verl must not cut again (docs/tool_and_reward.md).
    assert multi_turn["max_tool_response_length"] == 2048
    assert Path(multi_turn["tool_config_path"]) == REPO / "configs" / "tool.yaml"


def test_rl_validation_saving_and_logging(dapo):
    val = dapo["actor_rollout_ref"]["rollout"]["val_kwargs"]
    assert (val["n"], val["temperature"], val["top_p"], val["top_k"]) == (30, 0.7, 0.8, 20)
    trainer = dapo["trainer"]
    assert trainer["val_before_train"] is True
    assert trainer["test_freq"] == 10 and trainer["save_freq"] == 10
    assert trainer["total_epochs"] == 1
    assert trainer["log_val_generations"] == 10
    assert "tensorboard" in trainer["logger"]


# ------------------------------------------------------------------ reward


def test_reward_is_the_reference_rule(dapo):
    """math_dapo with strict box verification (+1 / -1), then -0.4 when the answer came without a tool call
    (num_turns = 2: one user and one assistant turn), whatever the correctness."""
    from retool.reward import compute_score

    reward = dapo["reward"]
    function = reward["custom_reward_function"]
    assert function["path"] == "pkg://retool.reward" and function["name"] == "compute_score"
    assert reward["reward_manager"]["name"] == "naive"  # the manager that passes num_turns, as the reference's patch
    kwargs = dict(function["reward_kwargs"])
    assert kwargs["tool_shaping"] == "seed"
    # answer_match chooses between the reference's strict match and a normalised one (retool.reward)
    assert kwargs["answer_match"] == "reference"

    def score(text: str, num_turns: int) -> float:
        return compute_score("aime_2025", text, "70", {"num_turns": num_turns}, **kwargs)["score"]

    assert score("So the answer is \\boxed{70}.", 4) == pytest.approx(1.0)
    assert score("So the answer is \\boxed{70}.", 2) == pytest.approx(0.6)
    assert score("So the answer is \\boxed{71}.", 4) == pytest.approx(-1.0)
    assert score("So the answer is \\boxed{71}.", 2) == pytest.approx(-1.4)
    assert score("No box here: 70.", 4) == pytest.approx(-1.0)


# ------------------------------------------------------------------ prompts


def test_converters_write_the_reference_prompts_by_default():
    from retool_data_helpers import AIME_DIR, DAPO_PREFIX, DAPO_SUFFIX, dapo_row, raw_user, sft_row, two_call_row

    from retool.data import rl, sft

    # RL training rows: DAPO's whole user message, then the answer-format line.
    row = rl.convert_row(dapo_row("Find $x$.", "3", "u-1"), "dapo")
    expected = f"{DAPO_PREFIX}Find $x$.{DAPO_SUFFIX}{REFERENCE_ANSWER_FORMAT}"
    assert row["prompt"] == [{"role": "user", "content": expected}]
    # Validation rows: the AIME problem as it is, then the same line.
    first = json.loads((AIME_DIR / "aime2025" / "test.jsonl").read_text().splitlines()[0])
    row = rl.convert_row(first, "aime2025")
    assert row["prompt"][0]["content"] == first["problem"] + REFERENCE_ANSWER_FORMAT
    assert row["data_source"] == "aime_2025" and row["agent_name"] == "tool_agent"
    # SFT rows: the ReTool-SFT text after the marker, <answer> tags removed, ends stripped.
    question = "Find the sum of all positive divisors of 36."
    expected = raw_user(question).split("*user question:*", 1)[1].replace("<answer>", "").replace("</answer>", "")
    assert sft.convert_row(two_call_row())[0]["content"] == expected.strip()
    assert sft.convert_row(sft_row("q?", "\\boxed{1}"))[0]["content"].endswith(
        "\\boxed{{'The final answer goes here.'}}")
