"""The launch check tries a custom reward manager (reward.reward_manager.source: importlib) on one synthetic
trajectory, built as verl's reward loop builds it with the recipe's real reward and the smoke model's tokenizer: one
that does not forward num_turns is refused with its name and the fix, one that does passes (retool/failures/
reward_probe.py, called by retool.failures.preflight). The managers are verl's own, loaded as custom ones, and two
written here that differ in one line."""

from __future__ import annotations

import json

import pytest

from retool.constants import REPO_ROOT
from retool.failures.preflight import main as preflight_main
from retool.failures.preflight import reward_manager_problems

pytestmark = pytest.mark.verl

VERL_MANAGERS = "pkg://verl.experimental.reward_loop.reward_manager"
OWN_MANAGER = """
from verl.experimental.reward_loop.reward_manager.base import RewardManagerBase


class {name}(RewardManagerBase):
    def __init__(self, config, tokenizer, compute_score, **_):
        super().__init__(config, tokenizer, compute_score)

    async def run_single(self, data):
        item = data[-1]
        text = self.tokenizer.decode(item.batch["responses"], skip_special_tokens=True)
        extra = dict(item.non_tensor_batch["extra_info"])
        {turns_line}
        result = self.compute_score(data_source=item.non_tensor_batch["data_source"], solution_str=text,
                                    ground_truth=item.non_tensor_batch["reward_model"]["ground_truth"],
                                    extra_info=extra)
        return {{"reward_score": result["score"], "reward_extra_info": result}}
"""


def probe_config(name: str, path: str) -> dict:
    return {
        "reward": {
            "reward_manager": {"source": "importlib", "name": name, "module": {"path": path, "name": None}},
            "custom_reward_function": {
                "path": "pkg://retool.reward",
                "name": "compute_score",
                "reward_kwargs": {"tool_shaping": "no_tool_penalty", "answer_match": "strict_box"},
            },
        },
        "actor_rollout_ref": {"model": {"path": str(REPO_ROOT / "assets" / "smoke_model"), "tokenizer_path": None}},
    }


def own_manager(tmp_path, name: str, forwards_turns: bool) -> dict:
    line = 'extra["num_turns"] = item.non_tensor_batch["__num_turns__"]' if forwards_turns else "pass"
    path = tmp_path / f"{name.lower()}.py"
    path.write_text(OWN_MANAGER.format(name=name, turns_line=line))
    return probe_config(name, str(path))


def test_verl_s_dapo_manager_loaded_as_a_custom_one_is_refused_with_its_name_and_the_fix():
    (problem,) = reward_manager_problems(probe_config("DAPORewardManager", f"{VERL_MANAGERS}.dapo"))
    assert problem.startswith(
        f"reward.reward_manager 'DAPORewardManager' (source: importlib, module.path: "
        f"{VERL_MANAGERS}.dapo) passed the reward function an extra_info without num_turns"
    )
    assert "on a synthetic trajectory of two tool rounds (__num_turns__=6)" in problem
    assert "every trajectory would fail with MissingNumTurns" in problem
    assert "extra_info['num_turns']" in problem and "name=naive" in problem


def test_verl_s_naive_manager_loaded_as_a_custom_one_passes():
    assert reward_manager_problems(probe_config("NaiveRewardManager", f"{VERL_MANAGERS}.naive")) == []


def test_a_manager_of_one_s_own_passes_only_when_it_forwards_num_turns(tmp_path):
    assert reward_manager_problems(own_manager(tmp_path, "KeepsTurns", forwards_turns=True)) == []
    (problem,) = reward_manager_problems(own_manager(tmp_path, "DropsTurns", forwards_turns=False))
    assert problem.startswith(
        "reward.reward_manager 'DropsTurns' (source: importlib, module.path: "
        f"{tmp_path / 'dropsturns.py'}) passed the reward function an extra_info without "
        "num_turns (keys ['index', 'split'])"
    )


def test_a_manager_that_never_calls_the_reward_or_cannot_load_is_named(tmp_path):
    silent = tmp_path / "silent.py"
    silent.write_text(
        OWN_MANAGER.format(name="Silent", turns_line="return {'reward_score': 0.0, 'reward_extra_info': {}}")
    )
    (problem,) = reward_manager_problems(probe_config("Silent", str(silent)))
    assert "'Silent'" in problem and "did not call the reward function" in problem
    (problem,) = reward_manager_problems(probe_config("Missing", str(silent)))
    assert "'Missing'" in problem and "does not load as verl loads it: AttributeError" in problem


def test_the_launch_check_exits_1_naming_the_manager(tmp_path, capsys):
    path = tmp_path / "rl.resolved.yaml"
    path.write_text(json.dumps(own_manager(tmp_path, "DropsTurns", forwards_turns=False)))
    assert preflight_main([str(path)]) == 1
    assert "[FAIL] reward manager: reward.reward_manager 'DropsTurns' (source: importlib" in capsys.readouterr().err
