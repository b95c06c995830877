"""The RL loop raises accuracy, and the test can tell: the smoke's GRPO stage trains on the correctness-only reward
(+1 right, -1 wrong, tool_shaping none), so right answers on the held-out synthetic problems are the only way up,
and held-out accuracy must rise with the 95% interval of its paired change above 0. A sign flip of the advantage, a
reward that never reaches the trainer, a broken tool or a tool-response mask that leaks would keep it flat.

No extra RL run here: the smoke's own RL stage is the run. The negative controls (negated reward, a tool that
returns wrong numbers) and the repeats with other seeds are `make bench-learning` (bench/learning_signal.py)."""

from __future__ import annotations

import json

import pytest
import yaml

pytestmark = [pytest.mark.slow, pytest.mark.verl]


@pytest.fixture(scope="module")
def summary(smoke_run_dir) -> dict:
    return json.loads((smoke_run_dir / "summary.json").read_text())


def test_the_smoke_trains_on_correctness_only(smoke_run_dir):
    reward = yaml.safe_load((smoke_run_dir / "rl.resolved.yaml").read_text())["reward"]["custom_reward_function"]
    assert (reward["path"], reward["name"]) == ("pkg://retool.reward", "compute_score")
    assert reward["reward_kwargs"]["tool_shaping"] == "none"


def test_grpo_raises_held_out_accuracy(summary):
    learning = summary["learning"]
    print("\n".join(learning.get("sentences", [learning.get("error", "")])))
    acc = learning["changes"]["acc"]
    assert acc["verdict"] == "rose" and acc["low"] > 0, learning["sentences"]
    assert acc["prompts"] == 64 and acc["samples_after"] >= 4 * 64
    # accuracy was neither out of reach nor already saturated before RL: the rise is RL's
    assert 0.05 <= acc["before"] <= 0.7, acc


def test_training_accuracy_climbs_during_rl(summary):
    curve = summary["learning"]["training_curve"]["acc"]
    values = [value for _, value in curve]
    third = max(1, len(values) // 3)
    assert sum(values[-third:]) / third > sum(values[:third]) / third, curve
