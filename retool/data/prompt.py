"""The one user-prompt format shared by SFT rows, RL training rows and validation rows.

The model sees the same instruction at every stage, so what SFT teaches (answer in `\\boxed{}`) is what the RL reward
checks and what validation measures.
"""

from __future__ import annotations

ANSWER_INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{}."


def user_prompt(problem: str) -> str:
    """User message text for a math problem: the problem, a blank line, then ANSWER_INSTRUCTION."""
    return f"{problem.strip()}\n\n{ANSWER_INSTRUCTION}"
