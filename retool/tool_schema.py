"""The OpenAI function schema of the code_interpreter tool, shared by SFT data and RL rollouts.

SFT rows (``tools`` column) and the RL prompt (rendered by verl from the tool) must show the model the same schema,
so both take it from here, for the tool's behaviour and session mode (retool.tool_settings). Kept free of verl and
torch so data preparation stays light.
"""

from __future__ import annotations

from typing import Any

from retool.constants import TOOL_NAME
from retool.tool_settings import BEHAVIOURS, SESSION_MODES

# (description, `code` parameter description) per behaviour.
_TEXTS = {
    # the reference run's schema (verl recipe/retool/sandbox_fusion_tool_config.yaml, docs/reference.md)
    "verl_retool": ("A tool for executing code.", "The code to execute."),
    "annotated": (
        "Run Python 3 code in a sandbox and return what it prints (stdout, then stderr). "
        "Each call starts a fresh interpreter, so define everything you use. "
        "The value of a final bare expression is printed, as in a Python shell.",
        "The Python code to run.",
    ),
}
# With session_mode per_trajectory the model must know that its earlier calls' state is still there.
_STATEFUL = {
    "verl_retool": (
        "A tool for executing code.",
        "A tool for executing code. Variables, imports and files persist between the calls of one conversation.",
    ),
    "annotated": (
        "Each call starts a fresh interpreter, so define everything you use.",
        "Calls of one conversation share one interpreter: variables, imports and files persist from call to call.",
    ),
}


def tool_schema(behaviour: str = "verl_retool", session_mode: str = "stateless") -> dict[str, Any]:
    """A fresh schema dict (JSON-compatible, safe to mutate) for the tool's behaviour and session mode."""
    if behaviour not in BEHAVIOURS or session_mode not in SESSION_MODES:
        raise ValueError(
            f"no schema for behaviour {behaviour!r} / session_mode {session_mode!r}: behaviour is one of "
            f"{list(BEHAVIOURS)}, session_mode one of {list(SESSION_MODES)}"
        )
    description, code = _TEXTS[behaviour]
    if session_mode == "per_trajectory":
        description = description.replace(*_STATEFUL[behaviour])
    return {
        "type": "function",
        "function": {
            "name": TOOL_NAME,
            "description": description,
            "parameters": {
                "type": "object",
                "properties": {"code": {"type": "string", "description": code}},
                "required": ["code"],
            },
        },
    }
