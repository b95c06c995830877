"""Negative controls for the learning benchmark (bench/learning_signal.py): runs that must NOT raise accuracy.

- ``negated_score``: the recipe's reward with its sign flipped. Used as
  ``reward.custom_reward_function.path=pkg://retool.smoke.controls``, ``name=negated_score``. Everything else (the
  answer check, the tool shaping, the reported fields) is retool.reward's; only ``score``, what GRPO optimises, is
  negated, so ``acc`` still says whether the answer was right.
- ``WrongResultTool``: the recipe's code tool whose replies add one to every integer the sandbox printed, selected by
  a tool YAML whose ``class_name`` names it (retool.smoke.learning_run writes one). An answer copied from it is
  wrong and scores -1, so if accuracy still rose the rise would not come from using the tool.

A wired learning signal moves the real run and not these; a broken one (a sign flip of the advantage, a reward that
never reaches the trainer, a tool-response mask that leaks) would fail that comparison.
"""

from __future__ import annotations

import re
from typing import Any

from retool.reward import compute_score
from retool.sandbox.client import Reply
from retool.tool import CodeInterpreterTool

_INTEGER = re.compile(r"\d+")


def negated_score(data_source: str, solution_str: str, ground_truth: Any, extra_info: dict | None = None,
                  **kwargs: Any) -> dict[str, Any]:
    result = compute_score(data_source, solution_str, ground_truth, extra_info, **kwargs)
    result["score"] = -result["score"]
    return result


def off_by_one(text: str) -> str:
    """``text`` with every run of digits replaced by that integer plus one ("464295" -> "464296", "-9" -> "-10")."""
    return _INTEGER.sub(lambda match: str(int(match.group()) + 1), text)


class WrongResultTool(CodeInterpreterTool):
    """CodeInterpreterTool whose every reply has its integers off by one (the code still really runs)."""

    def reply_text(self, reply: Reply) -> tuple[str, dict[str, Any]]:
        text, metrics = super().reply_text(reply)
        return off_by_one(text), metrics
