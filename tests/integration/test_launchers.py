"""Every launcher as a user starts it: extra overrides and environment reach the resolved verl config (DRY_RUN=1), an
unknown key fails loudly, and a real launch stops before verl when something is wrong: missing inputs, a Python
without the device stack, a weaker sandbox, a resume that would train something else. Nothing here needs a device.
The reference run's values themselves are held by test_reference_settings.py."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from retool.sandbox_gate import GRACE_VARIABLE

pytestmark = pytest.mark.verl

REPO = Path(__file__).resolve().parents[2]
SANDBOX = "http://10.0.0.5:8080/run_code"


def dry_run(launcher: str, *overrides: str, **env: str) -> subprocess.CompletedProcess:
    full_env = {**os.environ, "DRY_RUN": "1", "PYTHON": sys.executable, **env}
    return subprocess.run(
        [str(REPO / launcher), *overrides], cwd=REPO, env=full_env, capture_output=True, text=True, timeout=300
    )


def resolved(launcher: str, *overrides: str, **env: str) -> dict:
    proc = dry_run(launcher, *overrides, **env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return yaml.safe_load(proc.stdout)


@pytest.fixture(scope="module")
def sft_npu() -> dict:
    """A shakedown (SHAKEDOWN=1) of the NPU SFT launch: its paths and overrides are the launch's either way."""
    return resolved(
        "run_qwen3_4b_sft_npu.sh", "optim.lr=2e-5", MODEL_PATH="/models/qwen3-4b", DATA_DIR="/data/rt", SHAKEDOWN="1"
    )


@pytest.fixture(scope="module")
def dapo_npu_improved_shakedown() -> dict:
    return resolved("run_qwen3_4b_dapo_npu.sh", PROFILE="improved", DATA_DIR="", SHAKEDOWN="1")


@pytest.fixture(scope="module")
def dapo_npu() -> dict:
    return resolved(
        "run_qwen3_4b_dapo_npu.sh",
        "trainer.total_training_steps=130",
        NNODES="2",
        MODEL_PATH="/ckpt/sft-merged",
        DATA_DIR="/data/rt",
        RETOOL_SANDBOX_URL=SANDBOX,
        TENSORBOARD_DIR="/shared/tb/rl",
        HCCL_CONNECT_TIMEOUT="3000",
    )


def test_sft_launcher_passes_extra_overrides_and_paths(sft_npu):
    assert sft_npu["optim"]["lr"] == pytest.approx(2e-5)  # the extra argument, not the config's 1e-5
    assert sft_npu["model"]["path"] == "/models/qwen3-4b"
    assert sft_npu["data"]["train_files"] == "/data/rt/retool_sft.parquet"


def test_data_dir_defaults_to_the_profile_s_folder(dapo_npu_improved_shakedown):
    reference = resolved("run_qwen3_4b_dapo_npu.sh", PROFILE="reference", DATA_DIR="")
    for profile, cfg in (("reference", reference), ("improved", dapo_npu_improved_shakedown)):
        assert cfg["data"]["train_files"] == str(REPO / "data" / profile / "dapo_math_17k.parquet")
    proc = dry_run("run_qwen3_4b_dapo_npu.sh", PROFILE="best")
    assert proc.returncode == 2 and "PROFILE=best has no configs/profile/rl/best.yaml" in proc.stderr


def test_dapo_launcher_passes_extra_overrides_paths_and_nodes(dapo_npu):
    assert dapo_npu["trainer"]["total_training_steps"] == 130
    assert dapo_npu["trainer"]["nnodes"] == 2
    assert dapo_npu["actor_rollout_ref"]["model"]["path"] == "/ckpt/sft-merged"
    assert dapo_npu["data"]["val_files"] == "/data/rt/aime_2025.parquet"


