"""TRAINER_MODE on the NPU and CUDA RL launchers, held to the resolved configs (DRY_RUN=1, no device needed).

The async modes change exactly the keys docs/training.md ("Trainer modes") justifies, and nothing else of the
reference run; separate_async splits each node's devices between the trainer and the rollout (8 + 8 dies on an
Atlas A3 node, 4 + 4 GPUs on a CUDA node) in whole TP replicas, with a sync frequency verl accepts. The six resolves
run at the same time (each is a Python start plus Hydra: ~8 s of CPU).
"""

from __future__ import annotations

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest
import yaml
from test_launchers import REPO, dry_run

pytestmark = pytest.mark.verl

AR = "actor_rollout_ref"
MODES = ("sync", "colocate_async", "separate_async")
LAUNCHERS = {"npu": "run_qwen3_4b_dapo_npu.sh", "cuda": "run_qwen3_4b_dapo_cuda.sh"}
# every key an async mode changes against sync, with its value (docs/training.md, "Trainer modes")
ASYNC_KEYS = {
    "trainer.v1.sampler.max_off_policy_threshold": 10,
    "trainer.v1.sampler.max_off_policy_strategy": "wait",
    "algorithm.rollout_correction.bypass_mode": True,
    f"{AR}.rollout.calculate_log_probs": True,
}
SEPARATE_KEYS = {
    **ASYNC_KEYS,
    "trainer.v1.trainer_mode": "separate_async",
    f"{AR}.hybrid_engine": False,
    f"{AR}.actor.fsdp_config.param_offload": False,
    f"{AR}.actor.fsdp_config.optimizer_offload": False,
    f"{AR}.rollout.checkpoint_engine.backend": "nccl",
}
COLOCATE_KEYS = {**ASYNC_KEYS, "trainer.v1.trainer_mode": "colocate_async"}
# what separate_async sets by device (the split) besides SEPARATE_KEYS: trainer devices, rollout devices and nodes
SPLIT = {"npu": (8, 8), "cuda": (4, 4)}


def flatten(node, prefix: str = "") -> dict:
    if isinstance(node, dict):
        return {k: v for key, value in node.items() for k, v in flatten(value, f"{prefix}{key}.").items()}
    return {prefix[:-1]: node}


@pytest.fixture(scope="module")
def configs() -> dict[tuple[str, str], dict]:
    # one RUN_DIR for every dry run: the default folder is named by the second the launch started
    env = {"MODEL_PATH": "/ckpt/sft-merged", "DATA_DIR": "/data/rt", "NNODES": "2", "RUN_DIR": "/runs/rl-dry"}
    # sync is asked for the way users get it: TRAINER_MODE unset (empty)
    jobs = {
        (device, mode): (launcher, {**env, "TRAINER_MODE": "" if mode == "sync" else mode})
        for device, launcher in LAUNCHERS.items()
        for mode in MODES
    }
    with ThreadPoolExecutor(len(jobs)) as pool:
        procs = dict(zip(jobs, pool.map(lambda job: dry_run(job[0], **job[1]), jobs.values())))
    for key, proc in procs.items():
        assert proc.returncode == 0, (key, proc.stderr[-3000:])
    return {key: flatten(yaml.safe_load(proc.stdout)) for key, proc in procs.items()}


@pytest.mark.parametrize("device", LAUNCHERS)
def test_sync_is_the_default(configs, device):
    sync = configs[(device, "sync")]
    assert sync["trainer.v1.trainer_mode"] == "sync"
    assert sync[f"{AR}.hybrid_engine"] is True and sync[f"{AR}.rollout.checkpoint_engine.backend"] == "naive"
    assert sync[f"{AR}.actor.fsdp_config.param_offload"] is True  # the reference's, which separate_async drops


@pytest.mark.parametrize("device", LAUNCHERS)
def test_colocate_async_changes_only_its_keys(configs, device):
    sync, colocate = configs[(device, "sync")], configs[(device, "colocate_async")]
    changed = {key: colocate.get(key) for key in sync.keys() | colocate.keys() if sync.get(key) != colocate.get(key)}
    assert changed == COLOCATE_KEYS, changed
    assert colocate["trainer.v1.colocate_async.num_warmup_batches"] == 1  # one batch ahead (verl's default too)


@pytest.mark.parametrize("device", LAUNCHERS)
def test_separate_async_splits_each_node_and_changes_only_its_keys(configs, device):
    sync, separate = configs[(device, "sync")], configs[(device, "separate_async")]
    trainer, rollout = SPLIT[device]
    assert separate["trainer.nnodes"] == separate[f"{AR}.rollout.nnodes"] == 2
    assert (separate["trainer.n_gpus_per_node"], separate[f"{AR}.rollout.n_gpus_per_node"]) == (trainer, rollout)
    assert trainer + rollout == sync["trainer.n_gpus_per_node"]
    tp = separate[f"{AR}.rollout.tensor_model_parallel_size"]
    assert tp == 4 and rollout % tp == 0  # whole replicas: 2 of TP 4 on an A3 node's 8 rollout dies
    assert separate["trainer.v1.separate_async.num_warmup_batches"] == 1
    # verl's check: train_batch_size == parameter_sync_step * ppo_mini_batch_size (64 = 4 x 16, one sync per step)
    assert (
        separate["data.train_batch_size"]
        == (separate["trainer.v1.separate_async.parameter_sync_step"] * separate[f"{AR}.actor.ppo_mini_batch_size"])
        == 64
    )
    split = {"trainer.n_gpus_per_node": trainer, f"{AR}.rollout.n_gpus_per_node": rollout, f"{AR}.rollout.nnodes": 2}
    changed = {key: separate.get(key) for key in sync.keys() | separate.keys() if sync.get(key) != separate.get(key)}
    assert changed == {**SEPARATE_KEYS, **split}, changed


def test_a_bad_trainer_mode_or_split_stops_before_anything_runs():
    base = {**os.environ, "DRY_RUN": "1", "PYTHON": sys.executable, "MODEL_PATH": "/m", "DATA_DIR": "/d"}

    def launch(**env: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [str(REPO / "run_qwen3_4b_dapo_npu.sh")],
            cwd=REPO,
            env={**base, **env},
            capture_output=True,
            text=True,
            timeout=120,
        )

    proc = launch(TRAINER_MODE="fully_async")
    assert (
        proc.returncode == 2
        and "TRAINER_MODE=fully_async has no configs/trainer_mode/rl/fully_async.yaml" in proc.stderr
    )
    for bad in ("16", "0", "half"):
        proc = launch(TRAINER_MODE="separate_async", ROLLOUT_DEVICES=bad)
        assert proc.returncode == 2 and f"ROLLOUT_DEVICES={bad} must leave devices to both" in proc.stderr
