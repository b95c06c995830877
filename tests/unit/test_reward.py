"""retool.reward and retool.answers: the strict-box rule, the normalized matcher, shaping rules, and the dict verl
consumes."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from retool import reward
from retool.answers import canonical_answer, extract_boxed_answer, strict_box_answer
from retool.reward import MissingNumTurns, compute_score

from retool.tool_outcomes import OUTCOME_KEYS

TOOL_TURNS = {"num_turns": 4}  # one tool round: no shaping under the default rule
KEYS = [
    "score",
    "acc",
    "acc_strict_box",
    "acc_normalized",
    "pred",
    "has_answer",
    "num_turns",
    "tool_rounds",
    "used_tool",
    *OUTCOME_KEYS,
]
CALL = '<tool_call>\n{"name": "code_interpreter", "arguments": {"code": "print(5 * 5)"}}\n</tool_call>'


def score(text: str, truth, extra_info: dict | None = TOOL_TURNS, **kwargs) -> dict:
    return compute_score("math_dapo", text, truth, dict(extra_info) if extra_info else extra_info, **kwargs)


def multi_turn(*assistant_turns: str, tool_outputs: list[str]) -> str:
    """A trajectory as verl decodes it with Qwen's hermes template and skip_special_tokens=True."""
    parts = []
    for i, turn in enumerate(assistant_turns):
        parts.append(turn)
        if i < len(tool_outputs):
            parts.append(f"\nuser\n<tool_response>\n{tool_outputs[i]}\n</tool_response>\nassistant\n")
    return "".join(parts)


