"""The learning benchmark's negative controls and the overrides that select them (retool.smoke.controls and
retool.smoke.learning_run), on the real tool class, tool YAMLs and reward."""

from __future__ import annotations

import asyncio

import pytest
import yaml

from retool.profiles import get_profile
from retool.reward import compute_score
from retool_sandbox.spawn import running_sandbox
from retool.smoke import learning_run
from retool.smoke.controls import OffByOneTool, WrongResultTool, negated_score, off_by_one, shifted_digits

EXTRA = {"num_turns": 4}  # one executed tool round


def test_off_by_one_changes_every_integer_and_nothing_else():
    assert off_by_one("464295") == "464296"
    assert off_by_one("999\n[exit code 1]") == "1000\n[exit code 2]"
    assert off_by_one("no digits here") == "no digits here"


def test_shifted_digits_changes_every_digit_and_undoes_itself():
    assert shifted_digits("464295") == "919740"
    assert shifted_digits("-12 [exit code 1]") == "-67 [exit code 6]"
    assert shifted_digits(shifted_digits("0123456789")) == "0123456789"
    assert all(a != b for a, b in zip("0123456789", shifted_digits("0123456789")))


def _scored_copy(text: str, truth: str) -> dict:
    copied = f"<tool_response>\n{text}\n</tool_response>assistant\nSo the result is {text}.\n\n\\boxed{{{text}}}"
    return compute_score("synthetic_arith", copied, truth, EXTRA, tool_shaping="none")


def test_answers_copied_from_the_wrong_tools_score_minus_one_through_the_real_sandbox():
    with running_sandbox() as url:
        config = {"sandbox_fusion_url": f"{url}/run_code", "behaviour": "annotated"}
        (wrong, status), (plus_one, _) = (
            asyncio.run(cls(config).run_code("print(876 * 530 + 15)")) for cls in (WrongResultTool, OffByOneTool)
        )
    assert (wrong, plus_one, status["status"]) == ("919740", "464296", "ok")  # the sandbox printed 464295
    for text in (wrong, plus_one):
        assert (_scored_copy(text, "464295")["score"], _scored_copy(text, "464295")["acc"]) == (-1.0, 0.0)
    # the off-by-one reply is one slip from right (copied minus one); no single-digit slip rescues the shifted one
    assert _scored_copy("464295", "464295")["acc"] == 1.0
    slips = {wrong[:i] + d + wrong[i + 1 :] for i in range(len(wrong)) for d in "0123456789"}
    assert not any(_scored_copy(slip, "464295")["acc"] for slip in slips)


def test_the_negated_reward_flips_only_the_score():
    right = compute_score("synthetic_arith", "\\boxed{12}", "12", EXTRA, tool_shaping="none")
    flipped = negated_score("synthetic_arith", "\\boxed{12}", "12", EXTRA, tool_shaping="none")
    assert flipped["score"] == -right["score"] == -1.0
    assert {k: v for k, v in flipped.items() if k != "score"} == {k: v for k, v in right.items() if k != "score"}


@pytest.mark.parametrize("profile", ["reference", "improved"])
def test_the_wrong_tool_yaml_is_the_profile_yaml_with_the_class_swapped(tmp_path, profile):
    source = get_profile(profile).tool_config_path
    written = learning_run.wrong_tool_config(source, tmp_path / "tool.yaml")
    original, swapped = yaml.safe_load(source.read_text()), yaml.safe_load(written.read_text())
    assert [t["class_name"] for t in swapped["tools"]] == [learning_run.WRONG_TOOL_CLASS]
    off_by_one_class = learning_run.TOOL_CONTROLS["off_by_one_tool"]
    diagnostic = learning_run.wrong_tool_config(source, tmp_path / "t2.yaml", off_by_one_class)
    assert [t["class_name"] for t in yaml.safe_load(diagnostic.read_text())["tools"]] == [
        "retool.smoke.controls.OffByOneTool"
    ]
    assert [t["config"] for t in swapped["tools"]] == [t["config"] for t in original["tools"]]
    (tmp_path / "other.yaml").write_text(yaml.safe_dump({"tools": [{"class_name": "my.Tool", "config": {}}]}))
    with pytest.raises(ValueError, match="must list only retool.tool.CodeInterpreterTool"):
        learning_run.wrong_tool_config(tmp_path / "other.yaml", tmp_path / "out.yaml")


def test_overrides_select_seed_and_control(tmp_path):
    plain = learning_run.overrides()
    assert plain == ["+smoke=rl", "trainer.experiment_name=learning-grpo"]
    seeded = learning_run.overrides(steps=6, val_n=2, seed=3)
    assert {
        "trainer.total_training_steps=6",
        "trainer.test_freq=6",
        "actor_rollout_ref.rollout.val_kwargs.n=2",
        "data.seed=3",
        "actor_rollout_ref.rollout.seed=3",
    } <= set(seeded)
    negated = learning_run.overrides(control="negated")
    assert "reward.custom_reward_function.name=negated_score" in negated
    wrong = learning_run.overrides(control="wrong_tool", wrong_tool_yaml=tmp_path / "t.yaml")
    assert f"actor_rollout_ref.rollout.multi_turn.tool_config_path={tmp_path / 't.yaml'}" in wrong
    with pytest.raises(ValueError, match="needs the path"):
        learning_run.overrides(control="wrong_tool")
    assert wrong[-1] in learning_run.overrides(control="off_by_one_tool", wrong_tool_yaml=tmp_path / "t.yaml")
    with pytest.raises(ValueError, match="unknown control"):
        learning_run.overrides(control="mine")


def test_the_learning_run_command_line_reaches_the_run_s_input_checks(tmp_path, capsys):
    args = ["--sft-model", str(tmp_path / "sft"), "--run-dir", str(tmp_path / "run"), "--assets", str(tmp_path)]
    assert learning_run.main([*args, "--control", "negated", "--seed", "3"]) == 1
    assert "--sft-model" in capsys.readouterr().err and not (tmp_path / "run").exists()
    with pytest.raises(SystemExit):
        learning_run.main([*args, "--control", "mine"])
    spec = learning_run.LearningRun(tmp_path / "sft", tmp_path / "run")
    assert (spec.assets.name, spec.steps, spec.control, spec.trainer_mode) == ("smoke-assets", None, None, "sync")
