"""The compact lines of a stage: one per step, one per validation, durations and the ETA. Pure formatting.

Metric names are verl's (``critic/rewards/mean``, ``num_turns/mean``, ``response_length/mean``, ``timing_s/gen``,
``timing_s/update_actor``, ``timing_s/step``, ``val-core/<data_source>/acc/mean@N``, SFT's ``train/loss``,
``train/lr``, ``val/loss``), the recipe's training reward fields (``train-reward/<key>/mean``, patches/0004) and
the failure accounting (``failures/total/<cause>``, ``failures/total/all``, ``failures/share``). A metric that is
absent is left out of the line, never shown as zero.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

VAL_ACC = re.compile(r"^val-core/(?P<source>.+)/acc/mean@(?P<n>\d+)$")


def duration(seconds: float | None) -> str:
    """``45s``, ``7m22s``, ``3h05m``, ``2d04h``; ``?`` when unknown."""
    if seconds is None or seconds != seconds or seconds < 0:
        return "?"
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    if seconds < 86400:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    return f"{seconds // 86400}d{seconds % 86400 // 3600:02d}h"


def num(value: float, digits: int = 3) -> str:
    """A metric for a human: 3 significant digits from 1 up, 3 decimals below (0.406), scientific notation only for
    the very small or large."""
    if value != value:
        return "nan"
    if value == 0:
        return "0"
    if abs(value) >= 1e5 or abs(value) < 1e-3:
        return f"{value:.{digits - 1}e}"
    return f"{value:.{digits}g}" if abs(value) >= 1 else f"{value:.{digits}f}".rstrip("0").rstrip(".")


def seconds_per_step(seconds: float) -> str:
    return f"{seconds:.1f} s/step" if seconds < 100 else f"{duration(seconds)}/step"


def failures(metrics: Mapping[str, float], prefix: str = "failures/") -> str | None:
    """``failures 0``, ``failures 3 (tool_exception 2, reward_error 1; 9.4% of the step)``, or None without the keys.
    Reads the failure accounting's ``<prefix>total/<cause>``, ``<prefix>total/all`` and ``<prefix>share``."""
    causes: dict[str, float] = {}
    total = share = None
    for key, value in metrics.items():
        if not key.startswith(prefix):
            continue
        name = key[len(prefix) :].removeprefix("total/")
        if name == "all":
            total = value
        elif name == "share":
            share = value
        else:
            causes[name] = value
    if not causes and total is None:
        return None
    total = sum(causes.values()) if total is None else total
    if not total:
        return "failures 0"
    parts = ", ".join(
        f"{cause} {num(count)}" for cause, count in sorted(causes.items(), key=lambda kv: -kv[1]) if count
    )
    share_text = f"; {share:.1%} of the step" if share is not None else ""
    return f"failures {num(total)} ({parts}{share_text})"


def step_counter(step: int, total: int | None) -> str:
    return f"step {step}/{total}" if total else f"step {step}"


def eta(remaining_s: float) -> str:
    return f"ETA {duration(remaining_s)}"


def rl_step(step: int, total: int | None, m: Mapping[str, float], eta_s: float | None) -> str:
    """The console line of one RL step."""
    parts = [step_counter(step, total)]
    reward = m.get("critic/rewards/mean", m.get("critic/score/mean"))
    if reward is not None:
        parts.append(f"reward {num(reward)}")
    if "train-reward/acc/mean" in m:
        parts.append(f"acc {num(m['train-reward/acc/mean'])}")
    if "train-reward/used_tool/mean" in m:
        calls = m.get("train-reward/tool_calls/mean")
        parts.append(
            f"tool {num(m['train-reward/used_tool/mean'])}" + (f" ({num(calls)} calls)" if calls is not None else "")
        )
    unavailable = m.get("train-reward/tool_unavailable/mean")
    if unavailable:
        parts.append(f"sandbox unavailable {num(unavailable)}/traj")
    if "num_turns/mean" in m:
        parts.append(f"turns {num(m['num_turns/mean'])}")
    if "response_length/mean" in m:
        parts.append(f"resp {m['response_length/mean']:.0f} tok")
    failed = failures(m)
    if failed:
        parts.append(failed)
    if "timing_s/step" in m:
        split = [
            f"{name} {m[key]:.1f}"
            for name, key in (("gen", "timing_s/gen"), ("update", "timing_s/update_actor"))
            if key in m
        ]
        parts.append(seconds_per_step(m["timing_s/step"]) + (f" ({', '.join(split)})" if split else ""))
    if eta_s is not None:
        parts.append(eta(eta_s))
    return " | ".join(parts)


def sft_step(step: int, total: int | None, m: Mapping[str, float], pace_s: float | None, eta_s: float | None) -> str:
    """The console line of one SFT step."""
    parts = [step_counter(step, total)]
    if "train/loss" in m:
        parts.append(f"loss {num(m['train/loss'])}")
    if "train/lr" in m:
        parts.append(f"lr {m['train/lr']:.2e}" if m["train/lr"] else "lr 0")
    if pace_s is not None:
        parts.append(seconds_per_step(pace_s))
    if eta_s is not None:
        parts.append(eta(eta_s))
    return " | ".join(parts)


def validation(step: int, m: Mapping[str, float]) -> str | None:
    """The console line of a validation (RL: accuracy per data source at mean@N; SFT: val loss); None if ``m``
    holds no validation metric."""
    accuracy: dict[str, list[str]] = {}
    # sorted: verl lists the data sources in the order their trajectories finished, which varies from run to run
    for key, value in sorted(m.items()):
        match = VAL_ACC.match(key)
        if match:
            accuracy.setdefault(f"mean@{match.group('n')}", []).append(f"{match.group('source')} {value:.3f}")
    parts = [f"acc {n}: {', '.join(items)}" for n, items in accuracy.items()]
    if "val-aux/num_turns/mean" in m:
        parts.append(f"turns {num(m['val-aux/num_turns/mean'])}")
    failed = failures(m, "val-failures/")
    if failed:
        parts.append(failed)
    if "val/loss" in m:
        parts.append(f"val loss {num(m['val/loss'])}")
    if not parts:
        return None
    when = "before training" if step == 0 else f"at step {step}"
    return f"validation {when}: " + " | ".join(parts)


def is_training_step(m: Mapping[str, float]) -> bool:
    """Whether a step line carries a training step's metrics, not only a validation's: with patches/0009 a
    validation after a step is logged on its own line, with its ``timing_s/testing``."""
    return any(not key.startswith(("val-", "val/")) and key != "timing_s/testing" for key in m)