# (id, solution_str, ground_truth, reference acc, normalized acc)
CASES = [
    # both matchers agree
    ("plain", "The answer is \\boxed{25}.", "25", 1, 1),
    ("inline-math", "So the answer is $\\boxed{34}$.", "34", 1, 1),
    ("answer-tags", "The sum is 25.\n<answer>\n\\boxed{25}\n</answer>", "25", 1, 1),
    ("negative", "\\boxed{-3}", "-3", 1, 1),
    ("nested-braces", "\\boxed{\\frac{\\sqrt{3}}{2}}", "\\frac{\\sqrt{3}}{2}", 1, 1),
    ("last-box-wins", "Maybe \\boxed{24}. No, on reflection \\boxed{25}.", "25", 1, 1),
    ("earlier-box-ignored", "Maybe \\boxed{25}. No, on reflection \\boxed{24}.", "25", 0, 0),
    ("wrong", "\\boxed{24}", "25", 0, 0),
    ("no-box", "The answer is 25.", "25", 0, 0),
    ("long-prefix", "reasoning " * 60 + "\\boxed{25}", "25", 1, 1),
    ("box-ends-window", "\\boxed{25}" + "." * 90, "25", 1, 1),  # the box is exactly the first 10 of 100 chars
    (
        "after-tool-round",
        multi_turn("Compute.\n" + CALL, "It printed 25, so \\boxed{25}.", tool_outputs=["25"]),
        "25",
        1,
        1,
    ),
    (
        "early-guess-then-tool",
        multi_turn(
            "I guess \\boxed{25}. Let me check.\n" + CALL, "The check disagrees, so I am not sure.", tool_outputs=["26"]
        ),
        "25",
        0,
        0,
    ),
    ("stray-fence-in-prose", "Wrap code in ``` marks. The answer is \\boxed{25}.", "25", 1, 1),
    # reference quirks: exact string equality on the raw box content, last 100 characters only
    ("leading-zero", "\\boxed{034}", "34", 0, 1),
    ("leading-zero-truth", "\\boxed{25}", "025", 0, 1),
    ("dollars-inside-box", "\\boxed{$34$}", "34", 0, 1),
    ("spaces-inside-box", "\\boxed{ 34 }", "34", 0, 1),
    ("space-before-brace", "\\boxed {25}", "25", 0, 1),
    ("text-wrapper", "\\boxed{\\text{25}}", "25", 0, 1),
    ("dfrac", "\\boxed{\\dfrac{1}{2}}", "\\frac{1}{2}", 0, 1),
    ("thousands", "\\boxed{1,000}", "1000", 0, 1),
    ("decimal-integer", "\\boxed{25.0}", "25", 0, 1),
    ("box-then-101-chars", "\\boxed{25}" + "." * 91, "25", 0, 1),
    ("box-then-long-text", "\\boxed{25}\n\n" + "I double-checked the arithmetic above. " * 4, "25", 0, 1),
    ("last-box-unclosed", "\\boxed{25} or maybe \\boxed{2", "25", 0, 1),
    ("box-in-last-tool-output", multi_turn("Compute.\n" + CALL, "", tool_outputs=["\\boxed{25}"]), "25", 1, 0),
    (
        "box-in-final-tool-call",
        (
            'Let me print it.\n<tool_call>\n{"name": "code_interpreter", '
            '"arguments": {"code": "print(\'\\\\boxed{25}\')"}}'
            "\n</tool_call>"
        ),
        "25",
        1,
        0,
    ),
    ("box-in-code-fence", "```python\nprint('\\boxed{25}')\n```", "25", 1, 0),
    # normalized matcher: formerly missed spellings
    ("variable-prefix", "\\boxed{n=25}", "25", 0, 1),
    ("degrees-circ", "\\boxed{25^\\circ}", "25", 0, 1),
    ("degrees-braced-circ", "\\boxed{25^{\\circ}}", "25", 0, 1),
    ("degree-sign", "\\boxed{25\u00b0}", "25", 0, 1),
    ("unit-text-cm", "\\boxed{25 \\text{ cm}}", "25", 0, 1),
    ("unit-text-degrees", "\\boxed{25\\text{ degrees}}", "25", 0, 1),
    ("unit-squared", "\\boxed{25\\text{ cm}^2}", "25", 0, 1),
    ("dollar-sign", "\\boxed{\\$25}", "25", 0, 1),
    ("percent", "\\boxed{25\\%}", "25", 0, 1),
    ("parenthesised", "\\boxed{(-3)}", "-3", 0, 1),
    ("box-without-braces", "So the answer is \\boxed 5.", "5", 0, 1),
    ("fbox", "\\fbox{5}", "5", 0, 1),
    # the normalized matcher is not a yes-machine
    ("list-not-thousands", "\\boxed{1,2}", "12", 0, 0),
    ("rounded", "\\boxed{0.333}", "1/3", 0, 0),
    ("variable-not-unit", "\\boxed{25x}", "25", 0, 0),
    ("sign-matters", "\\boxed{(3)}", "-3", 0, 0),
    ("unclosed-tool-call", 'Let me compute. <tool_call>\n{"code": "x = r\'\\boxed{25}\'"', "25", 1, 0),
]


@pytest.mark.parametrize(
    ("text", "truth", "reference_acc", "normalized_acc"),
    [pytest.param(*case[1:], id=case[0]) for case in CASES],
)
def test_answer_table(text, truth, reference_acc, normalized_acc):
    default = score(text, truth)
    normalized = score(text, truth, answer_match="normalized")
    assert (default["acc_strict_box"], default["acc_normalized"]) == (reference_acc, normalized_acc)
    assert (default["acc"], default["score"]) == (reference_acc, 1.0 if reference_acc else -1.0)
    assert (normalized["acc"], normalized["score"]) == (normalized_acc, 1.0 if normalized_acc else -1.0)
    assert (normalized["acc_strict_box"], normalized["acc_normalized"]) == (reference_acc, normalized_acc)


def test_table_is_large_and_covers_both_disagreements():
    assert len(CASES) >= 30
    assert any(r == 1 and n == 0 for *_, r, n in CASES) and any(r == 0 and n == 1 for *_, r, n in CASES)


