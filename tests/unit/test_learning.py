"""retool.learning on dumps written here in verl's validation/rollout JSONL layout."""

from __future__ import annotations

import json
import random
import statistics
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from scipy import stats

from retool.learning import (
    LearningDataError,
    grpo_advantages,
    main,
    paired_change,
    report,
    t_quantile,
    tool_credit,
    training_curve,
    validation_changes,
)

PROMPTS = [f"What is {i} * 7?" for i in range(12)]


def rendered(question: str) -> str:
    return f"system\n# Tools ...\nuser\n{question}\n\nPlease reason step by step.\nassistant\n"


def record(question: str, used_tool: float, acc: float, score: float | None = None) -> dict:
    output = ("<tool_call>{}</tool_call>user\n<tool_response>\n7\n</tool_response>" if used_tool else "") + "\\boxed{7}"
    return {
        "input": rendered(question),
        "output": output,
        "gts": "7",
        "step": 0,
        "used_tool": used_tool,
        "acc": acc,
        "score": score if score is not None else (1.0 if acc else -1.0) - (0 if used_tool else 0.4),
    }


def write_dump(folder: Path, step: int, records: list[dict]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{step}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))


def two_validations(folder: Path, before_rate: float, after_rate: float, n: int = 4) -> None:
    """Each prompt sampled n times; the first round(rate * n) samples of a prompt used the tool."""
    for step, rate in ((0, before_rate), (10, after_rate)):
        write_dump(folder, step, [record(q, float(k < round(rate * n)), 0.0) for q in PROMPTS for k in range(n)])


def test_a_clear_rise_is_a_rise_and_a_clear_fall_a_fall(tmp_path):
    two_validations(tmp_path / "up", 0.25, 1.0)
    change = validation_changes(tmp_path / "up")["used_tool"]
    assert (change.before, change.after, change.delta) == pytest.approx((0.25, 1.0, 0.75))
    assert change.low > 0 and change.verdict == "rose" and change.prompts == 12
    assert "used_tool 0.250 -> 1.000 (+0.750" in change.sentence() and change.sentence().endswith(": rose")
    two_validations(tmp_path / "down", 0.75, 0.25)
    assert validation_changes(tmp_path / "down")["used_tool"].verdict == "fell"


def test_noise_around_no_change_is_not_called_a_rise(tmp_path):
    folder = tmp_path / "flat"
    before = [record(q, float((i + k) % 2), 0.0) for i, q in enumerate(PROMPTS) for k in range(2)]
    after = [record(q, float(i % 3 == 0), 0.0) for i, q in enumerate(PROMPTS) for k in range(2)]
    write_dump(folder, 0, before)
    write_dump(folder, 5, after)
    change = validation_changes(folder)["used_tool"]
    assert change.low < 0 < change.high and change.verdict == "no clear change"


def test_interval_is_student_t_on_prompt_differences():
    before = [record(q, 0.0, 0.0) for q in PROMPTS[:3]]
    after = [record(PROMPTS[0], 1.0, 0.0), record(PROMPTS[1], 0.0, 0.0), record(PROMPTS[2], 1.0, 0.0)]
    change = paired_change(before, after, "used_tool")
    # diffs 1, 0, 1: mean 2/3, sd 0.57735, t(2) = 4.303 -> half width 1.4343
    assert change.delta == pytest.approx(2 / 3)
    assert change.high - change.delta == pytest.approx(4.303 * 0.57735 / 3**0.5, rel=1e-4)


@pytest.mark.parametrize("prompts", [2, 5, 21, 64, 200])
def test_interval_matches_scipy_for_every_number_of_prompts(prompts):
    """The exact degrees of freedom: 64 prompts use t(63) = 1.998, not a rounded-up t(120) = 1.980."""
    rng = random.Random(prompts)
    questions = [f"What is {i} * 11?" for i in range(prompts)]
    before = [record(q, float(rng.random() < 0.3), float(rng.random() < 0.2)) for q in questions for _ in range(4)]
    after = [record(q, float(rng.random() < 0.6), float(rng.random() < 0.5)) for q in questions for _ in range(4)]
    for metric in ("used_tool", "acc", "score"):
        change = paired_change(before, after, metric)
        by_prompt = {q: ([], []) for q in questions}
        for side, records in enumerate((before, after)):
            for r in records:
                by_prompt[r["input"].split("user\n")[1].split("\n")[0]][side].append(r[metric])
        diffs = [statistics.fmean(b) - statistics.fmean(a) for a, b in by_prompt.values()]
        if statistics.pstdev(diffs) == 0:
            continue
        expected = stats.ttest_1samp(diffs, 0.0).confidence_interval(0.95)
        assert (change.low, change.high) == pytest.approx((expected.low, expected.high), rel=1e-9, abs=1e-12)
    assert t_quantile(prompts - 1) == pytest.approx(stats.t.ppf(0.975, prompts - 1), rel=1e-12)


