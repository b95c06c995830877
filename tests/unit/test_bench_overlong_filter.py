"""bench/overlong_filter.py's paper figure: the arithmetic from the measured runs to a 192-core host's start-up time
and worker count, and a section that states the measurement beside the prediction."""

from __future__ import annotations

import importlib.util

import pytest

from retool.constants import REPO_ROOT

spec = importlib.util.spec_from_file_location("overlong_filter", REPO_ROOT / "bench" / "overlong_filter.py")
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)

MODEL = {"fixed_s": 5.0, "per_worker_s": 3.0, "efficiency": 0.9}
ROWS = 1_791_700


def run(workers, filter_s, hash_s=5.0, pickle_s=None, rows_kept=ROWS - 300, cls="RLHFDataset", group_s=0.0, distinct=0):
    return {
        "class": cls,
        "workers": workers,
        "rows_in": ROWS,
        "rows_kept": rows_kept,
        "load_s": 30.0,
        "filter_s": filter_s,
        "hash_s": hash_s,
        "pickle_s": 3.0 * workers if pickle_s is None else pickle_s,
        "jobs": workers,
        "job_mb": 15.1,
        "group_s": group_s,
        "distinct": distinct,
        "peak_rss_mb": 3000.0,
        "worker_peak_rss_mb": 900.0,
        "filter_cache_sets": 1,
    }


def test_per_row_cost_is_what_the_one_worker_run_spent_beyond_hashing_and_its_job():
    assert bench.per_row_seconds(1000, {"filter_s": 9.0, "hash_s": 5.0, "pickle_s": 3.0}) == pytest.approx(1e-3)
    assert bench.per_row_seconds(1000, {"filter_s": 7.0, "hash_s": 5.0, "pickle_s": 3.0}) == 0.0  # noise


def test_efficiency_compares_the_ideal_two_worker_time_with_what_the_run_spent_on_rows():
    # 1,000 rows x 1 ms: ideal 0.5 s on 2 workers
    assert bench.parallel_efficiency(1000, 1e-3, {"filter_s": 11.5, "hash_s": 5.0, "pickle_s": 6.0}) == 1.0
    assert bench.parallel_efficiency(1000, 1e-3, {"filter_s": 12.0, "hash_s": 5.0, "pickle_s": 6.0}) == pytest.approx(
        0.5
    )
    assert bench.parallel_efficiency(1000, 1e-3, {"filter_s": 11.2, "hash_s": 5.0, "pickle_s": 6.0}) == 1.0  # capped


def test_workers_pay_their_start_one_after_the_other_and_share_the_rows():
    per_row = 1e-3
    assert bench.predicted_seconds(ROWS, per_row, 1, **MODEL, slowdown=2.0) == pytest.approx(
        2 * (5 + 3 + ROWS * per_row)
    )
    assert bench.predicted_seconds(ROWS, per_row, 48, **MODEL) == pytest.approx(
        5 + 48 * 3 + ROWS * per_row / (48 * 0.9)
    )
    # the 30-row validation file: datasets starts one worker per row at most
    assert bench.predicted_seconds(30, per_row, 48, **MODEL) == pytest.approx(5 + 30 * 3 + 30 * per_row / (30 * 0.9))
    with pytest.raises(ValueError, match="workers must be >= 1"):
        bench.predicted_seconds(ROWS, per_row, 0, **MODEL)


def test_the_fastest_count_balances_starting_workers_against_sharing_rows():
    # t(N) = 5 + 3 N + 1791.7 / (0.9 N) is least near N = sqrt(1791.7 / 2.7) = 26: candidates 24 and 32
    assert bench.fastest_workers(ROWS, 1e-3, max_workers=96, **MODEL) == 24
    assert bench.fastest_workers(17_917, 1e-3, max_workers=96, **MODEL) == 2  # few rows: few workers
    assert bench.fastest_workers(17_917, 1e-3, max_workers=1, **MODEL) == 1


def facts(configured: int) -> dict:
    one = run(1, 5.0 + 3.0 + ROWS * 1e-3)  # c = 1 ms
    two = run(2, 5.0 + 6.0 + ROWS * 1e-3 / 2 / 0.9)  # e = 0.9
    launch = run(2, 40.0, cls="DistinctPromptFilterDataset", group_s=2.0, distinct=17_917)
    relaunch = {**run(1, 9.0), "rows_in": 64, "rows_kept": 64, "filter_cache_sets": 2}
    return {
        "date": "2026-12-02",
        "host": "Test CPU (x86_64), 2 cores",
        "load_before": "0.10 0.10 0.10",
        "load_after": "2.00 1.00 0.50",
        "problems": 17_917,
        "repeats": 100,
        "overlong": 3,
        "overlong_chars": 12_000,
        "length": {"median_chars": 326.0, "sigma": 0.63, "samples": 60},
        "runs": {"verl-1": one, "verl-2": two, "configured": launch, "relaunch": relaunch},
        "configured_workers": configured,
        "core_slowdown": 2.0,
        "budget_s": 120.0,
    }


def test_the_model_s_terms_come_from_the_runs():
    d = bench.derive(facts(2))
    assert d["per_row_ms"] == pytest.approx(1.0) and d["efficiency"] == pytest.approx(0.9)
    assert d["fixed_s"] == pytest.approx(5.0) and d["per_worker_s"] == pytest.approx(3.0)
    assert d["verl_one_s"] == pytest.approx(2 * (5 + 3 + ROWS * 1e-3))
    # the configured class: grouping every row, then verl's filter over the distinct prompts
    assert d["configured_s"] == pytest.approx(2 * 2.0 + 2 * (5 + 2 * 3 + 17_917 * 1e-3 / (2 * 0.9)))
    assert d["configured_val_s"] == pytest.approx(2 * (5 + 2 * 3 + 30 * 1e-3 / (2 * 0.9)))
    assert d["recommended"] in (1, 2)


def test_the_section_states_the_measurement_and_the_paper_figure():
    text = bench.render(facts(2))
    d = bench.derive(facts(2))
    assert "1,791,700 rows (17,917 problems x 100)" in text and "load average 0.10 0.10 0.10 before" in text
    assert "| DistinctPromptFilterDataset | 2 | 30.0 | 40.0 | 5.0 / 6.0 / 2.0 | 1,791,400 | 900 |" in text
    assert "the main process, which peaked at 3000 MB in the configured run" in text
    assert "the cache then held 2 sets of filter results" in text
    total = d["configured_s"] + d["configured_val_s"]
    assert f"**{total:.0f} s** against the 120 s budget (met)" in text
    assert f"takes **{d['verl_one_s'] / 60:.0f} min** with 1 worker" in text
    assert "(NOT met)" in bench.render({**facts(2), "budget_s": 30.0})
