"""retool.reward: answer extraction and comparison, shaping rules, and the dict verl consumes."""

from __future__ import annotations

import logging
import math

import numpy as np
import pytest

from retool import reward
from retool.reward import compute_score, extract_boxed_answer

TOOL_TURNS = {"num_turns": 4}  # one tool round: no shaping under the default rule


def score(text: str, truth: str | int, extra_info: dict | None = TOOL_TURNS, **kwargs) -> dict:
    return compute_score("math_dapo", text, truth, dict(extra_info) if extra_info else extra_info, **kwargs)


def multi_turn(*assistant_turns: str, tool_outputs: list[str]) -> str:
    """A trajectory as verl decodes it with Qwen's hermes template and skip_special_tokens=True."""
    parts = []
    for i, turn in enumerate(assistant_turns):
        parts.append(turn)
        if i < len(tool_outputs):
            parts.append(f"\nuser\n<tool_response>\n{tool_outputs[i]}\n</tool_response>\nassistant\n")
    return "".join(parts)


@pytest.mark.parametrize(
    ("boxed", "truth"),
    [
        ("025", "25"),
        ("25", "025"),
        ("$25$", "25"),
        ("\\text{25}", "25"),
        ("\\textbf{25}.", "25"),
        (" 2 5 ", "25"),
        ("1,000", "1000"),
        ("1{,}000", "1000"),
        ("1\\,000", "1000"),
        ("-3", "-3"),
        ("\u22123", "-3"),
        ("- 3", "-3"),
        ("\\frac{1}{2}", "1/2"),
        ("\\dfrac{2}{4}", "1/2"),
        ("\\tfrac12", "0.5"),
        ("-\\frac{3}{4}", "-3/4"),
        ("\\frac{-3}{4}", "-\\frac{3}{4}"),
        ("2.0", "2"),
        ("\\frac{\\sqrt{3}}{2}", "\\dfrac{\\sqrt{3}}{2}"),
        ("x^2 + 1", "x^2+1"),
    ],
)
def test_equal_answers_score_one(boxed, truth):
    result = score(f"So the answer is $\\boxed{{{boxed}}}$.", truth)
    assert (result["score"], result["acc"]) == (1.0, 1.0)


@pytest.mark.parametrize(
    ("boxed", "truth"),
    [
        ("24", "25"),
        ("-3", "3"),
        ("3", "-3"),
        ("1,2", "12"),  # a list, not a thousands separator
        ("0.333", "1/3"),
        ("\\frac{1}{0}", "1"),
        ("25\\%", "25"),
        ("", "25"),
    ],
)
def test_different_answers_score_minus_one(boxed, truth):
    result = score(f"\\boxed{{{boxed}}}", truth)
    assert (result["score"], result["acc"]) == (-1.0, 0.0)


def test_no_box_is_wrong_with_empty_pred():
    result = score("The answer is 25.", "25")
    assert result["score"] == -1.0 and result["acc"] == 0.0
    assert result["pred"] == "" and result["has_answer"] == 0.0


def test_unclosed_box_is_not_an_answer():
    assert extract_boxed_answer("\\boxed{25") is None
    assert extract_boxed_answer("first \\boxed{7} then \\boxed{25") == "7"


def test_nested_braces_are_kept():
    assert extract_boxed_answer("\\boxed{\\frac{\\sqrt{3}}{2}}") == "\\frac{\\sqrt{3}}{2}"
    assert extract_boxed_answer("\\boxed{\\boxed{5}}") == "5"
    assert extract_boxed_answer("\\boxed {12}") == "12"


def test_last_of_several_boxes_counts():
    text = "Maybe \\boxed{3}. No, on reflection \\boxed{4}."
    assert score(text, "4")["acc"] == 1.0
    assert score(text, "3")["acc"] == 0.0
    assert score(text, "3")["pred"] == "4"


def test_pred_is_canonical_so_equal_answers_vote_together():
    assert score("\\boxed{025}", "25")["pred"] == "25"
    assert score("\\boxed{\\dfrac{2}{4}}", "1/2")["pred"] == "1/2"
    assert score("\\boxed{1,000}", "7")["pred"] == "1000"


