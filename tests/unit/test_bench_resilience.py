"""bench/resilience.py renders what the resilience test measured, with the run's own date and host."""

from __future__ import annotations

import json

from bench_modules import load_bench


FACTS = {
    "date": "2026-12-01",
    "host": {"cpu_model": "AMD EPYC", "cores": 2, "dtype": "bfloat16"},
    "steps": 6,
    "save_every": 2,
    "killed_after_step": 3,
    "resumed_from_checkpoint": 2,
    "outage_s": 10.4,
    "trajectories_per_step": 32,
    "wall_s": 338.2,
    "per_step": {
        "tool_calls": {"1": 5, "4": 14},
        "tool_retried": {"4": 14},
        "tool_unavailable": {"4": 14},
        "trajectory_masked": {"4": 14},
        "tool_session_lost": {},
    },
    "sessions_before_outage": {"started": 12, "closed": 12, "died": 0, "evicted_idle": 0},
    "sessions_after_restart": {"started": 9, "closed": 8, "died": 1, "evicted_memory": 0},
    "first_sandbox_requests": {"first_launch": 40, "during_resume": 0},
}


def test_the_section_states_the_run_and_its_counts(tmp_path):
    bench = load_bench("resilience")
    run = tmp_path / "run"
    run.mkdir()
    (run / "resilience.json").write_text(json.dumps(FACTS))
    out = tmp_path / "performance.md"
    assert bench.main(["--from-run", str(run), "--output", str(out)]) == 0
    text = out.read_text()
    assert "<!-- resilience:start -->" in text and "Measured 2026-12-01 on AMD EPYC, 2 cores" in text
    assert "killed with SIGKILL after step 3" in text and "down for 10.4 s" in text
    assert (
        "the crashed run made 40 requests to its sandbox; a fresh sandbox on that URL counted 0 "
        "from the resumed run" in text
    )
    assert "| 4 | 14 | 14 | 14 | 14 | 0 |" in text and "| 1 | 5 | 0 | 0 | 0 | 0 |" in text
    assert "started 9 and closed 8, 1 died, and evicted 0" in text


def test_a_run_without_facts_is_an_error(tmp_path, capsys):
    assert load_bench("resilience").main(["--from-run", str(tmp_path)]) == 1
    assert "resilience.json not found" in capsys.readouterr().err