def test_what_ray_workers_read_from_the_environment_travels_in_the_job_runtime_env(dapo_npu):
    # Workers of a `ray start` cluster have the raylet's environment; tests/integration/test_ray_runtime_env.py
    # shows a real worker reading these values from the runtime env, test_node_check_cluster.py a second node's.
    # configs/device/npu.env's variables go too, with the launching shell's values where it sets them.
    env_vars = dict(dapo_npu["ray_kwargs"]["ray_init"]["runtime_env"]["env_vars"])
    # verl's metric stream: a numbered file per launch in the run folder (verl truncates the file it opens)
    assert re.fullmatch(r"/.*/logs/metrics/rl-1\.jsonl", env_vars.pop("VERL_FILE_LOGGER_PATH"))
    assert env_vars == {
        "TENSORBOARD_DIR": "/shared/tb/rl",
        "RETOOL_SANDBOX_URL": SANDBOX,
        "PYTHONSAFEPATH": "1",
        "HCCL_CONNECT_TIMEOUT": "3000",
        "TASK_QUEUE_ENABLE": "1",
        "VLLM_USE_V1": "1",
        "RAY_DEDUP_LOGS": "0",
    }


def test_dapo_launcher_defaults_the_sandbox_url_and_refuses_the_old_variable():
    cfg = resolved("run_qwen3_4b_dapo_npu.sh", RETOOL_SANDBOX_URL="")
    env_vars = cfg["ray_kwargs"]["ray_init"]["runtime_env"]["env_vars"]
    assert env_vars["RETOOL_SANDBOX_URL"] == "http://127.0.0.1:8080/run_code"
    proc = dry_run("run_qwen3_4b_dapo_npu.sh", SANDBOX_URL=SANDBOX)
    assert proc.returncode == 2 and "SANDBOX_URL is not read; set RETOOL_SANDBOX_URL" in proc.stderr


def test_the_rl_launcher_names_the_sft_model_it_needs(rl_inputs, tmp_path):
    cfg = resolved("run_qwen3_4b_dapo_npu.sh", MODEL_PATH="")
    assert cfg["actor_rollout_ref"]["model"]["path"] == "MODEL_PATH-not-set"
    proc = launch("run_qwen3_4b_dapo_npu.sh", env={**rl_inputs, "MODEL_PATH": ""})
    assert proc.returncode == 2 and (
        "MODEL_PATH is not set: set MODEL_PATH to the model the SFT stage printed" in proc.stderr
    )
    proc = launch("run_qwen3_4b_dapo_npu.sh", env={**rl_inputs, "MODEL_PATH": str(tmp_path / "missing")})
    assert proc.returncode == 1 and "set MODEL_PATH to the model path it printed" in proc.stderr


def test_a_relative_run_dir_becomes_absolute_before_it_reaches_verl():
    cfg = resolved("run_qwen3_4b_dapo_npu.sh", RUN_DIR="runs/relative-check", TENSORBOARD_DIR="")
    assert cfg["trainer"]["default_local_dir"] == str(REPO / "runs" / "relative-check" / "checkpoints" / "rl")
    env_vars = cfg["ray_kwargs"]["ray_init"]["runtime_env"]["env_vars"]
    assert env_vars["TENSORBOARD_DIR"] == str(REPO / "runs" / "relative-check" / "tensorboard" / "rl")