@pytest.mark.parametrize(
    "text",
    [
        '<tool_call>\n{"name": "code_interpreter", "arguments": {"code": "print(\'\\\\boxed{25}\')"}}\n</tool_call>',
        "```python\nprint('\\boxed{25}')\n```",
        "<code>\n```python\nprint(r'\\boxed{25}')\n```\n</code>\n<interpreter>\n\\boxed{25}\n</interpreter>",
        "<tool_response>\n\\boxed{25}\n</tool_response>",
        'Let me compute. <tool_call>\n{"code": "x = r\'\\boxed{25}\'"',  # unclosed call at the end
        "```\n\\boxed{25}",  # unclosed fence
    ],
)
def test_answers_hidden_in_calls_code_or_outputs_do_not_count(text):
    result = score(text, "25")
    assert result["acc"] == 0.0 and result["has_answer"] == 0.0


def test_answer_outside_code_still_counts():
    text = "```python\nprint(24)\n```\nThe code printed 24, but I need one more: \\boxed{25}"
    assert score(text, "25")["acc"] == 1.0


def test_only_the_final_assistant_text_counts():
    boxed_early = multi_turn(
        'I guess \\boxed{25}. Let me check.\n<tool_call>\n{"name": "code_interpreter", '
        '"arguments": {"code": "5*5"}}\n</tool_call>',
        "The check disagrees, so I am not sure.",
        tool_outputs=["26"],
    )
    assert score(boxed_early, "25")["acc"] == 0.0

    solved = multi_turn(
        'Compute it.\n<tool_call>\n{"name": "code_interpreter", "arguments": {"code": "5*5"}}\n</tool_call>',
        "The product is 25.\n<answer>\n\\boxed{25}\n</answer>",
        tool_outputs=["25"],
    )
    result = score(solved, "25", {"num_turns": 4})
    assert (result["score"], result["acc"], result["tool_rounds"], result["used_tool"]) == (1.0, 1.0, 1.0, 1.0)


