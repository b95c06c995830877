"""What to run after a stage, with the paths of the run that just finished: ``python -m retool.next_step sft|rl DIR``.

scripts/launch.sh prints it when a stage ends, so the merge, RL, report and evaluation commands name this run's
folders (a glob like runs/sft-* would match every earlier run too).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import yaml

from retool.resume import latest_checkpoint


def resolved(run_dir: Path, stage: str) -> dict:
    return yaml.safe_load((run_dir / f"{stage}.resolved.yaml").read_text())


def last_checkpoint(run_dir: Path, stage: str) -> Path | None:
    checkpoints = Path(resolved(run_dir, stage)["trainer"]["default_local_dir"])
    step = latest_checkpoint(checkpoints, strict=False)
    return None if step is None else checkpoints / f"global_step_{step}"


def eval_device(run_dir: Path) -> str:
    """retool-eval's device options for an RL run: the launch's device and the run's rollout tensor parallelism,
    so the evaluation's vLLM is laid out as the validation's was."""
    rollout = resolved(run_dir, "rl").get("actor_rollout_ref", {}).get("rollout", {})
    tensor_parallel = rollout.get("tensor_model_parallel_size", 1)
    return f"--device {os.environ.get('DEVICE', 'npu')} --tensor-parallel-size {tensor_parallel}"


def commands(stage: str, run_dir: Path) -> list[str]:
    step = last_checkpoint(run_dir, stage)
    profile = os.environ.get("PROFILE", "reference")  # the launcher exports it, and DEVICE
    rl_launcher = "./run_qwen3_4b_dapo_cuda.sh" if os.environ.get("DEVICE") == "cuda" else "./run_qwen3_4b_dapo_npu.sh"
    if step is None:
        return [f"# {stage} saved no checkpoint in {run_dir}"]
    if os.environ.get("SHAKEDOWN") == "1":  # retool/shakedown/: both stages in one folder, then the checklist
        if stage == "sft":
            merged = run_dir / "sft_merged"
            return [
                f"# Shakedown SFT done: merged to {merged} and loaded. Its RL stage, in the same folder:",
                f"SHAKEDOWN=1 RUN_DIR={run_dir} PROFILE={profile} MODEL_PATH={merged} {rl_launcher}",
            ]
        return [
            "# Shakedown done: two RL steps, then a resume from step 1. Its checklist:",
            f"retool-shakedown {run_dir}",
        ]
    if stage == "sft":
        return [
            f"# SFT done: {step}. Its Hugging Face copy is {step / 'huggingface'}; RL can start from it, or merge:",
            f"python -m verl.model_merger merge --backend fsdp --local_dir {step} --target_dir {run_dir / 'merged'}",
            f"PROFILE={profile} MODEL_PATH={step / 'huggingface'} {rl_launcher}",
        ]
    return [
        f"# RL done: {step}. Curves and a report, then evaluate the merged actor:",
        f"retool-report --logdir {run_dir / 'tensorboard' / 'rl'} --output {run_dir / 'report'}",
        f"python -m verl.model_merger merge --backend fsdp --local_dir {step / 'actor'} "
        f"--target_dir {run_dir / 'merged'}",
        f"retool-eval --model {run_dir / 'merged'} --profile {profile} --data retool/datasets/aime2025/test.jsonl "
        f"--n 30 --sandbox-url http://127.0.0.1:8080 --output {run_dir / 'eval'} {eval_device(run_dir)}",
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m retool.next_step", description=__doc__.split("\n\n")[0])
    parser.add_argument("stage", choices=["sft", "rl"])
    parser.add_argument("run_dir", type=Path, help="the stage's run folder (RUN_DIR)")
    args = parser.parse_args(argv)
    if not (args.run_dir / f"{args.stage}.resolved.yaml").is_file():
        print(
            f"error: {args.run_dir} holds no {args.stage}.resolved.yaml: not a {args.stage} run folder", file=sys.stderr
        )
        return 1
    print("\n".join(commands(args.stage, args.run_dir)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
