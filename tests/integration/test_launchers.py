"""Every launcher, dry-run: the fully resolved verl config must carry the reference hyperparameters, honour extra
overrides and environment, and fail loudly on a key verl does not know. Nothing here needs a device."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.verl

REPO = Path(__file__).resolve().parents[2]
SANDBOX = "http://10.0.0.5:8080/run_code"


def dry_run(launcher: str, *overrides: str, **env: str) -> subprocess.CompletedProcess:
    full_env = {**os.environ, "DRY_RUN": "1", "PYTHON": sys.executable, **env}
    return subprocess.run([str(REPO / launcher), *overrides], cwd=REPO, env=full_env, capture_output=True,
                          text=True, timeout=300)


def resolved(launcher: str, *overrides: str, **env: str) -> dict:
    proc = dry_run(launcher, *overrides, **env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return yaml.safe_load(proc.stdout)


@pytest.fixture(scope="module")
def sft_npu() -> dict:
    return resolved("run_qwen3_4b_sft_npu.sh", "optim.lr=2e-5", MODEL_PATH="/models/qwen3-4b", DATA_DIR="/data/rt")


@pytest.fixture(scope="module")
def dapo_npu() -> dict:
    return resolved("run_qwen3_4b_dapo_npu.sh", "trainer.total_training_steps=130", NNODES="2",
                    MODEL_PATH="/ckpt/sft-merged", DATA_DIR="/data/rt", RETOOL_SANDBOX_URL=SANDBOX,
                    TENSORBOARD_DIR="/shared/tb/dapo")


def test_sft_npu_carries_the_reference_hyperparameters(sft_npu):
    cfg = sft_npu
    assert cfg["trainer"]["device"] == "npu"
    assert cfg["trainer"]["n_gpus_per_node"] == 16
    assert cfg["engine"]["strategy"] == "fsdp2"
    assert cfg["engine"]["ulysses_sequence_parallel_size"] == 4
    assert cfg["model"]["use_remove_padding"] is True
    assert cfg["data"]["max_length"] == 16384
    assert cfg["data"]["train_batch_size"] == 64
    assert cfg["data"]["micro_batch_size_per_gpu"] == 8
    assert cfg["data"]["messages_key"] == "messages" and cfg["data"]["tools_key"] == "tools"
    assert cfg["trainer"]["total_epochs"] == 6
    assert "tensorboard" in cfg["trainer"]["logger"]
    assert "hf_model" in cfg["checkpoint"]["save_contents"]


def test_sft_launcher_passes_extra_overrides_and_paths(sft_npu):
    assert sft_npu["optim"]["lr"] == pytest.approx(2e-5)  # the extra argument, not the config's 1e-5
    assert sft_npu["model"]["path"] == "/models/qwen3-4b"
    assert sft_npu["data"]["train_files"] == "/data/rt/retool_sft.parquet"


def test_dapo_npu_carries_the_reference_hyperparameters(dapo_npu):
    cfg = dapo_npu
    actor = cfg["actor_rollout_ref"]["actor"]
    rollout = cfg["actor_rollout_ref"]["rollout"]
    assert cfg["trainer"]["device"] == "npu" and cfg["trainer"]["n_gpus_per_node"] == 16
    assert cfg["algorithm"]["adv_estimator"] == "grpo"
    assert cfg["algorithm"]["use_kl_in_reward"] is False and actor["use_kl_loss"] is False
    assert (actor["clip_ratio_low"], actor["clip_ratio_high"], actor["clip_ratio_c"]) == (0.2, 0.28, 10.0)
    assert actor["optim"]["lr"] == pytest.approx(1e-6)
    assert cfg["data"]["train_batch_size"] == 64 and actor["ppo_mini_batch_size"] == 16
    assert rollout["n"] == 16
    assert (cfg["data"]["max_prompt_length"], cfg["data"]["max_response_length"]) == (2048, 16384)
    assert actor["ulysses_sequence_parallel_size"] == 4 and actor["use_dynamic_bsz"] is True
    assert actor["fsdp_config"]["param_offload"] is True and actor["fsdp_config"]["optimizer_offload"] is True
    assert rollout["name"] == "vllm" and rollout["mode"] == "async"
    assert rollout["tensor_model_parallel_size"] == 4 and rollout["gpu_memory_utilization"] == 0.8
    assert rollout["agent"]["num_workers"] == 16
    multi_turn = rollout["multi_turn"]
    assert multi_turn["enable"] is True and multi_turn["format"] == "hermes"
    assert (multi_turn["max_user_turns"], multi_turn["max_assistant_turns"]) == (16, 16)
    assert multi_turn["max_tool_response_length"] == 2048
    assert Path(multi_turn["tool_config_path"]) == REPO / "configs" / "tool.yaml"
    val = rollout["val_kwargs"]
    assert (val["n"], val["temperature"], val["top_p"], val["top_k"], val["do_sample"]) == (30, 0.7, 0.8, 20, True)
    trainer = cfg["trainer"]
    assert trainer["val_before_train"] is True and trainer["test_freq"] == 10 and trainer["save_freq"] == 10
    assert trainer["total_epochs"] == 1 and trainer["log_val_generations"] == 10
    assert "tensorboard" in trainer["logger"]
    reward_fn = cfg["reward"]["custom_reward_function"]
    assert reward_fn["path"] == "pkg://retool.reward" and reward_fn["name"] == "compute_score"
    assert reward_fn["reward_kwargs"]["tool_shaping"] == "seed"
    assert cfg["reward"]["reward_manager"]["name"] == "naive"  # the dapo manager drops num_turns


def test_dapo_launcher_passes_extra_overrides_paths_and_nodes(dapo_npu):
    assert dapo_npu["trainer"]["total_training_steps"] == 130
    assert dapo_npu["trainer"]["nnodes"] == 2
    assert dapo_npu["actor_rollout_ref"]["model"]["path"] == "/ckpt/sft-merged"
    assert dapo_npu["data"]["val_files"] == "/data/rt/aime_2025.parquet"


def test_what_ray_workers_read_from_the_environment_travels_in_the_job_runtime_env(dapo_npu):
    # Workers of a `ray start` cluster have the raylet's environment; tests/integration/test_ray_runtime_env.py
    # shows a real worker reading these values from the runtime env.
    env_vars = dapo_npu["ray_kwargs"]["ray_init"]["runtime_env"]["env_vars"]
    assert env_vars == {"TENSORBOARD_DIR": "/shared/tb/dapo", "RETOOL_SANDBOX_URL": SANDBOX}


def test_dapo_launcher_defaults_the_sandbox_url_and_refuses_the_old_variable():
    cfg = resolved("run_qwen3_4b_dapo_npu.sh", RETOOL_SANDBOX_URL="")
    env_vars = cfg["ray_kwargs"]["ray_init"]["runtime_env"]["env_vars"]
    assert env_vars["RETOOL_SANDBOX_URL"] == "http://127.0.0.1:8080/run_code"
    proc = dry_run("run_qwen3_4b_dapo_npu.sh", SANDBOX_URL=SANDBOX)
    assert proc.returncode == 2 and "SANDBOX_URL is not read; set RETOOL_SANDBOX_URL" in proc.stderr


def test_one_default_sft_model_path_for_config_launcher_and_docs():
    config = yaml.safe_load((REPO / "configs" / "dapo.yaml").read_text())
    assert config["actor_rollout_ref"]["model"]["path"] == "checkpoints/sft/merged"
    cfg = resolved("run_qwen3_4b_dapo_npu.sh", MODEL_PATH="")
    assert cfg["actor_rollout_ref"]["model"]["path"] == str(REPO / "checkpoints" / "sft" / "merged")
    assert "--target_dir checkpoints/sft/merged" in (REPO / "README.md").read_text()


def test_a_relative_run_dir_becomes_absolute_before_it_reaches_verl():
    cfg = resolved("run_qwen3_4b_dapo_npu.sh", RUN_DIR="runs/relative-check", TENSORBOARD_DIR="")
    assert cfg["trainer"]["default_local_dir"] == str(REPO / "runs" / "relative-check" / "checkpoints" / "dapo")
    env_vars = cfg["ray_kwargs"]["ray_init"]["runtime_env"]["env_vars"]
    assert env_vars["TENSORBOARD_DIR"] == str(REPO / "runs" / "relative-check" / "tensorboard" / "dapo")


def test_multi_node_sft_needs_one_shared_run_dir(tmp_path):
    (tmp_path / "retool_sft.parquet").write_bytes(b"")
    env = {**os.environ, "DATA_DIR": str(tmp_path), "PYTHON": sys.executable, "NNODES": "2", "NODE_RANK": "1"}
    for key in ("DRY_RUN", "RUN_DIR"):
        env.pop(key, None)
    proc = subprocess.run([str(REPO / "run_qwen3_4b_sft_npu.sh")], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 2
    assert "needs RUN_DIR set to one shared folder" in proc.stderr


def test_cuda_launchers_select_the_cuda_profile():
    sft = resolved("run_qwen3_4b_sft_cuda.sh", "trainer.experiment_name=cuda-check")
    assert sft["trainer"]["device"] == "cuda" and sft["trainer"]["n_gpus_per_node"] == 8
    assert sft["trainer"]["experiment_name"] == "cuda-check"
    dapo = resolved("run_qwen3_4b_dapo_cuda.sh", "actor_rollout_ref.rollout.n=8")
    assert dapo["trainer"]["device"] == "cuda" and dapo["trainer"]["n_gpus_per_node"] == 8
    assert dapo["actor_rollout_ref"]["rollout"]["n"] == 8


def test_smoke_launcher_prints_both_cpu_configs():
    proc = dry_run("run_smoke_cpu.sh", "trainer.total_training_steps=3", SFT_ARGS="optim.lr=1e-3")
    assert proc.returncode == 0, proc.stderr[-3000:]
    sft_text, _, dapo_text = proc.stdout.partition("# ---- RL")
    sft, dapo = yaml.safe_load(sft_text), yaml.safe_load(dapo_text.split("\n", 1)[1])
    assert sft["trainer"]["device"] == "cpu" and sft["engine"]["strategy"] == "fsdp2"
    assert sft["model"]["use_remove_padding"] is False
    assert sft["model"]["override_config"]["attn_implementation"] == "sdpa"
    assert sft["optim"]["lr"] == pytest.approx(1e-3)
    assert dapo["trainer"]["device"] == "cpu" and dapo["trainer"]["total_training_steps"] == 3
    rollout = dapo["actor_rollout_ref"]["rollout"]
    assert rollout["enforce_eager"] is True and rollout["free_cache_engine"] is False
    assert rollout["enable_sleep_mode"] is False
    assert dapo["ray_kwargs"]["ray_init"]["num_gpus"] == 1
    assert dapo["algorithm"]["rollout_correction"]["bypass_mode"] is True


@pytest.mark.parametrize("launcher", ["run_qwen3_4b_sft_npu.sh", "run_qwen3_4b_dapo_npu.sh"])
def test_unknown_key_fails(launcher):
    proc = dry_run(launcher, "trainer.no_such_key_anywhere=1")
    assert proc.returncode != 0
    assert "no_such_key_anywhere" in proc.stderr


def test_missing_input_is_an_error_outside_dry_run(tmp_path):
    env = {**os.environ, "DATA_DIR": str(tmp_path), "PYTHON": sys.executable}
    env.pop("DRY_RUN", None)
    proc = subprocess.run([str(REPO / "run_qwen3_4b_sft_npu.sh")], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 1
    assert f"{tmp_path}/retool_sft.parquet not found" in proc.stderr
    assert "retool_sft_preprocess.py" in proc.stderr