@pytest.mark.verl
@pytest.mark.parametrize(("text", "truth"), [pytest.param(c[1], c[2], id=c[0]) for c in CASES])
def test_strict_box_agrees_with_verl_math_dapo_strict_box(text, truth):
    """verl's own math_dapo (strict box, as the reference run's recipe calls it) gives the same acc and pred."""
    from verl.utils.reward_score import math_dapo

    expected = math_dapo.compute_score(text, truth, strict_box_verify=True)
    result = score(text, truth)
    assert result["acc"] == float(expected["acc"])
    # verl 0.9.1 returns None for "no box" ("[INVALID]" around v0.6.0); the recipe writes ""
    assert result["pred"] == (expected["pred"] if expected["pred"] not in (None, "[INVALID]") else "")


def test_strict_box_extraction_details():
    assert strict_box_answer("\\boxed{ 34 }") == " 34 "  # no strip
    assert strict_box_answer("\\boxed{\\boxed{5}}") == "5"  # rfind lands on the inner box
    assert strict_box_answer("\\boxed{25} then \\boxed{2") is None  # no fallback to an earlier box
    assert strict_box_answer("\\boxed{25}" + "x" * 91) is None  # the box starts 101 characters from the end
    assert strict_box_answer("x" * 500 + "\\boxed{\\{1,2\\}}") == "\\{1,2\\}"


def test_pred_follows_the_matcher_so_majority_votes_agree_with_acc():
    assert score("\\boxed{034}", "34")["pred"] == "034"
    assert score("\\boxed{034}", "34", answer_match="normalized")["pred"] == "34"
    assert score("\\boxed{\\dfrac{2}{4}}", "1/2", answer_match="normalized")["pred"] == "1/2"
    assert score("\\boxed{25 \\text{ cm}}", "7", answer_match="normalized")["pred"] == "25"
    for _, text, truth, _, _ in CASES:
        ref = score(text, truth)
        norm = score(text, truth, answer_match="normalized")
        # a vote groups samples by pred, so acc must be a function of pred
        assert ref["acc"] == float(ref["has_answer"] == 1.0 and ref["pred"] == truth)
        assert norm["acc"] == float(norm["has_answer"] == 1.0 and norm["pred"] == canonical_answer(truth))


@pytest.mark.parametrize("mode", ["strict_box", "normalized"])
def test_no_box_is_wrong_with_empty_pred(mode):
    result = score("The answer is 25.", "25", answer_match=mode)
    assert result["score"] == -1.0 and result["acc"] == 0.0
    assert result["pred"] == "" and result["has_answer"] == 0.0


def test_unknown_answer_match_is_rejected():
    for bad in ("strict", "reference"):
        with pytest.raises(ValueError, match=rf"answer_match.*'strict_box', 'normalized'.*'{bad}'"):
            score("\\boxed{25}", "25", answer_match=bad)


def test_normalized_extraction():
    assert extract_boxed_answer("\\boxed{25") is None
    assert extract_boxed_answer("first \\boxed{7} then \\boxed{25") == "7"
    assert extract_boxed_answer("\\boxed{\\boxed{5}}") == "5"
    assert extract_boxed_answer("\\boxed {12}") == "12"
    assert extract_boxed_answer("\\boxed 12.") == "12"
    assert extract_boxed_answer("\\fbox{12}") == "12"
    assert extract_boxed_answer("\\boxedanswer 12") is None


@pytest.mark.parametrize(
    ("boxed", "truth"),
    [
        ("025", "25"),
        ("$25$", "25"),
        ("\\textbf{25}.", "25"),
        (" 2 5 ", "25"),
        ("1{,}000", "1000"),
        ("1\\,000", "1000"),
        ("\u22123", "-3"),
        ("- 3", "-3"),
        ("\\tfrac12", "0.5"),
        ("-\\frac{3}{4}", "-3/4"),
        ("\\frac{-3}{4}", "-\\frac{3}{4}"),
        ("\\frac{\\sqrt{3}}{2}", "\\dfrac{\\sqrt{3}}{2}"),
        ("x^2 + 1", "x^2+1"),
        ("x = 5", "5"),
        ("\\theta = 30^\\circ", "30"),
        ("1,000\\text{ dollars}", "1000"),
        ("25 cm", "25"),
        ("50\\%", "50\\%"),
        ("(\\frac{1}{2})", "1/2"),
    ],
)
def test_normalized_equal_answers(boxed, truth):
    result = score(f"So the answer is $\\boxed{{{boxed}}}$.", truth, answer_match="normalized")
    assert (result["score"], result["acc"]) == (1.0, 1.0)


