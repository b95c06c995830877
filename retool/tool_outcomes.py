"""Per-trajectory counts of code-tool outcomes, carried from the tool to TensorBoard.

verl 0.9.1's ToolAgentLoop drops the metrics a tool returns, but it hands each tool call its trajectory's
``agent_data`` and ships ``agent_data.extra_fields`` to the reward manager, which merges them into ``extra_info``.
So the tool counts its outcomes there (``record``), and ``retool.reward.compute_score`` returns them as reward
fields (``outcome_fields``); verl logs reward fields of validation rollouts as ``val-aux/<data_source>/<key>/...``.

Keys (counts per trajectory, 0 when the model made no call):
``tool_calls`` every call; ``tool_ok`` exit 0; ``tool_error`` non-zero exit or unusable arguments; ``tool_timeout``
the run hit its time limit; ``tool_unavailable`` no result (sandbox down, HTTP error, sandbox-side error);
``tool_exception`` the tool itself raised (a bug of the tool, not of the model's code);
``tool_truncated`` the output was cut to ``max_output_chars``; ``tool_retried`` the call needed at least one retry
(a busy or restarting sandbox, retool_sandbox.client); ``tool_session_lost`` a session call found its
session's earlier state gone (the sandbox restarted or evicted it); ``trajectory_masked`` 1 when the recipe's agent
loop kept the trajectory out of the loss because a call got no answer (retool.agent_loop). Kept free of verl imports
(the reward imports it).

The first problem of a trajectory's calls that got no answer (the sandbox's reason, or the tool's traceback) rides
along in ``extra_fields[PROBLEM_FIELD]`` until the recipe's agent-loop worker takes it out for the failure ledger
(retool.failures.worker); ``masked_cause`` names the failure cause of a trajectory from its counts.
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping
from typing import Any

OUTCOME_KEYS = (
    "tool_calls",
    "tool_ok",
    "tool_error",
    "tool_timeout",
    "tool_unavailable",
    "tool_exception",
    "tool_truncated",
    "tool_retried",
    "tool_session_lost",
    "trajectory_masked",
)
PROBLEM_FIELD = "retool_tool_problem"
_KEY_OF_STATUS = {
    "ok": "tool_ok",
    "error_exit": "tool_error",
    "bad_input": "tool_error",
    "timeout": "tool_timeout",
    "sandbox_error": "tool_unavailable",
    "unavailable": "tool_unavailable",
    "tool_exception": "tool_exception",
}
# (key, the metric that sets it)
_FLAGS = (("tool_truncated", "truncated_chars"), ("tool_retried", "retries"), ("tool_session_lost", "session_lost"))


def record(extra_fields: MutableMapping[str, Any], metrics: Mapping[str, Any], problem: str | None = None) -> None:
    """Count one call, described by the tool's metrics (``status``, ``truncated_chars``), into ``extra_fields``;
    ``problem`` (why a call got no answer) is kept when it is the trajectory's first."""
    status = metrics.get("status")
    if status not in _KEY_OF_STATUS:
        raise ValueError(f"unknown tool status {status!r}; expected one of {sorted(_KEY_OF_STATUS)}")
    counted = ["tool_calls", _KEY_OF_STATUS[status]]
    counted += [key for key, metric in _FLAGS if metrics.get(metric, 0) > 0]
    for key in counted:
        extra_fields[key] = int(extra_fields.get(key, 0)) + 1
    if problem and PROBLEM_FIELD not in extra_fields:
        extra_fields[PROBLEM_FIELD] = problem


def masked_cause(extra_fields: Mapping[str, Any]) -> str | None:
    """The failure cause of a trajectory some of whose calls got no answer (retool.failures.causes), else None.
    A tool that raised is the more specific finding when both happened."""
    if int(extra_fields.get("tool_exception") or 0) > 0:
        return "tool_exception"
    if int(extra_fields.get("tool_unavailable") or 0) > 0:
        return "sandbox_unavailable"
    return None


def outcome_fields(extra_info: Mapping[str, Any]) -> dict[str, float]:
    """Every outcome count of a trajectory as a float (verl stacks reward fields into numeric columns)."""
    return {key: float(extra_info.get(key) or 0) for key in OUTCOME_KEYS}
