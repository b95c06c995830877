"""The synthetic tool-use task ``synthetic_arith`` for the CPU smoke run.

Each problem is a short arithmetic question on 3-digit numbers ("What is 347 * 829?") whose integer answer is
easy for Python and hard for a tiny model, so the tool is what gets the answer right. The task emits raw rows in
the two layouts the real recipe reads, so the smoke run exercises the real converters:

- SFT rows in the JoeYing/ReTool-SFT layout: one ``messages`` column, a user turn (the ReTool instruction, the
  ``*user question:*`` marker, the question, the boxed-answer reminder with its doubled braces) and ONE assistant
  string interleaving text, ``<code>`` blocks, ``<interpreter>`` output and a final ``<answer>`` block.
  About half of the traces answer without the tool, so a policy trained on them calls the tool only some of the
  time and RL has a tool-use rate to raise.
- RL rows in the BytedTsinghua-SIA/DAPO-Math-17k layout (data_source "math_dapo", the DAPO prompt prefix/suffix,
  string ground truth, UUID index). The RL converter names the curve from its source; callers that want the
  ``synthetic_arith`` curve rename ``data_source`` after conversion (see retool.smoke.build).

The question text is the same in both layouts, so converting both with prompt style ``recipe`` (what
retool.smoke.build does) gives SFT and RL prompts of one shape: question, blank line, boxed-answer instruction.

Everything is a pure function of the seed.
"""

from __future__ import annotations

import random
import uuid
from dataclasses import dataclass
from typing import Any

from retool.data.rl import DAPO_PREFIX, DAPO_SUFFIX

DATA_SOURCE = "synthetic_arith"

# The ReTool-SFT user turn: instruction, marker, question, reminder. The doubled braces are in the real data.
RETOOL_INSTRUCTION = (
    "Solve the following problem step by step. You now have the ability to selectively write executable Python "
    "code to enhance your reasoning process. The Python code will be executed by an external sandbox, and the "
    "output (wrapped in `<interpreter>output_str</interpreter>`) can be returned to aid your reasoning and help "
    "you arrive at the final answer. The Python code should be complete scripts, including necessary imports. \n"
    "Each code snippet is wrapped with `<code>\n```python\ncode snippet\n```\n</code>`.\n"
    "The last part of your response should be in the following format:\n"
    "<answer>\n\\boxed{{'The final answer goes here.'}}\n</answer>\n\n"
)
RETOOL_MARKER = "*user question:*"
RETOOL_REMINDER = (
    "Remember to place the final answer in the last part using the format: \n"
    "<answer>\n\\boxed{{'The final answer goes here.'}}\n</answer>"
)

# The DAPO-Math-17k user turn is DAPO_PREFIX + problem + DAPO_SUFFIX (the converter strips the same texts).
DAPO_DATA_SOURCE = "math_dapo"
DAPO_REWARD_STYLE = "rule-lighteval/MATH_v2"

# (question template, python expression template); operands a, b are 3-digit, c is 2-digit.
_KINDS = (
    ("What is {a} * {b}?", "{a} * {b}"),
    ("What is {a} * {b} + {c}?", "{a} * {b} + {c}"),
    ("What is {a} * {b} - {c}?", "{a} * {b} - {c}"),
)
_TOOL_LEADS = (
    "I will compute this with Python.",
    "Let me use the code interpreter.",
    "This product is easiest to get with code.",
)
_TOOL_OUTROS = ("The code printed {n}.", "So the result is {n}.", "The interpreter gives {n}.")
_NO_TOOL_LEADS = (
    "I will work this out directly.",
    "Let me do the arithmetic by hand.",
    "This can be computed without code.",
)
_NO_TOOL_OUTROS = ("The result is {n}.", "So the answer is {n}.", "That gives {n}.")


@dataclass(frozen=True)
class Problem:
    """One synthetic question; ``expression`` is Python whose value is ``answer``."""

    question: str
    expression: str
    answer: int


