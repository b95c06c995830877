"""retool-doctor's disk check: what a run's checkpoints take (model + optimizer states (+ the HF copy) x the number
kept) against the free space of the disk trainer.default_local_dir is on."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from doctor_helpers import QWEN3_4B, clear_run_choices, resolved_rl_config, rl_parquet, tiny_model_dir

from retool.checklist import FAIL, OK, SKIP, WARN
from retool.doctor.estimate import GIB, checkpoint_saves, estimate_checkpoints, param_count
from retool.doctor.inputs import check_model
from retool.doctor.resources import check_disk

ACTOR_STATE = ["model", "optimizer", "extra"]  # verl's default actor checkpoint.save_contents


@pytest.fixture(autouse=True)
def _no_run_choices(monkeypatch: pytest.MonkeyPatch) -> None:
    clear_run_choices(monkeypatch)


def rl_run(tmp_path: Path, model: Path, **trainer: object) -> dict:
    train = rl_parquet(tmp_path / "train.parquet", rows=10)
    cfg = resolved_rl_config(
        tmp_path,
        model,
        train,
        train,
        default_local_dir=str(tmp_path / "runs" / "rl-1" / "checkpoints" / "rl"),
        **trainer,
    )
    cfg["data"]["train_batch_size"] = 2
    return cfg


def test_checkpoint_arithmetic() -> None:
    p = param_count(QWEN3_4B)
    # The reference RL run: 130 steps, a save every 10, all kept; fp32 weights (4 B) + Adam's two moments (8 B).
    assert checkpoint_saves(130, 10, last_step_always=False) == 13
    reference = estimate_checkpoints(QWEN3_4B, save_contents=ACTOR_STATE, saves=13, keep=None)
    assert reference.kept == 13
    assert reference.total_gb == pytest.approx(13 * 12 * p / GIB)
    assert reference.total_gb == pytest.approx(584, rel=0.01)
    assert estimate_checkpoints(QWEN3_4B, save_contents=ACTOR_STATE, saves=13, keep=2).total_gb == pytest.approx(
        2 * 12 * p / GIB
    )
    with_hf = estimate_checkpoints(QWEN3_4B, save_contents=[*ACTOR_STATE, "hf_model"], saves=1, keep=None)
    assert with_hf.per_checkpoint_gb["hf_model"] == pytest.approx(4 * p / GIB)
    bf16 = estimate_checkpoints(QWEN3_4B, save_contents=["model"], saves=1, keep=0, fp32_master=False)
    assert bf16.total_gb == pytest.approx(2 * p / GIB)
    # The last step is saved off the beat too; save_freq -1: RL saves nothing, SFT the last step.
    assert checkpoint_saves(135, 10, last_step_always=False) == 14
    assert checkpoint_saves(135, -1, last_step_always=False) == 0
    assert checkpoint_saves(135, -1, last_step_always=True) == 1


def test_fails_when_the_checkpoints_exceed_the_free_space(tmp_path: Path) -> None:
    per = estimate_checkpoints(QWEN3_4B, save_contents=ACTOR_STATE, saves=1, keep=None).total_gb
    saves = int(1.2 * shutil.disk_usage(tmp_path).free / GIB / per) + 1  # just over the free space
    cfg = rl_run(tmp_path, Path("/nowhere/Qwen3-4B-Instruct-2507"), total_training_steps=saves, save_freq=1)
    check = check_disk(cfg, None)
    assert check.status == FAIL, check.details[0]
    assert f"{saves} kept of {saves} saved" in check.details[0] and "built-in qwen3-4b shape" in check.details[0]
    assert f"GiB free on {tmp_path}" in check.details[0]  # the run folder does not exist yet: its first parent
    assert "they do not fit" in check.details[0] and "trainer.max_actor_ckpt_to_keep=N" in check.details[0]
    cfg["trainer"]["max_actor_ckpt_to_keep"] = 1
    _, hf = check_model({"actor_rollout_ref": {"model": {"path": str(tiny_model_dir(tmp_path / "tiny"))}}})
    kept_one = check_disk(cfg, hf)
    assert kept_one.status == OK and f"1 kept of {saves} saved" in kept_one.details[0]


def test_warns_above_80_percent_of_the_free_space(tmp_path: Path) -> None:
    model = tiny_model_dir(tmp_path / "tiny")
    _, hf = check_model({"actor_rollout_ref": {"model": {"path": str(model)}}})
    per = estimate_checkpoints(hf, save_contents=ACTOR_STATE, saves=1, keep=None).total_gb
    free = shutil.disk_usage(tmp_path).free / GIB
    near = check_disk(rl_run(tmp_path, model, total_training_steps=int(0.9 * free / per), save_freq=1), hf)
    assert near.status == WARN and "they would fill over 80% of it" in near.details[0], near.details[0]
    half = check_disk(rl_run(tmp_path, model, total_training_steps=int(0.5 * free / per), save_freq=1), hf)
    assert half.status == OK, half.details[0]


def test_counts_saves_from_the_data_and_the_sft_settings(tmp_path: Path) -> None:
    model = tiny_model_dir(tmp_path / "tiny")
    _, hf = check_model({"actor_rollout_ref": {"model": {"path": str(model)}}})
    rl = check_disk(rl_run(tmp_path, model, total_epochs=3, save_freq=5), hf)
    assert rl.status == OK and "3 kept of 3 saved" in rl.details[0]
    assert "15 steps (10 train rows // batch 2 x 3 epochs), a save every 5 steps" in rl.details[0]
    assert "model 0.0, optimizer 0.0;" in rl.details[0]
    assert check_disk(rl_run(tmp_path, model, save_freq=-1), hf).details[0].startswith("the run saves no checkpoints")
    sft = {
        "model": {"path": str(model)},
        "data": {"train_files": str(tmp_path / "missing.parquet")},
        "checkpoint": {"save_contents": [*ACTOR_STATE, "hf_model"]},
        "trainer": {"save_freq": -1, "total_epochs": 6, "default_local_dir": str(tmp_path / "sft")},
    }
    last = check_disk(sft, hf)
    assert last.status == OK and "1 kept of 1 saved" in last.details[0] and "hf_model" in last.details[0]
    assert "trainer.save_freq -1: the last step only" in last.details[0]
    sft["trainer"]["save_freq"] = 10  # the step count is unknown: no total_training_steps and no readable data
    unknown = check_disk(sft, hf)
    assert unknown.status == WARN and "cannot count the checkpoints" in unknown.details[0]
    sft["trainer"]["max_ckpt_to_keep"] = 2
    assert "at most trainer.max_ckpt_to_keep 2 kept" in check_disk(sft, hf).details[0]
    assert check_disk({"trainer": {}}, hf).status == SKIP
