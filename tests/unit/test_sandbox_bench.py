"""bench/sandbox_bench.py's report: the target verdicts and the per-mode sections of docs/performance.md."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("sandbox_bench", ROOT / "bench" / "sandbox_bench.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _row(workload: str, concurrency: int, sandbox_rps: float, bare_rps: float, p50: float = 20.0) -> dict:
    return {"workload": workload, "concurrency": concurrency,
            "sandbox": {"p50": p50, "p99": p50 * 2, "rps": sandbox_rps},
            "bare": {"p50": 25.0, "p99": 50.0, "rps": bare_rps}}


def _meta(mode: str) -> dict:
    return {"date": "2026-11-30", "machine": "test", "isolation": "bwrap", "mode": mode, "slots": 2,
            "python": "python", "requests": 10, "warmup": 1, "load_before": "0", "load_after": "0"}


def test_verdicts_use_the_worst_workload_at_concurrency_equal_to_cores(bench, monkeypatch):
    monkeypatch.setattr(bench.os, "cpu_count", lambda: 2)
    burst = {"jobs": 16, "finished": 16, "timeouts": 0, "seconds": 2.0}
    rows = [_row("print(1)", 1, 50, 40), _row("print(1)", 2, 89, 100), _row("import numpy", 2, 120, 100),
            _row("print(1)", 8, 10, 100)]  # concurrency 8 must not count
    text = bench.render(rows, burst, _meta("fork"))
    assert "worst **0.89 x** (print(1)) (NOT met)" in text
    assert "**-5.0 ms** (met)" in text
    rows[1] = _row("print(1)", 2, 95, 100)
    assert "worst **0.95 x** (print(1)) (met)" in bench.render(rows, burst, _meta("fork"))
    late = dict(burst, finished=15, timeouts=1)
    assert "**1 timeouts**, 15/16 finished in 2.0 s (NOT met)" in bench.render(rows, late, _meta("fork"))


def test_each_mode_replaces_only_its_own_section(bench, tmp_path):
    doc = tmp_path / "performance.md"
    doc.write_text("# Performance\n\nintro\n\n## CPU smoke run\n\nkept\n")
    burst = {"jobs": 16, "finished": 16, "timeouts": 0, "seconds": 2.0}
    for mode in ("fork", "fresh", "fork"):
        bench.write_section(doc, bench.render([_row("print(1)", 1, 50, 40)], burst, _meta(mode)), mode)
    text = doc.read_text()
    assert text.count("## Sandbox, fork mode") == 1 and text.count("## Sandbox, fresh mode") == 1
    assert "`bench/sandbox_bench.py --fresh-sandbox-per-run`" in text
    assert text.startswith("# Performance\n\nintro\n\n## CPU smoke run\n\nkept\n\n<!-- sandbox-bench-fork:start -->")
    assert "<!-- sandbox-bench-fork:end -->\n\n<!-- sandbox-bench-fresh:start -->" in text
