"""Reward for ReTool: a correctness score plus tool-use shaping, as verl's custom reward function.

verl calls ``compute_score`` once per trajectory (``reward.custom_reward_function.path=pkg://retool.reward``) with
the decoded response (retool.answers describes it and the two answer matchers). Both matchers are computed for
every trajectory; the reward kwarg ``answer_match`` (verl forwards ``reward.custom_reward_function.reward_kwargs``)
picks the one behind ``score``/``acc``/``pred``; ``acc_strict_box`` and ``acc_normalized`` are always both reported.

Score: +1 correct, -1 wrong or no answer, then the ``tool_shaping`` rule:
``no_tool_penalty`` (the reference run's) subtracts 0.4 when ``(num_turns - 2) // 2 == 0`` (no tool round);
``tool_round_credit`` (verl's original recipe/retool rule) gives a wrong answer ``min(-0.6, -1 + 0.1 * tool_rounds)``;
``none`` leaves the base score (correctness only).
``num_turns`` comes from ``extra_info["num_turns"]`` (verl's ToolAgentLoop: 2 * tool_rounds + 2). A reward manager
that does not forward it (verl's ``dapo`` manager drops it) would switch the shaping off silently, so a missing
``num_turns`` stops the run at its first scored batch with a message (MissingNumTurns).
This module must stay importable without verl or torch.
"""

from __future__ import annotations

import logging
import math
import numbers
from typing import Any

from retool.answers import (
    ANSWER_MATCHERS,
    canonical_answer,
    extract_boxed_answer,
    final_assistant_text,
    strict_box_match,
)
from retool.failures.causes import BadGroundTruth, BadRewardSetting, ConfigurationError, MissingGroundTruth
from retool.tool_outcomes import outcome_fields

logger = logging.getLogger(__name__)

SHAPING_RULES = ("no_tool_penalty", "tool_round_credit", "none")
DEFAULT_SHAPING = "no_tool_penalty"
DEFAULT_ANSWER_MATCH = "strict_box"
NO_TOOL_PENALTY = 0.4  # the reference run's rule
_OWN_KWARGS = frozenset({"tool_shaping", "answer_match"})
# kwargs verl itself may pass to a custom reward function; anything else unknown is reported once
_VERL_KWARGS = frozenset({"reward_router_address", "reward_model_tokenizer"})

_warned: set[str] = set()


class MissingNumTurns(ConfigurationError, ValueError):
    """The reward manager did not forward ``num_turns``: tool shaping and the turn metrics would be wrong."""


def _warn_once(key: str, message: str) -> None:
    if key not in _warned:
        _warned.add(key)
        logger.warning(message)


# ---------------------------------------------------------------------------------------------------------------
# Ground truth, turns, shaping, the verl entry point
# ---------------------------------------------------------------------------------------------------------------


def ground_truth_text(ground_truth: Any, data_source: str = "") -> str:
    """The ground truth as the string both matchers compare with.

    str as is (the reference compares it unchanged); integers (also numpy) as digits; floats (also numpy) with an
    integral value as the integer ("25.0" -> "25"), other finite floats with ``str``. bool and anything else raise
    BadGroundTruth (a TypeError); NaN and infinities raise MissingGroundTruth (a ValueError). Both are configuration
    errors (retool.failures.causes): the data is wrong, and the run stops at the first such row.
    """
    if isinstance(ground_truth, str):
        return str(ground_truth)
    if isinstance(ground_truth, bool) or not isinstance(ground_truth, numbers.Real):
        raise BadGroundTruth(
            f"ground_truth must be a str or a number, got {type(ground_truth).__name__} for {data_source!r}: fix "
            "reward_model.ground_truth in the parquet file"
        )
    if isinstance(ground_truth, numbers.Integral):
        return str(int(ground_truth))
    value = float(ground_truth)
    if not math.isfinite(value):
        raise MissingGroundTruth(f"ground_truth must be finite, got {ground_truth!r} for {data_source!r}")
    return str(int(value)) if value.is_integer() else str(ground_truth)


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


def _check_choice(name: str, value: Any, allowed: tuple[str, ...]) -> str:
    if value not in allowed:
        raise BadRewardSetting(
            f"{name} must be one of {allowed}, got {value!r}; set reward.custom_reward_function.reward_kwargs.{name}"
        )
    return value