def test_t_quantile_needs_two_prompts():
    assert t_quantile(63) == pytest.approx(1.9983405, rel=1e-6) and t_quantile(1) == pytest.approx(12.7062, rel=1e-4)
    with pytest.raises(ValueError, match="at least 2 prompts"):
        t_quantile(0)


def test_tool_use_is_read_from_the_text_when_the_reward_did_not_record_it(tmp_path):
    records = [record(q, 1.0, 0.0) for q in PROMPTS]
    for r in records:
        del r["used_tool"]
    write_dump(tmp_path / "rollouts", 1, records)
    write_dump(tmp_path / "rollouts", 2, [record(q, 0.0, 0.0) for q in PROMPTS])
    curve = training_curve(tmp_path / "rollouts")
    assert curve["used_tool"] == [(1, 1.0), (2, 0.0)]
    assert [step for step, _ in curve["score"]] == [1, 2]
    assert [value for _, value in curve["score"]] == pytest.approx([-1.0, -1.4])


def test_a_validation_file_narrows_a_multi_set_dump(tmp_path):
    folder = tmp_path / "val"
    aime = [record("Find the number of ordered pairs", 0.0, 0.0)] * 4
    write_dump(folder, 0, aime + [record(q, 0.0, 0.0) for q in PROMPTS])
    write_dump(folder, 5, aime + [record(q, 1.0, 1.0) for q in PROMPTS])
    val_file = tmp_path / "synthetic.parquet"
    pq.write_table(
        pa.table({"prompt": [[{"role": "user", "content": f"{q}\n\nPlease reason step by step."}] for q in PROMPTS]}),
        val_file,
    )
    result = report(folder, val_file=val_file)
    assert result["changes"]["acc"]["prompts"] == 12 and result["changes"]["acc"]["delta"] == pytest.approx(1.0)
    assert report(folder)["changes"]["acc"]["prompts"] == 13  # without the file, AIME is mixed in


def test_unusable_dumps_name_what_is_wrong(tmp_path, capsys):
    with pytest.raises(LearningDataError, match="does not exist"):
        validation_changes(tmp_path / "nowhere")
    write_dump(tmp_path / "one", 0, [record(q, 0.0, 0.0) for q in PROMPTS])
    with pytest.raises(LearningDataError, match="holds 1 validation"):
        validation_changes(tmp_path / "one")
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "3.jsonl").write_text('{"input": 1}\nnot json\n')
    assert main(["--validation", str(tmp_path / "bad")]) == 1
    assert "3.jsonl:2: not JSON" in capsys.readouterr().err


def test_cli_prints_the_verdicts_and_writes_json(tmp_path, capsys):
    two_validations(tmp_path / "val", 0.25, 1.0)
    assert main(["--validation", str(tmp_path / "val"), "--json", str(tmp_path / "r.json")]) == 0
    out = capsys.readouterr().out
    assert "used_tool 0.250 -> 1.000" in out and ": rose" in out
    assert json.loads((tmp_path / "r.json").read_text())["changes"]["used_tool"]["verdict"] == "rose"


def trained(group: str, sample: int, used_tool: float, answer: str, truth: str = "7", reply: str = "7") -> dict:
    """A training-dump record of verl's v1 trainer: key <uid>_<session>_<output>, the reward's fields."""
    output = (
        f"<tool_call>{{}}</tool_call>user\n<tool_response>\n{reply}\n</tool_response>assistant\n" if used_tool else ""
    ) + f"\\boxed{{{answer}}}"
    right = float(answer == truth)
    return {
        "input": rendered(f"What is {group}?"),
        "output": output,
        "uid": f"{group}_{sample}_0",
        "pred": answer,
        "gts": truth,
        "used_tool": used_tool,
        "acc": right,
        "has_answer": 1.0,
        "score": 1.0 if right else -1.0,
    }


