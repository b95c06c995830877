"""bench/async_modes.py (the paper model, the section it writes) and bench/async_resume.py (its resume checks catch
each upstream bug on a run folder made to show it)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from bench_modules import load_bench
from resume_checks import data_order


modes = load_bench("async_modes")
resume = load_bench("async_resume")


def test_the_paper_model_follows_its_rules():
    model = modes.paper_model()
    sync, colocate, separate = model["sync"], model["colocate_async"], model["separate_async"]
    ref = modes.REFERENCE
    # sync waits for the slowest trajectory alone: the budget at the single-stream rate
    assert sync["generation_s"] == pytest.approx(ref["max_response_tokens"] / ref["single_stream_tokens_per_s"])
    # the async modes skip the old-log-prob pass: 3 forwards' worth of update against sync's 4
    assert colocate["update_s"] == pytest.approx(sync["update_s"] * 3 / 4)
    # half the dies: twice the generation and twice the update; the step is the slower side
    assert separate["generation_s"] == pytest.approx(2 * colocate["generation_s"])
    assert separate["update_s"] == pytest.approx(2 * colocate["update_s"])
    assert separate["step_s"] == max(separate["generation_s"], separate["update_s"] + separate["weight_sync_s"])
    assert sync["speedup"] == 1 and colocate["step_s"] < separate["step_s"] < sync["step_s"]
    assert 1 < colocate["span_mean"] < colocate["span_max"] <= ref["max_off_policy_threshold"]


def test_the_8_8_split_is_the_fastest_whole_replica_split():
    steps = modes.splits()
    assert sorted(steps) == [4, 8, 12] and min(steps, key=steps.get) == 8


def test_separate_async_only_ties_colocate_async_when_both_halves_take_as_long():
    # what docs/training.md says: with work that scales with the dies, splitting them is at best even
    def gap(mfu: float) -> float:
        model = modes.paper_model({**modes.REFERENCE, "mfu": mfu})
        return model["separate_async"]["step_s"] / model["colocate_async"]["step_s"]

    balanced = 0.25 * 141.312 / (256.0 - 5.0)  # the update on 8 dies (+ sync) as long as generation on 8
    assert gap(balanced) == pytest.approx(1.0, abs=0.03)
    assert gap(0.25) > gap(balanced) and gap(0.08) > gap(balanced)


def test_the_section_says_what_ran_and_the_model():
    times = {"step_s": 20.0, "gen_s": 8.0, "update_s": 9.0, "weight_sync_s": 0.5, "other_s": 2.5, "steps": 7}
    results = {
        mode: {
            "mode": mode,
            "times": dict(times, step_s=20.0 + i),
            "steps": 8,
            "trajectories_per_step": 32,
            "trajectories_per_hour": 32 * 3600 / (20.0 + i),
            "off_policy": {"staleness_mean": 0.5 * i, "staleness_max": i, "spans_mean": 1.0, "spans_max": 1.0},
        }
        for i, mode in enumerate(("sync", "colocate_async", "separate_async"))
    }
    measured = {
        "started": "2026-12-02T10:00:00+00:00",
        "commit": "abc1234",
        "host": {"cpu_model": "Test CPU", "cores": 2, "dtype": "float32"},
    }
    text = modes.render(results, "SFT model of `runs/smoke-x`", measured)
    assert "| sync | 20.0 | 5760 | 1.00x | 8.0 | — |" in text
    assert "| separate_async | 22.0 | 5236 | 0.91x | beside the update | 8.0 |" in text
    assert "2026-12-02T10:00:00+00:00 on Test CPU, 2 cores" in text and "### Paper model" in text


def make_run(root: Path, *, lost: bool = False, twice: bool = False, piled: bool = False) -> tuple[Path, float]:
    """A kill-and-resume run folder as verl leaves one: 16 prompts, 2 per step, 6 steps, checkpoints at steps 2, 4
    and 6 keeping 2 (step 2's model removed, its data.pt left; ``piled``: kept)."""
    import pandas as pd
    import torch
    from torch.utils.tensorboard import SummaryWriter

    questions = [f"What is {i} + {i}?" for i in range(16)]
    data = root / "rl_train.parquet"
    pd.DataFrame(
        {"prompt": [[{"role": "user", "content": f"{q}\n\nPlease reason step by step."}] for q in questions]}
    ).to_parquet(data)
    order = data_order(data, None, 16)
    config = {
        "data": {"train_files": str(data), "seed": None, "train_batch_size": 2},
        "trainer": {"default_local_dir": str(root / "checkpoints")},
    }
    import yaml

    (root / "rl.resolved.yaml").write_text(yaml.safe_dump(config))
    checkpoint = root / "checkpoints" / "global_step_2"
    checkpoint.mkdir(parents=True)
    torch.save({"_num_yielded": 6}, checkpoint / "data.pt")  # warm-up batch + 2 steps: 6 handed out, 4 trained
    for step in (2, 4, 6) if piled else (4, 6):
        (root / "checkpoints" / f"global_step_{step}" / "actor").mkdir(parents=True)
    # trained per step: the oldest first; after the resume the 2 in flight (order[4:6]) come first
    steps = {1: order[0:2], 2: order[2:4], 3: order[4:6], 4: order[6:8], 5: order[8:10], 6: order[10:12]}
    if lost:  # the resume skipped the prompts in flight at the checkpoint
        steps = {**steps, 3: order[6:8], 4: order[8:10], 5: order[10:12], 6: order[12:14]}
    (root / "rollouts").mkdir()
    for step, prompts in steps.items():
        if step == 3:
            time.sleep(0.05)
            resumed_at = time.time()
            time.sleep(0.05)
        lines = [
            json.dumps({"input": f"system\nTools...\nuser\n{q}\n\nPlease reason step by step.\nassistant\n"})
            for q in prompts
            for _ in range(2)
        ]
        (root / "rollouts" / f"{step}.jsonl").write_text("\n".join(lines) + "\n")
    writer = SummaryWriter(str(root / "tensorboard" / "rl"))
    for step in range(1, 7):
        writer.add_scalar("critic/rewards/mean", 0.1 * step, step)
        writer.add_scalar("training/global_step", step + 1 if twice and step > 2 else step, step)
    writer.close()
    return root, resumed_at


LOG = "Resuming from /r/checkpoints/global_step_2, setting global step to 2\nRestored 2 training prompt groups\n"


def test_a_clean_resume_passes_every_check(tmp_path):
    run_dir, resumed_at = make_run(tmp_path)
    result = resume.check(run_dir, resumed_at, LOG)
    assert all(c["passed"] for c in result["checks"].values()), result["checks"]
    assert result["in_flight"] == 2 and result["restored_groups"] == 2


def test_lost_in_flight_prompts_are_caught(tmp_path):
    run_dir, resumed_at = make_run(tmp_path, lost=True)
    checks = resume.check(run_dir, resumed_at, LOG)["checks"]
    assert not checks["in-flight prompts trained after the resume"]["passed"]
    assert (
        "2 in flight, of which 0 trained after the resume"
        in checks["in-flight prompts trained after the resume"]["seen"]
    )


def test_a_step_counted_twice_is_caught(tmp_path):
    run_dir, resumed_at = make_run(tmp_path, twice=True)
    checks = resume.check(run_dir, resumed_at, LOG)["checks"]
    assert not checks["no step counted twice: each step once in TensorBoard, labelled by its number"]["passed"]


def test_a_restart_from_step_0_is_caught(tmp_path):
    run_dir, _ = make_run(tmp_path)
    checks = resume.check(run_dir, 0.0, LOG.replace("global_step_2", "global_step_0"))["checks"]
    assert not checks["resumed from the checkpoint of step 2"]["passed"]
    assert not checks["no restart from step 0: dumps 1-2 untouched, 3-6 rewritten"]["passed"]


def test_checkpoints_piling_up_across_the_resume_are_caught(tmp_path):
    run_dir, resumed_at = make_run(tmp_path, piled=True)
    checks = resume.check(run_dir, resumed_at, LOG)["checks"]
    kept = checks["checkpoints kept: the last 2, the crashed launch's counted (patches/0008)"]
    assert not kept["passed"] and "steps [2, 4, 6]" in kept["seen"], kept
