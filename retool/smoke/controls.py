"""Negative controls for the learning benchmark (bench/learning_signal.py): runs that must NOT raise accuracy.

- ``negated_score``: the recipe's reward with its sign flipped. Used as
  ``reward.custom_reward_function.path=pkg://retool.smoke.controls``, ``name=negated_score``. Everything else (the
  answer check, the tool shaping, the reported fields) is retool.reward's; only ``score``, what GRPO optimises, is
  negated, so ``acc`` still says whether the answer was right.
- ``WrongResultTool``: the recipe's code tool whose replies have every digit the sandbox printed shifted by 5
  (0<->5, 1<->6, ...), selected by a tool YAML whose ``class_name`` names it (retool.smoke.learning_run writes one).
  Every digit of a result is wrong, so no slip of the model (an operand miscopied into the code, one digit of the
  reply miscopied) turns a reply into the right answer: a tool-using answer is right only if the model computes it
  itself, which the smoke's tiny model never does (nor without the tool). No route to a right answer means every
  GRPO group is all -1, advantage 0, no gradient: the policy must stay where SFT left it, tool use included. A
  recipe that rewards calling the tool in itself (shaping left on, an advantage that is not 0 for all-equal groups,
  an extra loss term) moves it.
- ``OffByOneTool``: the replies have every integer plus one. This was the wrong-tool control until it raised tool use
  (issue 26): its reply is one slip from right (an operand one off in the code, ``- 41`` for ``- 40``, or the reply
  copied minus one; runs with it show both), and an answer without the tool never is right, so each right answer
  wins its group for the tool: GRPO rightly credits an informative tool. Kept for
  ``retool.smoke.learning_run --control off_by_one_tool``, to reproduce that; the learning bench does not run it.

A wired learning signal moves the real runs and not the controls; a broken one (a sign flip of the advantage, a
reward that never reaches the trainer, credit for tool calls that do not earn a right answer) fails that comparison.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from retool.reward import compute_score
from retool_sandbox.client import Reply
from retool.tool import CodeInterpreterTool

_INTEGER = re.compile(r"\d+")
_DIGIT = re.compile(r"\d")


def negated_score(
    data_source: str, solution_str: str, ground_truth: Any, extra_info: dict | None = None, **kwargs: Any
) -> dict[str, Any]:
    result = compute_score(data_source, solution_str, ground_truth, extra_info, **kwargs)
    result["score"] = -result["score"]
    return result


def off_by_one(text: str) -> str:
    """``text`` with every run of digits replaced by that integer plus one ("464295" -> "464296", "-9" -> "-10")."""
    return _INTEGER.sub(lambda match: str(int(match.group()) + 1), text)


def shifted_digits(text: str) -> str:
    """``text`` with every digit d replaced by (d + 5) mod 10 ("464295" -> "919740"); its own inverse."""
    return _DIGIT.sub(lambda match: str((int(match.group()) + 5) % 10), text)


class _RewrittenReplyTool(CodeInterpreterTool):
    """CodeInterpreterTool whose reply text goes through ``rewrite`` (the code still really runs)."""

    rewrite: Callable[[str], str]

    def reply_text(self, reply: Reply) -> tuple[str, dict[str, Any]]:
        text, metrics = super().reply_text(reply)
        return type(self).rewrite(text), metrics


class WrongResultTool(_RewrittenReplyTool):
    """Every digit of every reply shifted by 5: no result it gives is right, nor one slip away from right."""

    rewrite = staticmethod(shifted_digits)


class OffByOneTool(_RewrittenReplyTool):
    """Every integer of every reply plus one: wrong, but one slip of the model away from right."""

    rewrite = staticmethod(off_by_one)
