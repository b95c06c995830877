"""retool.next_step: the command after a stage names this run's own folders."""

from __future__ import annotations

import yaml

from retool.next_step import main


def run_folder(tmp_path, stage: str, step: int | None, tensor_parallel: int | None = None):
    run_dir = tmp_path / stage
    checkpoints = run_dir / "checkpoints" / stage
    checkpoints.mkdir(parents=True)
    config = {"trainer": {"default_local_dir": str(checkpoints)}}
    if tensor_parallel is not None:
        config["actor_rollout_ref"] = {"rollout": {"tensor_model_parallel_size": tensor_parallel}}
    (run_dir / f"{stage}.resolved.yaml").write_text(yaml.safe_dump(config))
    if step is not None:
        (checkpoints / f"global_step_{step}").mkdir()
        (checkpoints / "latest_checkpointed_iteration.txt").write_text(str(step))
    return run_dir


def test_after_sft_the_rl_command_names_the_last_checkpoint(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("PROFILE", "improved")
    monkeypatch.delenv("DEVICE", raising=False)
    run_dir = run_folder(tmp_path, "sft", 186)
    assert main(["sft", str(run_dir)]) == 0
    out = capsys.readouterr().out
    hf = run_dir / "checkpoints" / "sft" / "global_step_186" / "huggingface"
    assert f"PROFILE=improved MODEL_PATH={hf} ./run_qwen3_4b_dapo_npu.sh" in out
    assert f"--local_dir {hf.parent} --target_dir {run_dir / 'merged'}" in out


def test_after_rl_report_merge_and_eval(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("PROFILE", raising=False)
    monkeypatch.delenv("DEVICE", raising=False)
    run_dir = run_folder(tmp_path, "rl", 130, tensor_parallel=4)
    assert main(["rl", str(run_dir)]) == 0
    out = capsys.readouterr().out
    assert f"retool-report --logdir {run_dir / 'tensorboard' / 'rl'}" in out
    assert f"--local_dir {run_dir / 'checkpoints' / 'rl' / 'global_step_130' / 'actor'}" in out
    evaluation = next(line for line in out.splitlines() if line.startswith("retool-eval "))
    assert "--profile reference" in evaluation
    # vLLM laid out as the run's validation: the NPU launch's device and the rollout's tensor parallelism
    assert evaluation.endswith(f"--output {run_dir / 'eval'} --device npu --tensor-parallel-size 4")


def test_the_eval_command_follows_the_device_and_the_rollout_of_the_run(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("DEVICE", "cuda")
    assert main(["rl", str(run_folder(tmp_path, "rl", 20, tensor_parallel=2))]) == 0
    assert "--device cuda --tensor-parallel-size 2" in capsys.readouterr().out


def test_no_checkpoint_and_no_run_folder(tmp_path, capsys):
    assert main(["rl", str(run_folder(tmp_path, "rl", None))]) == 0
    assert "saved no checkpoint" in capsys.readouterr().out
    assert main(["sft", str(tmp_path / "nothing")]) == 1
    assert "not a sft run folder" in capsys.readouterr().err


def test_after_a_cuda_sft_the_rl_command_is_the_cuda_launcher(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("DEVICE", "cuda")
    assert main(["sft", str(run_folder(tmp_path, "sft", 3))]) == 0
    out = capsys.readouterr().out
    assert "./run_qwen3_4b_dapo_cuda.sh" in out and "dapo_npu" not in out


def test_a_shakedown_goes_on_in_its_own_folder_then_to_its_checklist(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("SHAKEDOWN", "1")
    monkeypatch.setenv("PROFILE", "reference")
    monkeypatch.delenv("DEVICE", raising=False)
    run_dir = run_folder(tmp_path, "sft", 5)
    assert main(["sft", str(run_dir)]) == 0
    assert (
        f"SHAKEDOWN=1 RUN_DIR={run_dir} PROFILE=reference MODEL_PATH={run_dir / 'sft_merged'} "
        "./run_qwen3_4b_dapo_npu.sh"
    ) in capsys.readouterr().out
    assert main(["rl", str(run_folder(tmp_path, "rl", 2))]) == 0
    assert f"retool-shakedown {tmp_path / 'rl'}" in capsys.readouterr().out