def shape_score(base: float, correct: bool, num_turns: int | None, rule: str) -> float:
    """Apply a tool-use shaping rule to the base score (+1/-1); an unknown ``num_turns`` leaves it unchanged.

    ``no_tool_penalty`` is the reference run's test: no tool call when ``(num_turns - 2) // 2 == 0``, i.e.
    num_turns 2 or 3 (so 0 and 1 are not penalised there either).
    """
    _check_choice("tool_shaping", rule, SHAPING_RULES)
    tool_rounds = tool_rounds_from_num_turns(num_turns)
    if tool_rounds is None or rule == "none":
        return base
    if rule == "no_tool_penalty":
        return base - NO_TOOL_PENALTY if (int(num_turns) - 2) // 2 == 0 else base
    return base if correct else min(-0.6, base + 0.1 * tool_rounds)  # verl's original retool rule


def compute_score(
    data_source: str,
    solution_str: str,
    ground_truth: str | float,
    extra_info: dict | None = None,
    **kwargs: Any,
) -> dict[str, float | str]:
    """Score one trajectory; the same rule for every data_source.

    Returns a dict with the same keys for every call (verl stacks them into columns):
    score (shaped reward), acc (1.0/0.0 under the chosen matcher), acc_strict_box and acc_normalized (1.0/0.0
    under each matcher, whatever the mode), pred (the chosen matcher's answer, "" when none; majority votes use
    it: the raw boxed text under ``strict_box``, the canonical answer under ``normalized``), has_answer (1.0/0.0),
    num_turns, tool_rounds, used_tool, and the code tool's outcome counts ``retool.tool_outcomes.OUTCOME_KEYS``
    (tool_calls, tool_ok, tool_error, ...; 0 without tool calls).
    Keywords: ``answer_match`` ("strict_box" default, "normalized") and ``tool_shaping`` ("no_tool_penalty"
    default, "tool_round_credit", "none"); verl's own kwargs are ignored, other unknown ones reported once.
    Raises MissingNumTurns when ``extra_info`` has no ``num_turns``.
    """
    if not isinstance(solution_str, str):
        raise TypeError(f"solution_str must be a str, got {type(solution_str).__name__}")
    truth = ground_truth_text(ground_truth, data_source)
    extra_info = extra_info or {}
    truth_canonical = canonical_answer(truth)
    if not truth.strip() or not truth_canonical:
        raise MissingGroundTruth(
            f"empty ground_truth (data_source={data_source!r}, index={extra_info.get('index')!r}): "
            "fix reward_model.ground_truth in the parquet file"
        )
    mode = _check_choice("answer_match", kwargs.get("answer_match", DEFAULT_ANSWER_MATCH), ANSWER_MATCHERS)
    rule = _check_choice("tool_shaping", kwargs.get("tool_shaping", DEFAULT_SHAPING), SHAPING_RULES)
    unknown = set(kwargs) - _VERL_KWARGS - _OWN_KWARGS
    if unknown:
        _warn_once("kwargs", f"retool.reward.compute_score ignores unknown kwargs {sorted(unknown)}")

    strict_correct, strict_pred = strict_box_match(solution_str, truth)
    boxed = extract_boxed_answer(final_assistant_text(solution_str))
    normalized_pred = None if boxed is None else canonical_answer(boxed)
    normalized_correct = normalized_pred is not None and normalized_pred == truth_canonical
    if mode == "strict_box":
        correct, pred = strict_correct, strict_pred
    else:
        correct, pred = normalized_correct, normalized_pred

    num_turns = extra_info.get("num_turns")
    tool_rounds = tool_rounds_from_num_turns(num_turns)
    if tool_rounds is None:
        raise MissingNumTurns(
            f"extra_info has no 'num_turns' (data_source={data_source!r}, keys {sorted(extra_info)}): the reward "
            "manager did not forward the tool agent loop's turn count, so tool shaping and the turn metrics would be "
            "wrong. Use reward.reward_manager.name=naive (the launchers pin it); verl's dapo manager drops num_turns"
        )
    return {
        "score": shape_score(1.0 if correct else -1.0, correct, num_turns, rule),
        "acc": 1.0 if correct else 0.0,
        "acc_strict_box": 1.0 if strict_correct else 0.0,
        "acc_normalized": 1.0 if normalized_correct else 0.0,
        "pred": pred if pred is not None else "",
        "has_answer": 0.0 if pred is None else 1.0,
        "num_turns": float(num_turns),
        "tool_rounds": float(tool_rounds),
        "used_tool": float(tool_rounds > 0),
        **outcome_fields(extra_info),  # the code tool's per-call outcomes (retool.tool_outcomes)
    }
