"""Answer matchers of the reward: which final answer a decoded trajectory gives, and whether it is right.

``solution_str`` is the whole decoded response verl scores: every assistant turn and every tool response, decoded
with ``skip_special_tokens=True``, so with Qwen's hermes template it reads like
``text <tool_call>{json}</tool_call>user <tool_response>out</tool_response>assistant final text``.

- ``strict_box`` (the reference run's): verl's ``math_dapo`` rule with strict box verification, as verl's
  recipe/retool calls it. Keep the last 300 characters of ``solution_str``, then the last 100; take the last
  ``\\boxed{`` there with its matching brace; the raw content (no strip, no normalisation) must equal the ground
  truth string exactly. A box anywhere in those 100 characters counts, also one inside a tool output;
  ``\\boxed{034}`` is wrong for "34", and a box starting more than 100 characters before the end is missed.
- ``normalized`` (the improved profile's): the last ``\\boxed{...}`` / ``\\boxed x`` / ``\\fbox{...}`` of the final
  assistant text (after the last ``</tool_response>``, with ``<tool_call>``, ``<tool_response>``, ``<code>``,
  ``<interpreter>`` blocks and closed ``` fences removed), compared after normalisation: integers, decimals and
  fractions as rationals, ``x=``, degree signs, units, ``$``, ``%`` and enclosing parentheses dropped.

Standard library only: the reward imports it inside verl's reward workers.
"""

from __future__ import annotations

import re
from fractions import Fraction

ANSWER_MATCHERS = ("strict_box", "normalized")
# verl's math_dapo.compute_score keeps the last 300 characters; its strict-box check then keeps the last 100
STRICT_BOX_TAIL_CHARS = 300
STRICT_BOX_WINDOW = 100

# ---------------------------------------------------------------------------------------------------------------
# strict_box
# ---------------------------------------------------------------------------------------------------------------

_STRICT_BOX_OPEN = "\\boxed{"


def strict_box_answer(solution_str: str) -> str | None:
    """The answer verl's strict-box check extracts, or None when it finds none.

    Only the last ``STRICT_BOX_WINDOW`` characters are searched; the last ``\\boxed{`` there is taken with its
    matching ``}`` (every brace counts, escaped or not). If that box is not closed the result is None, even when an
    earlier box is. The content is returned as is: no strip, no normalisation.
    """
    window = solution_str[-STRICT_BOX_TAIL_CHARS:][-STRICT_BOX_WINDOW:]
    start = window.rfind(_STRICT_BOX_OPEN)
    if start < 0:
        return None
    return _braced_content(window, start + len(_STRICT_BOX_OPEN) - 1)


def strict_box_match(solution_str: str, ground_truth: str) -> tuple[bool, str | None]:
    """(correct, extracted answer) under strict_box: exact string equality with the ground truth."""
    pred = strict_box_answer(solution_str)
    return pred is not None and pred == ground_truth, pred


# ---------------------------------------------------------------------------------------------------------------
# normalized
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
    "mm",
    "cm",
    "km",
    "meters",
    "metres",
    "meter",
    "inches",
    "inch",
    "feet",
    "foot",
    "ft",
    "miles",
    "mph",
    "kg",
    "grams",
    "pounds",
    "lbs",
    "degrees",
    "degree",
    "units",
    "unit",
    "dollars",
    "cents",
    "hours",
    "hrs",
    "minutes",
    "seconds",
    "days",
    "weeks",
    "years",
    "ways",
    "points",
    "students",
    "people",
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
