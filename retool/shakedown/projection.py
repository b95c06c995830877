"""Measured seconds per step -> the full run's wall time, beside the docs' paper estimate.

Every input is measured in the run folder: the start-up (the launch's start in logs/launches.jsonl to verl's first
TensorBoard write), the step (SFT: the median gap between consecutive steps' points; RL: verl's ``timing_s/step``
without the checkpoint save it contains), the save (RL: ``timing_s/save_checkpoint``; SFT: the last step's point to
``latest_checkpointed_iteration.txt``), and the validation (``timing_s/testing``, or for the validation before
step 1 its point minus the event file's creation). The full run is the config without the shakedown
(``shakedown/<stage>.full.yaml``); a smoke or a plain run is its own full run.

The full run validates more trajectories than a shakedown (AIME 2025: 30 problems x 30 against 8 x 2). Those are
generated at once, like a training step's batch at the same lengths, so a full validation is projected at the
measured generation time of a step (``timing_s/gen``) scaled by trajectories, and never below the validation the
shakedown measured.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

from retool.doctor.config import capped, dig, parquet_rows, planned_steps
from retool.doctor.estimate import checkpoint_saves
from retool.shakedown.runfolder import Run, Stage

# README "Expected wall time": the paper estimate for the reference run on one Atlas A3 node (16 dies), not measured.
PAPER_ESTIMATE = (
    "the docs' paper estimate for the reference run on one Atlas A3 node (README; not measured): "
    "SFT 6-10 s per step (under an hour for 186 steps), RL 5-8 min per step (12-18 h for 130 steps, "
    "validation included)"
)
PAPER_SFT_S_PER_STEP = (6, 10)
PAPER_RL_MIN_PER_STEP = (5, 8)
PAPER_RL_HOURS = (12, 18)


def every(freq: Any, last: int) -> int:
    """How many of steps 1..last verl acts at for a frequency (it always acts at the last step when freq > 0)."""
    try:
        freq = int(freq or 0)
    except (TypeError, ValueError):  # verl's SFT also takes "after_each_epoch"
        freq = 0
    return checkpoint_saves(last, freq, last_step_always=False)  # validations follow verl's saving rule


def validation_trajectories(config: dict[str, Any]) -> int | None:
    rows = capped(parquet_rows(dig(config, "data.val_files")), dig(config, "data.val_max_samples"))
    n = dig(config, "actor_rollout_ref.rollout.val_kwargs.n", 1)
    return None if rows is None else rows * int(n)


def first_start(stage: Stage) -> float | None:
    starts = [float(r["start"]) for r in stage.starts if "start" in r]
    return min(starts) if starts else None


@dataclass
class Measured:
    """What one stage measured; None where the folder does not tell."""

    step_s: float | None = None
    steps_timed: int = 0
    save_s: float | None = None
    startup_s: float | None = None
    validation_s: float | None = None
    validation_step: int | None = None
    validation_trajectories: int | None = None
    generation_s: float | None = None


def measure_sft(stage: Stage) -> Measured:
    walls = stage.events.walls("train/loss")
    out = Measured()
    gaps = [walls[k] - walls[k - 1] for k in sorted(walls) if k - 1 in walls]
    if gaps:
        out.step_s, out.steps_timed = statistics.median(gaps), len(gaps)
    start = first_start(stage)
    if walls and start is not None:
        out.startup_s = walls[min(walls)] - start - (out.step_s or 0)  # to step 1, less step 1 itself
    marker = stage.checkpoint_dir / "latest_checkpointed_iteration.txt"
    last = max(walls) if walls else None
    if last is not None and marker.is_file() and stage.latest_checkpoint() == last:
        at_last = max(p.wall for p in stage.events.points if p.step == last)
        ends = [float(r["time"]) for r in stage.ends if "time" in r]
        saved = marker.stat().st_mtime
        if ends and not at_last <= saved <= max(ends):  # a copied folder's new mtime: the launch's end bounds it
            saved = max(ends)
        out.save_s = max(0.0, saved - at_last)
    return out


def measure_rl(stage: Stage, failures: list[dict[str, Any]]) -> Measured:
    events = stage.events
    out = Measured()
    steps, saves = events.series("timing_s/step"), events.series("timing_s/save_checkpoint")
    if steps:
        out.step_s = statistics.median(steps[k] - saves.get(k, 0.0) for k in steps)
        out.steps_timed = len(steps)
    if saves:
        out.save_s = statistics.median(saves.values())
    if events.series("timing_s/gen"):
        out.generation_s = statistics.median(events.series("timing_s/gen").values())
    testing = events.series("timing_s/testing")
    if testing:
        out.validation_step = max(testing)
        out.validation_s = testing[out.validation_step]
    else:  # the validation before step 1: from the event file's creation to its first validation point
        at_zero = [p for p in events.points if p.step == 0 and p.tag.startswith("val-core/")]
        if at_zero:
            first = min(at_zero, key=lambda p: p.wall)
            out.validation_step, out.validation_s = 0, first.wall - events.created[first.file]
    start = first_start(stage)
    if events.created and start is not None:
        out.startup_s = min(events.created.values()) - start
    if out.validation_step is not None:
        val = [r for r in failures if r.get("partition") == "val" and r.get("step") == out.validation_step]
        out.validation_trajectories = int(val[-1]["expected"]) if val else validation_trajectories(stage.config)
    return out


@dataclass
class Projection:
    stage: str
    seconds: float | None
    lines: list[str]
    missing: list[str]


def _unknown(*inputs: tuple[str, object]) -> list[str]:
    """The names of a projection's inputs that the shakedown did not measure."""
    return [what for what, value in inputs if value is None]


