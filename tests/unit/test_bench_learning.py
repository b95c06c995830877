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
    return {
        "before": before,
        "after": after,
        "delta": after - before,
        "low": low,
        "high": high,
        "verdict": verdict,
        "prompts": 64,
        "samples_after": 256,
    }


ROSE = change(0.5, 0.9, 0.3, 0.5, "rose")
FLAT = change(0.5, 0.52, -0.06, 0.1, "no clear change")


def credit(informative, won_tool, right_tool, copied, push, one_below=0):
    return {
        "total": {
            "samples": 384,
            "tool_samples": 200,
            "groups": 96,
            "informative_groups": informative,
            "won": {"tool": won_tool, "no_tool": informative - won_tool, "both": 0},
            "push": push,
            "right_tool": right_tool,
            "right_tool_copied": copied,
            "right_no_tool": 0,
            "one_below": one_below,
            "steps_without_gradient": 12 if informative == 0 else 3,
        }
    }


def result(acc, started, used_tool=ROSE, tool_credit=None):
    return {
        "changes": {"acc": acc, "used_tool": used_tool, "score": change(-0.3, 0.4, 0.5, 0.9, "rose")},
        "tool_credit": tool_credit or credit(60, 60, 160, 160, 1.1, one_below=1),
        "grad_norm": [
            [step, 0.0 if tool_credit and not tool_credit["total"]["informative_groups"] else 0.2]
            for step in range(1, 13)
        ],
        "training_curve": {"acc": [[1, 0.3], [2, 0.5]]},
        "steps": 12,
        "prompts_per_step": 8,
        "n": 4,
        "lr": 3e-4,
        "reward": "pkg://retool.reward:compute_score",
        "tool_shaping": "none",
        "val_n": 4,
        "wall_s": 300.0,
        "measured": {
            "started": started,
            "commit": "abc1234",
            "host": {"cpu_model": "Test CPU", "dtype": "float32", "isa_limits": {"ATEN_CPU_CAPABILITY": "avx2"}},
        },
    }


def write_runs(folder, control_acc, wrong_tool_use=FLAT, wrong_tool_credit=None):
    rose = change(0.35, 0.70, 0.25, 0.45, "rose")
    runs = {
        "grpo-smoke": (rose,),
        "grpo-seed2": (rose,),
        "grpo-seed3": (rose,),
        "negated": (change(0.35, 0.0, -0.4, -0.3, "fell"),),
        "wrong_tool": (control_acc, wrong_tool_use, wrong_tool_credit or credit(0, 0, 0, 0, 0.0)),
    }
    for i, (name, args) in enumerate(runs.items()):
        (folder / name).mkdir(parents=True)
        (folder / name / "learning.json").write_text(
            json.dumps(result(args[0], f"2026-11-2{i}T10:00:00+00:00", *args[1:]))
        )


def rendered(tmp_path, expected_exit: int) -> str:
    """The section bench/learning_signal.py writes from the runs under tmp_path/runs; its exit code checked."""
    out = tmp_path / "performance.md"
    assert bench.main(["--from-runs", str(tmp_path / "runs"), "--output", str(out)]) == expected_exit
    return out.read_text()


def test_the_section_holds_each_run_s_own_date_host_and_commit(tmp_path):
    write_runs(tmp_path / "runs", change(0.0, 0.0, 0.0, 0.0, "no clear change"))
    text = rendered(tmp_path, expected_exit=0)
    assert "2026-11-20T10:00:00+00:00, Test CPU with ATEN_CPU_CAPABILITY=avx2, float32, commit abc1234" in text
    assert "2026-11-24T10:00:00+00:00" in text
    assert "| GRPO, seed 3 | acc | 0.350 | 0.700 | +0.350 | [+0.250, +0.450] | rose |" in text
    assert "held-out accuracy rose in every seed (3): 95% interval above 0: **yes**" in text
    assert "control: tool digits all wrong: accuracy did not rise: **yes**" in text
    assert "control: tool digits all wrong: tool use did not rise: **yes**" in text
    assert (
        "control: tool digits all wrong: no group of differing rewards and no actor gradient in training (the "
        "control's premise): **yes**"
    ) in text
    assert (tmp_path / "img" / "learning_signal.png").stat().st_size > 0


