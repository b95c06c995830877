"""The OpenAI function schema of the code_interpreter tool, shared by SFT data and RL rollouts.

SFT rows (`tools` column) and the RL prompt (rendered by verl from the tool) must show the model the same
schema, so both read it from here. Kept free of verl/torch imports so data preparation stays light.
"""

from __future__ import annotations

import copy
from typing import Any

TOOL_NAME = "code_interpreter"

_SCHEMA: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": TOOL_NAME,
        "description": (
            "Run Python 3 code in a sandbox and return what it prints (stdout, then stderr). "
            "Each call starts a fresh interpreter, so define everything you use. "
            "The value of a final bare expression is printed, as in a Python shell."
        ),
        "parameters": {
            "type": "object",
            "properties": {
                "code": {"type": "string", "description": "The Python code to run."},
            },
            "required": ["code"],
        },
    },
}


def tool_schema() -> dict[str, Any]:
    """A fresh copy of the schema (JSON-compatible dict), safe to mutate."""
    return copy.deepcopy(_SCHEMA)


TOOL_SCHEMA: dict[str, Any] = tool_schema()
