"""``retool-verl-recipe install``: the reference's habit (run the launchers from ``verl/recipe/retool``) works. The
written launcher, run from there with DRY_RUN=1, resolves the full verl config through this checkout, with the
arguments and the environment passed on."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from retool.verl_recipe import MARKER, README, RecipeInstallError, install, main

pytestmark = pytest.mark.verl

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def verl_checkout(tmp_path: Path) -> Path:
    """A folder laid out like a verl clone: the verl/ package and recipe/ (the verl-recipe submodule)."""
    root = tmp_path / "verl"
    (root / "verl").mkdir(parents=True)
    (root / "verl" / "__init__.py").write_text("")
    (root / "recipe" / "dapo").mkdir(parents=True)
    return root


def test_the_launcher_in_recipe_retool_resolves_the_config(verl_checkout: Path, capsys) -> None:
    assert main(["install", str(verl_checkout)]) == 0
    recipe = verl_checkout / "recipe" / "retool"
    assert f"wrote {recipe / 'run_qwen3_4b_dapo_npu.sh'}" in capsys.readouterr().out
    env = {**os.environ, "DRY_RUN": "1", "PYTHON": sys.executable, "MODEL_PATH": "/ckpt/sft-merged",
           "DATA_DIR": "/data/rt", "PROFILE": "reference"}
    proc = subprocess.run(["bash", "run_qwen3_4b_dapo_npu.sh", "trainer.total_training_steps=7"], cwd=recipe, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    config = yaml.safe_load(proc.stdout)
    assert config["trainer"]["device"] == "npu" and config["trainer"]["n_gpus_per_node"] == 16
    assert config["trainer"]["total_training_steps"] == 7  # the argument reached verl
    assert config["actor_rollout_ref"]["model"]["path"] == "/ckpt/sft-merged"  # and the environment
    assert config["data"]["train_files"] == "/data/rt/dapo_math_17k.parquet"
    assert str(REPO / "run_qwen3_4b_dapo_npu.sh") in (recipe / "run_qwen3_4b_dapo_npu.sh").read_text()
    assert str(REPO) in (recipe / README).read_text()


def test_every_real_run_launcher_gets_a_thin_twin(verl_checkout: Path) -> None:
    written = install(verl_checkout)
    names = sorted(p.name for p in written)
    assert names == sorted([p.name for p in REPO.glob("run_qwen3_4b_*.sh")] + [README])
    for path in written:
        if path.suffix == ".sh":
            text = path.read_text()
            assert os.access(path, os.X_OK) and MARKER in text
            assert f"'{REPO / path.name}' \"$@\"" in text
    assert install(verl_checkout) == written  # its own files are rewritten without --force


def test_it_refuses_a_folder_that_is_not_verl_and_files_it_did_not_write(verl_checkout: Path, tmp_path: Path) -> None:
    with pytest.raises(RecipeInstallError, match="does not look like a verl checkout"):
        install(tmp_path / "elsewhere")
    theirs = verl_checkout / "recipe" / "retool" / "run_qwen3_4b_sft_npu.sh"
    theirs.parent.mkdir(parents=True)
    theirs.write_text("#!/bin/bash\n# the reference's own launcher\n")
    with pytest.raises(RecipeInstallError, match="not written by retool-verl-recipe.*--force"):
        install(verl_checkout)
    assert "reference's own launcher" in theirs.read_text()
    install(verl_checkout, force=True)
    assert MARKER in theirs.read_text()
