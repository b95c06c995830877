"""The recipe's tool agent loop: verl's ToolAgentLoop with two duties at the end of every trajectory.

configs/agent_loop.yaml registers it under verl's own name ``tool_agent`` (rollout.agent.agent_loop_config_path), so
rows prepared with ``agent_name: tool_agent`` run it without any other change. verl builds one instance per
trajectory; ``run`` is verl's, then:

1. Sessions end with their trajectory. With ``session_mode: per_trajectory`` the code tool keeps the trajectory's
   retool-sandbox session id in ``extra_fields``; the session is closed here, so the sandbox never has to guess
   whether a quiet session still has a model generating its next turn.
2. No answer from the sandbox is not the model's fault. A trajectory in which some tool call got no usable reply
   (``tool_unavailable`` > 0: the sandbox was down, restarting or overloaded past the client's retries) is kept out
   of the policy loss: its response mask is zeroed, and ``trajectory_masked`` = 1 is recorded (the reward reports it,
   so it reaches TensorBoard). Its reward still counts in its group's GRPO baseline. A healthy run masks nothing;
   ``mask_unanswered_tool_calls: false`` in the YAML turns it off.
"""

from __future__ import annotations

import logging
from typing import Any

from verl.experimental.agent_loop.agent_loop import AgentLoopOutput
from verl.experimental.agent_loop.tool_agent_loop import ToolAgentLoop

from retool.constants import TOOL_NAME
from retool.tool import SESSION_FIELD

logger = logging.getLogger(__name__)


class RecipeToolAgentLoop(ToolAgentLoop):
    def __init__(self, *args, mask_unanswered_tool_calls: bool = True, **kwargs):
        super().__init__(*args, **kwargs)
        self.mask_unanswered_tool_calls = mask_unanswered_tool_calls

    async def run(self, sampling_params: dict[str, Any], **kwargs) -> AgentLoopOutput:
        output = await super().run(sampling_params, **kwargs)
        fields = output.extra_fields
        session_id = fields.pop(SESSION_FIELD, None)
        tool = self.tools.get(TOOL_NAME)
        if session_id is not None and tool is not None:
            await tool.close_session(session_id)
        masked = self.mask_unanswered_tool_calls and int(fields.get("tool_unavailable") or 0) > 0
        if masked:
            output.response_mask = [0] * len(output.response_mask)
            logger.warning("a trajectory got no answer from the sandbox for %s tool call(s): kept out of the loss",
                           fields["tool_unavailable"])
        fields["trajectory_masked"] = int(masked)
        return output