@pytest.mark.parametrize(
    ("rule", "correct", "num_turns", "expected"),
    [
        ("seed", True, 2, 0.6),
        ("seed", True, 4, 1.0),
        ("seed", False, 2, -1.4),
        ("seed", False, 6, -1.0),
        ("seed", False, 0, -1.4),  # padding rows / single-turn loops: no tool round
        ("verl", True, 2, 1.0),
        ("verl", True, 10, 1.0),
        ("verl", False, 2, -1.0),
        ("verl", False, 4, -0.9),
        ("verl", False, 8, -0.7),
        ("verl", False, 10, -0.6),
        ("verl", False, 30, -0.6),
        ("none", True, 2, 1.0),
        ("none", False, 2, -1.0),
    ],
)
def test_shaping_rules(rule, correct, num_turns, expected):
    text = "\\boxed{25}" if correct else "\\boxed{24}"
    result = score(text, "25", {"num_turns": num_turns}, tool_shaping=rule)
    assert result["score"] == pytest.approx(expected)
    assert result["acc"] == float(correct)
    assert result["tool_rounds"] == max(0, (num_turns - 2) // 2)


def test_seed_rule_is_the_default():
    assert score("\\boxed{25}", "25", {"num_turns": 2})["score"] == pytest.approx(0.6)


def test_unknown_shaping_rule_is_rejected():
    with pytest.raises(ValueError, match="tool_shaping"):
        score("\\boxed{25}", "25", tool_shaping="bonus")


@pytest.mark.parametrize("extra_info", [None, {}, {"num_turns": None}, {"index": 3}])
def test_missing_num_turns_gives_unshaped_score_nan_turns_and_one_warning(extra_info, monkeypatch, caplog):
    monkeypatch.setattr(reward, "_warned", set())
    with caplog.at_level(logging.WARNING, logger="retool.reward"):
        right = score("\\boxed{25}", "25", extra_info)
        wrong = score("\\boxed{24}", "25", extra_info, tool_shaping="verl")
    assert right["score"] == 1.0 and wrong["score"] == -1.0
    for key in ("num_turns", "tool_rounds", "used_tool"):
        assert math.isnan(right[key])
    assert len([r for r in caplog.records if "num_turns" in r.message]) == 1


def test_num_turns_as_numpy_integer():
    result = score("\\boxed{25}", "25", {"num_turns": np.int32(6)})
    assert (result["num_turns"], result["tool_rounds"], result["used_tool"]) == (6.0, 2.0, 1.0)


@pytest.mark.parametrize("bad", [-1, 2.5, "4", True])
def test_invalid_num_turns_is_rejected(bad):
    with pytest.raises(ValueError, match="num_turns"):
        score("\\boxed{25}", "25", {"num_turns": bad})


@pytest.mark.parametrize("data_source", ["math_dapo", "aime_2024", "aime_2025", "synthetic_arith", "anything"])
def test_same_rule_for_every_data_source(data_source):
    result = compute_score(data_source, "\\boxed{025}", 25, {"num_turns": 2})
    assert result["score"] == pytest.approx(0.6) and result["acc"] == 1.0


def test_result_keys_and_types_are_the_same_for_every_outcome():
    outcomes = [
        score("\\boxed{25}", "25"),
        score("no answer", "25"),
        score("\\boxed{7}", "25", None),
        score("\\boxed{x}", "25", {"num_turns": 2}, tool_shaping="verl"),
    ]
    keys = list(outcomes[0])
    assert {"score", "acc", "pred", "num_turns", "tool_rounds", "used_tool"} <= set(keys)
    for result in outcomes:
        assert list(result) == keys
        assert isinstance(result["pred"], str)
        assert all(isinstance(v, float) for k, v in result.items() if k != "pred")


def test_bad_inputs_raise_clear_errors():
    with pytest.raises(ValueError, match="ground_truth"):
        compute_score("aime_2025", "\\boxed{1}", "  ", {"index": 7})
    with pytest.raises(TypeError, match="ground_truth"):
        compute_score("aime_2025", "\\boxed{1}", ["1"])
    with pytest.raises(TypeError, match="solution_str"):
        compute_score("aime_2025", None, "1")


def test_verl_call_kwargs_are_accepted_and_unknown_ones_reported(monkeypatch, caplog):
    monkeypatch.setattr(reward, "_warned", set())
    with caplog.at_level(logging.WARNING, logger="retool.reward"):
        score("\\boxed{25}", "25", reward_router_address=None, reward_model_tokenizer=None)
        assert not caplog.records
        assert score("\\boxed{25}", "25", tool_shapping="verl")["score"] == 1.0
    assert "tool_shapping" in caplog.text


@pytest.mark.verl
@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")  # NaN turns of the unknown row
def test_verl_forwards_reward_kwargs_and_aggregates_the_dict():
    """Load compute_score the way verl 0.9.1 does and feed its dicts to verl's validation metrics."""
    pytest.importorskip("verl")
    from omegaconf import OmegaConf
    from verl.trainer.ppo.metric_utils import process_validation_metrics
    from verl.trainer.ppo.reward import get_custom_reward_fn

    config = OmegaConf.create(
        {
            "reward": {
                "custom_reward_function": {
                    "path": "pkg://retool.reward",
                    "name": "compute_score",
                    "reward_kwargs": {"tool_shaping": "verl"},
                }
            }
        }
    )
    fn = get_custom_reward_fn(config)
    # called exactly as verl's naive reward manager calls it (keywords only)
    wrong = fn(data_source="aime_2025", solution_str="\\boxed{24}", ground_truth="25", extra_info={"num_turns": 6})
    assert wrong["score"] == pytest.approx(-0.8)  # verl rule: min(-0.6, -1 + 0.1 * 2)

    texts = ["\\boxed{25}", "\\boxed{025}", "\\boxed{24}", "none"]
    results = [
        fn(data_source="aime_2025", solution_str=t, ground_truth="25", extra_info={"num_turns": n})
        for t, n in zip(texts, [4, 2, 4, None], strict=True)
    ]
    infos = {key: [r[key] for r in results] for key in results[0]}
    metrics = process_validation_metrics(["aime_2025"] * 4, ["uid0"] * 4, infos)
    acc = metrics["aime_2025"]["acc"]
    assert acc["mean@4"] == pytest.approx(0.5)
    assert 0.0 <= acc["maj@4/mean"] <= 1.0  # majority votes ran on `pred`
    assert "pred" not in metrics["aime_2025"]
