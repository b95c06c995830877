"""The RL loop learns, and the test can tell: GRPO from the smoke's SFT model must raise tool use on held-out
synthetic problems (the 95% interval of the paired change above 0), and the same run on the negated reward (the
negative control) must not. A sign flip of the advantage, a reward that never reaches the trainer or a broken
tool-response mask would make the first fail or the second pass."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from retool.smoke import learning_run

pytestmark = [pytest.mark.slow, pytest.mark.verl]

STEPS = 12  # the same as bench/learning_signal.py; docs/performance.md has its curves
VAL_N = 4


@pytest.fixture(scope="module")
def inputs(smoke_run_dir) -> tuple[Path, Path]:
    resolved = yaml.safe_load((smoke_run_dir / "dapo.resolved.yaml").read_text())
    assets = Path(resolved["data"]["train_files"]).parents[1]
    return smoke_run_dir / "sft_merged", assets


@pytest.fixture(scope="module")
def runs_dir(tmp_path_factory) -> Path:
    # E2E_LEARNING_DIR keeps both runs (bench/learning_signal.py --from-runs renders them into docs)
    return Path(os.environ.get("E2E_LEARNING_DIR") or tmp_path_factory.mktemp("learning"))


@pytest.fixture(scope="module")
def grpo(inputs, runs_dir) -> dict:
    sft, assets = inputs
    return learning_run.run(sft, assets, runs_dir / "grpo", STEPS, VAL_N)


@pytest.fixture(scope="module")
def negated(inputs, runs_dir) -> dict:
    sft, assets = inputs
    return learning_run.run(sft, assets, runs_dir / "negated", STEPS, VAL_N, control="negated")


def test_grpo_raises_tool_use_on_held_out_problems(grpo):
    change = grpo["changes"]["used_tool"]
    print("\n".join(grpo["sentences"]))
    assert change["verdict"] == "rose" and change["low"] > 0, grpo["sentences"]
    assert change["prompts"] >= 16


def test_the_negated_reward_does_not(grpo, negated):
    print("\n".join(negated["sentences"]))
    control = negated["changes"]["used_tool"]
    assert control["verdict"] != "rose", negated["sentences"]
    # and the real run ends above the highest tool use the control's interval allows it after training
    assert grpo["changes"]["used_tool"]["after"] > control["before"] + control["high"]
