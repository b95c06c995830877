"""Fixtures several integration test modules share."""

from __future__ import annotations

import sys

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
