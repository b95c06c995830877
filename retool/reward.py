"""Reward for ReTool: the reference recipe's strict-box correctness plus tool-use shaping.

verl calls ``compute_score`` once per trajectory (``reward.custom_reward_function.path=pkg://retool.reward``).
``solution_str`` is the whole decoded response: every assistant turn and every tool response, decoded with
``skip_special_tokens=True``, so with Qwen's hermes template it reads like
``text <tool_call>{json}</tool_call>user <tool_response>out</tool_response>assistant final text``.

Two answer matchers (see docs/tool_and_reward.md for the table); both are computed for every trajectory:

- ``reference`` (default, reproduces the reference run): verl's ``math_dapo`` strict-box rule as the reference
  recipe calls it. Keep the last 300 characters of ``solution_str``, then the last 100; take the last
  ``\\boxed{`` there with its matching brace; the raw content (no strip, no normalisation) must equal the ground
  truth string exactly. A box anywhere in those 100 characters counts, also one inside a tool output;
  ``\\boxed{034}`` is wrong for "34", and a box starting more than 100 characters before the end is
  missed.
- ``normalized`` (the recipe's own matcher): the last ``\\boxed{...}`` / ``\\boxed x`` / ``\\fbox{...}`` of the
  final assistant text (after the last ``</tool_response>``, with ``<tool_call>``, ``<tool_response>``,
  ``<code>``, ``<interpreter>`` blocks and closed ``` fences removed), compared after normalisation: integers,
  decimals and fractions as rationals, ``x=``, degree signs, units, ``$``, ``%`` and enclosing parentheses dropped.

The reward kwarg ``answer_match`` (verl forwards ``reward.custom_reward_function.reward_kwargs``) picks the matcher
behind ``score``/``acc``/``pred``; ``acc_reference`` and ``acc_normalized`` are always both reported.

Score: +1 correct, -1 wrong or no answer, then the ``tool_shaping`` rule:
``seed`` (default, the reference recipe) subtracts 0.4 when ``(num_turns - 2) // 2 == 0`` (no tool round);
``verl`` gives a wrong answer ``min(-0.6, -1 + 0.1 * tool_rounds)``; ``none`` leaves the base score.
``num_turns`` comes from ``extra_info["num_turns"]`` (verl's ToolAgentLoop: 2 * tool_rounds + 2). When it is
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

from retool.tool_outcomes import outcome_fields

logger = logging.getLogger(__name__)

SHAPING_RULES = ("seed", "verl", "none")
DEFAULT_SHAPING = "seed"
ANSWER_MATCHERS = ("reference", "normalized")
DEFAULT_ANSWER_MATCH = "reference"
NO_TOOL_PENALTY = 0.4  # the reference recipe's rule
# verl's math_dapo.compute_score keeps the last 300 characters; its strict-box check then keeps the last 100
REFERENCE_TAIL_CHARS = 300
REFERENCE_BOX_WINDOW = 100
_OWN_KWARGS = frozenset({"tool_shaping", "answer_match"})
# kwargs verl itself may pass to a custom reward function; anything else unknown is reported once
_VERL_KWARGS = frozenset({"reward_router_address", "reward_model_tokenizer"})

_warned: set[str] = set()


def _warn_once(key: str, message: str) -> None:
    if key not in _warned:
        _warned.add(key)
        logger.warning(message)


# ---------------------------------------------------------------------------------------------------------------
# The reference rule (strict box)
# ---------------------------------------------------------------------------------------------------------------

_REFERENCE_OPEN = "\\boxed{"


def reference_boxed_answer(solution_str: str) -> str | None:
    """The answer the reference's strict-box check extracts, or None when it finds none.

    Only the last ``REFERENCE_BOX_WINDOW`` characters are searched; the last ``\\boxed{`` there is taken with its
    matching ``}`` (every brace counts, escaped or not). If that box is not closed the result is None, even when an
    earlier box is. The content is returned as is: no strip, no normalisation.
    """
    window = solution_str[-REFERENCE_TAIL_CHARS:][-REFERENCE_BOX_WINDOW:]
    start = window.rfind(_REFERENCE_OPEN)
    if start < 0:
        return None
    return _braced_content(window, start + len(_REFERENCE_OPEN) - 1)


def reference_match(solution_str: str, ground_truth: str) -> tuple[bool, str | None]:
    """(correct, extracted answer) under the reference rule: exact string equality with the ground truth."""
    pred = reference_boxed_answer(solution_str)
    return pred is not None and pred == ground_truth, pred


# ---------------------------------------------------------------------------------------------------------------
# The normalized matcher
# ---------------------------------------------------------------------------------------------------------------

# Regions whose text is not an answer. One alternation so re.sub scans left to right and a block opened inside
# another (a fence inside a tool call) is consumed with its parent. An unclosed tag block runs to the end of the
# text (a truncated tool call); an unmatched ``` fence is left alone, so one stray fence in prose cannot hide the
# final answer.
_HIDDEN = re.compile(
    r"<tool_call>.*?(?:</tool_call>|\Z)"
    r"|<tool_response>.*?(?:</tool_response>|\Z)"
    r"|<code>.*?(?:</code>|\Z)"
    r"|<interpreter>.*?(?:</interpreter>|\Z)"
    r"|```.*?```",
    re.DOTALL,
)
_BOX_COMMAND = re.compile(r"\\(?:boxed|fbox)(?![A-Za-z])\s*")
_BARE_BOX_ARGUMENT = re.compile(r"[^\s${}]+")  # \boxed 5
_WRAPPERS = re.compile(r"\\(?:text|textbf|textrm|mathrm|mathbf|mbox)\s*\{([^{}]*)\}")
_NUMBER = r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)"
_FRAC = re.compile(rf"([+-]?)\\frac\{{({_NUMBER})\}}\{{({_NUMBER})\}}")
_FRAC_SHORT = re.compile(r"([+-]?)\\frac(\d)(\d)")  # \frac12
_SLASH = re.compile(rf"({_NUMBER})/({_NUMBER})")
_THOUSANDS = re.compile(r"[+-]?\d{1,3}(?:,\d{3})+(?:\.\d+)?")
_DEGREES = ("^{\\circ}", "^\\circ", "\u00b0", "\\degree")
_VARIABLE_PREFIX = re.compile(r"\\?[A-Za-z]+(?:_\{?[A-Za-z0-9]+\}?)?=")  # n=, x_1=, \theta=
# a trailing \text{ cm} (letters only) after a value
_TEXT_UNIT = re.compile(
    r"(?P<value>.*?\S)\s*\\(?:text|textrm|mathrm|mbox)\s*\{\s*[A-Za-z][A-Za-z\s.]*\}"
    r"\s*(?:\^\s*\{?\s*[23]\s*\}?)?\s*\.?\s*",
    re.DOTALL,
)
_UNIT_WORDS = (
    "mm", "cm", "km", "meters", "metres", "meter", "inches", "inch", "feet", "foot", "ft", "miles", "mph",
    "kg", "grams", "pounds", "lbs", "degrees", "degree", "units", "unit", "dollars", "cents", "hours", "hrs",
    "minutes", "seconds", "days", "weeks", "years", "ways", "points", "students", "people",
)
_UNIT_SUFFIX = re.compile(rf"(.+?)(?:\\?%|(?:{'|'.join(_UNIT_WORDS)})(?:\^\{{?[23]\}}?)?)")


def _braced_content(text: str, open_index: int) -> str | None:
    """Text between ``text[open_index] == "{"`` and its matching ``}``; None when it is never closed."""
    depth = 0
    for i in range(open_index, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return text[open_index + 1 : i]
    return None


def final_assistant_text(solution_str: str) -> str:
    """The part of a decoded trajectory that can hold the answer: after the last tool response, blocks removed."""
    _, _, tail = solution_str.rpartition("</tool_response>")
    return _HIDDEN.sub(" ", tail)


def extract_boxed_answer(text: str) -> str | None:
    """Content of the last closed ``\\boxed{...}`` / ``\\fbox{...}`` (nested braces kept) or ``\\boxed x``.

    None if there is none; an unclosed box is skipped, so an earlier closed one still counts.
    """
    answer = None
    for match in _BOX_COMMAND.finditer(text):
        start = match.end()
        if start < len(text) and text[start] == "{":
            content = _braced_content(text, start)
        else:
            bare = _BARE_BOX_ARGUMENT.match(text, start)
            content = bare.group(0).rstrip(".,;:") if bare else None
            content = content or None
        if content is not None:
            answer = content.strip()
    return answer


def normalize_answer(answer: str) -> str:
    """Canonical text of an answer: no $, spaces, \\text{} wrappers, degree signs, ``x=`` prefix, thousands commas
    or trailing period."""
    s = answer.strip()
    for _ in range(3):  # wrappers can nest: \text{\textbf{5}}
        s = _WRAPPERS.sub(r"\1", s)
    for token in ("\\$", "$", "\\!", "\\,", "\\;", "\\:", "\\ ", "\\left", "\\right"):
        s = s.replace(token, "")
    s = s.replace("{,}", ",").replace("\u2212", "-").replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")
    s = re.sub(r"\s+", "", s).rstrip(".")
    for degree in _DEGREES:
        s = s.replace(degree, "")
    if s.count("=") == 1:
        prefix = _VARIABLE_PREFIX.match(s)
        if prefix and prefix.end() < len(s):
            s = s[prefix.end() :]
    if _THOUSANDS.fullmatch(s):
        s = s.replace(",", "")
    return s


def _as_rational(s: str) -> Fraction | None:
    """Value of a normalized integer, decimal or simple fraction; None for anything else."""
    if _THOUSANDS.fullmatch(s):
        s = s.replace(",", "")
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


def _number_value(s: str) -> Fraction | None:
    """Value of a normalized answer that is a number, possibly in parentheses or followed by a unit or %."""
    value = _as_rational(s)
    if value is None and len(s) > 2 and s[0] == "(" and s[-1] == ")":
        value = _as_rational(s[1:-1])
    if value is None:
        m = _UNIT_SUFFIX.fullmatch(s)
        if m:
            value = _as_rational(m.group(1))
    return value


def canonical_answer(answer: str) -> str:
    """One spelling per value ("025" -> "25", "\\dfrac{2}{4}" -> "1/2", "25\\text{ cm}" -> "25"), so equal
    answers vote together."""
    unit = _TEXT_UNIT.fullmatch(answer)
    if unit and _number_value(normalize_answer(unit.group("value"))) is not None:
        answer = unit.group("value")
    s = normalize_answer(answer)
    value = _number_value(s)
    return s if value is None else str(value)


def answers_match(pred: str, ground_truth: str) -> bool:
    """True when two answers are equal as rationals, or else as normalized strings."""
    return canonical_answer(pred) == canonical_answer(ground_truth)


# ---------------------------------------------------------------------------------------------------------------
# Ground truth, turns, shaping, the verl entry point
# ---------------------------------------------------------------------------------------------------------------


def ground_truth_text(ground_truth: Any, data_source: str = "") -> str:
    """The ground truth as the string both matchers compare with.

    str as is (the reference compares it unchanged); integers (also numpy) as digits; floats (also numpy) with an
    integral value as the integer ("25.0" -> "25"), other finite floats with ``str``. bool and anything else raise
    TypeError; NaN and infinities raise ValueError.
    """
    if isinstance(ground_truth, str):
        return str(ground_truth)
    if isinstance(ground_truth, bool) or not isinstance(ground_truth, numbers.Real):
        raise TypeError(
            f"ground_truth must be a str or a number, got {type(ground_truth).__name__} for {data_source!r}"
        )
    if isinstance(ground_truth, numbers.Integral):
        return str(int(ground_truth))
    value = float(ground_truth)
    if not math.isfinite(value):
        raise ValueError(f"ground_truth must be finite, got {ground_truth!r} for {data_source!r}")
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
        raise ValueError(
            f"{name} must be one of {allowed}, got {value!r}; set reward.custom_reward_function.reward_kwargs.{name}"
        )
    return value


def shape_score(base: float, correct: bool, num_turns: int | None, rule: str) -> float:
    """Apply a tool-use shaping rule to the base score (+1/-1); an unknown ``num_turns`` leaves it unchanged.

    ``seed`` is the reference recipe's test: no tool call when ``(num_turns - 2) // 2 == 0``, i.e. num_turns 2 or
    3 (so 0 and 1 are not penalised there either).
    """
    _check_choice("tool_shaping", rule, SHAPING_RULES)
    tool_rounds = tool_rounds_from_num_turns(num_turns)
    if tool_rounds is None or rule == "none":
        return base
    if rule == "seed":
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
    score (shaped reward), acc (1.0/0.0 under the chosen matcher), acc_reference and acc_normalized (1.0/0.0
    under each matcher, whatever the mode), pred (the chosen matcher's answer, "" when none; majority votes use
    it: the raw boxed text under ``reference``, the canonical answer under ``normalized``), has_answer (1.0/0.0),
    num_turns, tool_rounds, used_tool (NaN when num_turns is unknown), and the code tool's outcome counts
    ``retool.tool_outcomes.OUTCOME_KEYS`` (tool_calls, tool_ok, tool_error, ...; 0 without tool calls).
    Keywords: ``answer_match`` ("reference" default, "normalized") and ``tool_shaping`` ("seed" default, "verl",
    "none"); verl's own kwargs are ignored, other unknown ones reported once.
    """
    if not isinstance(solution_str, str):
        raise TypeError(f"solution_str must be a str, got {type(solution_str).__name__}")
    truth = ground_truth_text(ground_truth, data_source)
    extra_info = extra_info or {}
    truth_canonical = canonical_answer(truth)
    if not truth.strip() or not truth_canonical:
        raise ValueError(
            f"empty ground_truth (data_source={data_source!r}, index={extra_info.get('index')!r}): "
            "fix reward_model.ground_truth in the parquet file"
        )
    mode = _check_choice("answer_match", kwargs.get("answer_match", DEFAULT_ANSWER_MATCH), ANSWER_MATCHERS)
    rule = _check_choice("tool_shaping", kwargs.get("tool_shaping", DEFAULT_SHAPING), SHAPING_RULES)
    unknown = set(kwargs) - _VERL_KWARGS - _OWN_KWARGS
    if unknown:
        _warn_once("kwargs", f"retool.reward.compute_score ignores unknown kwargs {sorted(unknown)}")

    reference_correct, reference_pred = reference_match(solution_str, truth)
    boxed = extract_boxed_answer(final_assistant_text(solution_str))
    normalized_pred = None if boxed is None else canonical_answer(boxed)
    normalized_correct = normalized_pred is not None and normalized_pred == truth_canonical
    if mode == "reference":
        correct, pred = reference_correct, reference_pred
    else:
        correct, pred = normalized_correct, normalized_pred

    num_turns = extra_info.get("num_turns")
    tool_rounds = tool_rounds_from_num_turns(num_turns)
    if tool_rounds is None:
        _warn_once(
            "num_turns",
            "extra_info['num_turns'] is missing, so tool shaping is off and turn metrics are NaN; "
            "use reward.reward_manager.name=naive (it forwards num_turns) with the tool agent loop",
        )
    return {
        "score": shape_score(1.0 if correct else -1.0, correct, num_turns, rule),
        "acc": 1.0 if correct else 0.0,
        "acc_reference": 1.0 if reference_correct else 0.0,
        "acc_normalized": 1.0 if normalized_correct else 0.0,
        "pred": pred if pred is not None else "",
        "has_answer": 0.0 if pred is None else 1.0,
        "num_turns": math.nan if tool_rounds is None else float(num_turns),
        "tool_rounds": math.nan if tool_rounds is None else float(tool_rounds),
        "used_tool": math.nan if tool_rounds is None else float(tool_rounds > 0),
        **outcome_fields(extra_info),  # the code tool's per-call outcomes (retool.tool_outcomes)
    }