def test_multi_node_sft_needs_one_shared_run_dir(tmp_path):
    (tmp_path / "retool_sft.parquet").write_bytes(b"")
    env = {**os.environ, "DATA_DIR": str(tmp_path), "PYTHON": sys.executable, "NNODES": "2", "NODE_RANK": "1"}
    for key in ("DRY_RUN", "RUN_DIR"):
        env.pop(key, None)
    proc = subprocess.run(
        [str(REPO / "run_qwen3_4b_sft_npu.sh")], cwd=REPO, env=env, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 2
    assert "needs RUN_DIR set to one shared folder" in proc.stderr


def assert_rl_shakedown(cfg: dict) -> None:
    """configs/shakedown/rl.yaml's keys: 2 steps, both saved, the first launch ending at step 1's checkpoint, one
    validation of 8 problems x 2, rollouts dumped."""
    trainer = cfg["trainer"]
    assert (trainer["total_training_steps"], trainer["save_freq"], trainer["test_freq"]) == (2, 1, -1)
    assert trainer["checkpoint_callback_class"] == "retool.shakedown.first_launch.StopAfterFirstCheckpoint"
    assert trainer["val_before_train"] is True and trainer["rollout_data_dir"].endswith("/rollouts")
    assert cfg["data"]["val_max_samples"] == 8 and cfg["actor_rollout_ref"]["rollout"]["val_kwargs"]["n"] == 2


def test_shakedown_runs_the_npu_launches_own_config_for_a_few_steps(sft_npu, dapo_npu_improved_shakedown):
    assert sft_npu["trainer"]["total_training_steps"] == 5 and sft_npu["trainer"]["n_gpus_per_node"] == 16
    assert sft_npu["engine"]["ulysses_sequence_parallel_size"] == 4 and sft_npu["data"]["max_length"] == 16384
    assert sft_npu["data"]["train_batch_size"] == 64 and sft_npu["trainer"]["save_freq"] == 31
    cfg = dapo_npu_improved_shakedown
    assert_rl_shakedown(cfg)
    rollout = cfg["actor_rollout_ref"]["rollout"]
    assert (rollout["n"], rollout["tensor_model_parallel_size"], cfg["data"]["train_batch_size"]) == (16, 4, 64)
    assert cfg["data"]["max_response_length"] == 16384 and cfg["trainer"]["n_gpus_per_node"] == 16
    assert cfg["actor_rollout_ref"]["actor"]["ulysses_sequence_parallel_size"] == 4
    assert cfg["reward"]["custom_reward_function"]["reward_kwargs"]["answer_match"] == "normalized"  # the profile's


def test_a_shakedown_is_1_or_unset():
    proc = dry_run("run_qwen3_4b_sft_npu.sh", SHAKEDOWN="yes")
    assert proc.returncode == 2 and "SHAKEDOWN=yes: expected 1" in proc.stderr


def test_cuda_launchers_select_the_cuda_profile_and_take_the_shakedown():
    sft = resolved("run_qwen3_4b_sft_cuda.sh", "trainer.experiment_name=cuda-check", SHAKEDOWN="1")
    assert sft["trainer"]["device"] == "cuda" and sft["trainer"]["n_gpus_per_node"] == 8
    assert sft["trainer"]["experiment_name"] == "cuda-check" and sft["trainer"]["total_training_steps"] == 5
    dapo = resolved("run_qwen3_4b_dapo_cuda.sh", "actor_rollout_ref.rollout.n=8", SHAKEDOWN="1")
    assert dapo["trainer"]["device"] == "cuda" and dapo["trainer"]["n_gpus_per_node"] == 8
    assert dapo["actor_rollout_ref"]["rollout"]["n"] == 8
    assert_rl_shakedown(dapo)


def test_smoke_launcher_prints_both_cpu_configs():
    # SHAKEDOWN=1 too: its overlay comes after the smoke's (val n 2, not the smoke's 4), a command-line key after both
    proc = dry_run("run_smoke_cpu.sh", "trainer.total_training_steps=3", SFT_ARGS="optim.lr=1e-3", SHAKEDOWN="1")
    assert proc.returncode == 0, proc.stderr[-3000:]
    sft_text, _, dapo_text = proc.stdout.partition("# ---- RL")
    sft, dapo = yaml.safe_load(sft_text), yaml.safe_load(dapo_text.split("\n", 1)[1])
    assert sft["trainer"]["device"] == "cpu" and sft["engine"]["strategy"] == "fsdp2"
    assert sft["model"]["use_remove_padding"] is False
    assert sft["model"]["override_config"]["attn_implementation"] == "sdpa"
    assert sft["optim"]["lr"] == pytest.approx(1e-3)
    assert dapo["trainer"]["device"] == "cpu" and dapo["trainer"]["total_training_steps"] == 3
    assert dapo["actor_rollout_ref"]["rollout"]["val_kwargs"]["n"] == 2 and dapo["trainer"]["save_freq"] == 1
    assert sft["trainer"]["total_training_steps"] == 5
    rollout = dapo["actor_rollout_ref"]["rollout"]
    assert rollout["enforce_eager"] is True and rollout["free_cache_engine"] is False
    assert rollout["enable_sleep_mode"] is False
    # a placeholder accelerator per resource pool: the trainer's, and separate_async's rollout pool
    assert dapo["ray_kwargs"]["ray_init"]["num_gpus"] == 2
    assert dapo["algorithm"]["rollout_correction"]["bypass_mode"] is True
    # the NPU run's start-up filter, not a CPU variant of it (verl caps the workers at the host's cores)
    assert dapo["data"]["custom_cls"]["name"] == "DistinctPromptFilterDataset"
    assert dapo["data"]["filter_overlong_prompts_workers"] == 2


@pytest.mark.parametrize("launcher", ["run_qwen3_4b_sft_npu.sh", "run_qwen3_4b_dapo_npu.sh"])
def test_unknown_key_fails(launcher):
    proc = dry_run(launcher, "trainer.no_such_key_anywhere=1")
    assert proc.returncode != 0
    assert "no_such_key_anywhere" in proc.stderr


def test_missing_input_is_an_error_outside_dry_run(tmp_path):
    env = {**os.environ, "DATA_DIR": str(tmp_path), "PYTHON": sys.executable}
    env.pop("DRY_RUN", None)
    proc = subprocess.run(
        [str(REPO / "run_qwen3_4b_sft_npu.sh")], cwd=REPO, env=env, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 1
    assert f"{tmp_path}/retool_sft.parquet not found" in proc.stderr
    assert "retool-data prepare --profile reference" in proc.stderr


def launch(launcher: str, *overrides: str, env: dict, path: str | None = None) -> subprocess.CompletedProcess:
    """A real launch (no DRY_RUN), expected to stop before verl starts."""
    full_env = {**os.environ, **env}
    for key in ("DRY_RUN", "PYTHON", "RETOOL_ACCEPT_WEAK_ISOLATION"):
        if key not in env:
            full_env.pop(key, None)
    if path is not None:
        full_env["PATH"] = path
    return subprocess.run(
        [str(REPO / launcher), *overrides], cwd=REPO, env=full_env, capture_output=True, text=True, timeout=300
    )


def test_an_npu_launch_never_runs_on_the_cpu_venv(tmp_path):
    """After `make smoke` the checkout has .venv (CPU torch); an NPU launch must not take it, and must stop when the
    python it gets has no torch_npu."""
    (tmp_path / "retool_sft.parquet").write_bytes(b"")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    python3 = bin_dir / "python3"  # this venv's python: it has retool and verl, and the CPU build of torch
    python3.write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n')
    python3.chmod(0o755)
    proc = launch(
        "run_qwen3_4b_sft_npu.sh",
        env={"DATA_DIR": str(tmp_path), "RUN_DIR": str(tmp_path / "run")},
        path=f"{bin_dir}{os.pathsep}/usr/bin:/bin",
    )
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "without torch_npu" in proc.stderr and "PYTHON=" in proc.stderr and "CPU stack" in proc.stderr
    assert not (tmp_path / "run" / "sft.resolved.yaml").exists()  # stopped before resolving anything
    # and a python3 that cannot import the recipe at all is named with the fix
    python3.write_text('#!/bin/sh\nexec /usr/bin/python3 -I "$@"\n')  # isolated: sees no recipe
    proc = launch(
        "run_qwen3_4b_sft_npu.sh", env={"DATA_DIR": str(tmp_path)}, path=f"{bin_dir}{os.pathsep}/usr/bin:/bin"
    )
    assert proc.returncode == 1 and "cannot import the recipe and verl" in proc.stderr


@pytest.mark.parametrize("isolation", ["rlimit", "none"])
def test_rl_refuses_a_sandbox_weaker_than_bwrap(rl_inputs, tmp_path, isolation):
    from retool_sandbox.spawn import running_sandbox

    # the rlimit tier runs code as an unprivileged uid, which cannot reach a venv under /root: the system python
    with running_sandbox(isolation=isolation, slots=1, python="/usr/bin/python3") as url:
        proc = launch(
            "run_qwen3_4b_dapo_npu.sh",
            env={**rl_inputs, "RUN_DIR": str(tmp_path / "run"), "RETOOL_SANDBOX_URL": url + "/run_code"},
        )
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert f"isolation '{isolation}'" in proc.stderr and "RETOOL_ACCEPT_WEAK_ISOLATION=1" in proc.stderr
    assert "bubblewrap" in proc.stderr and not (tmp_path / "run" / "logs" / "rl.log").exists()


def test_rl_refuses_a_sandbox_that_does_not_answer(rl_inputs, tmp_path):
    proc = launch(
        "run_qwen3_4b_dapo_npu.sh",
        env={
            **rl_inputs,
            "RUN_DIR": str(tmp_path / "run"),
            "RETOOL_SANDBOX_URL": "http://127.0.0.1:9/run_code",  # refused
            GRACE_VARIABLE: "3",
        },
    )
    assert proc.returncode == 1 and "does not answer GET /v1/ping" in proc.stderr
    assert "(refused connections for 3 s)" in proc.stderr  # the launch's setting reached the check


def test_a_resume_that_would_train_something_else_is_refused(rl_inputs, tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    saved = dry_run(
        "run_qwen3_4b_dapo_npu.sh", "actor_rollout_ref.actor.optim.lr=2e-6", **{**rl_inputs, "RUN_DIR": str(run_dir)}
    )
    assert saved.returncode == 0, saved.stderr[-2000:]
    (run_dir / "rl.resolved.yaml").write_text(saved.stdout)
    proc = launch("run_qwen3_4b_dapo_npu.sh", env={**rl_inputs, "RUN_DIR": str(run_dir)})
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert "cannot resume" in proc.stderr and "actor_rollout_ref.actor.optim.lr: 2e-06 -> 1e-06" in proc.stderr
    assert not (run_dir / "logs" / "rl.log").exists()


def test_rl_refuses_a_reward_manager_that_drops_num_turns_before_anything_starts(rl_inputs, tmp_path):
    """verl's dapo manager does not pass num_turns: inside the run every trajectory would raise MissingNumTurns and
    verl would train on over padding. The launch refuses it with the fix, before the sandbox gate, Ray or verl, and
    leaves no config behind that a later launch of the same RUN_DIR would take for a run to resume."""
    run_dir = tmp_path / "run"
    proc = launch(
        "run_qwen3_4b_dapo_npu.sh",
        "reward.reward_manager.name=dapo",
        env={**rl_inputs, "RUN_DIR": str(run_dir), "RETOOL_SANDBOX_URL": "http://127.0.0.1:9/run_code"},
    )
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert (
        "reward.reward_manager.name=dapo: verl's dapo reward manager does not pass the agent loop's num_turns"
        in proc.stderr
        and "Fix: set reward.reward_manager.name=naive" in proc.stderr
    )
    assert "does not answer" not in proc.stderr  # stopped before the sandbox gate
    assert not (run_dir / "rl.resolved.yaml").exists() and not (run_dir / "logs" / "rl.log").exists()
    assert not list(run_dir.glob(".rl.resolved.yaml.*"))


@pytest.mark.parametrize(
    "stage, module, overrides",
    [
        (
            "sft",
            "verl.trainer.sft_trainer",
            ["device/sft=npu", "profile/sft=improved", "trainer.total_training_steps=3"],
        ),
        (
            "rl",
            "verl.trainer.main_ppo",
            [
                "device/rl=cuda",
                "profile/rl=improved",
                "trainer_mode/rl=separate_async",
                "+shakedown=rl",
                "+ray_kwargs.ray_init.runtime_env.env_vars.X='a b'",
            ],
        ),
    ],
)
def test_the_launchers_composer_prints_what_verl_s_entry_point_prints(stage, module, overrides):
    # DRY_RUN and the resolve step compose with retool.compose (no verl import); the run itself is verl's module.
    args = ["--config-path", str(REPO / "configs"), "--config-name", stage, *overrides, "--cfg", "job", "--resolve"]
    printed = {}
    for entry in (module, "retool.compose"):
        proc = subprocess.run(
            [sys.executable, "-m", entry, *args],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=300,
            env={**os.environ, "RETOOL_DATA_DIR": "/data/rt"},
        )
        assert proc.returncode == 0, f"{entry}: {proc.stderr[-3000:]}"
        printed[entry] = proc.stdout
    assert printed["retool.compose"] == printed[module] and len(printed[module].splitlines()) > 200
    broken = subprocess.run(
        [sys.executable, "-m", "retool.compose", *args[:4], "no.such.key=1", "--cfg", "job"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert broken.returncode != 0 and "no.such.key" in broken.stderr