def test_the_section_says_what_credit_grpo_gave_the_tool_in_each_run(tmp_path):
    write_runs(tmp_path / "runs", change(0.0, 0.0, 0.0, 0.0, "no clear change"))
    text = rendered(tmp_path, expected_exit=0)
    rows = {line.split(" | ")[0]: line for line in text.splitlines() if " of 96 | " in line}  # the credit table
    assert rows["| control: tool digits all wrong"].endswith(
        "| 0 of 96 | 0 / 0 / 0 | +0.000 | 12 of 12 | 0 of 200 (0 copied) | 0 of 184 |"
    )
    assert rows["| GRPO, seed 2"].endswith(
        "| 60 of 96 | 60 / 0 / 0 | +1.100 | 0 of 12 | 160 of 200 (160 copied) | 0 of 184 |"
    )
    assert (
        "Answers without the tool were right 0 times in 920 training samples of these runs: the tiny model does "
        "not compute the products itself"
    ) in text
    assert (
        "In its training 0 of 200 tool-using answers and 0 of 184 others were right, 0 of 96 groups had differing "
        "rewards, and the actor's gradient norm was 0 in 12 of 12 steps; held-out tool use changed by +0.020 "
        "[-0.060, +0.100] (no clear change). So a call that earns no right answer earns no credit"
    ) in text
    assert "the ones that tool would have made right: 3 of 600 in the seeds' training here" in text


def test_tool_use_rising_under_the_wrong_tool_fails_the_benchmark(tmp_path):
    write_runs(tmp_path / "runs", change(0.0, 0.0, 0.0, 0.0, "no clear change"), wrong_tool_use=ROSE)
    text = rendered(tmp_path, expected_exit=1)
    assert "control: tool digits all wrong: tool use did not rise: **NO**" in text
    assert "something other than right answers credits the call" in text


def test_a_right_answer_under_the_wrong_tool_breaks_the_control_s_premise_and_fails_the_benchmark(tmp_path):
    # one group had a right tool-using answer: that gradient, not a flaw of GRPO, would move tool use
    write_runs(
        tmp_path / "runs", change(0.0, 0.0, 0.0, 0.0, "no clear change"), wrong_tool_credit=credit(1, 1, 1, 0, 0.05)
    )
    text = rendered(tmp_path, expected_exit=1)
    assert "no actor gradient in training (the control's premise): **NO**" in text
    assert "tool use did not rise: **yes**" in text
    assert "1 of 96 groups had differing rewards, and the actor's gradient norm was 0 in 0 of 12 steps" in text
    assert "The control's premise failed (a right answer, or a gradient without one)" in text


def test_a_control_that_rises_fails_the_benchmark(tmp_path):
    write_runs(tmp_path / "runs", change(0.0, 0.2, 0.1, 0.3, "rose"))
    out = tmp_path / "performance.md"
    assert bench.main(["--from-runs", str(tmp_path / "runs"), "--output", str(out)]) == 1
    assert "control: tool digits all wrong: accuracy did not rise: **NO**" in out.read_text()


def test_the_off_by_one_diagnostic_says_what_won_its_groups(tmp_path):
    write_runs(tmp_path / "runs", change(0.0, 0.0, 0.0, 0.0, "no clear change"))
    (tmp_path / "runs" / "off_by_one_tool").mkdir()
    (tmp_path / "runs" / "off_by_one_tool" / "learning.json").write_text(
        json.dumps(
            result(
                change(0.0, 0.03, -0.01, 0.06, "no clear change"),
                "2026-11-30T10:00:00+00:00",
                used_tool=ROSE,
                tool_credit=credit(5, 4, 6, 2, 0.3),
            )
        )
    )
    text = rendered(tmp_path, expected_exit=0)  # a diagnostic, not a control: its rise fails nothing
    assert "| diagnostic: tool result off by one (the former control) | used_tool | 0.500 | 0.900 |" in text
    assert (
        "Measured in that tool's own run (diagnostic: tool result off by one (the former control), same seeds): "
        "6 of 200 tool-using training answers were right although every reply was off by one (2 of them the reply "
        "copied verbatim), against 0 of 184 without the tool; 5 of 96 groups had differing rewards, won by the "
        "tool / without it / both: 4 / 1 / 0, push on tool use +0.300; held-out tool use +0.400 [+0.300, +0.500] "
        "(rose)."
    ) in text
