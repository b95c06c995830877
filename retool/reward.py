"""Reward for ReTool: strict boxed-answer correctness plus tool-use shaping.

verl calls ``compute_score`` once per trajectory (``reward.custom_reward_function.path=pkg://retool.reward``).
``solution_str`` is the whole decoded response: every assistant turn and every tool response, decoded with
``skip_special_tokens=True``, so with Qwen's hermes template it reads like
``text <tool_call>{json}</tool_call>user <tool_response>out</tool_response>assistant final text``.

Contract (see docs/tool_and_reward.md for the table):
- The answer is the last ``\\boxed{...}`` of the final assistant text: text after the last ``</tool_response>``,
  with ``<tool_call>``, ``<tool_response>``, ``<code>``, ``<interpreter>`` blocks and ``` fences removed
  (an answer printed by code or hidden in a tool call is not an answer).
- Correct +1, wrong or missing -1. Integers compare as integers ("025" == "25"), fractions and decimals as
  rationals (``\\frac{1}{2}`` == ``1/2`` == ``0.5``), anything else as normalized strings.
- Tool shaping, chosen by the ``tool_shaping`` kwarg (verl forwards ``reward.custom_reward_function.reward_kwargs``):
  ``seed`` (default) subtracts 0.4 when no tool round ran; ``verl`` gives a wrong answer
  ``min(-0.6, -1 + 0.1 * tool_rounds)``; ``none`` leaves the base score.
- Tool rounds come from ``extra_info["num_turns"]`` (= 2 * tool_rounds + 2 in verl's ToolAgentLoop). When it is
  missing the base score is returned unshaped and the turn fields are NaN (visible in metrics, never a fake 0).
This module must stay importable without verl or torch.
"""

from __future__ import annotations

import logging
import math
import numbers
import re
from fractions import Fraction
from typing import Any

logger = logging.getLogger(__name__)

SHAPING_RULES = ("seed", "verl", "none")
DEFAULT_SHAPING = "seed"
NO_TOOL_PENALTY = 0.4  # the seed recipe's rule
# kwargs verl itself may pass to a custom reward function; anything else unknown is reported once
_VERL_KWARGS = frozenset({"reward_router_address", "reward_model_tokenizer"})

# Regions whose text is not an answer. One alternation so re.sub scans left to right and a block opened inside
# another (a fence inside a tool call) is consumed with its parent. An unclosed block runs to the end of the text.
_HIDDEN = re.compile(
    r"<tool_call>.*?(?:</tool_call>|\Z)"
    r"|<tool_response>.*?(?:</tool_response>|\Z)"
    r"|<code>.*?(?:</code>|\Z)"
    r"|<interpreter>.*?(?:</interpreter>|\Z)"
    r"|```.*?(?:```|\Z)",
    re.DOTALL,
)
_BOXED = re.compile(r"\\boxed\s*\{")
_WRAPPERS = re.compile(r"\\(?:text|textbf|textrm|mathrm|mathbf|mbox)\s*\{([^{}]*)\}")
_NUMBER = r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)"
_FRAC = re.compile(rf"([+-]?)\\frac\{{({_NUMBER})\}}\{{({_NUMBER})\}}")
_FRAC_SHORT = re.compile(r"([+-]?)\\frac(\d)(\d)")  # \frac12
_SLASH = re.compile(rf"({_NUMBER})/({_NUMBER})")
_THOUSANDS = re.compile(r"[+-]?\d{1,3}(?:,\d{3})+(?:\.\d+)?")

_warned: set[str] = set()


def _warn_once(key: str, message: str) -> None:
    if key not in _warned:
        _warned.add(key)
        logger.warning(message)


def final_assistant_text(solution_str: str) -> str:
    """The part of a decoded trajectory that can hold the answer: after the last tool response, blocks removed."""
    _, _, tail = solution_str.rpartition("</tool_response>")
    return _HIDDEN.sub(" ", tail)


def extract_boxed_answer(text: str) -> str | None:
    """Content of the last ``\\boxed{...}`` in ``text`` (nested braces kept), or None if there is no closed box."""
    answer = None
    for match in _BOXED.finditer(text):
        depth, start = 1, match.end()
        for i in range(start, len(text)):
            if text[i] == "{":
                depth += 1
            elif text[i] == "}":
                depth -= 1
                if depth == 0:
                    answer = text[start:i].strip()
                    break
    return answer


def normalize_answer(answer: str) -> str:
    """Canonical text of an answer: no $, spaces, \\text{} wrappers, thousands commas or trailing period."""
    s = answer.strip()
    for _ in range(3):  # wrappers can nest: \text{\textbf{5}}
        s = _WRAPPERS.sub(r"\1", s)
    for token in ("\\$", "$", "\\!", "\\,", "\\;", "\\:", "\\ ", "\\left", "\\right"):
        s = s.replace(token, "")
    s = s.replace("{,}", ",").replace("\u2212", "-").replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")
    s = re.sub(r"\s+", "", s).rstrip(".")
    if _THOUSANDS.fullmatch(s):
        s = s.replace(",", "")
    return s


