"""The stop rules of the failure accounting and the record of one step's failures (no verl, no Ray: unit-tested alone).

A run stops:
1. at the first configuration error (retool.failures.causes.ConfigurationError, a row lacking a key the reward needs):
   it would hit every trajectory;
2. when the failed share of one step's (or one validation batch's) trajectories passes ``max_failed_share``
   (default 0.05): an acute fault, e.g. the sandbox down on one node or a reward that raises on a kind of row;
3. when the failed share of the last ``sustained_steps`` training steps together (default 10) passes
   ``max_sustained_share`` (default 0.02): a chronic fault that no single step shows, e.g. a tool bug on 2% of the
   calls, which biases every GRPO group it touches and wastes that share of a 12-18 hour run.
0 turns a share rule off. The settings live in ``trainer.v1.sampler.sampler_kwargs`` (configs/rl.yaml).

A failed trajectory is a lost one (an exception: padded by verl in sync mode, its group evicted in the async modes)
or a masked one (kept out of the loss because a tool call got no answer). In the async modes verl throws a failed
trajectory's whole group away, so its healthy siblings are lost to the step too: they count as ``discarded``.
The failed share = (lost + masked + discarded) / (delivered + lost + discarded), where delivered counts the
trajectories of the step's sampled batches (separate_async samples ``parameter_sync_step`` batches per step; they
make one record). A failure is counted in the step during which it happened, whichever step's prompt it belonged to.

While the async trainer waits for a batch it evicts and refills failed groups for as long as it takes, so a fault
that fails most groups would keep it waiting for ever. Every group evicted adds its ``n`` trajectories to the
step's failed ones, and a full batch is ``n`` per prompt, so once ``failed groups / (prompts + failed groups)`` passes
``max_failed_share`` the step's share will pass it whatever comes next: the run stops then, without waiting for the
batch (``Judge.waiting_verdict``). With the rule off, a step that has thrown away ``STALL_BATCHES`` times its prompts
in failed groups without filling its batch stops the run all the same: it is not training.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from retool.failures.causes import ADVICE, CAUSES, SETTINGS_KEY

DEFAULTS = {"max_failed_share": 0.05, "sustained_steps": 10, "max_sustained_share": 0.02}
TRACEBACK_LINES = 40  # of the first traceback per cause, in the log and the stop message
STALL_BATCHES = 10  # failed groups, in batches' worth of prompts, after which a step that cannot fill stops the run


class FailureSettingError(ValueError):
    """A failure-accounting setting is out of range; the message names the key."""


@dataclass(frozen=True)
class Limits:
    max_failed_share: float = DEFAULTS["max_failed_share"]
    sustained_steps: int = DEFAULTS["sustained_steps"]
    max_sustained_share: float = DEFAULTS["max_sustained_share"]

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any]) -> Limits:
        values = {**DEFAULTS, **{k: v for k, v in settings.items() if k in DEFAULTS}}
        for key in ("max_failed_share", "max_sustained_share"):
            value = values[key]
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
                raise FailureSettingError(
                    f"{SETTINGS_KEY}.{key} must be a share between 0 and 1 (0 turns the rule off), got {value!r}"
                )
        steps = values["sustained_steps"]
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
            raise FailureSettingError(
                f"{SETTINGS_KEY}.sustained_steps must be a whole number of steps >= 1, got {steps!r}"
            )
        return cls(float(values["max_failed_share"]), steps, float(values["max_sustained_share"]))


@dataclass
class StepFailures:
    """The failures counted for one step (training) or one validation batch."""

    step: int
    partition: str
    delivered: int = 0
    lost: dict[str, int] = field(default_factory=dict)
    masked: dict[str, int] = field(default_factory=dict)
    first: dict[str, dict[str, Any]] = field(default_factory=dict)
    discarded: int = 0  # healthy trajectories thrown away with a failed group (async modes)
    groups_failed: int = 0  # groups with a failed trajectory that left the buffer: evicted (async) or padded (sync)
    unrecorded: int = 0  # failures a worker could not record in the ledger (counted, causes unknown)
    ledger_restarted: bool = False  # the ledger restarted: failures recorded in it before were lost

    def add(self, kind: str, cause: str, n: int = 1, event: Mapping[str, Any] | None = None) -> None:
        counts = self.lost if kind == "lost" else self.masked
        counts[cause] = counts.get(cause, 0) + n
        if event is not None:
            self.first.setdefault(cause, dict(event))

    @property
    def counts(self) -> dict[str, int]:
        return {cause: self.lost.get(cause, 0) + self.masked.get(cause, 0) for cause in CAUSES}

    @property
    def failed(self) -> int:
        return sum(self.counts.values()) + self.discarded + self.unrecorded

    @property
    def expected(self) -> int:
        return self.delivered + sum(self.lost.values()) + self.discarded + self.unrecorded

    @property
    def share(self) -> float:
        # a step stopped while it waits has masked samples not yet delivered: the share is at most all of it
        return min(1.0, self.failed / self.expected) if self.expected else 0.0

    def metrics(self, prefix: str) -> dict[str, float]:
        """``<prefix>/total/<cause>``, ``<prefix>/total/discarded`` and ``<prefix>/share``, and the groups that
        failed. "total" makes verl's metric aggregator sum what several batches of one step report."""
        values = {f"{prefix}/total/{cause}": float(n) for cause, n in self.counts.items()}
        values[f"{prefix}/total/discarded"] = float(self.discarded)
        values[f"{prefix}/total/all"] = float(self.failed)
        values[f"{prefix}/total/groups_failed"] = float(self.groups_failed)
        values[f"{prefix}/share"] = self.share
        return values

    def record(self) -> dict[str, Any]:
        """The line for logs/failures.jsonl."""
        record = {
            "step": self.step,
            "partition": self.partition,
            "counts": self.counts,
            "lost": sum(self.lost.values()),
            "masked": sum(self.masked.values()),
            "discarded": self.discarded,
            "groups_failed": self.groups_failed,
            "expected": self.expected,
            "share": round(self.share, 6),
            "tracebacks": {cause: event.get("traceback", "") for cause, event in self.first.items()},
        }
        if self.unrecorded:
            record["unrecorded"] = self.unrecorded
        if self.ledger_restarted:
            record["ledger_restarted"] = True
        return record

    def summary(self) -> str:
        """One line for the log, e.g. 'step 3 (train): 5 of 128 trajectories failed (3.9%): reward_error 5'."""
        parts = [f"{cause} {n}" for cause, n in self.counts.items() if n]
        if self.discarded:
            parts.append(f"{self.discarded} healthy discarded with their group")
        if self.unrecorded:
            parts.append(f"{self.unrecorded} not recorded (cause unknown)")
        return (
            f"step {self.step} ({self.partition}): {self.failed} of {self.expected} trajectories failed "
            f"({100 * self.share:.1f}%)" + (": " + ", ".join(parts) if parts else "")
        )


