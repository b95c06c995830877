"""CodeInterpreterTool: verl's ``code_interpreter`` tool, backed by a SandboxFusion-compatible ``/run_code`` server.

verl imports it by dotted path from the tool YAML (``class_name: retool.tool.CodeInterpreterTool``) inside every
agent-loop worker. This class only joins verl to the recipe's parts: the settings (``retool.tool_settings``), the
code preparation and reply text of its behaviour (``retool.tool_text``), the HTTP client with its deadlines,
retries and sessions (``retool_sandbox.client``), and the per-trajectory outcome counts (``retool.tool_outcomes``).

It never raises into the agent loop: bad arguments, sandbox outages and malformed replies all become a tool
message the model can read, and a bug of its own is counted as ``tool_exception`` with its traceback (the recipe's
failure accounting reports it). Config errors raise at construction (start-up).
"""

from __future__ import annotations

import logging
import time
import traceback
import uuid
from typing import Any

from verl.tools.base_tool import BaseTool
from verl.tools.schemas import OpenAIFunctionToolSchema, ToolResponse
from verl.utils.rollout_trace import rollout_trace_op

from retool import tool_outcomes, tool_text
from retool_sandbox.client import Reply, SandboxClient
from retool.tool_schema import tool_schema
from retool.tool_settings import ToolSettings

logger = logging.getLogger(__name__)

# per_trajectory sessions: the id is kept on verl's per-trajectory agent_data, as an attribute and in extra_fields,
# where the recipe's agent loop (retool.agent_loop) finds it to close the session when the trajectory ends
SESSION_ATTRIBUTE = "_retool_session_id"
SESSION_FIELD = "retool_session_id"


class CodeInterpreterTool(BaseTool):
    """verl BaseTool running Python in a /run_code sandbox.

    ``execute`` returns (ToolResponse(text=...), 0.0, metrics); metrics hold status ("ok", "error_exit", "timeout",
    "sandbox_error", "unavailable", "bad_input", "tool_exception" when this class itself failed), timed_out,
    sandbox_error, session_lost, retries, truncated_chars and latency_s. verl 0.9.1's ToolAgentLoop discards them, so
    each call is also counted into its trajectory's ``agent_data.extra_fields`` (retool.tool_outcomes), which reaches
    the reward, TensorBoard and the agent loop.

    With ``session_mode: per_trajectory`` the calls of one trajectory share one retool-sandbox session. verl 0.9.1's
    ToolAgentLoop creates and releases a tool instance around every call, so the trajectory is the ``agent_data``
    object it passes to ``execute``: its session id is kept on that object and in its ``extra_fields``, from which
    the recipe's agent loop (retool.agent_loop) closes the session when the trajectory ends. Callers without
    agent_data get one session per instance, closed by ``release``.
    """

    def __init__(self, config: dict[str, Any], tool_schema: OpenAIFunctionToolSchema | None = None):
        self.settings = ToolSettings.from_config(dict(config or {}))
        super().__init__(config, tool_schema)
        self.client = SandboxClient(
            self.settings.sandbox_fusion_url,
            self.settings.client_policy(),
            max_concurrency=self.settings.max_concurrency,
        )
        self._instance_sessions: set[str] = set()

    def get_openai_tool_schema(self) -> OpenAIFunctionToolSchema:
        """The schema of this tool's behaviour and session mode (retool.tool_schema), when the YAML gives none."""
        return OpenAIFunctionToolSchema.model_validate(tool_schema(self.settings.behaviour, self.settings.session_mode))

    def _session_id(self, instance_id: str, agent_data: Any) -> str | None:
        if self.settings.session_mode != "per_trajectory":
            return None
        if agent_data is None:
            self._instance_sessions.add(instance_id)
            return instance_id
        session_id = getattr(agent_data, SESSION_ATTRIBUTE, None)
        if session_id is None:
            session_id = uuid.uuid4().hex
            setattr(agent_data, SESSION_ATTRIBUTE, session_id)
            agent_data.extra_fields[SESSION_FIELD] = session_id
        return session_id

    async def close_session(self, session_id: str) -> None:
        """End a session now (best effort: a failure is logged; the server evicts idle sessions anyway)."""
        if not await self.client.close_session(session_id):
            logger.info("code_interpreter: closing session %s failed", session_id)

    async def release(self, instance_id: str, **kwargs) -> None:
        if instance_id in self._instance_sessions:
            self._instance_sessions.discard(instance_id)
            await self.close_session(instance_id)
        await super().release(instance_id, **kwargs)

    @rollout_trace_op
    async def execute(self, instance_id: str, parameters: dict[str, Any], **kwargs) -> tuple[ToolResponse, float, dict]:
        """Run parameters["code"]; never raises (except cancellation), every failure is a readable text."""
        started = time.monotonic()
        behaviour = self.settings.behaviour
        code = parameters.get("code") if isinstance(parameters, dict) else None
        agent_data = kwargs.get("agent_data")
        problem = None
        if not tool_text.usable_code(code, behaviour):
            text, metrics = tool_text.bad_argument_text(code), _metrics("bad_input")
        else:
            try:
                reply = await self.client.run(
                    tool_text.prepare_code(code, behaviour), session_id=self._session_id(instance_id, agent_data)
                )
                text, metrics = self.reply_text(reply)
                problem = reply.problem if reply.status in ("unavailable", "sandbox_error") else None
            except Exception as exc:  # last resort: a bug here must not kill the rollout; it is counted instead
                logger.exception("code_interpreter failed unexpectedly")
                problem = "".join(traceback.format_exception(exc))
                # worded as a reply that never came (which it is), without the sandbox-unavailable warning
                missing = Reply("unavailable", problem=f"internal tool error {type(exc).__name__}: {exc}")
                text, _ = tool_text.reply_text(
                    missing, behaviour, self.settings.default_timeout, self.settings.max_output_chars
                )
                metrics = _metrics("tool_exception")
        metrics["latency_s"] = time.monotonic() - started
        if agent_data is not None:
            tool_outcomes.record(agent_data.extra_fields, metrics, problem=problem)
        return ToolResponse(text=text), 0.0, metrics

    async def run_code(self, code: str, session_id: str | None = None) -> tuple[str, dict[str, Any]]:
        """POST ``code`` as is (no preparation) and word the reply; returns (text, metrics)."""
        return self.reply_text(await self.client.run(code, session_id=session_id))

    def reply_text(self, reply: Reply) -> tuple[str, dict[str, Any]]:
        s = self.settings
        if reply.status == "unavailable":
            logger.warning("code_interpreter: sandbox unavailable: %s", reply.problem)
        text, cut = tool_text.reply_text(reply, s.behaviour, s.default_timeout, s.max_output_chars)
        metrics = _metrics(
            reply.status, retries=reply.retries, truncated_chars=cut, session_lost=int(bool(reply.session_lost))
        )
        return text, metrics


def _metrics(status: str, **values: int) -> dict[str, Any]:
    return {
        "status": status,
        "timed_out": int(status == "timeout"),
        "sandbox_error": int(status in ("sandbox_error", "unavailable")),
        "truncated_chars": 0,
        "retries": 0,
        "session_lost": 0,
        **values,
    }
