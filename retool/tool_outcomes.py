"""Per-trajectory counts of code-tool outcomes, carried from the tool to TensorBoard.

verl 0.9.1's ToolAgentLoop drops the metrics a tool returns, but it hands each tool call its trajectory's
``agent_data`` and ships ``agent_data.extra_fields`` to the reward manager, which merges them into ``extra_info``.
So the tool counts its outcomes there (``record``), and ``retool.reward.compute_score`` returns them as reward
fields (``outcome_fields``); verl logs reward fields of validation rollouts as ``val-aux/<data_source>/<key>/...``.

Keys (counts per trajectory, 0 when the model made no call):
``tool_calls`` every call; ``tool_ok`` exit 0; ``tool_error`` non-zero exit or unusable arguments; ``tool_timeout``
the run hit its time limit; ``tool_unavailable`` no result (sandbox down, HTTP error, sandbox-side error);
``tool_truncated`` the output was cut to ``max_output_chars``; ``tool_retried`` the call needed at least one retry
(a busy or restarting sandbox, retool.sandbox.client); ``tool_session_lost`` a session call found its
session's earlier state gone (the sandbox restarted or evicted it); ``trajectory_masked`` 1 when the recipe's agent
loop kept the trajectory out of the loss because a call got no answer (retool.agent_loop). Kept free of verl imports (the reward imports it).
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping
from typing import Any

OUTCOME_KEYS = ("tool_calls", "tool_ok", "tool_error", "tool_timeout", "tool_unavailable", "tool_truncated",
                "tool_retried", "tool_session_lost", "trajectory_masked")
_KEY_OF_STATUS = {
    "ok": "tool_ok",
    "error_exit": "tool_error",
    "bad_input": "tool_error",
    "timeout": "tool_timeout",
    "sandbox_error": "tool_unavailable",
    "unavailable": "tool_unavailable",
}
# (key, the metric that sets it)
_FLAGS = (("tool_truncated", "truncated_chars"), ("tool_retried", "retries"), ("tool_session_lost", "session_lost"))


def record(extra_fields: MutableMapping[str, Any], metrics: Mapping[str, Any]) -> None:
    """Count one call, described by the tool's metrics (``status``, ``truncated_chars``), into ``extra_fields``."""
    status = metrics.get("status")
    if status not in _KEY_OF_STATUS:
        raise ValueError(f"unknown tool status {status!r}; expected one of {sorted(_KEY_OF_STATUS)}")
    counted = ["tool_calls", _KEY_OF_STATUS[status]]
    counted += [key for key, metric in _FLAGS if metrics.get(metric, 0) > 0]
    for key in counted:
        extra_fields[key] = int(extra_fields.get(key, 0)) + 1


def outcome_fields(extra_info: Mapping[str, Any]) -> dict[str, float]:
    """Every outcome count of a trajectory as a float (verl stacks reward fields into numeric columns)."""
    return {key: float(extra_info.get(key) or 0) for key in OUTCOME_KEYS}