class StopRun(RuntimeError):
    """The failure accounting stopped the run; the message says why and what to do."""


def trimmed(text: str, lines: int = TRACEBACK_LINES) -> str:
    rows = text.rstrip().splitlines()
    if len(rows) <= lines:
        return "\n".join(rows)
    return "\n".join([f"... ({len(rows) - lines} lines above, full text in the log)", *rows[-lines:]])


def example(event: Mapping[str, Any]) -> str:
    where = event.get("where") or "unknown node"
    header = (
        f"First example (prompt {event.get('uid')}, sample {event.get('session')}, step {event.get('step')}, "
        f"on {where}): {event.get('detail', '')}"
    )
    return header + "\n" + trimmed(str(event.get("traceback") or "(no traceback)"))


def configuration_stop(event: Mapping[str, Any], step: int) -> str:
    return (
        f"The run was stopped at step {step}: a configuration error, which every trajectory would hit "
        f"({event.get('cause')}).\n{example(event)}\n"
        "What to do: fix what the error names (the configuration or the data), then launch again; a run folder "
        "with a checkpoint resumes from it with the same RUN_DIR."
    )


class Judge:
    """Applies the share rules step after step (the sustained rule needs the recent training steps)."""

    def __init__(self, limits: Limits):
        self.limits = limits
        self.recent: deque[tuple[int, int]] = deque(maxlen=limits.sustained_steps)  # (failed, expected) per step

    def verdict(self, step: StepFailures) -> str | None:
        """The stop message for this step, or None when the run goes on."""
        limits = self.limits
        if step.partition == "train":
            self.recent.append((step.failed, step.expected))
        if limits.max_failed_share and step.share > limits.max_failed_share:
            what = (
                f"{step.failed} of {step.expected} trajectories failed ({100 * step.share:.1f}%), more than "
                f"max_failed_share {limits.max_failed_share:g}"
            )
            return self._message(step, what, "max_failed_share")
        if step.partition == "train" and limits.max_sustained_share and len(self.recent) == limits.sustained_steps:
            failed = sum(f for f, _ in self.recent)
            expected = sum(e for _, e in self.recent)
            if expected and failed / expected > limits.max_sustained_share:
                what = (
                    f"{failed} of {expected} trajectories of the last {limits.sustained_steps} steps failed "
                    f"({100 * failed / expected:.1f}%), more than max_sustained_share "
                    f"{limits.max_sustained_share:g}"
                )
                return self._message(step, what, "max_sustained_share")
        return None

    def waiting_verdict(self, step: StepFailures, prompts: int) -> str | None:
        """The stop message while an async step waits for its batch of ``prompts`` groups and has thrown
        ``step.groups_failed`` failed groups away (each with all its trajectories), or None."""
        failed, limit = step.groups_failed, self.limits.max_failed_share
        if prompts <= 0 or failed == 0:
            return None
        if limit and failed / (prompts + failed) > limit:
            what = (
                f"while waiting for its batch of {prompts} groups, {failed} groups with a failed trajectory were "
                f"thrown away, so more than max_failed_share {limit:g} of the step's trajectories failed whatever "
                f"the rest of the batch brings ({step.failed} trajectories counted so far)"
            )
            return self._message(step, what, "max_failed_share")
        if failed >= STALL_BATCHES * prompts:
            what = (
                f"while waiting for its batch of {prompts} groups, {failed} groups with a failed trajectory "
                f"({STALL_BATCHES} batches' worth) were thrown away and no batch filled"
            )
            return self._message(step, what, None)
        return None

    @staticmethod
    def _message(step: StepFailures, what: str, key: str | None) -> str:
        main = max(step.counts, key=lambda cause: step.counts[cause])
        by_cause = [f"{c} {n}" for c, n in step.counts.items() if n]
        if step.discarded:
            by_cause.append(f"{step.discarded} healthy trajectories discarded with their failed group")
        if step.unrecorded:
            by_cause.append(f"{step.unrecorded} not recorded in the ledger (cause unknown)")
        lines = [
            f"The run was stopped at step {step.step} ({'validation' if step.partition == 'val' else 'training'})"
            f": {what}. By cause: " + (", ".join(by_cause) or "none recorded") + "."
        ]
        if main in step.first:
            lines.append(example(step.first[main]))
        lines.append(f"What to do: {ADVICE[main]}.")
        limit = (
            f"The limit is {SETTINGS_KEY}.{key} (0 turns the rule off)"
            if key
            else f"This stop has no setting: a step that throws away {STALL_BATCHES} batches' worth of groups is not "
            "training"
        )
        lines.append(limit + "; a run folder with a checkpoint resumes from it with the same RUN_DIR.")
        return "\n".join(lines)


