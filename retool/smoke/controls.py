"""A negative control for the learning-signal test: the recipe's reward with its sign flipped.

Used as ``reward.custom_reward_function.path=pkg://retool.smoke.controls``, ``name=negated_score``. Everything
else (the answer check, the tool shaping, the reported fields) is retool.reward's; only ``score``, what GRPO
optimises, is negated. A run trained on it must not show the rise a real run shows, or the test that compares
them could not tell a wired signal from a broken one.
"""

from __future__ import annotations

from typing import Any

from retool.reward import compute_score


def negated_score(data_source: str, solution_str: str, ground_truth: Any, extra_info: dict | None = None,
                  **kwargs: Any) -> dict[str, Any]:
    result = compute_score(data_source, solution_str, ground_truth, extra_info, **kwargs)
    result["score"] = -result["score"]
    return result
