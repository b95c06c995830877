"""The smoke's RL stage run again from an SFT'd tiny model, optionally with another seed or a control, with its report.

The smoke's RL stage is itself the learning run: correctness-only reward, validation on the held-out synthetic
problems before and after training (configs/smoke/rl.yaml). This module repeats that stage with the same launcher,
configs (``+smoke=rl``), sandbox, tool and reward, for bench/learning_signal.py:

- ``--seed S``: another data order and sampling seed (``data.seed``, ``actor_rollout_ref.rollout.seed``);
- ``--control negated``: GRPO on the negated reward (retool.smoke.controls.negated_score);
- ``--control wrong_tool``: the tool replies with every printed digit shifted by 5
  (retool.smoke.controls.WrongResultTool), so no tool-using answer is right unless the model computes it itself;
- ``--control off_by_one_tool``: the tool replies with every printed integer plus one
  (retool.smoke.controls.OffByOneTool), the former wrong-tool control, kept as a diagnostic: a slip of one makes a
  tool-using answer right;
- ``--trainer-mode colocate_async|separate_async``: verl's asynchronous trainers (TRAINER_MODE of the launchers).

    python -m retool.smoke.learning_run --sft-model runs/smoke-x/sft_merged --assets .cache/smoke-assets \\
        --run-dir runs/learning-x [--seed S] [--control negated|wrong_tool|off_by_one_tool] [--steps N] [--val-n K] \\
        [--trainer-mode sync|colocate_async|separate_async]

Writes ``<run-dir>/learning.json``: retool.learning's report on the synthetic validation set (changes with 95%
intervals, training curve, the credit GRPO gave tool use), the actor's gradient norm per step, the run's settings, and
when and where it ran (``measured``: start time, host, commit).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from retool.cli_options import add_options, from_args, option
from retool.constants import REPO_ROOT
from retool.learning import report
from retool.platform.cpu_dtype import host_report
from retool_sandbox.spawn import running_sandbox
from retool.smoke.summary import read_log_line, read_scalars, stage_times
from retool.trainer_modes import MODES as TRAINER_MODES
from retool.trainer_modes import off_policy

TOOL_CLASS = "retool.tool.CodeInterpreterTool"
WRONG_TOOL_CLASS = "retool.smoke.controls.WrongResultTool"
# the controls that swap the recipe's tool for a wrong one: control -> tool class
TOOL_CONTROLS = {"wrong_tool": WRONG_TOOL_CLASS, "off_by_one_tool": "retool.smoke.controls.OffByOneTool"}
CONTROLS = ("negated", *TOOL_CONTROLS)
GRAD_NORM = "actor/grad_norm"  # per step: 0.0 when no group had reward variance (the credit in learning.json)


def wrong_tool_config(tool_config: Path, out: Path, class_name: str = WRONG_TOOL_CLASS) -> Path:
    """Write ``out``: ``tool_config`` (a tool YAML) with the recipe's tool class swapped for ``class_name``."""
    import yaml

    config = yaml.safe_load(tool_config.read_text())
    tools = config.get("tools") if isinstance(config, dict) else None
    if not tools or any(t.get("class_name") != TOOL_CLASS for t in tools):
        raise ValueError(f"{tool_config} must list only {TOOL_CLASS} tools to make the wrong-result control of it")
    for tool in tools:
        tool["class_name"] = class_name
    out.write_text(yaml.safe_dump(config, sort_keys=False))
    return out


def overrides(
    steps: int | None = None,
    val_n: int | None = None,
    control: str | None = None,
    seed: int | None = None,
    wrong_tool_yaml: Path | None = None,
) -> list[str]:
    """The Hydra overrides on top of ``+smoke=rl`` for a learning run (None keeps the smoke's value)."""
    args = ["+smoke=rl", f"trainer.experiment_name=learning-{control or 'grpo'}"]
    if steps is not None:
        # validate before training (val_before_train) and after the last step
        args += [f"trainer.total_training_steps={steps}", f"trainer.test_freq={steps}"]
    if val_n is not None:
        args.append(f"actor_rollout_ref.rollout.val_kwargs.n={val_n}")
    if seed is not None:
        args += [f"data.seed={seed}", f"actor_rollout_ref.rollout.seed={seed}"]
    if control == "negated":
        args += [
            "reward.custom_reward_function.path=pkg://retool.smoke.controls",
            "reward.custom_reward_function.name=negated_score",
        ]
    elif control in TOOL_CONTROLS:
        if wrong_tool_yaml is None:
            raise ValueError(f"the {control} control needs the path of its tool YAML")
        args.append(f"actor_rollout_ref.rollout.multi_turn.tool_config_path={wrong_tool_yaml}")
    elif control is not None:
        raise ValueError(f"unknown control {control!r}; choose one of {CONTROLS}")
    return args


