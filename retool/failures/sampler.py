"""verl hook ``trainer.v1.sampler.custom_sampler``: the trainer mode's own replay buffer, with failure accounting.

``FailureAccountingSampler`` builds verl's ReplayBuffer (sync) or ReplayBufferAsync (colocate_async,
separate_async) with the accounting below; everything else is verl's.

- While the trainer waits for a batch, every pass drains the run's ledger (the failed trajectories the agent-loop
  workers recorded) and, when verl evicts failed groups (the async modes), counts each group's healthy trajectories
  thrown away with it (``discarded``) and judges the step so far: a fault that fails most groups stops the run
  while verl would still be evicting and refilling (retool.failures.limits, ``Judge.waiting_verdict``). A
  configuration error stops it at the next poll.
- A failed group that leaves the buffer (evicted, or sampled and padded in sync mode) with no failed trajectory in
  the ledger failed outside the agent loop (verl's ``_run_prompt``): it is counted as one ``agent_loop_error``.
- Each training step (the ``parameter_sync_step`` batches of a separate_async step together) and each validation
  batch is judged once and recorded once: ``failures/total/<cause>``, ``failures/total/discarded``,
  ``failures/total/groups_failed``, ``failures/total/all`` and ``failures/share`` among the step's metrics
  (TensorBoard and verl's console line, beside verl's own ``training/rollout_failure/evicted_samples``),
  ``val-failures/...`` on TensorBoard at the validation's step, a line in ``logs/failures.jsonl``, and in the log a
  summary line and the first traceback of each cause. The run stops (StopRun, with the cause, one example traceback
  and what to do) when the limits say so.
- A ledger that restarted (and so forgot what it held) or a worker that could not record is said in the log and in
  the step's record.

Settings (``trainer.v1.sampler.sampler_kwargs``): ``max_failed_share``, ``sustained_steps``, ``max_sustained_share``
(retool.failures.limits) and ``failure_log`` (the JSONL file; null: none). With a custom sampler verl does not wire
its DAPO group filter (``algorithm.filter_groups``) nor ``sync_refill_failed_groups``; the launch check
(retool.failures.preflight) refuses them.
"""

from __future__ import annotations

import os
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import ray

from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer, ReplayBufferAsync

from retool.failures.ledger import ledger_handle
from retool.failures.limits import Judge, Limits, StepFailures, StopRun, append_record, configuration_stop, trimmed

OUTSIDE_THE_LOOP = (
    "verl marked this group failed with no failed trajectory recorded: an error in its _run_prompt "
    "outside the agent loop (the worker's log has 'Error in _run_prompt' with the traceback)"
)


