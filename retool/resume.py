"""Resuming a stage in its own run folder after a crash: same config, last checkpoint, one TensorBoard point per step.

``scripts/launch.sh`` resumes when RUN_DIR names a folder that already holds ``<stage>.resolved.yaml``
(``RUN_DIR=runs/rl-... ./run_qwen3_4b_dapo_npu.sh``). Before verl starts, ``prepare`` (``python -m retool.resume``):

1. compares the config the launcher resolves now with the saved one and refuses a resume that would train
   something else: any key that differs stops it, except those that only say where things run (RESUME_FREE);
   the Ray workers' environment (``ray_kwargs.ray_init.runtime_env.env_vars``: the sandbox URL, the TensorBoard
   folder, the device variables) is the new launch's, written into the saved config that verl runs, so a resumed
   run calls the sandbox it was launched with, not the crashed run's;
2. finds the last checkpoint verl wrote (``latest_checkpointed_iteration.txt`` in ``trainer.default_local_dir``);
   verl's ``resume_mode: auto`` continues from it with its optimizer, RNG and dataloader state, so the data order
   is the uninterrupted run's;
3. removes from the stage's TensorBoard events every point logged after that checkpoint (steps the crashed run logged
   and the resumed run will log again), keeping the files' other records byte for byte: in every folder a launch
   of the run wrote to (the run folder's default one, the crashed launch's ``TENSORBOARD_DIR``, earlier ones);
4. prints the Hydra overrides the resumed run needs: validation before training only when the uninterrupted run
   validated at the checkpoint's step and that validation's metrics are not in TensorBoard. What a validation cut
   off by the crash did log at that step (its failure counts, its sample generations) is removed first, so the
   validation run again is logged once.

The log is appended to (``tee -a``), never overwritten. Patch 0009 logs a step's training metrics right after its
checkpoint, before its validation; a crash in the short time between the two leaves that step's training scalars
missing: they are recomputed by nobody, and the resume says so.
"""

from __future__ import annotations

import argparse
import struct
import sys
from pathlib import Path
from typing import Any

import yaml

from retool.doctor.config import dig

# The Ray workers' environment: where the sandbox listens, where TensorBoard goes, the device variables.
RUNTIME_ENV = "ray_kwargs.ray_init.runtime_env"
WORKER_ENV = RUNTIME_ENV + ".env_vars"
# Keys that may differ between the crashed run and its resume: the workers' environment (and the hook that cleans
# their import path, which runs launched before it existed lack), and what resuming sets.
RESUME_FREE = (
    WORKER_ENV + ".",
    RUNTIME_ENV + ".worker_process_setup_hook",
    "trainer.resume_mode",
    "trainer.val_before_train",
)
# Worker variables each launch sets anew: verl's metric stream, a file per launch (scripts/launch.sh).
PER_LAUNCH = ("VERL_FILE_LOGGER_PATH:",)
LATEST = "latest_checkpointed_iteration.txt"
# The workers' environment of the run before this resume and of this launch, for the node check: a node's own
# RETOOL_NODE_SANDBOX_URL still wins over a new RETOOL_SANDBOX_URL there, and it says so (retool/node_check.py).
RESUMED_ENV = "logs/resumed_worker_env.yaml"
# The TensorBoard folders earlier launches of the run wrote to, when a resume moved it (one per line).
EARLIER_EVENT_DIRS = "logs/tensorboard_dirs.txt"
# What a validation logs: verl's metrics (val-core/ always), its sample generations (val/), the failure accounting's
# counts (retool/failures/sampler.py).
VALIDATION_TAG_PREFIXES = ("val-core/", "val-aux/", "val/", "val-failures/")
VALIDATION_DONE_PREFIX = "val-core/"
# verl logs it with every training step's metrics.
TRAINING_STEP_TAG = "training/global_step"


class ResumeError(RuntimeError):
    """The run folder cannot be resumed as asked; the message says why and what to do."""


