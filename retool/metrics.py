"""Evaluation metrics as pure functions: mean@n, the unbiased pass@k estimator, majority vote.

Contracts:
- A *problem* has n sampled answers; ``correct`` is a list of booleans (one per sample) and ``preds`` the
  extracted answers (``None`` when a sample gave no answer).
- ``mean_at_n`` is verl's ``acc/mean@n``: the mean accuracy of each problem, averaged over problems
  (equal to the plain mean over samples when every problem has the same n).
- ``pass_at_k`` is the unbiased estimator of Chen et al. (2021): the probability that at least one of k
  samples drawn without replacement from the n is correct, 1 - C(n-c, k) / C(n, k).
- ``majority_vote`` picks the most frequent non-empty answer (ties: the answer seen first) and reports
  whether it is correct. A problem where no sample answered counts as wrong.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Mapping, Sequence
from typing import Any


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k for one problem with ``n`` samples of which ``c`` are correct."""
    if n < 1:
        raise ValueError(f"pass_at_k needs n >= 1 samples, got n={n}")
    if not 0 <= c <= n:
        raise ValueError(f"pass_at_k needs 0 <= c <= n, got c={c}, n={n}")
    if not 1 <= k <= n:
        raise ValueError(f"pass_at_k needs 1 <= k <= n, got k={k}, n={n}: draw more samples or lower k")
    if n - c < k:
        return 1.0
    # Product form of C(n-c, k) / C(n, k): exact enough and never overflows.
    miss = 1.0
    for i in range(n - c + 1, n + 1):
        miss *= 1.0 - k / i
    return 1.0 - miss


def mean_at_n(correct_per_problem: Sequence[Sequence[bool]]) -> float:
    """Mean over problems of each problem's mean accuracy."""
    if not correct_per_problem:
        raise ValueError("mean_at_n needs at least one problem")
    means = []
    for index, correct in enumerate(correct_per_problem):
        if not correct:
            raise ValueError(f"mean_at_n: problem #{index} has no samples")
        means.append(sum(bool(x) for x in correct) / len(correct))
    return sum(means) / len(means)


def majority_answer(preds: Sequence[Hashable | None]) -> Hashable | None:
    """The most frequent non-None answer; ties go to the one that appeared first; None if none answered."""
    counts = Counter(p for p in preds if p is not None)
    if not counts:
        return None
    best = max(counts.values())
    return next(p for p in preds if p is not None and counts[p] == best)


def majority_vote(preds: Sequence[Hashable | None], correct: Sequence[bool]) -> bool:
    """Whether the majority answer of one problem is correct (judged by the samples that gave it)."""
    if len(preds) != len(correct):
        raise ValueError(f"majority_vote: {len(preds)} predictions but {len(correct)} correctness flags")
    answer = majority_answer(preds)
    if answer is None:
        return False
    return any(bool(ok) for p, ok in zip(preds, correct) if p == answer)


def pass_ks(n: int) -> list[int]:
    """The k values reported for n samples: 1, 4 and n (those that are <= n, without repeats)."""
    return sorted({k for k in (1, 4, n) if 1 <= k <= n})


def summarize(samples: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Aggregate per-sample records into the metrics of ``metrics.json``.

    Each record needs: ``problem_id`` (hashable), ``correct`` (bool), ``pred`` (answer or None),
    ``num_turns`` (int), ``tool_calls`` (int) and ``tool_errors`` (int). Every problem must have the same
    number of samples n (as an evaluation run produces); otherwise a ValueError names the problem.
    """
    if not samples:
        raise ValueError("summarize: no samples to aggregate")
    groups: dict[Hashable, list[Mapping[str, Any]]] = {}
    for index, record in enumerate(samples):
        missing = [
            key
            for key in ("problem_id", "correct", "pred", "num_turns", "tool_calls", "tool_errors")
            if key not in record
        ]
        if missing:
            raise ValueError(f"summarize: sample #{index} lacks keys {missing}")
        groups.setdefault(record["problem_id"], []).append(record)
    sizes = {len(group) for group in groups.values()}
    if len(sizes) != 1:
        uneven = {pid: len(group) for pid, group in groups.items()}
        raise ValueError(f"summarize: problems have different sample counts {uneven}; every problem needs n samples")
    n = sizes.pop()

    correct = [[bool(r["correct"]) for r in group] for group in groups.values()]
    preds = [[r["pred"] for r in group] for group in groups.values()]
    calls = sum(int(r["tool_calls"]) for r in samples)
    errors = sum(int(r["tool_errors"]) for r in samples)
    metrics: dict[str, Any] = {f"acc/mean@{n}": mean_at_n(correct)}
    for k in pass_ks(n):
        metrics[f"acc/pass@{k}"] = sum(pass_at_k(n, sum(c), k) for c in correct) / len(correct)
    metrics[f"acc/maj@{n}"] = sum(majority_vote(p, c) for p, c in zip(preds, correct)) / len(correct)
    metrics["num_turns/mean"] = sum(int(r["num_turns"]) for r in samples) / len(samples)
    metrics["tool_calls/per_answer"] = calls / len(samples)
    # No call made: the rate is undefined, not perfect.
    metrics["tool/success_rate"] = (calls - errors) / calls if calls else None
    metrics["answered/rate"] = sum(r["pred"] is not None for r in samples) / len(samples)
    metrics["counts"] = {
        "problems": len(groups),
        "samples": len(samples),
        "n": n,
        "correct": sum(sum(c) for c in correct),
        "tool_calls": calls,
        "tool_errors": errors,
        "samples_with_tool_call": sum(int(r["tool_calls"]) > 0 for r in samples),
    }
    return metrics
