"""retool.resume on run folders laid out as verl leaves them: config comparison, checkpoints, TensorBoard cleanup."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from retool.report import read_event_dir
from retool.resume import (
    ResumeError,
    config_differences,
    kept_checkpoints,
    latest_checkpoint,
    main,
    prepare,
    purge_after,
)


def write_events(folder: Path, points: dict[str, list[int]], value: float = 1.0) -> None:
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(str(folder))
    for tag, steps in points.items():
        for step in steps:
            writer.add_scalar(tag, value + step, step)
    writer.close()


def rl_config(run_dir: Path, **trainer) -> dict:
    return {
        "trainer": {
            "default_local_dir": str(run_dir / "checkpoints" / "rl"),
            "test_freq": 2,
            "val_before_train": True,
            "resume_mode": "auto",
            **trainer,
        },
        "actor_rollout_ref": {"actor": {"optim": {"lr": 1e-6}}},
        "ray_kwargs": {"ray_init": {"runtime_env": {"env_vars": {"RETOOL_SANDBOX_URL": "http://a:1/run_code"}}}},
    }


def run_folder(
    tmp_path: Path, checkpoint: int | None, val_steps: list[int], train_steps: list[int], cut_off_val: list[int] = ()
) -> Path:
    """A run folder as verl leaves it: validations logged whole at ``val_steps``; at ``cut_off_val`` only what a
    validation logs before the crash cut it off (the failure counts, the sample generations)."""
    run_dir = tmp_path / "run"
    (run_dir / "checkpoints" / "rl").mkdir(parents=True)
    (run_dir / "rl.resolved.yaml").write_text(yaml.safe_dump(rl_config(run_dir)))
    if checkpoint is not None:
        (run_dir / "checkpoints" / "rl" / f"global_step_{checkpoint}").mkdir()
        (run_dir / "checkpoints" / "rl" / "latest_checkpointed_iteration.txt").write_text(str(checkpoint))
    write_events(
        run_dir / "tensorboard" / "rl",
        {
            "val-core/x/acc/mean@4": val_steps,
            "val-failures/share": [*val_steps, *cut_off_val],
            "val/generations/text_summary": [*val_steps, *cut_off_val],
            "critic/rewards/mean": train_steps,
            "training/global_step": train_steps,
        },
    )
    return run_dir


def test_only_keys_that_say_where_things_run_may_differ(tmp_path):
    saved = rl_config(tmp_path)
    moved = rl_config(tmp_path, val_before_train=False)
    moved["ray_kwargs"]["ray_init"]["runtime_env"]["env_vars"].update(
        RETOOL_SANDBOX_URL="http://b:2/run_code", TENSORBOARD_DIR="/shared/tb", HCCL_CONNECT_TIMEOUT="3000"
    )
    # a run launched before the launcher set the workers' import-path hook resumes under a launcher that sets it
    moved["ray_kwargs"]["ray_init"]["runtime_env"]["worker_process_setup_hook"] = "retool.launch_path.undo_driver_paths"
    assert config_differences(saved, moved) == []
    other = rl_config(tmp_path, save_freq=5)
    other["actor_rollout_ref"]["actor"]["optim"]["lr"] = 2e-6
    assert config_differences(saved, other) == [
        "actor_rollout_ref.actor.optim.lr: 1e-06 -> 2e-06",
        "trainer.save_freq: '<absent>' -> 5",
    ]


def test_points_after_the_checkpoint_are_removed_and_the_rest_kept_byte_for_byte(tmp_path):
    folder = tmp_path / "tb"
    write_events(folder, {"critic/rewards/mean": [1, 2, 3, 4, 5], "val-core/x/acc/mean@4": [0, 2, 4]})
    (event_file,) = folder.glob("events.out.tfevents.*")
    with event_file.open("ab") as handle:  # a record the crash cut short
        handle.write(b"\x20\x00\x00\x00\x00\x00\x00\x00\x01\x02")
    removed, at_step = purge_after(folder, 2)
    assert removed == 4 and at_step == {"critic/rewards/mean", "val-core/x/acc/mean@4"}
    scalars = read_event_dir(folder)
    assert sorted(scalars["critic/rewards/mean"]) == [1, 2] and sorted(scalars["val-core/x/acc/mean@4"]) == [0, 2]
    assert scalars["critic/rewards/mean"][2][1] == pytest.approx(3.0)
    assert purge_after(folder, 2) == (0, at_step)  # idempotent


def test_latest_checkpoint(tmp_path):
    assert latest_checkpoint(tmp_path) is None
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("4\n")
    with pytest.raises(ResumeError, match="global_step_4 is missing"):
        latest_checkpoint(tmp_path)
    (tmp_path / "global_step_4").mkdir()
    assert latest_checkpoint(tmp_path) == 4


def test_a_removed_checkpoint_whose_folder_verl_left_is_not_kept(tmp_path):
    # verl removes an old checkpoint's actor/ and leaves global_step_N/data.pt behind
    for step, contents in ((2, ("data.pt",)), (4, ("data.pt", "actor")), (6, ("actor",)), (10, ())):
        folder = tmp_path / f"global_step_{step}"
        folder.mkdir()
        for name in contents:
            (folder / name).mkdir() if name == "actor" else (folder / name).write_bytes(b"")
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("6\n")
    assert kept_checkpoints(tmp_path) == [4, 6]


def test_resume_after_a_checkpoint_revalidates_only_what_is_missing(tmp_path):
    # checkpoint at step 2 (test_freq 2): its validation was logged before the crash, steps 3-4 were logged too
    run_dir = run_folder(tmp_path, checkpoint=2, val_steps=[0, 2, 4], train_steps=[1, 2, 3, 4])
    new = tmp_path / "new.yaml"
    new.write_text((run_dir / "rl.resolved.yaml").read_text())
    assert prepare("rl", run_dir, new) == ["trainer.val_before_train=False"]
    scalars = read_event_dir(run_dir / "tensorboard" / "rl")
    assert sorted(scalars["critic/rewards/mean"]) == [1, 2] and sorted(scalars["val-core/x/acc/mean@4"]) == [0, 2]


def test_a_validation_the_crash_cut_off_runs_again_and_is_logged_once(tmp_path, capsys):
    # patch 0009: step 2's training metrics were logged after its checkpoint; the crash came during its validation,
    # which had logged its failure counts and sample generations but not its metrics
    run_dir = run_folder(tmp_path, checkpoint=2, val_steps=[0], train_steps=[1, 2], cut_off_val=[2])
    new = tmp_path / "new.yaml"
    new.write_text((run_dir / "rl.resolved.yaml").read_text())
    assert prepare("rl", run_dir, new) == ["trainer.val_before_train=True"]
    scalars = read_event_dir(run_dir / "tensorboard" / "rl")
    assert sorted(scalars["critic/rewards/mean"]) == [1, 2] and sorted(scalars["training/global_step"]) == [1, 2]
    assert sorted(scalars["val-failures/share"]) == [0]  # the validation run again logs step 2's
    err = capsys.readouterr().err
    assert "did not finish the validation of step 2: it runs again" in err and "died before logging" not in err


def test_a_crash_between_a_checkpoint_and_its_step_s_log_is_reported(tmp_path, capsys):
    # unpatched verl logs a step after its validation: the soak's kill in step 130's validation left only the
    # validation's failure counts and generations at step 130
    run_dir = run_folder(tmp_path, checkpoint=2, val_steps=[0], train_steps=[1], cut_off_val=[2])
    new = tmp_path / "new.yaml"
    new.write_text((run_dir / "rl.resolved.yaml").read_text())
    assert prepare("rl", run_dir, new) == ["trainer.val_before_train=True"]
    assert sorted(read_event_dir(run_dir / "tensorboard" / "rl")["val-failures/share"]) == [0]
    assert "saved step 2 but died before logging it" in capsys.readouterr().err


def test_resume_before_the_first_checkpoint_starts_over_and_clears_the_curves(tmp_path, capsys):
    run_dir = run_folder(tmp_path, checkpoint=None, val_steps=[0], train_steps=[1])
    new = tmp_path / "new.yaml"
    new.write_text((run_dir / "rl.resolved.yaml").read_text())
    assert prepare("rl", run_dir, new) == []
    assert read_event_dir(run_dir / "tensorboard" / "rl") == {}
    assert "starts again from step 0" in capsys.readouterr().err


def test_a_changed_config_is_refused_with_the_keys(tmp_path, capsys):
    run_dir = run_folder(tmp_path, checkpoint=2, val_steps=[0, 2], train_steps=[1, 2, 3])
    changed = rl_config(run_dir)
    changed["actor_rollout_ref"]["actor"]["optim"]["lr"] = 3e-6
    new = tmp_path / "new.yaml"
    new.write_text(yaml.safe_dump(changed))
    assert main(["prepare", "--stage", "rl", "--run-dir", str(run_dir), "--new-config", str(new)]) == 1
    err = capsys.readouterr().err
    assert "cannot resume" in err and "actor_rollout_ref.actor.optim.lr: 1e-06 -> 3e-06" in err
    assert sorted(read_event_dir(run_dir / "tensorboard" / "rl")["critic/rewards/mean"]) == [1, 2, 3]  # untouched
    assert (
        main(
            [
                "prepare",
                "--stage",
                "rl",
                "--run-dir",
                str(run_dir),
                "--new-config",
                str(run_dir / "rl.resolved.yaml"),
                "--check-only",
            ]
        )
        == 0
    )
    assert capsys.readouterr().out == ""


def test_an_sft_resume_continues_after_its_checkpoint_without_overrides(tmp_path):
    run_dir = tmp_path / "run"
    checkpoints = run_dir / "checkpoints" / "sft"
    (checkpoints / "global_step_31").mkdir(parents=True)
    (checkpoints / "latest_checkpointed_iteration.txt").write_text("31")
    config = {"trainer": {"default_local_dir": str(checkpoints), "save_freq": 31}, "engine": {"strategy": "fsdp"}}
    (run_dir / "sft.resolved.yaml").write_text(yaml.safe_dump(config))
    write_events(run_dir / "tensorboard" / "sft", {"train/loss": list(range(1, 41))})
    assert prepare("sft", run_dir, run_dir / "sft.resolved.yaml") == []
    assert sorted(read_event_dir(run_dir / "tensorboard" / "sft")["train/loss"]) == list(range(1, 32))


def test_a_resume_takes_the_new_launch_s_worker_environment(tmp_path, capsys):
    """The crashed run logged to another TensorBoard folder and called sandbox a:1; the resume is launched with
    sandbox b:2, a new folder and a device variable more: verl's saved config takes all three, nothing else changes,
    and the crashed run's folder loses the points after the checkpoint."""
    run_dir = tmp_path / "run"
    (run_dir / "checkpoints" / "rl" / "global_step_2").mkdir(parents=True)
    (run_dir / "checkpoints" / "rl" / "latest_checkpointed_iteration.txt").write_text("2")
    crashed = rl_config(run_dir)
    crashed["ray_kwargs"]["ray_init"]["runtime_env"]["env_vars"]["TENSORBOARD_DIR"] = str(tmp_path / "tb-crashed")
    crashed["ray_kwargs"]["ray_init"]["runtime_env"]["env_vars"]["VERL_FILE_LOGGER_PATH"] = "/r/logs/metrics/rl-1.jsonl"
    (run_dir / "rl.resolved.yaml").write_text(yaml.safe_dump(crashed))
    write_events(tmp_path / "tb-crashed", {"critic/rewards/mean": [1, 2, 3], "val-core/x/acc/mean@4": [0, 2]})
    relaunched = rl_config(run_dir)
    env_vars = {
        "RETOOL_SANDBOX_URL": "http://b:2/run_code",
        "TENSORBOARD_DIR": str(tmp_path / "tb-resumed"),
        "HCCL_CONNECT_TIMEOUT": "1500",
        "VERL_FILE_LOGGER_PATH": "/r/logs/metrics/rl-2.jsonl",
    }
    relaunched["ray_kwargs"]["ray_init"]["runtime_env"]["env_vars"] = env_vars
    new = tmp_path / "new.yaml"
    new.write_text(yaml.safe_dump(relaunched))

    assert prepare("rl", run_dir, new) == ["trainer.val_before_train=False"]
    saved = yaml.safe_load((run_dir / "rl.resolved.yaml").read_text())
    assert saved["ray_kwargs"]["ray_init"]["runtime_env"]["env_vars"] == env_vars
    assert {**saved, "ray_kwargs": None} == {**crashed, "ray_kwargs": None}
    assert sorted(read_event_dir(tmp_path / "tb-crashed")["critic/rewards/mean"]) == [1, 2]
    err = capsys.readouterr().err
    assert (
        "[resume] the workers take this launch's RETOOL_SANDBOX_URL: 'http://a:1/run_code' -> "
        "'http://b:2/run_code'" in err
    )
    assert "HCCL_CONNECT_TIMEOUT: '<absent>' -> '1500'" in err and "(1 TensorBoard points logged after it" in err
    assert "VERL_FILE_LOGGER_PATH" not in err  # a file per launch by design: taken, not reported
    # it crashes again before logging anything; the same launch again: nothing left to take, and step 2's
    # validation, logged in the first folder, is still found there
    assert prepare("rl", run_dir, new) == ["trainer.val_before_train=False"]
    assert "the workers take" not in capsys.readouterr().err
