"""The trainer modes of the RL launchers (TRAINER_MODE), and what a run's mode did, read back from verl's metrics.

``sync`` is the reference run's; ``colocate_async`` and ``separate_async`` are verl 0.9.1's asynchronous v1
trainers (configs/trainer_mode/rl/, docs/training.md "Trainer modes"). Per training step verl logs:

- ``timing_s/step``; ``timing_s/gen``: the trainer blocked on its replay buffer until enough groups finished. In
  sync and colocate_async the rollout is generating on the same devices all that time, so this is the step's
  generation; in separate_async the rollout pool generates beside the update all the time, and this is only the
  trainer's idle wait. ``timing_s/old_log_prob`` + ``timing_s/adv`` + ``timing_s/update_actor``: the update;
  ``timing_s/update_weights``: the weight sync into the rollout;
- ``training/off_policy/trajectory_staleness/{mean,max}``: model versions between the weights that generated a
  trajectory's last token and the weights it trains (0 in sync); ``.../trajectory_staleness_worst/...``: the same
  for its first token; ``.../trajectory_spans/...``: versions one trajectory was generated across (above 1: paused
  at a weight update and resumed on the new weights); ``training/off_policy/evicted_samples``: groups dropped as
  too stale (only with ``max_off_policy_strategy: drop``).

``off_policy`` and ``step_times`` condense them for the smoke summary (retool/smoke/summary.py), the report
(retool/report/) and bench/async_modes.py. Series are ``{tag: [(step, value), ...]}`` as the summary reads them.
"""

from __future__ import annotations

from statistics import mean
from typing import Any

MODES = ("sync", "colocate_async", "separate_async")
ASYNC_MODES = MODES[1:]

OFF_POLICY = "training/off_policy"
STALENESS = f"{OFF_POLICY}/trajectory_staleness"
STALENESS_WORST = f"{OFF_POLICY}/trajectory_staleness_worst"
SPANS = f"{OFF_POLICY}/trajectory_spans"
EVICTED = f"{OFF_POLICY}/evicted_samples"

UPDATE_PARTS = ("timing_s/old_log_prob", "timing_s/adv", "timing_s/update_actor")

Series = dict[str, list[tuple[int, float]]]


def mode_of(config: dict[str, Any]) -> str:
    """The trainer mode of a resolved RL config (verl's default, sync, when the key is absent)."""
    return ((config.get("trainer") or {}).get("v1") or {}).get("trainer_mode") or "sync"


def _values(scalars: Series, tag: str, first_step: int = 1) -> list[float]:
    return [value for step, value in scalars.get(tag, []) if step >= first_step]


def off_policy(scalars: Series) -> dict[str, Any] | None:
    """How stale the trained data was over a run's steps; None when verl logged no staleness (an old run)."""
    staleness = _values(scalars, f"{STALENESS}/mean")
    if not staleness:
        return None
    return {
        "steps": len(staleness),
        "staleness_mean": mean(staleness),
        "staleness_max": max(_values(scalars, f"{STALENESS}/max") or staleness),
        "staleness_worst_max": max(_values(scalars, f"{STALENESS_WORST}/max") or [0.0]),
        "spans_mean": mean(_values(scalars, f"{SPANS}/mean") or [1.0]),
        "spans_max": max(_values(scalars, f"{SPANS}/max") or [1.0]),
        "evicted_groups": sum(_values(scalars, EVICTED)),
    }


def off_policy_sentence(mode: str, stats: dict[str, Any] | None) -> str:
    if stats is None:
        return f"Trainer mode `{mode}`; staleness not logged"
    return (
        f"Trainer mode `{mode}`: trained trajectories were {stats['staleness_mean']:.2f} model versions behind on "
        f"average (most {stats['staleness_max']:g}; first tokens at most {stats['staleness_worst_max']:g}), each "
        f"generated across {stats['spans_mean']:.2f} versions on average (most {stats['spans_max']:g}), "
        f"{stats['evicted_groups']:g} groups dropped as too stale, over {stats['steps']} steps"
    )


def step_times(scalars: Series, first_step: int = 1) -> dict[str, float] | None:
    """Mean seconds per training step from ``first_step`` on: the step, the trainer's wait for trajectories
    (``gen``), the update, the weight sync, and the rest (saving, batch balancing, dumps); None without steps."""
    steps = {step: value for step, value in scalars.get("timing_s/step", []) if step >= first_step}
    if not steps:
        return None

    def per_step(tag: str) -> float:
        values = dict(scalars.get(tag, []))
        return mean(values.get(step, 0.0) for step in steps)

    times = {
        "step_s": mean(steps.values()),
        "gen_s": per_step("timing_s/gen"),
        "update_s": sum(per_step(tag) for tag in UPDATE_PARTS),
        "weight_sync_s": per_step("timing_s/update_weights"),
    }
    times["other_s"] = times["step_s"] - times["gen_s"] - times["update_s"] - times["weight_sync_s"]
    times["steps"] = len(steps)
    return times
