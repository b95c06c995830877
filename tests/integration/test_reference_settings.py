"""The NPU launchers reproduce the reference run by default; PROFILE=improved changes exactly the keys it lists.

Every value of the reference run that reaches a verl 0.9.1 config is held to the launchers' fully resolved configs
(DRY_RUN=1, no device needed) from the tables below, each row naming where the reference's value comes from:

  L-SFT, L-RL  hicann/cann-recipes-train @ e9890e3b, agent_rl/qwen3_tool_agent/run_qwen3_4b_{sft,dapo}_npu.sh:<line>
  P1, P3       the same folder's patches/0001 (num_turns to the reward), 0003 (-0.4 without a tool call)
  R            volcengine/verl @ 95470480, recipe/retool/retool.py:<line> (the file P3 patches; byte-verified)
  T            recipe/retool/sandbox_fusion_tool_config.yaml of verl v0.6.x:<line>
  V0 <file>    a verl v0.6.0 default in force because the reference launcher does not set the key
  README       the reference README @ e9890e3b:<line>

Values that verl 0.9.1 cannot express the reference's way (loss normalisation, SFT checkpoints) are in DIFFERENCES,
with the recipe's value; docs/reference.md explains each, and a test checks that it names them.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from test_launchers import resolved  # the launchers' DRY_RUN helper (same directory)

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit"))  # retool_data_helpers: rows in the hub layouts

from retool.constants import REPO_ROOT

pytestmark = pytest.mark.verl

L_RL = "L-RL run_qwen3_4b_dapo_npu.sh"
L_SFT = "L-SFT run_qwen3_4b_sft_npu.sh"
AR = "actor_rollout_ref"

RL_TABLE = [  # (key in the resolved RL config, the reference's value, where the value comes from)
    ("algorithm.adv_estimator", "grpo", f"{L_RL}:60,89"),
    ("algorithm.use_kl_in_reward", False, f"{L_RL}:62,90"),
    ("algorithm.norm_adv_by_std_in_grpo", True, "V0 trainer/config/ppo_trainer.yaml:78"),
    (f"{AR}.actor.use_kl_loss", False, f"{L_RL}:64,108"),
    ("data.return_raw_chat", True, f"{L_RL}:94"),
    ("data.train_batch_size", 64, f"{L_RL}:75,95"),
    ("data.max_prompt_length", 2048, f"{L_RL}:71,96"),
    ("data.max_response_length", 16384, f"{L_RL}:72,97"),
    ("data.truncation", "error", f"{L_RL}:99"),
    ("data.shuffle", True, "V0 trainer/config/data/legacy_data.yaml:49"),
    (f"{AR}.model.use_remove_padding", True, f"{L_RL}:105"),
    (f"{AR}.model.enable_gradient_checkpointing", True, f"{L_RL}:106"),
    (f"{AR}.actor.strategy", "fsdp", "V0 trainer/config/actor/dp_actor.yaml:26"),
    (f"{AR}.actor.use_torch_compile", False, f"{L_RL}:107"),
    (f"{AR}.actor.fsdp_config.use_torch_compile", False, f"{L_RL}:107 (0.9.1's FSDP engine reads this key)"),
    (f"{AR}.ref.fsdp_config.use_torch_compile", False, "V0 trainer/config/ref/ref.yaml:6 (the ref inherits)"),
    (f"{AR}.actor.clip_ratio_low", 0.2, f"{L_RL}:67,110"),
    (f"{AR}.actor.clip_ratio_high", 0.28, f"{L_RL}:68,111"),
    (f"{AR}.actor.clip_ratio_c", 10.0, f"{L_RL}:112"),
    (f"{AR}.actor.policy_loss.loss_mode", "vanilla", "V0 trainer/config/actor/actor.yaml:51"),
    (f"{AR}.actor.entropy_coeff", 0, "V0 trainer/config/actor/actor.yaml:75"),
    (f"{AR}.actor.ppo_epochs", 1, "V0 trainer/config/actor/actor.yaml:91"),
    (f"{AR}.actor.shuffle", False, "V0 trainer/config/actor/actor.yaml:94"),
    (f"{AR}.actor.optim.lr", 1e-6, f"{L_RL}:73,113"),
    (f"{AR}.actor.optim.betas", [0.9, 0.999], "V0 trainer/config/optim/fsdp.yaml:20"),
    (f"{AR}.actor.optim.weight_decay", 0.01, "V0 trainer/config/actor/actor.yaml:126"),
    (f"{AR}.actor.optim.lr_warmup_steps_ratio", 0.0, "V0 trainer/config/actor/actor.yaml:120"),
    (f"{AR}.actor.optim.lr_scheduler_type", "constant", "V0 trainer/config/optim/fsdp.yaml:32"),
    (f"{AR}.actor.optim.clip_grad", 1.0, "V0 trainer/config/actor/dp_actor.yaml:29"),
    (f"{AR}.actor.use_dynamic_bsz", True, f"{L_RL}:114"),
    (f"{AR}.actor.ppo_mini_batch_size", 16, f"{L_RL}:76,115"),
    (f"{AR}.actor.ppo_max_token_len_per_gpu", 18432, f"{L_RL}:85,116"),
    (f"{AR}.actor.ulysses_sequence_parallel_size", 4, f"{L_RL}:82,117"),
    (f"{AR}.actor.fsdp_config.param_offload", True, f"{L_RL}:83,118"),
    (f"{AR}.actor.fsdp_config.optimizer_offload", True, f"{L_RL}:83,119"),
    (f"{AR}.actor.fsdp_config.model_dtype", "fp32", "V0 trainer/config/engine/fsdp.yaml:32"),
    (f"{AR}.rollout.name", "vllm", f"{L_RL}:121"),
    (f"{AR}.rollout.mode", "async", f"{L_RL}:122"),
    (f"{AR}.rollout.tensor_model_parallel_size", 4, f"{L_RL}:81,123"),
    (f"{AR}.rollout.gpu_memory_utilization", 0.8, f"{L_RL}:130"),
    (f"{AR}.rollout.n", 16, f"{L_RL}:77,131"),
    (f"{AR}.rollout.temperature", 1.0, "V0 trainer/config/rollout/rollout.yaml:11"),
    (f"{AR}.rollout.top_p", 1.0, "V0 trainer/config/rollout/rollout.yaml:17"),
    (f"{AR}.rollout.enforce_eager", False, "V0 trainer/config/rollout/rollout.yaml:38"),
    (f"{AR}.rollout.max_num_seqs", 1024, "V0 trainer/config/rollout/rollout.yaml:68"),
    (f"{AR}.rollout.max_num_batched_tokens", 8192, "V0 trainer/config/rollout/rollout.yaml:62"),
    (f"{AR}.rollout.enable_chunked_prefill", True, "V0 trainer/config/rollout/rollout.yaml:71"),
    (f"{AR}.rollout.enable_prefix_caching", True, "V0 trainer/config/rollout/rollout.yaml:74"),
    (f"{AR}.rollout.dtype", "bfloat16", "V0 trainer/config/rollout/rollout.yaml:29"),
    (f"{AR}.rollout.calculate_log_probs", False, "V0 trainer/config/rollout/rollout.yaml:197"),
    (f"{AR}.rollout.multi_turn.enable", True, f"{L_RL}:124"),
    (f"{AR}.rollout.multi_turn.max_user_turns", 16, f"{L_RL}:70,125"),
    (f"{AR}.rollout.multi_turn.max_assistant_turns", 16, f"{L_RL}:70,126"),
    (f"{AR}.rollout.multi_turn.format", "hermes", f"{L_RL}:128"),
    (f"{AR}.rollout.multi_turn.max_parallel_calls", 1, "V0 trainer/config/rollout/rollout.yaml:163"),
    (f"{AR}.rollout.multi_turn.max_tool_response_length", 256, "V0 trainer/config/rollout/rollout.yaml:166"),
    (f"{AR}.rollout.multi_turn.tool_response_truncate_side", "middle", "V0 trainer/config/rollout/rollout.yaml:169"),
    (f"{AR}.rollout.agent.num_workers", 16, f"{L_RL}:129"),
    (f"{AR}.rollout.val_kwargs.n", 30, f"{L_RL}:78,135"),
    (f"{AR}.rollout.val_kwargs.temperature", 0.7, f"{L_RL}:134"),
    (f"{AR}.rollout.val_kwargs.top_p", 0.8, f"{L_RL}:132"),
    # L-RL:133 sets top_k 20, but the reference's agent loop sent vLLM only temperature and top_p (V0
    # experimental/agent_loop/agent_loop.py:442-453): it sampled with top-k off. 0.9.1 sends top_k, so -1.
    (f"{AR}.rollout.val_kwargs.top_k", -1, "V0 experimental/agent_loop/agent_loop.py:442-453"),
    ("trainer.device", "npu", f"{L_RL}:147"),
    ("trainer.nnodes", 1, f"{L_RL}:142"),
    ("trainer.n_gpus_per_node", 16, f"{L_RL}:139"),
    ("trainer.val_before_train", True, f"{L_RL}:140"),
    ("trainer.log_val_generations", 10, f"{L_RL}:141"),
    ("trainer.save_freq", 10, f"{L_RL}:143"),
    ("trainer.test_freq", 10, f"{L_RL}:145"),
    ("trainer.total_epochs", 1, f"{L_RL}:146"),
    ("trainer.total_training_steps", 130, "README:157 (the run was stopped at step 130)"),
    ("trainer.balance_batch", True, "V0 trainer/config/ppo_trainer.yaml:142"),
    ("reward.reward_manager.name", "naive", "V0 trainer/config/reward_model/reward_model.yaml:56 + P1"),
    ("reward.custom_reward_function.reward_kwargs.answer_match", "strict_box", "R:109 (strict_box_verify=True)"),
    ("reward.custom_reward_function.reward_kwargs.tool_shaping", "no_tool_penalty", "P3 (R:112-115)"),
]

SFT_TABLE = [
    ("trainer.nnodes", 1, f"{L_SFT}:39,50"),
    ("trainer.n_gpus_per_node", 16, f"{L_SFT}:40,51"),
    ("trainer.device", "npu", f"{L_SFT}:69"),
    ("trainer.total_epochs", 6, f"{L_SFT}:67"),
    ("trainer.save_freq", 31, f"{L_SFT}:68"),
    ("data.max_length", 16384, f"{L_SFT}:55"),
    ("data.truncation", "error", "V0 trainer/config/sft_trainer.yaml:19"),
    ("data.train_batch_size", 64, f"{L_SFT}:56"),
    ("data.micro_batch_size_per_gpu", 8, f"{L_SFT}:60"),
    ("data.use_dynamic_bsz", False, "V0 fsdp_sft_trainer.py (no dynamic batch size in 0.6.x SFT)"),
    ("data.messages_key", "messages", f"{L_SFT}:58"),
    ("data.tools_key", "tools", f"{L_SFT}:59"),
    ("engine.strategy", "fsdp", f"{L_SFT}:62"),
    ("engine.ulysses_sequence_parallel_size", 4, f"{L_SFT}:70"),
    ("engine.model_dtype", "fp32", "V0 trainer/config/sft_trainer.yaml:31"),
    ("model.use_remove_padding", True, f"{L_SFT}:71"),
    ("model.enable_gradient_checkpointing", True, "V0 trainer/config/sft_trainer.yaml:37"),
    ("model.lora_rank", 0, "V0 trainer/config/sft_trainer.yaml:39"),
    ("optim.lr", 1e-5, "V0 trainer/config/sft_trainer.yaml:45"),
    ("optim.betas", [0.9, 0.95], "V0 trainer/config/sft_trainer.yaml:46"),
    ("optim.weight_decay", 0.01, "V0 trainer/config/sft_trainer.yaml:47"),
    ("optim.lr_warmup_steps_ratio", 0.1, "V0 trainer/config/sft_trainer.yaml:48"),
    ("optim.clip_grad", 1.0, "V0 trainer/config/sft_trainer.yaml:49"),
    ("optim.lr_scheduler_type", "cosine", "V0 trainer/config/sft_trainer.yaml:50"),
    ("optim.min_lr_ratio", 0.0, "V0 trainer/fsdp_sft_trainer.py:342-345"),
    ("optim.num_cycles", 0.5, "V0 trainer/fsdp_sft_trainer.py:342-345"),
]

TOOL_TABLE = [  # (key of configs/tool.yaml's config:, the reference's value, source)
    ("behaviour", "verl_retool", "R:29-58 (CustomSandboxFusionTool) + V0 tools/sandbox_fusion_tools.py:179-189"),
    ("default_timeout", 30, "T:8"),
    ("memory_limit_mb", 1024, "T:10"),
    ("session_mode", "stateless", "V0 tools/sandbox_fusion_tools.py (every call a fresh process)"),
]
REFERENCE_SCHEMA = {  # T:14-24
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

# Where 0.9.1 or the recipe cannot be the reference: (key, this recipe's value, the reference's, why in one phrase).
DIFFERENCES = {
    "rl": [
        (
            f"{AR}.actor.loss_agg_mode",
            "token-mean",
            "token-mean per micro-batch, scaled",
            "no 0.9.1 option normalises per micro-batch; token-mean is the closest",
        ),
        ("trainer.max_actor_ckpt_to_keep", 3, None, "disk: the reference kept all 13 saves"),
        # start-up speed only (bench/overlong_filter.py): the same rows are kept; the reference's filter did not run
        (
            "data.custom_cls",
            {"path": "pkg://retool.rl_dataset", "name": "DistinctPromptFilterDataset"},
            None,
            "verl's overlong-prompt filter once per distinct prompt",
        ),
        ("data.filter_overlong_prompts_workers", 2, 1, "each filter worker costs seconds to start"),
        (
            "trainer.logger",
            ["console", "tensorboard", "file"],
            ["console", "tensorboard"],
            "verl's metric stream for the console view",
        ),
    ],
    "sft": [
        ("trainer.max_ckpt_to_keep", 2, None, "disk: the reference kept all 6 epochs' checkpoints"),
        ("data.val_files", None, "the training file", "it measured the training data"),
        (
            "checkpoint.save_contents",
            ["model", "optimizer", "extra", "hf_model"],
            ["model", "optimizer", "extra"],
            "a Hugging Face copy RL can start from",
        ),
        (
            "trainer.logger",
            ["console", "tensorboard", "file"],
            ["console", "tensorboard"],
            "verl's metric stream for the console view",
        ),
    ],
}

# The keys PROFILE=improved changes (configs/profile/*/improved.yaml); docs/reference.md says why for each.
IMPROVED = {
    "rl": {
        f"{AR}.actor.strategy": "fsdp2",
        f"{AR}.ref.strategy": "fsdp2",  # verl interpolates it from the actor's
        f"{AR}.rollout.calculate_log_probs": True,
        f"{AR}.rollout.multi_turn.tool_config_path": str(REPO_ROOT / "configs" / "tool_annotated.yaml"),
        "actor_rollout_ref.rollout.multi_turn.max_tool_response_length": 2048,
        "reward.custom_reward_function.reward_kwargs.answer_match": "normalized",
    },
    "sft": {"engine.strategy": "fsdp2"},
}
LAUNCHERS = {"sft": "run_qwen3_4b_sft_npu.sh", "rl": "run_qwen3_4b_dapo_npu.sh"}
TABLES = {"sft": SFT_TABLE, "rl": RL_TABLE}


def dig(config: dict, dotted: str):
    node = config
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            raise KeyError(f"{dotted}: no {part!r} in the resolved config")
        node = node[part]
    return node


def flatten(node, prefix: str = "") -> dict:
    if isinstance(node, dict):
        out = {}
        for key, value in node.items():
            out.update(flatten(value, f"{prefix}.{key}" if prefix else str(key)))
        return out
    return {prefix: node}


@pytest.fixture(scope="module")
def configs() -> dict:
    """{(stage, profile): resolved config}, with the same data and run folders so only the profile differs."""
    same = {"DATA_DIR": "/data/retool", "RUN_DIR": "/runs/check", "MODEL_PATH": "/models/m"}
    return {
        (stage, profile): resolved(launcher, PROFILE=profile, **same)
        for stage, launcher in LAUNCHERS.items()
        for profile in ("reference", "improved")
    }


@pytest.mark.parametrize("stage", ["sft", "rl"])
def test_the_default_npu_config_is_the_reference_run(configs, stage):
    config = configs[(stage, "reference")]
    wrong = [
        f"{key} = {dig(config, key)!r}, the reference had {value!r} ({source})"
        for key, value, source in TABLES[stage]
        if dig(config, key) != pytest.approx(value)
    ]
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("stage", ["sft", "rl"])
def test_the_listed_differences_hold_and_docs_name_them(configs, stage):
    config = configs[(stage, "reference")]
    reference_md = (REPO_ROOT / "docs" / "reference.md").read_text()
    for key, ours, _, why in DIFFERENCES[stage]:
        assert dig(config, key) == ours, key
        assert f"`{key}`" in reference_md, f"docs/reference.md does not name `{key}` ({why})"


def test_the_reference_tool_is_the_default_tool():
    from retool.tool_yaml import load_tool_schema

    tool_yaml = REPO_ROOT / "configs" / "tool.yaml"
    settings = yaml.safe_load(tool_yaml.read_text())["tools"][0]["config"]
    for key, value, source in TOOL_TABLE:
        assert settings.get(key) == value, (
            f"configs/tool.yaml {key}: {settings.get(key)!r}, reference {value!r} ({source})"
        )
    assert load_tool_schema(tool_yaml) == REFERENCE_SCHEMA  # what SFT rows carry and RL shows


@pytest.mark.parametrize("stage", ["sft", "rl"])
def test_the_improved_profile_differs_only_in_its_listed_keys(configs, stage):
    reference, improved = (flatten(configs[(stage, profile)]) for profile in ("reference", "improved"))
    changed = {
        key: improved.get(key)
        for key in reference.keys() | improved.keys()
        if reference.get(key) != improved.get(key) and not key.endswith(".tool_config_path")
    }
    expected = {key: value for key, value in IMPROVED[stage].items() if not key.endswith(".tool_config_path")}
    assert changed == expected
    for key, value in IMPROVED[stage].items():
        assert improved[key] == value, key
    documented = (REPO_ROOT / "docs" / "reference.md").read_text()
    for key in IMPROVED[stage]:
        assert f"`{key}`" in documented, f"docs/reference.md does not explain `{key}`"


def test_the_reward_is_the_reference_rule(configs):
    """math_dapo with strict box verification (+1 / -1), then -0.4 when the answer came without a tool call
    (num_turns = 2: one user and one assistant turn), whatever the correctness (R:109, P3)."""
    from retool.reward import compute_score

    kwargs = dict(dig(configs[("rl", "reference")], "reward.custom_reward_function.reward_kwargs"))

    def score(text: str, num_turns: int) -> float:
        return compute_score("aime_2025", text, "70", {"num_turns": num_turns}, **kwargs)["score"]

    assert score("So the answer is \\boxed{70}.", 4) == pytest.approx(1.0)
    assert score("So the answer is \\boxed{70}.", 2) == pytest.approx(0.6)
    assert score("So the answer is \\boxed{71}.", 4) == pytest.approx(-1.0)
    assert score("So the answer is \\boxed{71}.", 2) == pytest.approx(-1.4)
    assert score("No box here: 70.", 4) == pytest.approx(-1.0)


@pytest.mark.parametrize(("manager", "forwards_num_turns"), [("naive", True), ("dapo", False)])
def test_a_reward_manager_that_drops_num_turns_stops_at_the_first_scored_trajectory(manager, forwards_num_turns):
    """verl's own reward-loop managers, given a trajectory as the agent loop hands it over: the naive one (pinned)
    forwards num_turns; the dapo one drops it, and the recipe's reward then stops the run with the fix."""
    from omegaconf import OmegaConf
    from retool_data_helpers import qwen_tokenizer
    from verl import DataProto
    from verl.experimental.reward_loop.reward_manager.dapo import DAPORewardManager
    from verl.experimental.reward_loop.reward_manager.naive import NaiveRewardManager
    from verl.trainer.ppo.reward import get_custom_reward_fn

    from retool.reward import MissingNumTurns

    config = OmegaConf.create(
        {
            "reward": {
                "custom_reward_function": {
                    "path": "pkg://retool.reward",
                    "name": "compute_score",
                    "reward_kwargs": {"tool_shaping": "no_tool_penalty", "answer_match": "strict_box"},
                }
            }
        }
    )
    tokenizer = qwen_tokenizer()
    cls = {"naive": NaiveRewardManager, "dapo": DAPORewardManager}[manager]
    rewarder = cls(config, tokenizer, get_custom_reward_fn(config))
    response = torch.tensor([tokenizer.encode("So the answer is \\boxed{70}.")])
    data = DataProto.from_dict(
        tensors={"responses": response, "attention_mask": torch.ones_like(response)},
        non_tensors={
            "data_source": np.array(["aime_2025"], dtype=object),
            "reward_model": np.array([{"ground_truth": "70"}], dtype=object),
            "extra_info": np.array([{"index": "0"}], dtype=object),
            "__num_turns__": np.array([2], dtype=np.int32),
        },
    )
    run = rewarder.loop.run_until_complete  # the manager runs the score on its own event loop's executor
    if forwards_num_turns:
        result = run(rewarder.run_single(data))
        assert result["reward_score"] == pytest.approx(0.6)  # right, but without a tool call
    else:
        with pytest.raises(MissingNumTurns, match="reward.reward_manager.name=naive"):
            run(rewarder.run_single(data))


