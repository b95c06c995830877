"""The three start-up lines of a stage, from the resolved config the launcher wrote (never from verl's config dump):

    device cpu | profile improved | 1 node x 1 device | full log: runs/x/logs/rl.log (VERBOSE=1 prints it here too)
    model runs/smoke-x/sft_merged | data .cache/smoke-assets/data: train rl_train.parquet | val rl_val_synthetic.parquet
    12 steps of 8 prompts x 4 samples (sync) | validation before training and every 12 steps (mean@4) | sandbox http://...

one console line each.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from retool.doctor.config import as_list, dig


def shown_path(path: str | os.PathLike[str] | None) -> str:
    """``path`` relative to the working directory when it lies below it (shorter on the console), else as given."""
    if not path:
        return "?"
    try:
        return os.path.relpath(path) if Path(path).resolve().is_relative_to(Path.cwd()) else str(path)
    except (OSError, ValueError):
        return str(path)


def data_line(train: Any, val: Any) -> str:
    """``data DIR: train a.parquet | val b.parquet`` (the folder once when the files share it)."""
    train_files, val_files = as_list(train), as_list(val)
    folders = {str(Path(f).parent) for f in train_files + val_files}
    if len(folders) == 1:
        text = f"data {shown_path(folders.pop())}: train {_names(train_files)}"
        return text + (f" | val {_names(val_files)}" if val_files else "")
    text = f"data train {', '.join(map(shown_path, train_files))}"
    return text + (f" | val {', '.join(map(shown_path, val_files))}" if val_files else "")


def _names(files: list[str]) -> str:
    return ", ".join(Path(f).name for f in files)


def _every(freq: Any, what: str) -> str | None:
    """``<what> every N steps`` (``every N steps`` for what="every"); None when ``freq`` is off (<= 0) or unset."""
    try:
        freq = int(freq)
    except (TypeError, ValueError):
        return None
    if freq <= 0:
        return None
    return f"every {freq} steps" if what == "every" else f"{what} every {freq} steps"


def plan_line(stage: str, config: Mapping[str, Any], sandbox_url: str | None) -> str:
    """How long and how: steps (or epochs), batch, validation, checkpoints, the sandbox for RL."""
    trainer = config.get("trainer") or {}
    steps = trainer.get("total_training_steps")
    epochs = trainer.get("total_epochs")
    length = f"{steps} steps" if steps else f"{epochs} epoch{'s' if epochs != 1 else ''}"
    batch = dig(config, "data.train_batch_size")
    parts = []
    if stage == "rl":
        rollout = dig(config, "actor_rollout_ref.rollout") or {}
        mode = dig(config, "trainer.v1.trainer_mode")
        parts.append(f"{length} of {batch} prompts x {rollout.get('n', '?')} samples" + (f" ({mode})" if mode else ""))
        checks = ["before training"] if trainer.get("val_before_train", True) else []
        every = _every(trainer.get("test_freq"), "every")
        if every:
            checks.append(every)
        if checks:
            n = dig(config, "actor_rollout_ref.rollout.val_kwargs.n")
            parts.append(f"validation {' and '.join(checks)}" + (f" (mean@{n})" if n else ""))
    else:
        parts.append(f"{length}, batch {batch}, lr {dig(config, 'optim.lr', '?')}")
        every = _every(trainer.get("test_freq"), "validation")
        if every:
            parts.append(every)
    # verl's SFT trainer always saves the last step; its RL trainer only with save_freq > 0
    parts.append(
        _every(trainer.get("save_freq"), "checkpoint")
        or ("checkpoint at the end" if stage == "sft" else "no checkpoints (save_freq off)")
    )
    if sandbox_url:
        parts.append(f"sandbox {sandbox_url}")
    return " | ".join(parts)


def header(
    stage: str,
    config: Mapping[str, Any],
    log: Path,
    *,
    device: str | None = None,
    profile: str | None = None,
    environ: Mapping[str, str] = os.environ,
) -> list[str]:
    """The start-up lines of ``stage`` (sft or rl) run with the resolved ``config``."""
    trainer = config.get("trainer") or {}
    nodes, per_node = trainer.get("nnodes", 1), trainer.get("n_gpus_per_node", "?")
    unit = "process" if device == "cpu" and stage == "sft" else "device"
    first = [
        f"device {device or trainer.get('device', '?')}",
        f"profile {profile or '?'}",
        f"{nodes} node{'s' if nodes != 1 else ''} x {per_node} {unit}{'s' if per_node != 1 else ''}",
        f"full log: {shown_path(log)} (VERBOSE=1 prints it here too)",
    ]
    rank = environ.get("NODE_RANK", "0")
    if stage == "sft" and str(nodes) != "1" and rank != "0":
        first.append(f"node {rank}: the step lines appear on node 0's console")
    model = dig(config, "model.path") if stage == "sft" else dig(config, "actor_rollout_ref.model.path")
    env_vars = dig(config, "ray_kwargs.ray_init.runtime_env.env_vars") or {}
    sandbox = (env_vars.get("RETOOL_SANDBOX_URL") or environ.get("RETOOL_SANDBOX_URL")) if stage == "rl" else None
    data = data_line(dig(config, "data.train_files"), dig(config, "data.val_files"))
    lines = [" | ".join(first), f"model {shown_path(model)} | {data}", plan_line(stage, config, sandbox)]
    if stage == "rl" and dig(config, "ray_kwargs.ray_init.log_to_driver") is False:
        lines.append(
            "warning: ray_kwargs.ray_init.log_to_driver is false: what Ray's workers print reaches neither "
            "this console nor the log (only /tmp/ray/session_*/logs on each node); remove the override"
        )
    return lines
