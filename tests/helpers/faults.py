"""Faults injected into real runs, for the failure accounting's end-to-end tests (tests/e2e/test_failure_accounting.py).

verl loads both by name inside its Ray workers: the reward by file path (``reward.custom_reward_function.path``), the
tool by dotted path (the tool YAML's ``class_name``), which the tests make importable by putting this folder on
PYTHONPATH of the launch (a local Ray cluster's workers inherit it).

- ``compute_score``: the recipe's reward, which, once its process has scored ``raise_after`` trajectories, raises
  on every row whose ``extra_info.index`` falls in one bucket of ``one_in`` (a stable hash: the same rows in every
  process, every sample of such a row: whole groups fail), or with ``per_call: true`` on every ``one_in``-th
  trajectory it scores (some samples of a group fail, their siblings do not): ValueError, or with
  ``configuration: true`` the configuration error MissingGroundTruth. The settings come as reward kwargs
  (``reward.custom_reward_function.reward_kwargs``); ``one_in: 1`` fails every trajectory;
- ``CrashingTool``: the recipe's code tool, raising on every ``CRASH_EVERY``-th call of its process.
"""

from __future__ import annotations

import hashlib

from retool.failures.causes import MissingGroundTruth
from retool.reward import compute_score as recipe_compute_score
from retool.tool import CodeInterpreterTool

CRASH_EVERY = 20
_scored = 0


def raises_on(index: str, one_in: int = 2) -> bool:
    return int(hashlib.sha256(str(index).encode()).hexdigest(), 16) % one_in == 0


def compute_score(
    data_source,
    solution_str,
    ground_truth,
    extra_info=None,
    raise_after: int = 0,
    configuration: bool = False,
    one_in: int = 2,
    per_call: bool = False,
    **kwargs,
):
    global _scored
    _scored += 1
    index = (extra_info or {}).get("index")
    hit = _scored % one_in == 0 if per_call else raises_on(index, one_in)
    if _scored > raise_after and hit:
        error = MissingGroundTruth if configuration else ValueError
        raise error(f"injected reward failure on row {index}")
    return recipe_compute_score(data_source, solution_str, ground_truth, extra_info, **kwargs)


class CrashingTool(CodeInterpreterTool):
    calls = 0

    async def execute(self, instance_id, parameters, **kwargs):
        type(self).calls += 1
        if type(self).calls % CRASH_EVERY == 0:
            raise RuntimeError(f"injected tool crash on call {type(self).calls}")
        return await super().execute(instance_id, parameters, **kwargs)