def _as_rational(s: str) -> Fraction | None:
    """Value of a normalized integer, decimal or simple fraction; None for anything else."""
    try:
        if re.fullmatch(_NUMBER, s):
            return Fraction(s)
        for pattern in (_FRAC, _FRAC_SHORT):
            m = pattern.fullmatch(s)
            if m:
                value = Fraction(m.group(2)) / Fraction(m.group(3))
                return -value if m.group(1) == "-" else value
        m = _SLASH.fullmatch(s)
        if m:
            return Fraction(m.group(1)) / Fraction(m.group(2))
    except ZeroDivisionError:
        return None
    return None


def canonical_answer(answer: str) -> str:
    """One spelling per value ("025" -> "25", "\\dfrac{2}{4}" -> "1/2"), so equal answers vote together."""
    s = normalize_answer(answer)
    value = _as_rational(s)
    return s if value is None else str(value)


def answers_match(pred: str, ground_truth: str) -> bool:
    """True when two answers are equal as rationals, or else as normalized strings."""
    return canonical_answer(pred) == canonical_answer(ground_truth)


def tool_rounds_from_num_turns(num_turns: Any) -> int | None:
    """Executed tool rounds from verl's ``num_turns`` (2k+2 after k rounds); None when unknown.

    0 or 1 (padding rows, single-turn loops) count as no tool round. Raises ValueError for a value that is not a
    non-negative integer, since that means the caller passed something else under the key.
    """
    if num_turns is None:
        return None
    if isinstance(num_turns, bool) or not isinstance(num_turns, numbers.Real) or num_turns != int(num_turns):
        raise ValueError(f"extra_info['num_turns'] must be a non-negative integer, got {num_turns!r}")
    if num_turns < 0:
        raise ValueError(f"extra_info['num_turns'] must be a non-negative integer, got {num_turns!r}")
    return max(0, (int(num_turns) - 2) // 2)


def shape_score(base: float, correct: bool, tool_rounds: int | None, rule: str) -> float:
    """Apply a tool-use shaping rule to the base score (+1/-1); unknown tool rounds leave it unchanged."""
    if rule not in SHAPING_RULES:
        raise ValueError(
            f"tool_shaping must be one of {SHAPING_RULES}, got {rule!r}; "
            "set reward.custom_reward_function.reward_kwargs.tool_shaping"
        )
    if tool_rounds is None or rule == "none":
        return base
    if rule == "seed":
        return base - NO_TOOL_PENALTY if tool_rounds == 0 else base
    return base if correct else min(-0.6, base + 0.1 * tool_rounds)  # verl's original retool rule


def compute_score(
    data_source: str,
    solution_str: str,
    ground_truth: str | int,
    extra_info: dict | None = None,
    **kwargs: Any,
) -> dict[str, float | str]:
    """Score one trajectory; the same rule for every data_source.

    Returns a dict with the same keys for every call (verl stacks them into columns):
    score (shaped reward), acc (1.0/0.0), pred (canonical extracted answer, "" when none; majority votes use it),
    has_answer (1.0/0.0), num_turns, tool_rounds, used_tool (NaN when num_turns is unknown).
    Keyword ``tool_shaping`` picks the rule ("seed" default, "verl", "none"); other verl kwargs are ignored.
    """
    if not isinstance(solution_str, str):
        raise TypeError(f"solution_str must be a str, got {type(solution_str).__name__}")
    if isinstance(ground_truth, bool) or not isinstance(ground_truth, (str, int)):
        raise TypeError(f"ground_truth must be a str or int, got {type(ground_truth).__name__} for {data_source!r}")
    extra_info = extra_info or {}
    truth = canonical_answer(str(ground_truth))
    if not truth:
        raise ValueError(
            f"empty ground_truth (data_source={data_source!r}, index={extra_info.get('index')!r}): "
            "fix reward_model.ground_truth in the parquet file"
        )
    rule = kwargs.get("tool_shaping", DEFAULT_SHAPING)
    unknown = set(kwargs) - _VERL_KWARGS - {"tool_shaping"}
    if unknown:
        _warn_once("kwargs", f"retool.reward.compute_score ignores unknown kwargs {sorted(unknown)}")

    boxed = extract_boxed_answer(final_assistant_text(solution_str))
    pred = None if boxed is None else canonical_answer(boxed)
    correct = pred is not None and pred == truth
    base = 1.0 if correct else -1.0

    num_turns = extra_info.get("num_turns")
    tool_rounds = tool_rounds_from_num_turns(num_turns)
    if tool_rounds is None:
        _warn_once(
            "num_turns",
            "extra_info['num_turns'] is missing, so tool shaping is off and turn metrics are NaN; "
            "use reward.reward_manager.name=naive (it forwards num_turns) with the tool agent loop",
        )
    return {
        "score": shape_score(base, correct, tool_rounds, rule),
        "acc": 1.0 if correct else 0.0,
        "pred": pred if pred is not None else "",
        "has_answer": 0.0 if pred is None else 1.0,
        "num_turns": math.nan if tool_rounds is None else float(num_turns),
        "tool_rounds": math.nan if tool_rounds is None else float(tool_rounds),
        "used_tool": math.nan if tool_rounds is None else float(tool_rounds > 0),
    }