def test_sft_and_rl_data_of_each_profile_carry_its_schema_and_wording(tmp_path):
    """retool_sft_preprocess.py and retool-prepare-rl convert per profile; the launchers' check refuses a mix."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from retool_data_helpers import AIME_DIR, two_call_row

    from retool.data import rl, sft
    from retool.profiles import PROFILES, check_data

    raw = tmp_path / "raw_sft.parquet"
    pq.write_table(pa.Table.from_pylist([two_call_row()]), raw)
    for name, profile in PROFILES.items():
        sft.preprocess(
            raw, tmp_path / f"sft_{name}.parquet", profile.tool_config_path, prompt_style=profile.prompt_style
        )
        rl.prepare(
            AIME_DIR / "aime2025" / "test.jsonl",
            tmp_path / f"aime_{name}.parquet",
            limit=2,
            prompt_style=profile.prompt_style,
        )
    for name, profile in PROFILES.items():
        other = "improved" if name == "reference" else "reference"
        assert check_data(profile, tmp_path / f"sft_{name}.parquet", (tmp_path / f"aime_{name}.parquet",)) == []
        problems = check_data(profile, tmp_path / f"sft_{other}.parquet", (tmp_path / f"aime_{other}.parquet",))
        assert len(problems) == 2 and all(f"--profile {name}" in p for p in problems), problems