def test_tool_credit_counts_only_groups_with_reward_variance_and_who_won_them(tmp_path):
    # step 1: group a's right answer used the tool (copied from a reply of 7); group b all wrong (advantage 0)
    # step 2: group c's right answer came without the tool; the reply 6 was changed into the right 7 in group d
    write_dump(
        tmp_path,
        1,
        [
            trained("a", 0, 1.0, "7"),
            trained("a", 1, 1.0, "8"),
            trained("a", 2, 0.0, "5"),
            trained("a", 3, 0.0, "5"),
            *(trained("b", k, float(k % 2), "9") for k in range(4)),
        ],
    )
    write_dump(
        tmp_path,
        2,
        [
            trained("c", 0, 0.0, "7"),
            *(trained("c", k, 1.0, "9") for k in (1, 2, 3)),
            trained("d", 0, 1.0, "7", reply="6"),
            *(trained("d", k, 1.0, "6", reply="6") for k in (1, 2, 3)),
        ],
    )
    credit = tool_credit(tmp_path)
    first, second = credit["steps"][1], credit["steps"][2]
    # group a: scores (1, -1, -1, -1) -> advantages (1.5, -0.5, -0.5, -0.5); tool samples 1.5 - 0.5 = +1 over 8
    assert (first["informative_groups"], first["groups"], first["won"]) == (1, 2, {"tool": 1, "no_tool": 0, "both": 0})
    assert first["push"] == pytest.approx(1.0 / 8, abs=1e-4)
    assert (first["right_tool"], first["right_tool_copied"], first["right_no_tool"]) == (1, 1, 0)
    # group c: three tool samples at -0.5 each; group d: all tool, so it moves no tool use (push 0)
    assert second["won"] == {"tool": 1, "no_tool": 1, "both": 0} and second["push"] == pytest.approx(-1.5 / 8, abs=1e-4)
    assert (second["right_tool"], second["right_tool_copied"], second["right_no_tool"]) == (1, 0, 1)
    total = credit["total"]
    assert (total["informative_groups"], total["groups"], total["steps_without_gradient"]) == (3, 4, 0)
    assert total["push"] == pytest.approx(-0.5 / 8, abs=1e-4) and total["tool_samples"] == 11
    assert (first["one_below"], second["one_below"]) == (0, 3)  # group d's "6": the truth 7 minus one


def test_a_run_where_every_answer_is_wrong_has_no_gradient_step(tmp_path):
    for step in (1, 2):
        write_dump(tmp_path, step, [trained(g, k, float(k < 2), "5") for g in "ab" for k in range(4)])
    total = tool_credit(tmp_path)["total"]
    assert (total["informative_groups"], total["push"], total["steps_without_gradient"]) == (0, 0.0, 2)


@pytest.mark.verl
def test_the_recomputed_advantage_is_verl_s_grpo_advantage():
    import numpy as np
    import torch
    from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage

    groups = [[1.0, -1.0, -1.0, -1.0], [-1.0] * 4, [1.0, 1.0, -1.0, 1.0], [0.5, -0.3, 1.0, -1.0]]
    scores = torch.tensor([[s] for group in groups for s in group])
    index = np.array([str(i) for i, group in enumerate(groups) for _ in group])
    verl_advantages, _ = compute_grpo_outcome_advantage(scores, torch.ones_like(scores), index)
    ours = [a for group in groups for a in grpo_advantages(group)]
    assert verl_advantages.flatten().tolist() == pytest.approx(ours, abs=1e-5)


def test_a_dump_without_group_keys_leaves_the_verdict_and_says_why_credit_is_missing(tmp_path):
    two_validations(tmp_path / "val", 0.25, 1.0)
    write_dump(tmp_path / "rollouts", 1, [record(q, 1.0, 1.0) for q in PROMPTS])  # no "uid"
    result = report(tmp_path / "val", tmp_path / "rollouts")
    assert result["changes"]["used_tool"]["verdict"] == "rose"
    assert "<uid>_<session>_<output>" in result["tool_credit"]["error"]
