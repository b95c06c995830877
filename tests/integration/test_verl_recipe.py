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

from retool.verl_recipe import MARKER, README, RecipeInstallError, checkout, install, main

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


def test_a_launcher_copied_by_hand_runs_with_the_installed_recipe(verl_checkout: Path) -> None:
    """The CANN 样例's habit taken literally: copy the launcher into verl/recipe/retool and run it there. It finds
    the installed recipe's checkout (retool-verl-recipe checkout) and resolves the run's config through it."""
    recipe = verl_checkout / "recipe" / "retool"
    recipe.mkdir(parents=True)
    copied = recipe / "run_qwen3_4b_sft_npu.sh"
    copied.write_text((REPO / copied.name).read_text())
    scripts = str(Path(sys.executable).parent)  # where retool-verl-recipe is installed
    env = {**os.environ, "DRY_RUN": "1", "PYTHON": sys.executable, "PATH": f"{scripts}:{os.environ['PATH']}"}
    proc = subprocess.run(["bash", copied.name, "trainer.total_epochs=2"], cwd=recipe, env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    config = yaml.safe_load(proc.stdout)
    assert config["trainer"]["total_epochs"] == 2
    assert config["model"]["path"] == str(REPO / "models" / "Qwen3-4B-Instruct-2507")  # the checkout's folders
    assert config["data"]["train_files"] == str(REPO / "data" / "reference" / "retool_sft.parquet")

    # No installed recipe on PATH: it stops at that line, with the fix, before anything else runs.
    bare = {**env, "PATH": "/usr/bin:/bin"}
    proc = subprocess.run(["bash", copied.name], cwd=recipe, env=bare, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    assert proc.stderr.strip() == (f"error: {copied.name} is outside the ReTool checkout and no installed recipe is "
                                   "found: bash scripts/install_npu.sh in the checkout")


def test_checkout_names_the_clone_or_says_how_to_install(tmp_path: Path, capsys) -> None:
    assert main(["checkout"]) == 0 and capsys.readouterr().out.strip() == str(REPO)
    with pytest.raises(RecipeInstallError, match="not a checkout .*bash scripts/install_npu.sh"):
        checkout(tmp_path)
