"""The smoke run, once per test session: test_smoke.py checks its signals, test_learning_signal.py its accuracy
verdict (the smoke's RL stage is the learning run), and other e2e tests reuse its run folder."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def smoke_run_dir(tmp_path_factory) -> Path:
    # E2E_SMOKE_RUN_DIR: a smoke run folder that already holds sft_merged, for working on the tests that only need
    # its SFT model and data (`pytest tests/e2e/test_failure_accounting.py`); the smoke is not run again.
    if os.environ.get("E2E_SMOKE_RUN_DIR"):
        return Path(os.environ["E2E_SMOKE_RUN_DIR"])
    # E2E_RUN_DIR keeps the folder for inspection (CI prints its summary either way).
    run_dir = Path(os.environ.get("E2E_RUN_DIR") or tmp_path_factory.mktemp("smoke") / "run")
    env = {**os.environ, "RUN_DIR": str(run_dir), "PYTHON": sys.executable}
    env.pop("DRY_RUN", None)
    env.pop("SHAKEDOWN", None)  # the session's smoke is the plain one (test_shakedown_run.py runs SHAKEDOWN=1)
    proc = subprocess.run(
        [str(REPO / "run_smoke_cpu.sh")], cwd=REPO, env=env, capture_output=True, text=True, timeout=40 * 60
    )
    (run_dir / "logs").mkdir(parents=True, exist_ok=True)
    (run_dir / "logs" / "smoke.out").write_text(proc.stdout + "\n--- stderr ---\n" + proc.stderr)
    if proc.returncode != 0:
        pytest.fail(
            f"run_smoke_cpu.sh exited {proc.returncode}; tail of its output:\n{proc.stdout[-4000:]}\n"
            f"{proc.stderr[-4000:]}"
        )
    return run_dir
