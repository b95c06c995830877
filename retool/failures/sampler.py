"""verl hook ``trainer.v1.sampler.custom_sampler``: the trainer mode's own replay buffer, with failure accounting.

``FailureAccountingSampler`` builds verl's ReplayBuffer (sync) or ReplayBufferAsync (colocate_async,
separate_async) with the accounting below; everything else is verl's. Each time the trainer samples a batch:

- the failures recorded in the run's ledger since the last batch are counted by cause (retool.failures.limits):
  training steps get ``failures/total/<cause>``, ``failures/total/all`` and ``failures/share`` among the step's metrics
  (TensorBoard and verl's console line), validation batches ``val-failures/...`` on TensorBoard at the validation's
  step; every batch adds a line to ``logs/failures.jsonl``, and the log gets a summary line and the first traceback
  of each cause;
- the run stops (StopRun, with the cause, one example traceback and what to do) when the limits say so; and while
  the trainer waits for a batch, every poll asks the ledger for a configuration error, so such an error stops the
  run seconds after the first trajectory hits it.

Settings (``trainer.v1.sampler.sampler_kwargs``): ``max_failed_share``, ``sustained_steps``, ``max_sustained_share``
(retool.failures.limits) and ``failure_log`` (the JSONL file; null: none). With a custom sampler verl does not wire
its DAPO group filter (``algorithm.filter_groups``) nor ``sync_refill_failed_groups``; the launch check
(retool.failures.preflight) refuses them.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import ray

from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer, ReplayBufferAsync

from retool.failures.ledger import ledger_handle
from retool.failures.limits import Judge, Limits, StepFailures, StopRun, append_record, configuration_stop, trimmed



class _Accounting:
    """Mixed into verl's replay buffers (before them in the bases)."""

    def _start_accounting(self) -> None:
        settings = dict(self.sampler_kwargs or {})
        self._judge = Judge(Limits.from_settings(settings))
        log = settings.get("failure_log")
        self._failure_log = Path(log) if log else None
        self._ledger = ledger_handle()
        self._val_writer = None

    # -- verl's entry points ---------------------------------------------------------------------------------------

    def sample(self, global_steps: int, partition_id: str, batch_size: int) -> tuple[Any, dict]:
        try:
            batch, metrics = super().sample(global_steps, partition_id, batch_size)
        except StopRun:
            raise
        except RuntimeError:  # e.g. sync mode: "selected terminal groups with no materializable trajectories"
            self._account(global_steps, partition_id, delivered=0)
            raise
        step = self._account(global_steps, partition_id, delivered=_trajectories(batch))
        if partition_id == "train":
            metrics.update(step.metrics("failures"))
        else:
            self._write_validation(step)
        return batch, metrics

    def _wait_for_next_poll(self, partition_id: str, last_debug_time: float) -> float:
        self._stop_on_configuration_error()
        return super()._wait_for_next_poll(partition_id, last_debug_time)

    # -- accounting ------------------------------------------------------------------------------------------------

    def _stop_on_configuration_error(self, step: int | None = None) -> None:
        event = ray.get(self._ledger.configuration_error.remote())
        if event is not None:
            self._stop(configuration_stop(event, step if step is not None else event.get("step")),
                       step=event.get("step"), partition=event.get("partition"), reason="configuration_error")

    def _account(self, global_steps: int, partition_id: str, delivered: int) -> StepFailures:
        drained = ray.get(self._ledger.drain.remote(partition_id))
        step = StepFailures(global_steps, partition_id, delivered, drained["lost"], drained["masked"],
                            drained["first"])
        append_record(self._failure_log, step.record())
        if step.failed:
            # printed, not logged: in verl's Ray workers a module logger's warnings do not reliably reach the log
            lines = [f"WARNING retool failures {step.summary()}"]
            lines += [f"WARNING retool failures: first {cause} of step {global_steps} on {event.get('where')}: "
                      f"{event.get('detail')}\n{trimmed(str(event.get('traceback') or ''))}"
                      for cause, event in step.first.items()]
            print("\n".join(lines), file=sys.stderr, flush=True)
        self._stop_on_configuration_error(global_steps)
        message = self._judge.verdict(step)
        if message is not None:
            self._stop(message, step=global_steps, partition=partition_id, reason="share")
        return step

    def _stop(self, message: str, *, step: Any, partition: Any, reason: str) -> None:
        append_record(self._failure_log, {"stop": True, "step": step, "partition": partition, "reason": reason,
                                          "message": message})
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
    return len({key.rsplit("_", 1)[0] for key, tag in zip(batch.keys, batch.tags, strict=True)
                if not tag.get("is_padding", False)})


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
