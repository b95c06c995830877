"""``SHAKEDOWN=1 ./run_smoke_cpu.sh`` end to end, as a user runs it before a long run (make test-shakedown; not in
make test): SFT 5 steps, the merge loaded, RL with one validation and step 1, where the first launch ends, a real
relaunch that resumes from step 1's checkpoint and runs step 2, then the checklist, which must pass every line (a
shakedown is asked for all of them, the resume included). E2E_SHAKEDOWN_RUN_DIR keeps the run folder; given a kept
folder of a finished run, the tests read it again without running the shakedown again.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from run_folders import copy_run

from retool.shakedown import cli
from retool.shakedown.relaunch import prompt_digests
from retool.shakedown.runfolder import read_run

pytestmark = [pytest.mark.shakedown, pytest.mark.slow, pytest.mark.verl]

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def shakedown(tmp_path_factory) -> dict:
    run_dir = Path(os.environ.get("E2E_SHAKEDOWN_RUN_DIR") or tmp_path_factory.mktemp("shakedown") / "run")
    finished = run_dir / "logs" / "smoke.json"
    if finished.is_file():  # a kept folder of an earlier run of these tests: read again, not run again
        return {**json.loads(finished.read_text()), "run_dir": run_dir}
    if run_dir.exists():
        pytest.fail(f"{run_dir} exists: a SHAKEDOWN=1 launch there would resume it; name a new folder")
    env = {**os.environ, "RUN_DIR": str(run_dir), "PYTHON": sys.executable, "SHAKEDOWN": "1"}
    env.pop("DRY_RUN", None)
    started = time.monotonic()
    proc = subprocess.run(
        [str(REPO / "run_smoke_cpu.sh")], cwd=REPO, env=env, capture_output=True, text=True, timeout=40 * 60
    )
    wall = time.monotonic() - started
    (run_dir / "logs").mkdir(parents=True, exist_ok=True)
    (run_dir / "logs" / "smoke.out").write_text(proc.stdout + "\n--- stderr ---\n" + proc.stderr)
    print(f"SHAKEDOWN=1 ./run_smoke_cpu.sh took {wall:.0f} s\n{proc.stdout[-6000:]}")
    result = {"code": proc.returncode, "out": proc.stdout, "err": proc.stderr, "wall_s": round(wall, 1)}
    finished.write_text(json.dumps(result))
    return {**result, "run_dir": run_dir}


def lines_of(run_dir: Path, capsys) -> tuple[int, dict[str, dict]]:
    code = cli.main([str(run_dir), "--json"])
    return code, {line["name"]: line for line in json.loads(capsys.readouterr().out)}


def test_the_shakedown_ends_with_a_checklist_that_passes_every_line(shakedown, capsys):
    assert shakedown["code"] == 0, shakedown["out"][-4000:] + shakedown["err"][-4000:]
    assert "retool-shakedown: 13 ok\n" in shakedown["out"]
    code, lines = lines_of(shakedown["run_dir"], capsys)
    assert code == 0 and all(line["status"] == "OK" for line in lines.values()), lines
    config = " ".join(lines["config"]["details"])
    assert "sft: the full run's config except trainer.total_training_steps" in config
    resume = " ".join(lines["resume"]["details"])
    assert "the relaunch loaded global_step_1" in resume and "logged step 2 alone" in resume
    assert "its step 2 drew 8 prompts, none of step 1's" in resume


def test_the_rl_stage_was_launched_twice_the_second_time_as_a_resume(shakedown):
    run = read_run(shakedown["run_dir"])
    assert run.kind == "shakedown"
    sft, rl = run.stages["sft"], run.stages["rl"]
    assert [r["resume"] for r in sft.starts] == [False] and len(sft.ends) == 1
    assert [r["resume"] for r in rl.starts] == [False, True] and len(rl.ends) == 2
    assert rl.events.counts("timing_s/step") == Counter({1: 1, 2: 1})
    assert sft.events.counts("train/loss") == Counter(dict.fromkeys(range(1, 6), 1))
    assert (shakedown["run_dir"] / "checkpoints" / "rl" / "latest_checkpointed_iteration.txt").read_text() == "2"
    merge = json.loads((shakedown["run_dir"] / "logs" / "merge.json").read_text())
    assert merge["step"] == 5 and merge["logits_finite"] is True


def test_a_resume_that_drew_step_1_s_prompts_again_fails_the_resume_line(shakedown, tmp_path, capsys):
    copy = copy_run(shakedown["run_dir"], tmp_path / "run")
    record = json.loads((copy / "shakedown" / "resume.json").read_text())
    # as if step 1 had drawn the prompts the resumed step 2 drew: a dataloader started afresh
    record["first_launch"]["prompts"]["1"] = prompt_digests(copy / "rollouts" / "2.jsonl")
    (copy / "shakedown" / "resume.json").write_text(json.dumps(record))
    code, lines = lines_of(copy, capsys)
    assert code == 1 and {name for name, line in lines.items() if line["status"] == "FAIL"} == {"resume"}
    assert any("the dataloader's state was not restored" in text for text in lines["resume"]["details"])