def make_problems(n: int, seed: int) -> list[Problem]:
    """Return ``n`` distinct problems (no two share an expression), deterministic in ``seed``."""
    if n < 0:
        raise ValueError(f"number of problems must be >= 0, got {n}")
    rng = random.Random(seed)
    seen: set[str] = set()
    problems: list[Problem] = []
    while len(problems) < n:
        question_t, expression_t = rng.choice(_KINDS)
        values = {"a": rng.randint(100, 999), "b": rng.randint(100, 999), "c": rng.randint(10, 99)}
        expression = expression_t.format(**values)
        if expression in seen:
            continue
        seen.add(expression)
        # eval of our own template over integers: the answer is computed, never hard-coded
        problems.append(Problem(question_t.format(**values), expression, int(eval(expression, {}))))
    return problems


def sft_user_content(question: str) -> str:
    """The ReTool-SFT user turn for ``question``."""
    return f"{RETOOL_INSTRUCTION}{RETOOL_MARKER}\n{question}\n\n{RETOOL_REMINDER}"


def sft_assistant_content(problem: Problem, use_tool: bool, rng: random.Random) -> str:
    """One ReTool-SFT assistant string: text, optionally one code/interpreter round, then the answer block."""
    n = problem.answer
    answer_block = f"<answer>\n\\boxed{{{n}}}\n</answer>"
    if not use_tool:
        return f"{rng.choice(_NO_TOOL_LEADS)} {rng.choice(_NO_TOOL_OUTROS).format(n=n)}\n{answer_block}"
    code = rng.choice((f"print({problem.expression})", f"result = {problem.expression}\nprint(result)"))
    return (
        f"{rng.choice(_TOOL_LEADS)}\n"
        f"<code>\n```python\n{code}\n```\n</code>\n"
        f"<interpreter>\n{n}\n</interpreter>\n"
        f"{rng.choice(_TOOL_OUTROS).format(n=n)}\n{answer_block}"
    )


def sft_rows(problems: list[Problem], seed: int, tool_fraction: float = 0.5) -> list[dict[str, Any]]:
    """Raw ReTool-SFT rows, one per problem; exactly ``round(tool_fraction * len)`` of them call the tool."""
    if not 0.0 <= tool_fraction <= 1.0:
        raise ValueError(f"tool_fraction must be in [0, 1], got {tool_fraction}")
    rng = random.Random(seed)
    n_tool = round(tool_fraction * len(problems))
    uses_tool = [True] * n_tool + [False] * (len(problems) - n_tool)
    rng.shuffle(uses_tool)
    return [
        {
            "messages": [
                {"role": "user", "content": sft_user_content(p.question)},
                {"role": "assistant", "content": sft_assistant_content(p, use, rng)},
            ]
        }
        for p, use in zip(problems, uses_tool)
    ]


def rl_rows(problems: list[Problem], seed: int) -> list[dict[str, Any]]:
    """Raw DAPO-Math-17k rows, one per problem (the real set repeats each problem; the converter can dedupe)."""
    rng = random.Random(seed)
    return [
        {
            "data_source": DAPO_DATA_SOURCE,
            "prompt": [{"content": f"{DAPO_PREFIX}{p.question}{DAPO_SUFFIX}", "role": "user"}],
            "ability": "MATH",
            "reward_model": {"ground_truth": str(p.answer), "style": DAPO_REWARD_STYLE},
            "extra_info": {"index": str(uuid.UUID(int=rng.getrandbits(128), version=4))},
        }
        for p in problems
    ]


def make_splits(sizes: dict[str, int], seed: int) -> dict[str, list[Problem]]:
    """Disjoint problem sets, one per named split, in the order given (same seed and sizes -> same splits)."""
    problems = make_problems(sum(sizes.values()), seed)
    splits: dict[str, list[Problem]] = {}
    start = 0
    for name, size in sizes.items():
        splits[name] = problems[start : start + size]
        start += size
    return splits
