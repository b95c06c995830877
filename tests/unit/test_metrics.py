"""Known values of the evaluation metrics (retool.metrics)."""

from __future__ import annotations

import itertools
import math

import pytest

from retool.metrics import majority_answer, majority_vote, mean_at_n, pass_at_k, pass_ks, summarize


@pytest.mark.parametrize(
    ("n", "c", "k", "expected"),
    [
        (5, 2, 1, 0.4),
        (5, 2, 2, 1 - 3 / 10),  # 1 - C(3,2)/C(5,2)
        (10, 3, 4, 1 - 35 / 210),  # 1 - C(7,4)/C(10,4)
        (4, 0, 4, 0.0),
        (4, 4, 1, 1.0),
        (4, 1, 4, 1.0),
        (30, 9, 1, 0.3),
    ],
)
def test_pass_at_k_known_values(n: int, c: int, k: int, expected: float) -> None:
    assert pass_at_k(n, c, k) == pytest.approx(expected, abs=1e-12)


def test_pass_at_k_equals_enumeration_of_all_draws() -> None:
    # Independent check: the fraction of k-subsets of the n samples that hold a correct one.
    for n in range(1, 8):
        for c in range(n + 1):
            samples = [True] * c + [False] * (n - c)
            for k in range(1, n + 1):
                draws = list(itertools.combinations(samples, k))
                brute = sum(any(d) for d in draws) / len(draws)
                assert pass_at_k(n, c, k) == pytest.approx(brute, abs=1e-12), (n, c, k)


def test_pass_at_k_large_n_does_not_overflow() -> None:
    exact = 1 - math.comb(900, 100) / math.comb(1000, 100)
    assert pass_at_k(1000, 100, 100) == pytest.approx(exact, rel=1e-9)


@pytest.mark.parametrize(("n", "c", "k"), [(0, 0, 1), (3, 4, 1), (3, -1, 1), (3, 1, 0), (3, 1, 4)])
def test_pass_at_k_rejects_bad_arguments(n: int, c: int, k: int) -> None:
    with pytest.raises(ValueError, match="pass_at_k"):
        pass_at_k(n, c, k)


def test_mean_at_n() -> None:
    assert mean_at_n([[True, False], [True, True]]) == pytest.approx(0.75)
    # Problems weigh equally even with unequal sample counts.
    assert mean_at_n([[True], [False, False, True]]) == pytest.approx((1 + 1 / 3) / 2)
    with pytest.raises(ValueError, match="problem #1"):
        mean_at_n([[True], []])
    with pytest.raises(ValueError):
        mean_at_n([])


def test_majority_vote() -> None:
    assert majority_answer(["5", "7", "5", None]) == "5"
    assert majority_vote(["5", "7", "5", None], [True, False, True, False]) is True
    assert majority_vote(["5", "7", "7", None], [True, False, False, False]) is False
    # Tie: the answer seen first wins.
    assert majority_answer(["7", "5", "5", "7"]) == "7"
    assert majority_vote(["7", "5", "5", "7"], [False, True, True, False]) is False
    # None never wins, even when most samples gave no answer.
    assert majority_answer([None, None, "3"]) == "3"
    assert majority_vote([None, None, None], [False, False, False]) is False
    with pytest.raises(ValueError, match="2 predictions but 1"):
        majority_vote(["1", "2"], [True])


def test_pass_ks() -> None:
    assert pass_ks(30) == [1, 4, 30]
    assert pass_ks(4) == [1, 4]
    assert pass_ks(2) == [1, 2]
    assert pass_ks(1) == [1]


def _record(pid: str, correct: bool, pred: str | None, turns: int, calls: int, errors: int) -> dict:
    return {
        "problem_id": pid,
        "correct": correct,
        "pred": pred,
        "num_turns": turns,
        "tool_calls": calls,
        "tool_errors": errors,
    }


def test_summarize_known_values() -> None:
    samples = [
        _record("a", True, "12", 4, 1, 0),
        _record("a", False, "13", 2, 0, 0),
        _record("a", True, "12", 6, 2, 1),
        _record("a", False, None, 2, 0, 0),
        _record("b", False, "1", 4, 1, 1),
        _record("b", False, "2", 2, 0, 0),
        _record("b", False, "2", 2, 0, 0),
        _record("b", True, "3", 4, 1, 0),
    ]
    m = summarize(samples)
    assert m["acc/mean@4"] == pytest.approx((2 / 4 + 1 / 4) / 2)
    assert m["acc/pass@1"] == pytest.approx(m["acc/mean@4"])
    assert m["acc/pass@4"] == pytest.approx(1.0)
    assert {k for k in m if k.startswith("acc/pass@")} == {"acc/pass@1", "acc/pass@4"}
    assert m["acc/maj@4"] == pytest.approx(0.5)  # a: "12" right; b: "2" wrong
    assert m["num_turns/mean"] == pytest.approx(26 / 8)
    assert m["tool_calls/per_answer"] == pytest.approx(5 / 8)
    assert m["tool/success_rate"] == pytest.approx(3 / 5)
    assert m["answered/rate"] == pytest.approx(7 / 8)
    assert m["counts"] == {
        "problems": 2,
        "samples": 8,
        "n": 4,
        "correct": 3,
        "tool_calls": 5,
        "tool_errors": 2,
        "samples_with_tool_call": 4,
    }


def test_summarize_without_tool_calls_has_no_success_rate() -> None:
    m = summarize([_record("a", False, None, 2, 0, 0), _record("a", True, "1", 2, 0, 0)])
    assert m["tool/success_rate"] is None
    assert m["acc/mean@2"] == pytest.approx(0.5)
    assert m["acc/pass@2"] == pytest.approx(1.0)


def test_summarize_rejects_uneven_or_incomplete_records() -> None:
    with pytest.raises(ValueError, match="different sample counts"):
        summarize(
            [_record("a", True, "1", 2, 0, 0), _record("a", True, "1", 2, 0, 0), _record("b", True, "1", 2, 0, 0)]
        )
    with pytest.raises(ValueError, match=r"sample #0 lacks keys \['pred'\]"):
        summarize([{"problem_id": "a", "correct": True, "num_turns": 2, "tool_calls": 0, "tool_errors": 0}])
    with pytest.raises(ValueError, match="no samples"):
        summarize([])
