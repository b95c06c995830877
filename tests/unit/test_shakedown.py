"""retool/shakedown/ without a run: the step arithmetic of the projection, the rewind before the resume, the paper
estimate kept equal to the README's, and a folder that is not a run. The checklist on a real run folder, and planted
defects in a copy of it, are tests/e2e/test_shakedown_checklist.py's; a whole SHAKEDOWN=1 run is
tests/e2e/test_shakedown_run.py's (make test-shakedown)."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from retool.constants import REPO_ROOT
from retool.doctor.config import planned_steps
from retool.shakedown import cli, projection, relaunch
from retool.shakedown.curves import latest_records
from retool.shakedown.runfolder import Events, Point, Stage


def parquet(path: Path, rows: int) -> str:
    pq.write_table(pa.table({"x": list(range(rows))}), path)
    return str(path)


def test_verl_acts_at_every_multiple_and_at_the_last_step():
    assert projection.every(10, 130) == 13  # the reference's saves (and validations after step 0)
    assert projection.every(31, 186) == 6  # the reference SFT's saves
    assert projection.every(4, 10) == 3  # 4, 8 and the last step
    assert projection.every(-1, 5) == 0 and projection.every(None, 5) == 0
    assert projection.every("after_each_epoch", 5) == 0


def test_planned_steps_from_the_config_or_from_the_data(tmp_path):
    assert planned_steps({"trainer": {"total_training_steps": 130}}) == 130
    sft = {
        "trainer": {"total_training_steps": None, "total_epochs": 6},
        "data": {"train_files": parquet(tmp_path / "sft.parquet", 2000), "train_batch_size": 64},
    }
    assert planned_steps(sft) == 186  # 2,000 ReTool-SFT rows / 64 = 31 steps x 6 epochs
    sft["data"]["train_files"] = str(tmp_path / "missing.parquet")
    assert planned_steps(sft) is None


def test_a_full_validation_is_projected_from_a_step_s_generation_never_below_the_measured_one(tmp_path):
    val = parquet(tmp_path / "aime.parquet", 30)
    full = {
        "data": {"val_files": val, "val_max_samples": -1, "train_batch_size": 64},
        "actor_rollout_ref": {"rollout": {"n": 16, "val_kwargs": {"n": 30}}},
        "trainer": {"total_training_steps": 130, "test_freq": 10, "save_freq": 10, "val_before_train": True},
    }
    stage = Stage("rl", config={}, full_config=full, events=Events(), launches=[])
    measured = projection.Measured(
        step_s=300.0,
        steps_timed=2,
        save_s=20.0,
        startup_s=240.0,
        validation_s=100.0,
        validation_step=0,
        validation_trajectories=16,
        generation_s=210.0,
    )
    projected = projection.project_rl(stage, measured)
    validation = 210.0 * 900 / 1024  # the full validation's 900 trajectories at a 1,024-trajectory step's pace
    assert projected.seconds == pytest.approx(240 + 14 * validation + 130 * 300 + 13 * 20)
    assert "14 validations and 13 saves" in projected.lines[0]
    slow_validation = projection.Measured(**{**measured.__dict__, "validation_s": 400.0})
    assert projection.project_rl(stage, slow_validation).seconds == pytest.approx(240 + 14 * 400 + 130 * 300 + 13 * 20)
    assert projection.project_rl(stage, projection.Measured()).missing == [
        "the step time",
        "the start-up",
        "a validation's time",
    ]


def test_sft_is_timed_by_the_gaps_between_its_steps(tmp_path):
    points = [Point(tmp_path / "e", 1000.0 + 10 * k + (5 if k == 1 else 0), k, "train/loss", 1.0) for k in range(1, 6)]
    stage = Stage(
        "sft",
        config={"trainer": {"default_local_dir": str(tmp_path)}},
        full_config=None,
        events=Events(points),
        launches=[{"event": "start", "start": 900.0}],
    )
    measured = projection.measure_sft(stage)
    assert measured.step_s == 10.0 and measured.steps_timed == 4
    assert measured.startup_s == pytest.approx(1015.0 - 900.0 - 10.0)  # to step 1, less one step


def test_the_paper_estimate_is_the_readme_s():
    readme = (REPO_ROOT / "README.md").read_text()
    low, high = projection.PAPER_SFT_S_PER_STEP
    assert f"SFT {low}-{high} s per step" in readme and f"SFT {low}-{high} s per step" in projection.PAPER_ESTIMATE
    low, high = projection.PAPER_RL_MIN_PER_STEP
    hours_low, hours_high = projection.PAPER_RL_HOURS
    for text in (readme, projection.PAPER_ESTIMATE):
        assert f"RL {low}-{high} min per step ({hours_low}-{hours_high} h for 130 steps" in text


def rl_folder(tmp_path: Path, saved: tuple[int, ...]) -> Path:
    """An RL run folder as a shakedown's first launch leaves it: checkpoints of ``saved``, step 1's rollout dump."""
    run = tmp_path / "run"
    checkpoints = run / "checkpoints" / "rl"
    for step in saved:
        (checkpoints / f"global_step_{step}" / "actor").mkdir(parents=True)
    (checkpoints / "latest_checkpointed_iteration.txt").write_text(str(max(saved)))
    (run / "rollouts").mkdir()
    (run / "rollouts" / "1.jsonl").write_text(
        "".join(json.dumps({"input": f"prompt {i // 2}", "output": "x"}) + "\n" for i in range(4))
    )
    (run / "rl.resolved.yaml").write_text(
        yaml.safe_dump(
            {
                "trainer": {
                    "default_local_dir": str(checkpoints),
                    "total_training_steps": 2,
                    "rollout_data_dir": str(run / "rollouts"),
                }
            }
        )
    )
    return run


def test_after_the_first_launch_the_launcher_starts_again_and_once(tmp_path):
    run = rl_folder(tmp_path, saved=(1,))
    assert relaunch.after_launch(run) is True
    record = json.loads((run / "shakedown" / "resume.json").read_text())
    assert record["first_launch"]["saved"] == [1] and record["stopped_after"] == 1 and record["resumed"] is False
    assert len(record["first_launch"]["prompts"]["1"]) == 2  # the distinct prompts step 1 drew, hashed
    checkpoints = run / "checkpoints" / "rl"
    (checkpoints / "global_step_2" / "actor").mkdir(parents=True)  # what the relaunch saves
    (checkpoints / "latest_checkpointed_iteration.txt").write_text("2")
    assert relaunch.after_launch(run) is False  # after the relaunch: done, no third launch
    assert json.loads((run / "shakedown" / "resume.json").read_text())["resumed"] is True


def test_a_first_launch_that_did_not_stop_at_step_1_cannot_be_resumed(tmp_path, capsys):
    run = rl_folder(tmp_path, saved=(1, 2))
    assert relaunch.main(["--run-dir", str(run)]) == 1
    err = capsys.readouterr().err
    assert "should have ended at the checkpoint of step 1 of 2 (latest checkpoint: 2; saved: [1, 2])" in err
    assert not (run / "shakedown" / "resume.json").exists()


def test_a_resumed_step_counts_once_in_the_failure_totals():
    records = [
        {"step": 1, "partition": "train"},
        {"step": 2, "partition": "train", "expected": 1},
        {"step": 2, "partition": "train", "expected": 2},
        {"stop": True, "step": 2},
    ]
    kept = latest_records(records)
    assert [r.get("expected") for r in kept if r.get("step") == 2 and not r.get("stop")] == [2]
    assert len(kept) == 3


def test_a_folder_that_is_not_a_run_is_a_clear_error(tmp_path, capsys):
    assert cli.main([str(tmp_path)]) == 2
    assert "holds neither sft.resolved.yaml nor rl.resolved.yaml" in capsys.readouterr().err
    assert cli.main([str(tmp_path / "absent")]) == 2
    assert "is not a folder" in capsys.readouterr().err