@pytest.mark.parametrize(
    ("boxed", "truth"),
    [
        ("-3", "3"),
        ("3", "-3"),
        ("\\frac{1}{0}", "1"),
        ("", "25"),
        ("(1,2)", "12"),
        ("x = 5", "6"),
        ("2x", "2"),
        ("25\\text{ cm}", "26"),
    ],
)
def test_normalized_different_answers(boxed, truth):
    result = score(f"\\boxed{{{boxed}}}", truth, answer_match="normalized")
    assert (result["score"], result["acc"]) == (-1.0, 0.0)


@pytest.mark.parametrize(
    "text",
    [
        '<tool_call>\n{"name": "code_interpreter", "arguments": {"code": "print(\'\\\\boxed{25}\')"}}\n</tool_call>',
        "```python\nprint('\\boxed{25}')\n```",
        "<code>\n```python\nprint(r'\\boxed{25}')\n```\n</code>\n<interpreter>\n\\boxed{25}\n</interpreter>",
        "<tool_response>\n\\boxed{25}\n</tool_response>",
        'Let me compute. <tool_call>\n{"code": "x = r\'\\boxed{25}\'"',  # unclosed call at the end
    ],
)
def test_normalized_ignores_answers_in_calls_code_or_outputs(text):
    result = score(text, "25", answer_match="normalized")
    assert result["acc"] == 0.0 and result["has_answer"] == 0.0


def test_unmatched_fence_does_not_swallow_the_answer():
    for text in ("Use ```\n\\boxed{25}", "```python\nprint(1)\n```\nStray ``` here. So \\boxed{25}"):
        assert score(text, "25", answer_match="normalized")["acc"] == 1.0
    # a closed fence after the answer text still hides only its own content
    assert score("```\n\\boxed{24}\n``` so \\boxed{25}", "25", answer_match="normalized")["pred"] == "25"


@pytest.mark.parametrize(
    ("truth", "text"),
    [
        (np.int64(25), "\\boxed{25}"),
        (np.int32(25), "\\boxed{25}"),
        (25, "\\boxed{25}"),
        (25.0, "\\boxed{25}"),
        (np.float64(25.0), "\\boxed{25}"),
        (np.float32(25.0), "\\boxed{25}"),
        (0.5, "\\boxed{0.5}"),
        (np.str_("25"), "\\boxed{25}"),
    ],
)
def test_numeric_ground_truths(truth, text):
    for mode in ("strict_box", "normalized"):
        result = score(text, truth, answer_match=mode)
        assert (result["acc"], result["acc_strict_box"], result["acc_normalized"]) == (1.0, 1.0, 1.0), mode
    assert score("\\boxed{24}", truth)["acc"] == 0.0


def test_float_ground_truth_compares_as_its_integer():
    assert reward.ground_truth_text(np.float64(25.0)) == "25"
    assert reward.ground_truth_text(np.int64(-7)) == "-7"
    assert reward.ground_truth_text(2.5) == "2.5"
    assert score("\\boxed{25.0}", 25.0)["acc"] == 0.0  # the reference compares with the string "25"


@pytest.mark.parametrize("bad", [True, np.bool_(True), ["1"], None, b"25"])
def test_non_numeric_ground_truths_are_rejected(bad):
    with pytest.raises(TypeError, match="ground_truth"):
        score("\\boxed{1}", bad)


@pytest.mark.parametrize("bad", [float("nan"), np.float64("inf")])
def test_non_finite_ground_truths_are_rejected(bad):
    with pytest.raises(ValueError, match="ground_truth"):
        score("\\boxed{1}", bad)