class _Accounting:
    """Mixed into verl's replay buffers (before them in the bases)."""

    def _start_accounting(self) -> None:
        settings = dict(self.sampler_kwargs or {})
        self._judge = Judge(Limits.from_settings(settings))
        log = settings.get("failure_log")
        self._failure_log = Path(log) if log else None
        self._ledger = ledger_handle()
        self._incarnation = ray.get(self._ledger.get_incarnation.remote())
        # verl samples parameter_sync_step batches per training step (trainer_base.PPOTrainer.step), in every mode
        self._calls_per_step = int((self.trainer_config or {}).get("parameter_sync_step", 1) or 1)
        self._prompts_per_step = 0  # known from the first training batch asked for
        self._open: dict[str, StepFailures] = {}
        self._calls: dict[str, int] = defaultdict(int)
        # partition -> uid -> {"lost": sessions, "masked": sessions} recorded for groups still in the buffer
        self._recorded: dict[str, dict[str, dict[str, set[str]]]] = defaultdict(dict)
        self._val_writer = None

    # -- verl's entry points ---------------------------------------------------------------------------------------

    def sample(self, global_steps: int, partition_id: str, batch_size: int) -> tuple[Any, dict]:
        if partition_id == "train":
            self._prompts_per_step = batch_size * self._calls_per_step
        try:
            batch, metrics = super().sample(global_steps, partition_id, batch_size)
        except StopRun:
            raise
        except RuntimeError:  # e.g. sync mode: "selected terminal groups with no materializable trajectories"
            self._close_batch(global_steps, partition_id, delivered=0, last=True)
            raise
        step = self._close_batch(global_steps, partition_id, delivered=_trajectories(batch))
        if step is not None and partition_id == "train":
            metrics.update(step.metrics("failures"))
        elif step is not None:
            self._write_validation(step)
        return batch, metrics

    def wait_for_sampleable(self, global_steps: int, partition_id: str, target_count: int) -> tuple[set[str], dict]:
        # separate_async's hybrid switch waits here before the step's first batch is asked for
        if partition_id == "train" and not self._prompts_per_step:
            self._prompts_per_step = target_count
        return super().wait_for_sampleable(global_steps, partition_id, target_count)

    def _wait_for_next_poll(self, partition_id: str, last_debug_time: float) -> float:
        self._stop_on_configuration_error()
        return super()._wait_for_next_poll(partition_id, last_debug_time)

    def _evict_terminal_groups(self, global_steps: int, partition_id: str, eviction_reasons: tuple) -> tuple:
        failed = set(eviction_reasons[2])
        evicted = set().union(*eviction_reasons[:3])
        if failed:
            self._collect(global_steps, partition_id)
            stored = self._stored_sessions(partition_id, failed)
            step = self._step(global_steps, partition_id)
            for uid in failed:
                self._group_failed(step, partition_id, uid, discarded=stored.get(uid, set()))
        for uid in evicted - failed:
            self._recorded[partition_id].pop(uid, None)
        result = super()._evict_terminal_groups(global_steps, partition_id, eviction_reasons)
        if failed and partition_id == "train":
            message = self._judge.waiting_verdict(self._step(global_steps, partition_id), self._prompts_per_step)
            if message is not None:
                self._stop_step(message, global_steps, partition_id, reason="share")
        return result

    def _materialize_batch(self, partition_id: str, selected_prompt_uids: list[str], partition_snapshot: dict) -> Any:
        failed = set(selected_prompt_uids) & self.failure_keys[partition_id]  # sync mode: padded, not evicted
        if failed:
            step = self._step(None, partition_id)
            self._collect(step.step, partition_id)
            for uid in failed:
                self._group_failed(step, partition_id, uid, discarded=set())
        for uid in selected_prompt_uids:
            self._recorded[partition_id].pop(uid, None)
        return super()._materialize_batch(partition_id, selected_prompt_uids, partition_snapshot)

    # -- accounting ------------------------------------------------------------------------------------------------

    def _step(self, global_steps: int | None, partition_id: str) -> StepFailures:
        """The step (or validation batch) being counted in ``partition_id``."""
        if partition_id not in self._open:
            self._open[partition_id] = StepFailures(global_steps or 0, partition_id)
        return self._open[partition_id]

    def _collect(self, global_steps: int | None, partition_id: str) -> StepFailures:
        """Drain the ledger into the step being counted."""
        step = self._step(global_steps, partition_id)
        drained = ray.get(self._ledger.drain.remote(partition_id))
        if drained["incarnation"] != self._incarnation:
            self._incarnation = drained["incarnation"]
            step.ledger_restarted = True
            print(
                f"WARNING retool failures: the failure ledger restarted during step {global_steps}: the failures it "
                "held were lost; this step's counts are low by that much (its record says ledger_restarted)",
                file=sys.stderr,
                flush=True,
            )
        step.unrecorded += drained["unrecorded"]
        for event in drained["events"]:
            step.add(event["kind"], event["cause"], event=event)
            sessions = self._recorded[partition_id].setdefault(str(event.get("uid")), {"lost": set(), "masked": set()})
            sessions[event["kind"]].add(str(event.get("session")))
            if event.get("configuration"):
                self._stop_step(
                    configuration_stop(event, event.get("step", global_steps)),
                    global_steps,
                    partition_id,
                    reason="configuration_error",
                )
        return step

    def _group_failed(self, step: StepFailures, partition_id: str, uid: str, discarded: set[str]) -> None:
        """A failed group leaves the buffer; ``discarded``: its stored sessions, thrown away with it."""
        recorded = self._recorded[partition_id].pop(uid, None) or {"lost": set(), "masked": set()}
        step.groups_failed += 1
        if not recorded["lost"]:
            step.add(
                "lost",
                "agent_loop_error",
                event={"uid": uid, "step": step.step, "detail": OUTSIDE_THE_LOOP, "where": "verl's agent-loop worker"},
            )
        # a masked trajectory is counted as masked already; a lost one was never stored
        step.discarded += len(discarded - recorded["masked"] - recorded["lost"])

    def _stored_sessions(self, partition_id: str, uids: set[str]) -> dict[str, set[str]]:
        """The sessions of ``uids`` whose trajectories are in the buffer (keys are ``{uid}_{session}_{index}``)."""
        stored: dict[str, set[str]] = defaultdict(set)
        for key in self.partitions[partition_id]:
            uid, session, _ = key.split("_", 2)
            if uid in uids:
                stored[uid].add(session)
        return stored

    def _close_batch(
        self, global_steps: int, partition_id: str, delivered: int, last: bool = False
    ) -> StepFailures | None:
        """Count a sampled batch; the step it completes (every batch in validation) is logged, judged and returned."""
        self._stop_on_configuration_error(global_steps)
        step = self._collect(global_steps, partition_id)
        step.delivered += delivered
        self._calls[partition_id] += 1
        if partition_id == "train" and self._calls[partition_id] < self._calls_per_step and not last:
            return None
        del self._open[partition_id]
        self._calls[partition_id] = 0
        step.step = global_steps
        append_record(self._failure_log, step.record())
        if step.failed:
            # printed, not logged: in verl's Ray workers a module logger's warnings do not reliably reach the log
            lines = [f"WARNING retool failures {step.summary()}"]
            lines += [
                f"WARNING retool failures: first {cause} of step {global_steps} on {event.get('where')}: "
                f"{event.get('detail')}\n{trimmed(str(event.get('traceback') or ''))}"
                for cause, event in step.first.items()
            ]
            print("\n".join(lines), file=sys.stderr, flush=True)
        message = self._judge.verdict(step)
        if message is not None:
            self._stop(message, step=global_steps, partition=partition_id, reason="share")
        return step

    def _stop_on_configuration_error(self, step: int | None = None) -> None:
        event = ray.get(self._ledger.configuration_error.remote())
        if event is not None:
            self._stop(
                configuration_stop(event, step if step is not None else event.get("step")),
                step=event.get("step"),
                partition=event.get("partition"),
                reason="configuration_error",
            )

    def _stop_step(self, message: str, global_steps: int | None, partition_id: str, *, reason: str) -> None:
        """Stop in the middle of a step: its counts so far are recorded first."""
        step = self._open.pop(partition_id, None)
        if step is not None:
            step.step = global_steps if global_steps is not None else step.step
            append_record(self._failure_log, step.record())
        self._stop(message, step=global_steps, partition=partition_id, reason=reason)

    def _stop(self, message: str, *, step: Any, partition: Any, reason: str) -> None:
        append_record(
            self._failure_log,
            {"stop": True, "step": step, "partition": partition, "reason": reason, "message": message},
        )
        # printed whole (not through logging's per-line prefixes), so the console and the log show it as one block
        print("retool: " + message[0].lower() + message[1:], flush=True)
        raise StopRun(message)

    def _write_validation(self, step: StepFailures) -> None:
        """val-failures/... at the validation's step: verl keeps a validation sampler's metrics to itself."""
        directory = os.environ.get("TENSORBOARD_DIR")
        if not directory:
            return
        if self._val_writer is None:
            from torch.utils.tensorboard import SummaryWriter

            self._val_writer = SummaryWriter(directory)
        for tag, value in step.metrics("val-failures").items():
            self._val_writer.add_scalar(tag, value, step.step)
        self._val_writer.flush()


def _trajectories(batch: Any) -> int:
    """Sessions in a sampled batch (keys are ``{uid}_{session}_{index}``; padding is added later, by the trainer)."""
    return len(
        {
            key.rsplit("_", 1)[0]
            for key, tag in zip(batch.keys, batch.tags, strict=True)
            if not tag.get("is_padding", False)
        }
    )


class _SyncSampler(_Accounting, ReplayBuffer):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._start_accounting()


class _AsyncSampler(_Accounting, ReplayBufferAsync):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._start_accounting()


class FailureAccountingSampler:
    """What verl instantiates: the replay buffer of the run's trainer mode, with failure accounting."""

    def __new__(cls, *args, trainer_mode: str, **kwargs):
        implementation = _SyncSampler if trainer_mode == "sync" else _AsyncSampler
        return implementation(*args, trainer_mode=trainer_mode, **kwargs)