def assets_profile(assets: Path) -> str:
    """The profile the smoke data was converted with (retool.smoke.build's manifest), which the run must use."""
    manifest = assets / "manifest.json"
    try:
        return json.loads(manifest.read_text())["data_inputs"]["profile"]
    except (OSError, ValueError, KeyError) as exc:
        raise FileNotFoundError(
            f"{manifest} does not name the data's profile ({exc}): rebuild the assets with python -m retool.smoke.build"
        ) from None


def checkout_commit() -> str | None:
    """The recipe checkout's commit as run_smoke_cpu.sh records it (git describe --always --dirty); None without git."""
    try:
        out = subprocess.run(
            ["git", "-C", str(REPO_ROOT), "describe", "--always", "--dirty"], capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None


def measured_now() -> dict[str, Any]:
    """When and where a run happens: start time (UTC, ISO), the host's CPU and dtype, the checkout's commit."""
    return {
        "started": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "host": host_report(),
        "commit": checkout_commit(),
    }


def check_inputs(sft_model: Path, assets: Path) -> None:
    for path, what in (
        (sft_model / "config.json", "--sft-model (a merged SFT model)"),
        (assets / "data" / "rl_train.parquet", "--assets (retool.smoke.build output)"),
    ):
        if not path.is_file():
            raise FileNotFoundError(f"{path} not found: check {what}")


def launch_env(
    sft_model: Path,
    assets: Path,
    run_dir: Path,
    sandbox_url: str,
    trainer_mode: str = "sync",
    python: str = sys.executable,
) -> dict[str, str]:
    """The environment of scripts/launch.sh for the smoke's RL stage on ``sft_model`` into ``run_dir``."""
    env = {
        **os.environ,
        "DEVICE": "cpu",
        "PYTHON": python,
        "PROFILE": assets_profile(assets),
        "RUN_DIR": str(run_dir),
        "TRAINER_MODE": trainer_mode,
        "RETOOL_DATA_DIR": str(assets / "data"),
        "RETOOL_SFT_MODEL": str(sft_model),
        "RETOOL_SANDBOX_URL": sandbox_url,
    }
    env.pop("DRY_RUN", None)
    return env


def launch(
    sft_model: Path,
    assets: Path,
    run_dir: Path,
    args: list[str],
    trainer_mode: str = "sync",
    python: str = sys.executable,
    timeout_s: float = 3600,
) -> None:
    """scripts/launch.sh rl with ``args`` against a sandbox of its own; RuntimeError when verl failed."""
    with running_sandbox() as sandbox:
        env = launch_env(sft_model, assets, run_dir, f"{sandbox}/run_code", trainer_mode, python)
        # The launcher prints the run's compact view (retool.console) on this console; verl's whole output goes to
        # <run-dir>/logs/rl.log.
        proc = subprocess.run(
            [str(REPO_ROOT / "scripts" / "launch.sh"), "rl", *args], cwd=REPO_ROOT, env=env, timeout=timeout_s
        )
    if proc.returncode != 0:
        raise RuntimeError(
            f"the RL run exited {proc.returncode} (its last lines are above); full log {run_dir / 'logs' / 'rl.log'}"
        )


@dataclasses.dataclass(frozen=True)
class LearningRun:
    """What ``run`` trains, and the command line of this module (retool.cli_options); None keeps the smoke's value."""

    sft_model: Path = option(help="merged SFT model (a smoke run's sft_merged)")
    run_dir: Path = option(help="the run's folder (learning.json, logs/, the run's outputs)")
    assets: Path = option(
        REPO_ROOT / ".cache" / "smoke-assets", help="smoke assets (retool.smoke.build --out); default: %(default)s"
    )
    steps: int | None = option(None, help="GRPO steps (default: the smoke's)")
    val_n: int | None = option(None, help="samples per held-out prompt at each validation (default: the smoke's)")
    seed: int | None = option(None, help="data order and sampling seed (default: the smoke's)")
    control: str | None = option(None, choices=CONTROLS, help="a negative control (see the module docstring)")
    trainer_mode: str = option("sync", choices=TRAINER_MODES, help="verl's trainer (TRAINER_MODE of the launchers)")


def run(spec: LearningRun, python: str = sys.executable, timeout_s: float = 3600) -> dict[str, Any]:
    """Train, then return (and write to run_dir/learning.json) the learning report; RuntimeError if verl failed."""
    check_inputs(spec.sft_model, spec.assets)
    from retool.profiles import get_profile

    run_dir = spec.run_dir.resolve()
    run_dir.mkdir(parents=True, exist_ok=True)
    wrong_yaml = (
        wrong_tool_config(
            get_profile(assets_profile(spec.assets)).tool_config_path,
            run_dir / "tool_wrong_result.yaml",
            TOOL_CONTROLS[spec.control],
        )
        if spec.control in TOOL_CONTROLS
        else None
    )
    args = overrides(spec.steps, spec.val_n, spec.control, spec.seed, wrong_yaml)
    measured = measured_now()
    started = time.monotonic()
    launch(spec.sft_model, spec.assets, run_dir, args, spec.trainer_mode, python, timeout_s)
    result = report(run_dir / "validation", run_dir / "rollouts", spec.assets / "data" / "rl_val_synthetic.parquet")
    scalars = read_scalars(run_dir / "tensorboard" / "rl")
    result.update(
        run_settings(run_dir / "rl.resolved.yaml"),
        control=spec.control,
        measured=measured,
        wall_s=round(time.monotonic() - started, 1),
        off_policy=off_policy(scalars),
        grad_norm=scalars.get(GRAD_NORM, []),
    )
    (run_dir / "learning.json").write_text(json.dumps(result, indent=2) + "\n")
    return result


def from_smoke_run(smoke: Path, assets: Path, out: Path) -> dict[str, Any]:
    """The learning report of a finished smoke run's own RL stage (the first run of the benchmark: the smoke's
    seeds, no control), written to ``out/learning.json`` like ``run`` writes its own. When, where and at which commit
    come from the smoke's logs (stages.tsv, host.json, commit.txt)."""
    stages = stage_times(smoke)
    if "rl" not in stages or not (smoke / "validation").is_dir():
        raise FileNotFoundError(f"{smoke} holds no finished RL stage (logs/stages.tsv, validation/)")
    start, end = stages["rl"]
    measured = {
        "started": datetime.datetime.fromtimestamp(start, datetime.timezone.utc).isoformat(timespec="seconds"),
        "host": json.loads((smoke / "logs" / "host.json").read_text()),
        "commit": read_log_line(smoke / "logs" / "commit.txt"),
    }
    result = report(smoke / "validation", smoke / "rollouts", assets / "data" / "rl_val_synthetic.parquet")
    result.update(
        run_settings(smoke / "rl.resolved.yaml"),
        control=None,
        measured=measured,
        wall_s=round(end - start, 1),
        run_dir=str(smoke),
        grad_norm=read_scalars(smoke / "tensorboard" / "rl").get(GRAD_NORM, []),
    )
    out.mkdir(parents=True, exist_ok=True)
    (out / "learning.json").write_text(json.dumps(result, indent=2) + "\n")
    return result


def run_settings(resolved: Path) -> dict[str, Any]:
    """What a learning report needs to say about the run (resolved config): steps, batch, samples, learning rate,
    seeds, the reward's tool shaping and the tool class."""
    import yaml

    config = yaml.safe_load(resolved.read_text())
    rollout = config["actor_rollout_ref"]["rollout"]
    reward = config["reward"]["custom_reward_function"]
    return {
        "steps": config["trainer"]["total_training_steps"],
        "prompts_per_step": config["data"]["train_batch_size"],
        "n": rollout["n"],
        "val_n": rollout["val_kwargs"]["n"],
        "lr": config["actor_rollout_ref"]["actor"]["optim"]["lr"],
        "seed": {"data": config["data"].get("seed"), "rollout": rollout.get("seed")},
        "reward": f"{reward['path']}:{reward['name']}",
        "tool_shaping": (reward.get("reward_kwargs") or {}).get("tool_shaping"),
        "tool_config": Path(rollout["multi_turn"]["tool_config_path"]).name,
        "trainer_mode": ((config["trainer"].get("v1") or {}).get("trainer_mode") or "sync"),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m retool.smoke.learning_run", description=__doc__.split("\n")[0])
    add_options(parser, LearningRun)
    try:
        result = run(from_args(LearningRun, parser.parse_args(argv)))
    except (FileNotFoundError, ValueError, RuntimeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print("\n".join(result["sentences"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