@pytest.mark.parametrize(
    ("rule", "correct", "num_turns", "expected"),
    [
        ("no_tool_penalty", True, 2, 0.6),
        ("no_tool_penalty", True, 3, 0.6),  # (3 - 2) // 2 == 0: the reference still counts no tool call
        ("no_tool_penalty", True, 4, 1.0),
        ("no_tool_penalty", False, 2, -1.4),
        ("no_tool_penalty", False, 6, -1.0),
        ("no_tool_penalty", False, 0, -1.0),  # (0 - 2) // 2 == -1: the reference does not penalise
        ("no_tool_penalty", True, 1, 1.0),
        ("tool_round_credit", True, 2, 1.0),
        ("tool_round_credit", True, 10, 1.0),
        ("tool_round_credit", False, 2, -1.0),
        ("tool_round_credit", False, 4, -0.9),
        ("tool_round_credit", False, 8, -0.7),
        ("tool_round_credit", False, 10, -0.6),
        ("tool_round_credit", False, 30, -0.6),
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


def test_shaping_applies_to_the_chosen_matcher():
    # wrong under reference, right under normalized; no tool call
    assert score("\\boxed{034}", "34", {"num_turns": 2})["score"] == pytest.approx(-1.4)
    assert score("\\boxed{034}", "34", {"num_turns": 2}, answer_match="normalized")["score"] == pytest.approx(0.6)
    assert score("\\boxed{034}", "34", {"num_turns": 4}, tool_shaping="tool_round_credit")["score"] == pytest.approx(
        -0.9
    )


def test_defaults_are_strict_box_and_no_tool_penalty():
    assert score("\\boxed{25}", "25", {"num_turns": 2})["score"] == pytest.approx(0.6)
    assert score("\\boxed{025}", "25")["acc"] == 0.0


def test_unknown_shaping_rule_is_rejected():
    with pytest.raises(ValueError, match="tool_shaping"):
        score("\\boxed{25}", "25", tool_shaping="bonus")


@pytest.mark.parametrize("extra_info", [None, {}, {"num_turns": None}, {"index": 3}])
@pytest.mark.parametrize("rule", ["no_tool_penalty", "tool_round_credit", "none"])
def test_missing_num_turns_stops_the_run_with_the_fix(extra_info, rule):
    """A reward manager that drops num_turns (verl's dapo manager) would turn the shaping off silently."""
    with pytest.raises(MissingNumTurns, match="reward.reward_manager.name=naive"):
        score("\\boxed{25}", "25", extra_info, tool_shaping=rule)


def test_num_turns_as_numpy_integer():
    result = score("\\boxed{25}", "25", {"num_turns": np.int32(6)})
    assert (result["num_turns"], result["tool_rounds"], result["used_tool"]) == (6.0, 2.0, 1.0)
    assert score("\\boxed{25}", "25", {"num_turns": np.int32(2)})["score"] == pytest.approx(0.6)


@pytest.mark.parametrize("bad", [-1, 2.5, "4", True])
def test_invalid_num_turns_is_rejected(bad):
    with pytest.raises(ValueError, match="num_turns"):
        score("\\boxed{25}", "25", {"num_turns": bad})


@pytest.mark.parametrize("data_source", ["math_dapo", "aime_2024", "aime_2025", "synthetic_arith", "anything"])
def test_same_rule_for_every_data_source(data_source):
    result = compute_score(data_source, "\\boxed{25}", 25, {"num_turns": 2})
    assert result["score"] == pytest.approx(0.6) and result["acc"] == 1.0
    assert compute_score(data_source, "\\boxed{025}", 25, {"num_turns": 2})["acc"] == 0.0


@pytest.mark.parametrize("mode", ["strict_box", "normalized"])
def test_result_keys_and_types_are_the_same_for_every_outcome(mode):
    outcomes = [
        score("\\boxed{25}", "25", answer_match=mode),
        score("no answer", "25", answer_match=mode),
        score("\\boxed{7}", "25", {"num_turns": 8}, answer_match=mode),
        score("\\boxed{x}", "25", {"num_turns": 2}, tool_shaping="tool_round_credit", answer_match=mode),
        score("\\boxed{025}", 25.0, answer_match=mode),
    ]
    for result in outcomes:
        assert list(result) == KEYS
        assert isinstance(result["pred"], str)
        assert all(type(v) is float for k, v in result.items() if k != "pred")


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
        score(
            "\\boxed{25}",
            "25",
            reward_router_address=None,
            reward_model_tokenizer=None,
            answer_match="strict_box",
            tool_shaping="no_tool_penalty",
        )
        assert not caplog.records
        assert score("\\boxed{25}", "25", tool_shapping="tool_round_credit")["score"] == 1.0
    assert "tool_shapping" in caplog.text


@pytest.mark.verl
def test_verl_forwards_reward_kwargs_and_aggregates_the_dict():
    """Load compute_score the way verl 0.9.1 does and feed its dicts to verl's validation metrics."""
    from omegaconf import OmegaConf
    from verl.trainer.ppo.metric_utils import process_validation_metrics
    from verl.trainer.ppo.reward import get_custom_reward_fn

    def load(reward_kwargs: dict):
        config = OmegaConf.create(
            {
                "reward": {
                    "custom_reward_function": {
                        "path": "pkg://retool.reward",
                        "name": "compute_score",
                        "reward_kwargs": reward_kwargs,
                    }
                }
            }
        )
        return get_custom_reward_fn(config)

    fn = load({"tool_shaping": "tool_round_credit"})
    # called exactly as verl's naive reward manager calls it (keywords only)
    wrong = fn(data_source="aime_2025", solution_str="\\boxed{24}", ground_truth="25", extra_info={"num_turns": 6})
    assert wrong["score"] == pytest.approx(-0.8)  # verl rule: min(-0.6, -1 + 0.1 * 2)

    texts = ["\\boxed{25}", "\\boxed{025}", "\\boxed{24}", "none"]
    for reward_kwargs, acc_mean in (
        ({"tool_shaping": "tool_round_credit"}, 0.25),
        ({"answer_match": "normalized"}, 0.5),
    ):
        fn = load(reward_kwargs)
        results = [
            fn(data_source="aime_2025", solution_str=t, ground_truth="25", extra_info={"num_turns": n})
            for t, n in zip(texts, [4, 2, 4, 6], strict=True)
        ]
        infos = {key: [r[key] for r in results] for key in results[0]}
        metrics = process_validation_metrics(["aime_2025"] * 4, ["uid0"] * 4, infos)
        assert metrics["aime_2025"]["acc"]["mean@4"] == pytest.approx(acc_mean)
        assert metrics["aime_2025"]["acc_strict_box"]["mean@4"] == pytest.approx(0.25)
        assert metrics["aime_2025"]["acc_normalized"]["mean@4"] == pytest.approx(0.5)
        assert 0.0 <= metrics["aime_2025"]["acc"]["maj@4/mean"] <= 1.0  # majority votes ran on `pred`
        assert "pred" not in metrics["aime_2025"]


def test_tool_outcomes_in_extra_info_become_reward_fields():
    # what the tool counts into agent_data.extra_fields arrives merged into extra_info (verl's naive manager)
    extra = {"num_turns": 6, "tool_calls": 2, "tool_ok": 1, "tool_timeout": 1, "tool_truncated": 1}
    result = compute_score("aime_2025", CALL + " \\boxed{25}", "25", extra)
    expected = {"tool_calls": 2.0, "tool_ok": 1.0, "tool_timeout": 1.0, "tool_truncated": 1.0}
    assert {k: result[k] for k in OUTCOME_KEYS} == {k: expected.get(k, 0.0) for k in OUTCOME_KEYS}
    no_call = compute_score("aime_2025", "\\boxed{25}", "25", {"num_turns": 2})
    assert [no_call[k] for k in OUTCOME_KEYS] == [0.0] * len(OUTCOME_KEYS)
