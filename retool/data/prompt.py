"""The user-prompt text of SFT rows, RL training rows and validation rows, in two named styles.

``verl_retool`` (the default) is the text of verl's recipe/retool converters, which the reference run used
(docs/reference.md, "Prompts"):
- RL and validation rows: the source's own prompt text, unchanged, followed by VERL_RETOOL_ANSWER_FORMAT (a newline
  and "The answer format must be: \\boxed{'The final answer goes here.'}"). For DAPO-Math-17k the source text is the
  whole user message, DAPO's "Answer:" instruction included; for AIME it is the problem text.
- SFT rows: the ReTool-SFT user turn after its ``*user question:*`` marker with the ``<answer>``/``</answer>`` tags
  removed and the ends stripped, so the trailing "Remember to place the final answer in the last part using the
  format: ... \\boxed{{'The final answer goes here.'}}" line stays (doubled braces and all, as in the data).

``qwen_boxed`` (the improved profile's): the bare problem or question, a blank line, then ANSWER_INSTRUCTION (the
boxed-answer instruction of Qwen's math models), for SFT, RL and validation alike. A model then sees one prompt
shape at every stage; the CPU smoke run uses it because its tiny model cannot bridge the reference's two shapes
(retool.smoke.build).
"""

from __future__ import annotations

PROMPT_STYLES = ("verl_retool", "qwen_boxed")
DEFAULT_PROMPT_STYLE = "verl_retool"

# Appended by verl's recipe/retool to every RL and validation prompt (the string starts with the newline).
VERL_RETOOL_ANSWER_FORMAT = "\nThe answer format must be: \\boxed{'The final answer goes here.'}"
# The qwen_boxed style's instruction, after a blank line.
ANSWER_INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{}."


def check_prompt_style(style: str) -> str:
    """Return ``style`` if it is one of PROMPT_STYLES, else raise ValueError listing them."""
    if style not in PROMPT_STYLES:
        raise ValueError(f"prompt style must be one of {list(PROMPT_STYLES)}, got {style!r}")
    return style


def qwen_boxed_prompt(problem: str) -> str:
    """The qwen_boxed style: the problem (ends stripped), a blank line, then ANSWER_INSTRUCTION."""
    return f"{problem.strip()}\n\n{ANSWER_INSTRUCTION}"


def verl_retool_prompt(source_text: str) -> str:
    """The verl_retool style for RL and validation rows: the source text as it is, then VERL_RETOOL_ANSWER_FORMAT."""
    return f"{source_text}{VERL_RETOOL_ANSWER_FORMAT}"