def append_record(path: Path | None, record: Mapping[str, Any]) -> None:
    if path is None:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as out:
        out.write(json.dumps(record) + "\n")


def read_records(path: Path) -> list[dict[str, Any]]:
    """Every record of a run's logs/failures.jsonl (none when the file is missing); a torn last line is skipped."""
    if not path.is_file():
        return []
    records = []
    for line in path.read_text().splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return records


def totals(records: list[dict[str, Any]]) -> dict[str, Any]:
    """A run's failures summed from its logs/failures.jsonl records: per partition the trajectories expected, failed
    and by cause, the steps counted, and the stop record (None when the accounting did not stop the run)."""
    out: dict[str, Any] = {"stop": None}
    for record in records:
        if record.get("stop"):
            out["stop"] = record
            continue
        part = out.setdefault(record["partition"], {"steps": 0, "expected": 0, "failed": 0, "by_cause": {}})
        part["steps"] += 1
        part["expected"] += record["expected"]
        extra = {key: record[key] for key in ("discarded", "unrecorded") if record.get(key)}
        for cause, n in {**record["counts"], **extra}.items():
            part["failed"] += n
            part["by_cause"][cause] = part["by_cause"].get(cause, 0) + n
    return out


def totals_sentence(summed: dict[str, Any]) -> str:
    """One line for summaries: 'Failures: training 0 of 384 trajectories (12 steps counted); validation ...'."""
    parts = []
    for partition, label in (("train", "training"), ("val", "validation")):
        part = summed.get(partition)
        if part is None:
            continue
        causes = ", ".join(f"{cause} {n}" for cause, n in part["by_cause"].items() if n)
        parts.append(
            f"{label} {part['failed']} of {part['expected']} trajectories failed"
            + (f" ({causes})" if causes else "")
            + f", {part['steps']} batch{'' if part['steps'] == 1 else 'es'} counted"
        )
    if not parts:
        return "Failures: not counted (no logs/failures.jsonl)"
    stop = summed.get("stop")
    ending = f"; the run was stopped at step {stop['step']} ({stop['reason']})" if stop else ""
    return "Failures: " + "; ".join(parts) + ending