def project_sft(stage: Stage, measured: Measured) -> Projection:
    full = stage.full_config or stage.config
    steps = planned_steps(full)
    missing = _unknown(
        ("the step time", measured.step_s),
        ("the start-up", measured.startup_s),
        ("the save", measured.save_s),
        ("the full run's steps", steps),
    )
    if missing:
        return Projection("sft", None, [], missing)
    saves = max(1, every(dig(full, "trainer.save_freq"), steps))  # SFT always saves its last step
    seconds = measured.startup_s + steps * measured.step_s + saves * measured.save_s
    return Projection(
        "sft",
        seconds,
        [
            f"SFT: {secs(measured.step_s)} per step (median of {measured.steps_timed} step gaps), start-up "
            f"{secs(measured.startup_s)}, save {secs(measured.save_s)} -> {steps} steps and {plural(saves, 'save')}: "
            f"{hours(seconds)}"
        ],
        [],
    )


def project_rl(stage: Stage, measured: Measured) -> Projection:
    full = stage.full_config or stage.config
    steps = planned_steps(full)
    missing = _unknown(
        ("the step time", measured.step_s),
        ("the start-up", measured.startup_s),
        ("a validation's time", measured.validation_s),
        ("the full run's steps", steps),
    )
    if missing:
        return Projection("rl", None, [], missing)
    validations = int(bool(dig(full, "trainer.val_before_train", True))) + every(dig(full, "trainer.test_freq"), steps)
    saves = every(dig(full, "trainer.save_freq"), steps)
    full_val = validation_trajectories(full)
    batch = int(dig(full, "data.train_batch_size", 0)) * int(dig(full, "actor_rollout_ref.rollout.n", 1))
    val_s, how = measured.validation_s, "as measured"
    if full_val and measured.validation_trajectories and full_val != measured.validation_trajectories:
        if measured.generation_s and batch:
            val_s = max(measured.validation_s, measured.generation_s * full_val / batch)
            how = (
                f"{full_val} trajectories, from a step's generation of {batch} ({secs(measured.generation_s)}); "
                f"measured {secs(measured.validation_s)} for {measured.validation_trajectories}"
            )
        else:
            how = f"the measured one, for {measured.validation_trajectories} trajectories: a floor"
    save_s = measured.save_s or 0.0
    seconds = measured.startup_s + validations * val_s + steps * measured.step_s + saves * save_s
    save_text = f"save {secs(save_s)}" if measured.save_s is not None else "save not measured (counted 0)"
    return Projection(
        "rl",
        seconds,
        [
            f"RL: {secs(measured.step_s)} per step without its save (median of {measured.steps_timed}), {save_text}, "
            f"start-up {secs(measured.startup_s)}, a validation {secs(val_s)} ({how}) -> {steps} steps, "
            f"{plural(validations, 'validation')} and {plural(saves, 'save')}: {hours(seconds)}"
        ],
        [],
    )


def plural(n: int, what: str) -> str:
    return f"{n} {what}{'' if n == 1 else 's'}"


def secs(seconds: float) -> str:
    return f"{seconds:.2g} s" if seconds < 10 else f"{seconds:.0f} s"


def hours(seconds: float) -> str:
    return f"{seconds / 3600:.1f} h" if seconds >= 3600 else f"{seconds / 60:.1f} min"


def project(run: Run) -> tuple[list[Projection], dict[str, Measured]]:
    measured, projections = {}, []
    if "sft" in run.stages:
        measured["sft"] = measure_sft(run.stages["sft"])
        projections.append(project_sft(run.stages["sft"], measured["sft"]))
    if "rl" in run.stages:
        measured["rl"] = measure_rl(run.stages["rl"], run.failures)
        projections.append(project_rl(run.stages["rl"], measured["rl"]))
    return projections, measured


def full_run_name(run: Run) -> str:
    if run.kind == "shakedown":
        return "the full run (this config without SHAKEDOWN=1)"
    return f"the full run (this {run.kind or 'run'}'s own config)"
