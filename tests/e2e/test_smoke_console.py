"""The console of a real CPU run (the e2e smoke, run once per session by conftest.py, its console captured in
logs/smoke.out): short, with every stage and step on it, while the log files keep every metric verl logged.

The log files are the full output whether the console is compact or VERBOSE=1, so "nothing is lost" is checked on
them against TensorBoard, which verl's tracker fills from the same dict as its console logger: every scalar of
every step must be in the log's ``step:N`` line with the same value. VERBOSE=1 is checked on the real output without
a second training run: the console filter in verbose mode must print the stage's log back unchanged.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from retool.console import view
from retool.smoke.summary import read_scalars

pytestmark = [pytest.mark.slow, pytest.mark.verl]

REPO = Path(__file__).resolve().parents[2]
CONSOLE_LIMIT = 200  # lines: the bound for a newcomer's `make smoke`


def logged_steps(log: Path) -> dict[int, dict[str, float]]:
    """Every ``step:N - key:value ...`` line of a log, read with a parser of this test's own (not retool.console's).
    A step line may follow verl's dump thread's ``Dumped generations to <path>.jsonl`` on the same line (its print's
    text and newline are two writes)."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", log.read_text(errors="replace"))
    steps: dict[int, dict[str, float]] = {}
    for match in re.finditer(r"(?:(?<![\w/])|(?<=\.jsonl))step:(\d+)((?: - [^\n\r]*?:[^ \n\r]+)+)", text):
        metrics = steps.setdefault(int(match.group(1)), {})
        for item in match.group(2).split(" - ")[1:]:
            key, _, value = item.rpartition(":")
            metrics[key] = float(re.sub(r"^np\.\w+\((.*)\)$", r"\1", value))
    return steps


@pytest.fixture(scope="module")
def console(smoke_run_dir) -> list[str]:
    return (smoke_run_dir / "logs" / "smoke.out").read_text().splitlines()


def test_the_console_is_short_and_shows_every_stage_and_step(smoke_run_dir, console):
    print("\n".join(console))
    assert len(console) < CONSOLE_LIMIT, f"{len(console)} lines on the console"
    assert max(map(len, console)) < 1000
    for stage in ("assets", "sft", "merge", "rl"):
        assert any(line.startswith(f"==> [{stage}] ") for line in console), stage
    for stage in ("sft", "rl"):
        trained = sorted(
            step
            for step, metrics in logged_steps(smoke_run_dir / "logs" / f"{stage}.log").items()
            if view.is_training_step(metrics)
        )
        assert trained == list(range(1, len(trained) + 1)) and len(trained) >= 10, (stage, trained)
        total = len(trained)
        for step in trained:
            assert sum(line.startswith(f"[{stage}] step {step}/{total} | ") for line in console) == 1, (stage, step)
        assert any(line.startswith(f"[{stage}] done: {total} steps in ") for line in console), stage
        header = next(line for line in console if line.startswith(f"[{stage}] device cpu | "))
        assert "full log: " in header and f"logs/{stage}.log" in header, header
    for when in ("before training", "at step 12"):
        pattern = rf"\[rl\] validation {when}: acc mean@4: aime_2025 \d\.\d{{3}}, synthetic_arith \d\.\d{{3}} \| "
        assert any(re.match(pattern, line) for line in console), when
    # no config dump, no line of a Ray actor as it printed it, no colour codes
    assert not any(
        "'actor_rollout_ref'" in line or re.search(r"\(\w+ pid=\d+\)", line) or "\x1b" in line for line in console
    )


def test_the_console_numbers_are_the_ones_verl_logged(smoke_run_dir, console):
    rl = logged_steps(smoke_run_dir / "logs" / "rl.log")
    for step, metrics in rl.items():
        if not view.is_training_step(metrics):
            continue
        line = next(line for line in console if line.startswith(f"[rl] step {step}/"))
        assert f"| reward {view.num(metrics['critic/rewards/mean'])} |" in line, line
        assert f"| acc {view.num(metrics['train-reward/acc/mean'])} |" in line, line
        assert f"| turns {view.num(metrics['num_turns/mean'])} |" in line, line
        assert f"{metrics['timing_s/step']:.1f} s/step (gen {metrics['timing_s/gen']:.1f}, " in line, line
    sft = logged_steps(smoke_run_dir / "logs" / "sft.log")
    last = max(step for step, metrics in sft.items() if "train/loss" in metrics)
    line = next(line for line in console if line.startswith(f"[sft] step {last}/"))
    assert f"| loss {view.num(sft[last]['train/loss'])} |" in line, line


@pytest.mark.parametrize("stage", ["sft", "rl"])
def test_the_log_holds_every_metric_verl_logged(smoke_run_dir, stage):
    logged = logged_steps(smoke_run_dir / "logs" / f"{stage}.log")
    scalars = read_scalars(smoke_run_dir / "tensorboard" / stage)
    assert len(scalars) >= (5 if stage == "sft" else 100), sorted(scalars)
    for tag, points in scalars.items():
        if tag.startswith("val-failures/"):  # the recipe writes these to TensorBoard itself (retool/failures/)
            continue
        for step, value in points:
            assert tag in logged.get(step, {}), f"{tag} at step {step} is in TensorBoard but not in the log"
            assert logged[step][tag] == pytest.approx(value, rel=1e-5, abs=1e-6), (tag, step)


def test_verbose_prints_the_real_output_unchanged(smoke_run_dir, tmp_path):
    log = smoke_run_dir / "logs" / "rl.log"
    copy = tmp_path / "rl.log"
    proc = subprocess.run(
        [sys.executable, "-m", "retool.console", "--stage", "rl", "--log", str(copy), "--", "cat", str(log)],
        capture_output=True,
        env={**os.environ, "VERBOSE": "1"},
        timeout=120,
    )
    assert proc.returncode == 0
    head, _, rest = proc.stdout.partition(b"\n")
    assert head.startswith(b"[rl] full log: ") and rest == log.read_bytes() == copy.read_bytes()
