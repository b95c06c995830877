"""The recipe's tool agent loop: verl's ToolAgentLoop with three duties around every trajectory.

configs/agent_loop.yaml registers it under verl's own name ``tool_agent`` (rollout.agent.agent_loop_config_path), so
rows prepared with ``agent_name: tool_agent`` run it without any other change. verl builds one instance per
trajectory; ``run`` is verl's, then:

1. Sessions end with their trajectory. With ``session_mode: per_trajectory`` the code tool keeps the trajectory's
   retool-sandbox session id in ``extra_fields``; the session is closed here, so the sandbox never has to guess
   whether a quiet session still has a model generating its next turn.
2. No answer from the code is not the model's fault. A trajectory in which some tool call got no usable reply
   (``tool_unavailable`` > 0: the sandbox was down, restarting or overloaded past the client's retries;
   ``tool_exception`` > 0: the tool itself raised) is kept out of the policy loss: its response mask is zeroed, and
   ``trajectory_masked`` = 1 is recorded (the reward reports it, so it reaches TensorBoard). Its reward still counts
   in its group's GRPO baseline. A healthy run masks nothing; ``mask_unanswered_tool_calls: false`` in the YAML turns
   it off. The recipe's failure accounting (retool.failures) counts these trajectories by cause.
3. Faults are not hidden. verl answers a tool that raises with "Error executing tool ..." and goes on, and answers a
   call of a tool it does not have with "Unknown function ...": here a tool that raises (in ``create`` or
   ``execute``) is counted as ``tool_exception``
   with its traceback, and a call of the recipe's own tool (``code_interpreter``, which the SFT data teaches) that the
   run's tool config does not provide raises UnknownTool, a configuration error that stops the run.
"""

from __future__ import annotations

import logging
import traceback
from typing import Any

from verl.experimental.agent_loop.agent_loop import AgentLoopOutput
from verl.experimental.agent_loop.tool_agent_loop import ToolAgentLoop
from verl.tools.function_tool import FunctionTool

from retool import tool_outcomes
from retool.constants import TOOL_NAME
from retool.failures.causes import UnknownTool
from retool.tool import SESSION_FIELD

logger = logging.getLogger(__name__)


class _CountedTool:
    """A verl BaseTool whose exceptions are counted into the calling trajectory before verl words them.

    One per agent-loop instance, so per trajectory: ``create`` gets no ``agent_data`` from verl, so the loop binds the
    trajectory's before each call."""

    def __init__(self, tool: Any):
        self._tool = tool
        self.agent_data: Any = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._tool, name)

    async def create(self, *args, **kwargs) -> Any:
        try:
            return await self._tool.create(*args, **kwargs)
        except Exception as exc:
            _count_exception(self.agent_data, exc)
            raise

    async def execute(self, instance_id: str, parameters: dict[str, Any], **kwargs) -> Any:
        try:
            return await self._tool.execute(instance_id, parameters, **kwargs)
        except Exception as exc:
            _count_exception(kwargs.get("agent_data"), exc)
            raise


def _count_exception(agent_data: Any, exc: Exception) -> None:
    if agent_data is not None:
        tool_outcomes.record(
            agent_data.extra_fields, {"status": "tool_exception"}, problem="".join(traceback.format_exception(exc))
        )


class RecipeToolAgentLoop(ToolAgentLoop):
    def __init__(self, *args, mask_unanswered_tool_calls: bool = True, **kwargs):
        super().__init__(*args, **kwargs)
        self.mask_unanswered_tool_calls = mask_unanswered_tool_calls
        self.tools = {
            name: tool if isinstance(tool, FunctionTool) else _CountedTool(tool) for name, tool in self.tools.items()
        }

    async def _call_tool(self, tool_call: Any, tools_kwargs: dict[str, Any], agent_data: Any) -> Any:
        active = getattr(agent_data, "_active_tools", self.tools)
        if tool_call.name == TOOL_NAME and TOOL_NAME not in active:
            raise UnknownTool(
                f"the model called {TOOL_NAME}, the tool its SFT data teaches, but this run's tool config "
                f"(actor_rollout_ref.rollout.multi_turn.tool_config_path) provides {sorted(active) or 'no tool'}. "
                "Fix: point tool_config_path at configs/tool.yaml (the reference) or configs/tool_annotated.yaml"
            )
        tool = active.get(tool_call.name)
        if isinstance(tool, _CountedTool):
            tool.agent_data = agent_data
        return await super()._call_tool(tool_call, tools_kwargs, agent_data)

    async def run(self, sampling_params: dict[str, Any], **kwargs) -> AgentLoopOutput:
        output = await super().run(sampling_params, **kwargs)
        fields = output.extra_fields
        session_id = fields.pop(SESSION_FIELD, None)
        tool = self.tools.get(TOOL_NAME)
        if session_id is not None and tool is not None:
            await tool.close_session(session_id)
        unanswered = int(fields.get("tool_unavailable") or 0) + int(fields.get("tool_exception") or 0)
        masked = self.mask_unanswered_tool_calls and unanswered > 0
        if masked:
            output.response_mask = [0] * len(output.response_mask)
            logger.warning("a trajectory got no answer for %s tool call(s): kept out of the loss", unanswered)
        fields["trajectory_masked"] = int(masked)
        return output
