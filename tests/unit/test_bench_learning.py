"""bench/learning_signal.py --from-runs: the section it writes says what the runs measured (their own dates, hosts and
commits) and checks the benchmark's claims on them."""

from __future__ import annotations

import importlib.util
import json

from retool.constants import REPO_ROOT

spec = importlib.util.spec_from_file_location("learning_signal", REPO_ROOT / "bench" / "learning_signal.py")
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)


def change(before, after, low, high, verdict):
    return {"before": before, "after": after, "delta": after - before, "low": low, "high": high, "verdict": verdict,
            "prompts": 64, "samples_after": 256}


def result(acc, started):
    return {"changes": {"acc": acc, "used_tool": change(0.5, 0.9, 0.3, 0.5, "rose"),
                        "score": change(-0.3, 0.4, 0.5, 0.9, "rose")},
            "training_curve": {"acc": [[1, 0.3], [2, 0.5]]}, "steps": 12, "prompts_per_step": 8, "n": 4,
            "lr": 3e-4, "reward": "pkg://retool.reward:compute_score", "tool_shaping": "none", "val_n": 4,
            "wall_s": 300.0,
            "measured": {"started": started, "commit": "abc1234",
                         "host": {"cpu_model": "Test CPU", "dtype": "float32", "isa_limits": {"ATEN_CPU_CAPABILITY": "avx2"}}}}


def write_runs(folder, control_acc):
    rose = change(0.35, 0.70, 0.25, 0.45, "rose")
    runs = {"grpo-smoke": rose, "grpo-seed2": rose, "grpo-seed3": rose,
            "negated": change(0.35, 0.0, -0.4, -0.3, "fell"), "wrong_tool": control_acc}
    for i, (name, acc) in enumerate(runs.items()):
        (folder / name).mkdir(parents=True)
        (folder / name / "learning.json").write_text(json.dumps(result(acc, f"2026-11-2{i}T10:00:00+00:00")))


def test_the_section_holds_each_run_s_own_date_host_and_commit(tmp_path):
    write_runs(tmp_path / "runs", change(0.0, 0.0, 0.0, 0.0, "no clear change"))
    out = tmp_path / "performance.md"
    assert bench.main(["--from-runs", str(tmp_path / "runs"), "--output", str(out)]) == 0
    text = out.read_text()
    assert "2026-11-20T10:00:00+00:00, Test CPU with ATEN_CPU_CAPABILITY=avx2, float32, commit abc1234" in text
    assert "2026-11-24T10:00:00+00:00" in text
    assert "| GRPO, seed 3 | acc | 0.350 | 0.700 | +0.350 | [+0.250, +0.450] | rose |" in text
    assert "held-out accuracy rose in every seed (3): 95% interval above 0: **yes**" in text
    assert "control: tool result off by one: accuracy did not rise: **yes**" in text
    assert (tmp_path / "img" / "learning_signal.png").stat().st_size > 0


def test_a_control_that_rises_fails_the_benchmark(tmp_path):
    write_runs(tmp_path / "runs", change(0.0, 0.2, 0.1, 0.3, "rose"))
    out = tmp_path / "performance.md"
    assert bench.main(["--from-runs", str(tmp_path / "runs"), "--output", str(out)]) == 1
    assert "control: tool result off by one: accuracy did not rise: **NO**" in out.read_text()
