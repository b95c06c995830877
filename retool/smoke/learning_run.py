"""The smoke's RL stage run again from an SFT'd tiny model, optionally on a control reward, with its learning report.

The smoke's RL stage is itself the learning-signal run: it validates on the held-out synthetic problems before and
after training (configs/smoke/dapo.yaml). This module repeats that stage with the same launcher, configs
(``+smoke=dapo``), sandbox, tool and reward: ``--control negated`` trains on the negated reward
(retool.smoke.controls), the negative control of tests/e2e/test_learning_signal.py; bench/learning_signal.py runs
both. ``--steps`` and ``--val-n`` change the smoke's step count and samples per validation prompt.

    python -m retool.smoke.learning_run --sft-model runs/smoke-x/sft_merged --assets .cache/smoke-assets \\
        --run-dir runs/learning-x [--control negated] [--steps N] [--val-n K]

Writes ``<run-dir>/learning.json`` (retool.learning's report on the synthetic validation set: changes with 95%
intervals, training curve).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from retool.learning import report
from retool.sandbox.testing import running_sandbox

REPO = Path(__file__).resolve().parents[2]
CONTROLS = {"negated": ("pkg://retool.smoke.controls", "negated_score")}


def overrides(steps: int | None, val_n: int | None, control: str | None) -> list[str]:
    """The Hydra overrides on top of ``+smoke=dapo`` for a learning run (None keeps the smoke's value)."""
    args = ["+smoke=dapo", f"trainer.experiment_name=learning-{control or 'grpo'}"]
    if steps is not None:
        # validate before training (val_before_train) and after the last step
        args += [f"trainer.total_training_steps={steps}", f"trainer.test_freq={steps}"]
    if val_n is not None:
        args.append(f"actor_rollout_ref.rollout.val_kwargs.n={val_n}")
    if control is not None:
        path, name = CONTROLS[control]
        args += [f"reward.custom_reward_function.path={path}", f"reward.custom_reward_function.name={name}"]
    return args


def run(sft_model: Path, assets: Path, run_dir: Path, steps: int | None = None, val_n: int | None = None,
        control: str | None = None, python: str = sys.executable, timeout_s: float = 3600) -> dict[str, Any]:
    """Train, then return (and write to run_dir/learning.json) the learning report; RuntimeError if verl failed."""
    for path, what in ((sft_model / "config.json", "--sft-model (a merged SFT model)"),
                       (assets / "data" / "rl_train.parquet", "--assets (retool.smoke.build output)")):
        if not path.is_file():
            raise FileNotFoundError(f"{path} not found: check {what}")
    run_dir = run_dir.resolve()
    run_dir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with running_sandbox() as sandbox:
        env = {**os.environ, "DEVICE": "cpu", "PYTHON": python, "RUN_DIR": str(run_dir),
               "RETOOL_DATA_DIR": str(assets / "data"), "RETOOL_SFT_MODEL": str(sft_model),
               "RETOOL_SANDBOX_URL": f"{sandbox}/run_code"}
        env.pop("DRY_RUN", None)
        with open(run_dir / "learning_run.log", "w") as log:
            proc = subprocess.run([str(REPO / "scripts" / "launch.sh"), "dapo",
                                   *overrides(steps, val_n, control)],
                                  cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, timeout=timeout_s)
    if proc.returncode != 0:
        tail = (run_dir / "learning_run.log").read_text()[-3000:]
        raise RuntimeError(f"the RL run exited {proc.returncode}; log {run_dir / 'learning_run.log'}:\n{tail}")
    result = report(run_dir / "validation", run_dir / "rollouts", assets / "data" / "rl_val_synthetic.parquet")
    result.update(run_settings(run_dir / "dapo.resolved.yaml"), control=control,
                  wall_s=round(time.monotonic() - started, 1))
    (run_dir / "learning.json").write_text(json.dumps(result, indent=2) + "\n")
    return result


def run_settings(resolved: Path) -> dict[str, Any]:
    """What a learning report needs to say about the run: steps, batch, samples, learning rate (resolved config)."""
    import yaml

    config = yaml.safe_load(resolved.read_text())
    rollout = config["actor_rollout_ref"]["rollout"]
    return {"steps": config["trainer"]["total_training_steps"], "prompts_per_step": config["data"]["train_batch_size"],
            "n": rollout["n"], "val_n": rollout["val_kwargs"]["n"], "lr": config["actor_rollout_ref"]["actor"]["optim"]["lr"]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m retool.smoke.learning_run", description=__doc__.split("\n")[0])
    parser.add_argument("--sft-model", type=Path, required=True, help="merged SFT model (a smoke run's sft_merged)")
    parser.add_argument("--assets", type=Path, default=REPO / ".cache" / "smoke-assets",
                        help="smoke assets (retool.smoke.build --out); default: %(default)s")
    parser.add_argument("--run-dir", type=Path, required=True)
    parser.add_argument("--steps", type=int, default=None, help="GRPO steps (default: the smoke's)")
    parser.add_argument("--val-n", type=int, default=None,
                        help="samples per held-out prompt at each validation (default: the smoke's)")
    parser.add_argument("--control", choices=sorted(CONTROLS), default=None)
    args = parser.parse_args(argv)
    try:
        result = run(args.sft_model, args.assets, args.run_dir, args.steps, args.val_n, args.control)
    except (FileNotFoundError, RuntimeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print("\n".join(result["sentences"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