def flatten(node: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(node, dict):
        flat: dict[str, Any] = {}
        for key, value in node.items():
            flat.update(flatten(value, f"{prefix}.{key}" if prefix else str(key)))
        return flat
    return {prefix: node}


def config_differences(saved: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """``key: saved -> new`` for every key that matters and differs."""
    old, now = flatten(saved), flatten(new)
    return [
        f"{key}: {old.get(key, '<absent>')!r} -> {now.get(key, '<absent>')!r}"
        for key in sorted(old.keys() | now.keys())
        if old.get(key) != now.get(key) and not key.startswith(RESUME_FREE)
    ]


def worker_env(config: dict[str, Any]) -> dict[str, Any]:
    return dict(dig(config, WORKER_ENV) or {})


def take_launch_environment(saved_path: Path, new: dict[str, Any]) -> list[str]:
    """Write the new launch's worker environment into the saved config verl will run; returns what changed, but for
    the keys every launch sets anew (``PER_LAUNCH``)."""
    from omegaconf import OmegaConf  # Hydra's own YAML reader and writer: every other value stays as verl wrote it

    saved = OmegaConf.load(saved_path)
    old, now = worker_env(OmegaConf.to_container(saved)), worker_env(new)
    changed = [
        f"{key}: {old.get(key, '<absent>')!r} -> {now.get(key, '<absent>')!r}"
        for key in sorted(old.keys() | now.keys())
        if old.get(key) != now.get(key)
    ]
    if old.get("TENSORBOARD_DIR") and old.get("TENSORBOARD_DIR") != now.get("TENSORBOARD_DIR"):
        history = saved_path.parent / EARLIER_EVENT_DIRS
        history.parent.mkdir(parents=True, exist_ok=True)
        with history.open("a") as handle:
            handle.write(f"{old['TENSORBOARD_DIR']}\n")
    record = saved_path.parent / RESUMED_ENV
    record.parent.mkdir(parents=True, exist_ok=True)
    record.write_text(yaml.safe_dump({"saved": old, "launch": now}))
    if changed:
        OmegaConf.update(saved, WORKER_ENV, now, merge=False, force_add=True)
        partial = saved_path.with_name(f".{saved_path.name}.env")
        OmegaConf.save(saved, partial)
        partial.replace(saved_path)  # whole or not at all
    return [change for change in changed if not change.startswith(PER_LAUNCH)]


def event_dirs(stage: str, run_dir: Path, saved: dict[str, Any]) -> list[Path]:
    """Every TensorBoard folder the run's launches wrote to: the default one, the last launch's, earlier ones."""
    found = {run_dir / "tensorboard" / stage}
    if worker_env(saved).get("TENSORBOARD_DIR"):
        found.add(Path(worker_env(saved)["TENSORBOARD_DIR"]))
    if (run_dir / EARLIER_EVENT_DIRS).is_file():
        found.update(Path(line) for line in (run_dir / EARLIER_EVENT_DIRS).read_text().splitlines() if line.strip())
    return sorted(folder for folder in found if folder.is_dir())


def latest_checkpoint(checkpoint_dir: Path | None, strict: bool = True) -> int | None:
    """The step of the last complete checkpoint verl recorded, or None before the first save.

    ``strict=False`` (what only shows it: the console, the shakedown, the next-step hint): None also when the marker
    cannot be read or names a folder that is not there, instead of an error."""
    marker = checkpoint_dir / LATEST if checkpoint_dir is not None else None
    if marker is None or not marker.is_file():
        return None
    try:
        step = int(marker.read_text().strip())
    except (OSError, ValueError):
        if strict:
            raise
        return None
    if not (checkpoint_dir / f"global_step_{step}").is_dir():
        if not strict:
            return None
        raise ResumeError(
            f"{marker} names step {step}, but {checkpoint_dir}/global_step_{step} is missing: the "
            "checkpoint folder was edited; restore it or start a new RUN_DIR"
        )
    return step


def kept_checkpoints(checkpoint_dir: Path) -> list[int]:
    """The steps whose checkpoint is still on disk. verl removes an old checkpoint's model and leaves its folder with
    the dataloader's state (``data.pt``): such a folder is not a checkpoint."""
    return sorted(
        int(folder.name.removeprefix("global_step_"))
        for folder in checkpoint_dir.glob("global_step_*")
        if folder.is_dir() and any(entry.name != "data.pt" for entry in folder.iterdir())
    )


def _records(data: bytes) -> list[bytes]:
    """The TFRecords of an event file, each with its length and checksums (written back as they were)."""
    records, offset = [], 0
    while offset + 12 <= len(data):
        (length,) = struct.unpack_from("<Q", data, offset)
        end = offset + 12 + length + 4
        if end > len(data):
            break  # a record the crash cut short: dropped
        records.append(data[offset:end])
        offset = end
    return records


def _event(record: bytes) -> Any:
    from tensorboard.compat.proto.event_pb2 import Event

    return Event.FromString(record[12:-4])


def purge_after(event_dir: Path, step: int, also_at_step: tuple[str, ...] = ()) -> tuple[int, set[str]]:
    """Drop every summary logged after ``step`` from the event files under ``event_dir``, and those logged at
    exactly ``step`` whose tags start with one of ``also_at_step``.

    Returns (points removed, tags logged at exactly ``step`` that remain)."""
    removed, at_step = 0, set()
    for path in sorted(event_dir.rglob("events.out.tfevents.*")):
        kept = []
        for record in _records(path.read_bytes()):
            event = _event(record)
            if event.HasField("summary"):
                tags = [value.tag for value in event.summary.value]
                at = event.step == step and bool(also_at_step) and all(tag.startswith(also_at_step) for tag in tags)
                if event.step > step or at:
                    removed += len(tags)
                    continue
                if event.step == step:
                    at_step.update(tags)
            kept.append(record)
        path.write_bytes(b"".join(kept))
    return removed, at_step


def prepare(stage: str, run_dir: Path, new_config: Path, clean: bool = True) -> list[str]:
    """Check and clean ``run_dir`` for a resume of ``stage``; returns the extra Hydra overrides for verl.

    ``clean=False`` only compares the configs (the other nodes of a multi-node SFT: node 0 cleans up)."""
    saved_path = run_dir / f"{stage}.resolved.yaml"
    saved, new = (yaml.safe_load(p.read_text()) for p in (saved_path, new_config))
    differences = config_differences(saved, new)
    if differences:
        raise ResumeError(
            f"RUN_DIR={run_dir} was started with another {stage} config ({saved_path}); resuming it would train "
            "something else:\n  "
            + "\n  ".join(differences[:20])
            + "\nResume with the same launcher, profile, data and overrides, or start a new RUN_DIR"
        )
    if not clean:
        return []
    trainer = saved.get("trainer") or {}
    checkpoint_dir = Path(trainer["default_local_dir"])
    step = latest_checkpoint(checkpoint_dir)
    test_freq = int(trainer.get("test_freq") or 0)
    validated_then = step is not None and (
        (test_freq > 0 and step % test_freq == 0) or (step == 0 and bool(trainer.get("val_before_train")))
    )
    removed, at_step, folders = 0, set(), event_dirs(stage, run_dir, saved)
    for event_dir in folders:
        # before the first checkpoint nothing of the crashed run survives, its step-0 validation included
        gone, tags = purge_after(event_dir, -1 if step is None else step)
        removed, at_step = removed + gone, at_step | tags
    revalidate = stage != "sft" and validated_then and not any(t.startswith(VALIDATION_DONE_PREFIX) for t in at_step)
    if revalidate and step is not None:  # what the validation the crash cut off logged goes: it is run again
        for event_dir in folders:
            gone, _ = purge_after(event_dir, step, also_at_step=VALIDATION_TAG_PREFIXES)
            removed += gone
    for change in take_launch_environment(saved_path, new):
        print(f"[resume] the workers take this launch's {change}", file=sys.stderr)
    if step is None:
        print(
            f"[resume] no checkpoint in {checkpoint_dir} yet: {stage} starts again from step 0 "
            f"({removed} TensorBoard points of the crashed run removed)",
            file=sys.stderr,
        )
        return []
    print(
        f"[resume] {stage} continues after the checkpoint of step {step} in {checkpoint_dir} "
        f"({removed} TensorBoard points logged after it removed)",
        file=sys.stderr,
    )
    if stage == "sft":
        return []
    if revalidate:
        print(f"[resume] the crashed run did not finish the validation of step {step}: it runs again", file=sys.stderr)
    if step > 0 and TRAINING_STEP_TAG not in at_step:
        print(
            f"[resume] the crashed run saved step {step} but died before logging it: that step's training "
            "scalars stay missing from TensorBoard",
            file=sys.stderr,
        )
    return [f"trainer.val_before_train={revalidate}"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m retool.resume", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    prep = sub.add_parser(
        "prepare",
        help="check a run folder for a resume and clean its TensorBoard events; prints verl overrides, one per line",
    )
    prep.add_argument("--stage", choices=["sft", "rl"], required=True)
    prep.add_argument("--run-dir", type=Path, required=True)
    prep.add_argument("--new-config", type=Path, required=True, help="the config resolved for this launch")
    prep.add_argument("--check-only", action="store_true", help="compare the configs only (no cleanup, no overrides)")
    args = parser.parse_args(argv)
    try:
        for override in prepare(args.stage, args.run_dir, args.new_config, clean=not args.check_only):
            print(override)
    except (ResumeError, OSError, KeyError, ValueError) as exc:
        print(f"error: cannot resume: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
