"""retool-shakedown on the real folder of the session's smoke run (tests/e2e/conftest.py), and on copies of it with
one defect planted each: a TensorBoard tag removed, no tool call made, no RL checkpoint, a stop record of the failure
accounting, a smoke relabelled as a shakedown (which must have resumed). Every defect fails its own line and no
other; the untouched folder passes, says which lines it did not check and why, and projects its own wall time.

Copies cost a second each: the smoke folder is ~50 MB and event files are rewritten with TensorBoard's own record
reader and writer. A whole SHAKEDOWN=1 run is tests/e2e/test_shakedown_run.py's (make test-shakedown, not make test).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from run_folders import copy_run

from retool.resume import _event, _records
from retool.shakedown import cli

pytestmark = [pytest.mark.slow, pytest.mark.verl]

ALL = {
    "stages",
    "config",
    "devices",
    "tensorboard",
    "validation",
    "tool calls",
    "reward",
    "failures",
    "checkpoint",
    "resume",
    "merge",
    "memory",
    "speed",
}


def checklist(folder: Path, capsys) -> tuple[int, dict[str, dict]]:
    code = cli.main([str(folder), "--json"])
    lines = json.loads(capsys.readouterr().out)
    return code, {line["name"]: line for line in lines}


def failing(lines: dict[str, dict]) -> set[str]:
    return {name for name, line in lines.items() if line["status"] == "FAIL"}


@pytest.fixture(scope="module")
def smoke_lines(smoke_run_dir) -> dict[str, dict]:
    proc = subprocess.run(
        [sys.executable, "-m", "retool.shakedown", str(smoke_run_dir)], capture_output=True, text=True, timeout=300
    )
    print(proc.stdout, proc.stderr)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    listing = subprocess.run(
        [sys.executable, "-m", "retool.shakedown", str(smoke_run_dir), "--json"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    return {line["name"]: line for line in json.loads(listing.stdout)}


def test_the_smoke_passes_and_says_what_it_did_not_check(smoke_lines):
    assert set(smoke_lines) == ALL
    not_checked = {name for name, line in smoke_lines.items() if line["status"] == "SKIP"}
    assert not_checked == {"config", "resume"}
    assert "a smoke run is not asked to resume" in smoke_lines["resume"]["details"][0]
    assert all(line["status"] == "OK" for name, line in smoke_lines.items() if name not in not_checked)
    tools = smoke_lines["tool calls"]["details"][0]
    assert tools.startswith("training: ") and " calls in 12 steps of 32 trajectories (ok " in tools
    assert any("merge" in text or "sft_merged" in text for text in smoke_lines["merge"]["details"])
    assert "RL started from it and trained 12 steps" in smoke_lines["merge"]["details"]


def test_the_smoke_s_projection_is_its_own_wall_time(smoke_run_dir, smoke_lines):
    """A smoke is its own full run, so the projection from its measured parts must come back to what it took."""
    from retool.shakedown.projection import project
    from retool.shakedown.runfolder import read_run

    run = read_run(smoke_run_dir)
    projections, _ = project(run)
    for projected in projections:
        stage = run.stages[projected.stage]
        took = sum(float(r["time"]) - float(r["start"]) for r in stage.ends)
        print(f"{projected.stage}: projected {projected.seconds:.0f} s, took {took:.0f} s")
        assert projected.seconds == pytest.approx(took, rel=0.25), projected.lines


def rewrite_scalars(event_dir: Path, tags: set[str], value: float | None) -> int:
    """Drop every point of ``tags`` from the event files (verl writes one scalar per event); with ``value``, write
    them again at the same steps with that value, in a new event file. Returns the points dropped."""
    from tensorboard.compat.proto.event_pb2 import Event
    from tensorboard.compat.proto.summary_pb2 import Summary
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    dropped: list[tuple[str, int, float]] = []
    for path in sorted(event_dir.glob("events.out.tfevents.*")):
        kept = []
        for record in _records(path.read_bytes()):
            event = _event(record)
            hit = [v for v in event.summary.value if v.tag in tags]
            if hit:
                assert len(event.summary.value) == 1, "one scalar per event, as verl's TensorBoard logger writes"
                dropped.append((hit[0].tag, event.step, event.wall_time))
                continue
            kept.append(record)
        path.write_bytes(b"".join(kept))
    if value is not None:
        writer = EventFileWriter(str(event_dir))
        for tag, step, wall in dropped:
            writer.add_event(
                Event(wall_time=wall, step=step, summary=Summary(value=[Summary.Value(tag=tag, simple_value=value)]))
            )
        writer.close()
    return len(dropped)


def plant_no_failures_curve(run: Path) -> None:
    assert rewrite_scalars(run / "tensorboard" / "rl", {"failures/share"}, None) >= 12


def plant_zero_tool_calls(run: Path) -> None:
    tags = {"train-reward/tool_calls/mean", "train-reward/tool_ok/mean"}
    assert rewrite_scalars(run / "tensorboard" / "rl", tags, 0.0) >= 24


def plant_no_rl_checkpoint(run: Path) -> None:
    shutil.rmtree(run / "checkpoints" / "rl")


def plant_a_stop(run: Path) -> None:
    with (run / "logs" / "failures.jsonl").open("a") as out:
        out.write(
            json.dumps(
                {
                    "stop": True,
                    "step": 7,
                    "partition": "train",
                    "reason": "max_failed_share",
                    "message": "The run was stopped at step 7 (training): 9 of 32 trajectories failed",
                }
            )
            + "\n"
        )


def plant_shakedown_label(run: Path) -> None:
    launches = run / "logs" / "launches.jsonl"
    launches.write_text(launches.read_text().replace('"kind": "smoke"', '"kind": "shakedown"'))


@pytest.mark.parametrize(
    ("plant", "fails", "says"),
    [
        (plant_no_failures_curve, {"tensorboard", "failures"}, "failures/share missing at steps 1-12"),
        (plant_zero_tool_calls, {"tool calls"}, "the model made no tool call in any training step"),
        (plant_no_rl_checkpoint, {"devices", "checkpoint"}, "rl: no checkpoint in"),
        (plant_a_stop, {"failures"}, "the failure accounting stopped the run at step 7 (max_failed_share)"),
        (plant_shakedown_label, {"config", "resume"}, "no shakedown/resume.json"),
    ],
    ids=["tag removed", "zero tool calls", "no checkpoint", "stop record", "shakedown without resume"],
)
def test_a_planted_defect_fails_its_line_and_no_other(smoke_run_dir, smoke_lines, tmp_path, capsys, plant, fails, says):
    run = copy_run(smoke_run_dir, tmp_path / "run")
    code, untouched = checklist(run, capsys)
    assert code == 0 and not failing(untouched)  # the copy itself passes: the defect is what fails
    plant(run)
    code, lines = checklist(run, capsys)
    assert code == 1
    assert failing(lines) == fails, {name: lines[name]["details"] for name in failing(lines)}
    assert any(says in text for name in fails for text in lines[name]["details"]), lines
