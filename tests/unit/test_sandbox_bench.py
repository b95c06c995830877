"""bench/sandbox_bench.py's report: the target verdicts, prose that only restates the measured tables, and the
per-mode sections of docs/performance.md."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BURST = {"jobs": 16, "finished": 16, "timeouts": 0, "seconds": 2.0}


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("sandbox_bench", ROOT / "bench" / "sandbox_bench.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _side(p50: float, rps: float) -> dict:
    return {"p50": p50, "p99": p50 * 2, "rps": rps}


def _row(
    workload: str,
    concurrency: int,
    sandbox_rps: float,
    bare_rps: float,
    p50: float = 20.0,
    bare_p50: float = 25.0,
    **extra,
) -> dict:
    return {
        "workload": workload,
        "concurrency": concurrency,
        "sandbox": _side(p50, sandbox_rps),
        "bare": _side(bare_p50, bare_rps),
        **extra,
    }


def _meta(mode: str, **extra) -> dict:
    return {
        "date": "2026-11-30",
        "machine": "test",
        "isolation": "bwrap",
        "mode": mode,
        "slots": 2,
        "cores": 2,
        "python": "python",
        "requests": 10,
        "warmup": 1,
        "load_before": "0",
        "load_after": "0",
        **extra,
    }


def test_verdicts_use_the_worst_workload_at_concurrency_equal_to_cores(bench, monkeypatch):
    monkeypatch.setattr(bench.os, "cpu_count", lambda: 2)
    rows = [
        _row("print(1)", 1, 50, 40),
        _row("print(1)", 2, 89, 100),
        _row("import numpy", 2, 120, 100),
        _row("print(1)", 8, 10, 100),
    ]  # concurrency 8 must not count
    meta = _meta("fork")
    del meta["cores"]  # saved by older runs: the machine's count is used
    text = bench.render(rows, BURST, meta)
    assert "worst **0.89 x** (print(1)) (NOT met)" in text
    assert "**-5.0 ms** (met)" in text
    rows[1] = _row("print(1)", 2, 95, 100)
    assert "worst **0.95 x** (print(1)) (met)" in bench.render(rows, BURST, meta)
    late = dict(BURST, finished=15, timeouts=1)
    assert "**1 timeouts**, 15/16 finished in 2.0 s (NOT met)" in bench.render(rows, late, meta)


def test_preimport_target_takes_the_smaller_of_latency_and_throughput_ratio(bench):
    rows = [
        _row("import numpy", 1, 60, 10, p50=15, bare_p50=90),  # p50 6.0 x, throughput 6.0 x
        _row("import numpy", 2, 110, 20, p50=16, bare_p50=95),  # 5.9 x, 5.5 x
        _row("import sympy", 1, 70, 3, p50=14, bare_p50=300),  # 21.4 x, 23.3 x
        _row("import sympy", 2, 130, 6, p50=15, bare_p50=310),  # 20.7 x, 21.7 x
    ]
    text = bench.render(rows, BURST, _meta("fork", preimport=["numpy", "scipy", "sympy", "mpmath"]))
    assert (
        "import numpy at 1: **6.0 x**, import numpy at 2: **5.5 x**, import sympy at 1: **21.4 x**, "
        "import sympy at 2: **20.7 x** (met)"
    ) in text
    rows[1] = _row("import numpy", 2, 90, 20, p50=16, bare_p50=95)  # throughput only 4.5 x
    text = bench.render(rows, BURST, _meta("fork", preimport=["sympy"]))
    assert "import numpy at 2: **4.5 x**" in text and "(NOT met; the server did not preimport numpy)" in text
    partial = bench.render(rows[:1], BURST, _meta("fork"))
    assert "import numpy at 1: **6.0 x** (not judged: only these rows were measured)" in partial


def _numbers(text: str) -> set[str]:
    return set(re.findall(r"(?<![\w.])\d+(?:\.\d+)?", text))  # not the 50 of "p50"


def _derivable(bench, rows: list[dict], meta: dict) -> set[str]:
    """Every number the report may state: the table's cells, what is computed from them, the run's settings."""
    allowed = set()
    for r in rows:
        allowed |= _numbers(r["workload"]) | {str(r["concurrency"])}
        sides = [side for side in ("sandbox", "bare", "sandboxfusion") if side in r]
        for side in sides:
            allowed |= {f"{r[side][key]:.1f}" for key in ("p50", "p99", "rps")}
            ratio = r[side]["rps"] / r["bare"]["rps"]
            latency = r["bare"]["p50"] / r[side]["p50"]
            allowed |= {f"{ratio:.2f}", f"{latency:.2f}", f"{1 / latency:.2f}", f"{bench.speedup(r, side):.1f}"}
        allowed.add(f"{abs(r['sandbox']['p50'] - r['bare']['p50']):.1f}")
    allowed |= {str(n) for n in range(len(rows) + 1)}  # "k of n rows"
    allowed |= {"0.9", "25", "5", "1", "2"}  # the targets and their concurrency levels
    allowed |= _numbers(" ".join(str(v) for v in meta.values())) | _numbers(" ".join(map(str, BURST.values())))
    allowed |= {f"{BURST['seconds']:.1f}", "64"}
    return allowed


def _prose(text: str) -> str:
    return "\n".join(line for line in text.splitlines() if not line.startswith("|"))


@pytest.mark.parametrize("scale", [1.0, 3.7])
def test_every_number_in_the_prose_comes_from_the_table(bench, scale):
    rows = [
        _row("print(1)", 1, 70 * scale, 35, p50=14 / scale),
        _row("print(1)", 2, 130, 70 * scale),
        _row("import numpy", 1, 60, 11 * scale, p50=15, bare_p50=88 * scale),
        _row("sympy factorint(2**64-1)", 2, 6.3 * scale, 6.2, p50=310, bare_p50=318),
    ]
    meta = _meta("fork", preimport=["numpy"])
    text = bench.render(rows, BURST, meta)
    stray = _numbers(_prose(text)) - _derivable(bench, rows, meta)
    assert not stray, (stray, _prose(text))


def test_the_readings_change_with_the_tables(bench):
    fast = [_row("print(1)", 1, 70, 35, p50=14, bare_p50=28), _row("print(1)", 2, 130, 70)]
    slow = [_row("print(1)", 1, 30, 35, p50=40, bare_p50=28), _row("print(1)", 2, 50, 70)]
    a, b = (bench.render(rows, BURST, _meta("fork")) for rows in (fast, slow))
    assert "print(1) 14.0 vs 28.0 ms (sandbox 2.00 x faster)" in a
    assert "print(1) 40.0 vs 28.0 ms (sandbox 1.43 x slower)" in b
    assert "ranged from 1.86 x (print(1), concurrency 2) to 2.00 x (print(1), concurrency 1); 0 of 2 rows" in a
    assert "ranged from 0.71 x (print(1), concurrency 2) to 0.86 x (print(1), concurrency 1); 2 of 2 rows" in b
    assert _prose(a).split("Targets:")[1] != _prose(b).split("Targets:")[1]


def test_no_fixed_figures_and_sandboxfusion_only_when_measured(bench):
    rows = [_row("print(1)", 1, 70, 35), _row("sympy factorint(2**64-1)", 32, 5.9, 4.4, p50=2672, bare_p50=6482)]
    for mode in ("fork", "fresh", "external"):
        text = bench.render(rows, BURST, _meta(mode))
        for fixed in ("SandboxFusion", "469de08", "0.4 x", "9.6 s", "~10 ms", "beats", "converge", "~0.3 s"):
            assert fixed not in text, (fixed, mode)
    measured = [dict(rows[0], sandboxfusion=_side(60.0, 14.0)), dict(rows[1], sandboxfusion=_side(9000.0, 2.2))]
    text = bench.render(measured, BURST, _meta("fork"))
    assert "`bench/sandbox_bench.py --sandboxfusion-url ...`" in text
    assert "| print(1) | 1 | 20.0 / 40.0 | 70.0 | 25.0 / 50.0 | 35.0 | 60.0 / 120.0 | 14.0 | -5.0 | 2.00 |" in text
    assert (
        "SandboxFusion, measured in this run, reached 0.40 x (print(1), concurrency 1) to 0.50 x (sympy "
        "factorint(2**64-1), concurrency 32) of bare throughput; its highest p99 was 18000.0 ms"
    ) in text


def test_the_interpreter_is_named_relative_to_the_repository(bench):
    for python, shown in (
        (f"{ROOT}/.venv/bin/python", ".venv/bin/python"),
        ("/usr/bin/python3", "python3"),
        (".venv/bin/python", ".venv/bin/python"),
    ):  # saved runs keep the display form
        text = bench.render([_row("print(1)", 1, 70, 35)], BURST, _meta("fork", python=python))
        assert f"interpreter `{shown}` for both sides" in text
        assert str(ROOT) not in text and "/usr/" not in text


def test_each_mode_replaces_only_its_own_section(bench, tmp_path):
    doc = tmp_path / "performance.md"
    doc.write_text("# Performance\n\nintro\n\n## CPU smoke run\n\nkept\n")
    for mode in ("fork", "fresh", "fork"):
        bench.write_section(doc, bench.render([_row("print(1)", 1, 50, 40)], BURST, _meta(mode)), mode)
    text = doc.read_text()
    assert text.count("## Sandbox, fork mode") == 1 and text.count("## Sandbox, fresh mode") == 1
    assert "`bench/sandbox_bench.py --fresh-sandbox-per-run`" in text
    assert text.startswith("# Performance\n\nintro\n\n## CPU smoke run\n\nkept\n\n<!-- sandbox-bench-fork:start -->")
    assert "<!-- sandbox-bench-fork:end -->\n\n<!-- sandbox-bench-fresh:start -->" in text


def test_machine_names_an_arm_cpu(bench, monkeypatch, tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nBogoMIPS\t: 200.00\nCPU implementer\t: 0x48\nCPU part\t: 0xd01\n")
    real = bench.Path

    monkeypatch.setattr(bench, "Path", lambda p: real(cpuinfo) if p == "/proc/cpuinfo" else real(p))
    assert bench._cpu_model() == "HiSilicon Kunpeng 920"


def _sessions_row(cell: str, sessions: int, before: float, idle: float, pss: float | None) -> dict:
    return {
        "cell": cell,
        "sessions": sessions,
        "live": sessions,
        "opened_s": 2.5,
        "first_p50": 120.0,
        "first_p99": 400.0,
        "later_p50": 40.0,
        "mem_before": before,
        "mem_idle": idle,
        "mem_closed": before,
        "pss": pss,
        "floor_mb": 2048,
        "max_sessions": 1024,
    }


def test_the_sessions_section_states_what_was_measured_and_what_fits(bench):
    meta = {
        "date": "2026-12-01",
        "machine": "test",
        "isolation": "bwrap",
        "slots": 2,
        "concurrency": 4,
        "command": "--sessions 100 --session-cells plain,numpy+sympy:50",
    }
    rows = [
        _sessions_row("plain", 100, 20048.0, 19048.0, 700.0),  # 10 MiB by MemAvailable, 7 by Pss
        _sessions_row("numpy+sympy", 50, 20048.0, 17548.0, 4000.0),
    ]  # 50 by MemAvailable, 80 by Pss
    text = bench.render_sessions(rows, meta)
    assert "| plain: `x = 1` | 100 | 100 | 2.5 | 120.0 / 400.0 | 40.0 | 10.0 | 7.0 | 1800 |" in text
    # the larger per-session figure decides what fits: (20048 - 2048) / 80
    assert (
        "| numpy+sympy: `import numpy, sympy; x = numpy.arange(10)` | 50 | 50 | 2.5 | 120.0 / 400.0 | 40.0 "
        "| 50.0 | 80.0 | 225 |" in text
    )
    assert (
        "`bench/sandbox_bench.py --sessions 100 --session-cells plain,numpy+sympy:50`" in text
        and "memory floor 2048 MiB" in text
    )
    unknown = bench.render_sessions([_sessions_row("plain", 10, 12048.0, 11948.0, None)], meta)
    assert "| 10.0 | - | 1000 |" in unknown  # not root: no Pss, MemAvailable alone
