"""verl hook ``actor_rollout_ref.rollout.agent.agent_loop_manager_class``: verl's TransferQueue agent-loop manager,
whose workers record every failed trajectory in the run's failure ledger (retool.failures.ledger).

verl 0.9.1's worker catches an exception from any trajectory of a prompt, logs it and marks the prompt's group
``failure``; the trainer then pads or evicts the missing trajectories and trains on (its ReplayBuffer docstring).
The recipe's worker records each such trajectory before verl sees the exception (``lost``: ``reward_error`` when
the reward raised, else ``agent_loop_error``), and each finished trajectory whose tool calls got no answer
(``masked``: ``sandbox_unavailable`` or ``tool_exception``, which the recipe's agent loop keeps out of the loss), then
lets verl go on exactly as before. A trajectory is recorded once: a masked one whose reward then raises is lost.
verl can also mark a group failed outside any trajectory (the outer ``except`` of its ``_run_prompt``): the sampler
counts such a group from the buffer itself. The trainer's sampler (retool.failures.sampler) counts them per step and
stops the run when they pass the run's limits.
"""

from __future__ import annotations

import sys
import traceback
from typing import Any

import ray

from verl.trainer.ppo.v1 import AgentLoopManagerTQ, AgentLoopWorkerTQ

from retool.failures import causes
from retool.failures.ledger import ledger_handle, where
from retool.tool_outcomes import PROBLEM_FIELD, masked_cause


_REWARD_STAGE = "_retool_failed_in_reward"


class AccountingAgentLoopWorker(AgentLoopWorkerTQ.__ray_actor_class__):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._ledger = ledger_handle()
        self._unrecorded: dict[str, int] = {}  # per partition: events the ledger did not take, handed over later

    async def _record(self, event: dict[str, Any]) -> None:
        """Into the ledger before verl goes on, so the sampler sees it by the time the group is terminal."""
        unrecorded, self._unrecorded = self._unrecorded, {}
        try:
            await self._ledger.record.remote({**event, "where": where()}, unrecorded)
        except Exception as exc:  # a lost count must not become a lost trajectory: keep the number, say it
            for partition, n in unrecorded.items():
                self._unrecorded[partition] = self._unrecorded.get(partition, 0) + n
            self._unrecorded[event["partition"]] = self._unrecorded.get(event["partition"], 0) + 1
            print(
                f"WARNING retool failures: could not record a failed trajectory ({event['cause']}) in the ledger "
                f"({exc!r}); {sum(self._unrecorded.values())} such failures will be counted, without their cause, "
                "when it answers again",
                file=sys.stderr,
                flush=True,
            )

    async def _run_agent_loop(
        self,
        sampling_params: dict[str, Any],
        trajectory: dict[str, Any],
        *,
        agent_name: str,
        trace: bool = True,
        **kwargs,
    ) -> Any:
        try:
            return await super()._run_agent_loop(
                sampling_params, trajectory, agent_name=agent_name, trace=trace, **kwargs
            )
        except Exception as exc:
            configuration = causes.configuration_error(exc)
            await self._record(
                {
                    "partition": "val" if trajectory.get("validate") else "train",
                    "kind": "lost",
                    "cause": "reward_error" if getattr(exc, _REWARD_STAGE, False) else "agent_loop_error",
                    "step": kwargs.get("global_steps", trajectory.get("step")),
                    "uid": kwargs.get("uid"),
                    "session": kwargs.get("session_id"),
                    "detail": causes.describe(configuration or exc),
                    "traceback": "".join(traceback.format_exception(exc)),
                    "configuration": configuration is not None,
                }
            )
            raise

    async def _agent_loop_postprocess(self, output: Any, validate: bool, **kwargs) -> Any:
        masked = []
        for one in output if isinstance(output, list) else [output]:
            problem = one.extra_fields.pop(PROBLEM_FIELD, None)
            cause = masked_cause(one.extra_fields)
            if cause is not None:
                masked.append(
                    {
                        "partition": "val" if validate else "train",
                        "kind": "masked",
                        "cause": cause,
                        "step": kwargs.get("global_steps"),
                        "uid": kwargs.get("uid"),
                        "session": kwargs.get("session_id"),
                        "detail": (problem or "").splitlines()[-1] if problem else cause,
                        "traceback": problem or "",
                        "configuration": False,
                    }
                )
        result = await super()._agent_loop_postprocess(output, validate, **kwargs)
        # recorded once the trajectory is stored: had its reward raised, it would be counted as lost, not twice
        for event in masked:
            await self._record(event)
        return result

    async def _compute_score(self, outputs: list[Any], kwargs: dict) -> None:
        try:
            await super()._compute_score(outputs, kwargs)
        except Exception as exc:
            setattr(exc, _REWARD_STAGE, True)  # read by _run_agent_loop above, which sees it next
            raise


class AccountingAgentLoopManager(AgentLoopManagerTQ):
    """verl's TransferQueue agent-loop manager with the recipe's accounting workers."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.agent_loop_workers_class = ray.remote(AccountingAgentLoopWorker)
