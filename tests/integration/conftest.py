"""Fixtures several integration test modules share."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest


@pytest.fixture(scope="module")
def rl_inputs(tmp_path_factory) -> dict:
    """What a CPU RL launch reads before verl starts: a model folder and RL data of the reference profile."""
    from retool.data import rl
    from retool.datasets import dataset_path

    root = tmp_path_factory.mktemp("rl-inputs")
    (root / "model").mkdir()
    for name in ("dapo_math_17k", "aime_2025"):
        rl.prepare(dataset_path("aime2025"), root / f"{name}.parquet", limit=4)
    return {"DEVICE": "cpu", "MODEL_PATH": str(root / "model"), "DATA_DIR": str(root), "PYTHON": sys.executable}


@pytest.fixture(scope="module")
def smoke_assets(tmp_path_factory) -> Path:
    """The smoke's assets as run_smoke_cpu.sh builds them (its shipped tiny model, no pre-training), with the file
    names the launchers require under ``launcher-data/``: the SFT data, and RL's training and validation data (the
    synthetic tool task)."""
    out = tmp_path_factory.mktemp("smoke-assets")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "retool.smoke.build",
            "--out",
            str(out),
            "--aime-rows",
            "8",
            "--rl-val-rows",
            "64",
            "--profile",
            "improved",
        ],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = out / "launcher-data"
    data.mkdir()
    for name, built in (("retool_sft", "sft_train"), ("dapo_math_17k", "rl_train"), ("aime_2025", "rl_val_synthetic")):
        (data / f"{name}.parquet").symlink_to(out / "data" / f"{built}.parquet")
    return out
