"""The RL loop learns, and the test can tell: the smoke's GRPO stage must raise tool use on the held-out synthetic
problems (the 95% interval of the paired change above 0), and the same stage on the negated reward (the negative
control, run here from the smoke's SFT model) must not. A sign flip of the advantage, a reward that never reaches the
trainer or a broken tool-response mask would make the first fail or the second pass."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

from retool.smoke import learning_run

pytestmark = [pytest.mark.slow, pytest.mark.verl]


@pytest.fixture(scope="module")
def runs_dir(tmp_path_factory) -> Path:
    # E2E_LEARNING_DIR keeps both reports (bench/learning_signal.py --from-runs renders them into docs)
    return Path(os.environ.get("E2E_LEARNING_DIR") or tmp_path_factory.mktemp("learning"))


@pytest.fixture(scope="module")
def grpo(smoke_run_dir, runs_dir) -> dict:
    """The smoke's own RL stage: its summary holds the learning report of the synthetic validation set."""
    summary = json.loads((smoke_run_dir / "summary.json").read_text())
    result = summary["learning"]
    assert "changes" in result, result
    result = {**result, **learning_run.run_settings(smoke_run_dir / "rl.resolved.yaml"), "control": None,
              "wall_s": summary["stages"]["rl"]["wall_s"]}
    (runs_dir / "grpo").mkdir(parents=True, exist_ok=True)
    (runs_dir / "grpo" / "learning.json").write_text(json.dumps(result, indent=2) + "\n")
    return result


@pytest.fixture(scope="module")
def negated(smoke_run_dir, runs_dir) -> dict:
    resolved = yaml.safe_load((smoke_run_dir / "rl.resolved.yaml").read_text())
    assets = Path(resolved["data"]["train_files"]).parents[1]
    return learning_run.run(smoke_run_dir / "sft_merged", assets, runs_dir / "negated", control="negated")


def test_grpo_raises_tool_use_on_held_out_problems(grpo):
    change = grpo["changes"]["used_tool"]
    print("\n".join(grpo["sentences"]))
    assert change["verdict"] == "rose" and change["low"] > 0, grpo["sentences"]
    assert change["prompts"] >= 16


def test_the_negated_reward_does_not(grpo, negated):
    print("\n".join(negated["sentences"]))
    assert (negated["steps"], negated["val_n"]) == (grpo["steps"], grpo["val_n"])  # the same run, reward negated
    control = negated["changes"]["used_tool"]
    assert control["verdict"] != "rose", negated["sentences"]
    # and the real run ends above the highest tool use the control's interval allows it after training
    assert grpo["changes"]["used_tool"]["after"] > control["before"] + control["high"]
