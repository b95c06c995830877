"""``retool-verl-recipe install``: the reference's habit (run the launchers from ``verl/recipe/retool``) works. The
written launcher, run from there with DRY_RUN=1, resolves the full verl config through this checkout, with the
arguments and the environment passed on. The verl tree is laid out like the CANN 样例's (tests/helpers/verl_tree.py):
verl's own retool.py, reward.py, tool.py in recipe/retool and the verl/ package at its root, as stand-ins that fail
loudly and leave a record when imported; nothing the launch runs may import them."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from retool.launch_path import HOOK
from retool.verl_recipe import MARKER, README, RecipeInstallError, checkout, install, main
from verl_tree import imported, verl_tree

pytestmark = pytest.mark.verl

REPO = Path(__file__).resolve().parents[2]
LAUNCHERS = ("run_qwen3_4b_dapo_npu.sh", "run_qwen3_4b_sft_npu.sh")


@pytest.fixture
def verl_checkout(tmp_path: Path) -> Path:
    """A folder laid out like the 样例's verl clone: the verl/ package and recipe/ (the verl-recipe submodule)."""
    root = verl_tree(tmp_path / "verl")
    (root / "recipe" / "dapo").mkdir(parents=True)
    return root


def dry_run(launcher: str, cwd: Path, *overrides: str, **env: str) -> dict:
    """``bash <launcher>`` run from ``cwd`` with DRY_RUN=1, as a user runs it there; its resolved config."""
    scripts = str(Path(sys.executable).parent)  # where retool-verl-recipe is installed
    full = {**os.environ, "DRY_RUN": "1", "PYTHON": sys.executable, "PATH": f"{scripts}:{os.environ['PATH']}", **env}
    proc = subprocess.run(
        ["bash", launcher, *overrides], cwd=cwd, env=full, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return yaml.safe_load(proc.stdout)


def assert_launch_settings(config: dict, launcher: str) -> None:
    """What the launch needs to stay clear of its folder: Ray workers get the hook (retool/launch_path.py)."""
    if "dapo" in launcher:
        runtime_env = config["ray_kwargs"]["ray_init"]["runtime_env"]
        assert runtime_env["worker_process_setup_hook"] == HOOK
        assert runtime_env["env_vars"]["PYTHONSAFEPATH"] == "1"


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_the_launcher_in_recipe_retool_resolves_the_config(verl_checkout: Path, launcher: str, capsys) -> None:
    assert main(["install", str(verl_checkout)]) == 0
    recipe = verl_checkout / "recipe" / "retool"
    assert f"wrote {recipe / launcher}" in capsys.readouterr().out
    config = dry_run(
        launcher,
        recipe,
        "trainer.total_training_steps=7",
        MODEL_PATH="/ckpt/sft-merged",
        DATA_DIR="/data/rt",
        PROFILE="reference",
    )
    assert config["trainer"]["device"] == "npu" and config["trainer"]["n_gpus_per_node"] == 16
    assert config["trainer"]["total_training_steps"] == 7  # the argument reached verl
    if "dapo" in launcher:
        assert config["actor_rollout_ref"]["model"]["path"] == "/ckpt/sft-merged"  # and the environment
        assert config["data"]["train_files"] == "/data/rt/dapo_math_17k.parquet"
    else:
        assert config["model"]["path"] == "/ckpt/sft-merged"
        assert config["data"]["train_files"] == "/data/rt/retool_sft.parquet"
    assert_launch_settings(config, launcher)
    assert imported(verl_checkout) == []  # verl's retool.py beside the launcher was never imported
    assert str(REPO / launcher) in (recipe / launcher).read_text()
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
    theirs.write_text("#!/bin/bash\n# the reference's own launcher\n")
    with pytest.raises(RecipeInstallError, match="not written by retool-verl-recipe.*--force"):
        install(verl_checkout)
    assert "reference's own launcher" in theirs.read_text()
    install(verl_checkout, force=True)
    assert MARKER in theirs.read_text()


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_a_launcher_copied_by_hand_runs_with_the_installed_recipe(verl_checkout: Path, launcher: str) -> None:
    """The CANN 样例's habit taken literally: copy the launcher into verl/recipe/retool and run it there. It finds
    the installed recipe's checkout (retool-verl-recipe checkout) and resolves the run's config through it; paths
    given relative to that folder stay relative to it (every process keeps it as its working directory)."""
    recipe = verl_checkout / "recipe" / "retool"
    shutil.copy(REPO / launcher, recipe / launcher)
    config = dry_run(launcher, recipe, "trainer.total_epochs=2", MODEL_PATH="./m", RUN_DIR="runs/x")
    assert config["trainer"]["total_epochs"] == 2
    model = config["actor_rollout_ref"]["model"]["path"] if "dapo" in launcher else config["model"]["path"]
    assert model == "./m"
    data = "dapo_math_17k" if "dapo" in launcher else "retool_sft"
    assert config["data"]["train_files"] == str(REPO / "data" / "reference" / f"{data}.parquet")  # the checkout's
    if "dapo" in launcher:
        tensorboard = config["ray_kwargs"]["ray_init"]["runtime_env"]["env_vars"]["TENSORBOARD_DIR"]
        assert tensorboard == str(recipe / "runs" / "x" / "tensorboard" / "rl")  # RUN_DIR from the launch folder
    assert_launch_settings(config, launcher)
    # From the checkout's root too, where verl/ (the stand-in) would hide the installed verl.
    assert dry_run(f"recipe/retool/{launcher}", verl_checkout, MODEL_PATH="/m")["trainer"]["device"] == "npu"
    assert imported(verl_checkout) == []

    # No installed recipe on PATH: it stops at that line, with the fix, before anything else runs.
    bare = {**os.environ, "DRY_RUN": "1", "PYTHON": sys.executable, "PATH": "/usr/bin:/bin"}
    proc = subprocess.run(["bash", launcher], cwd=recipe, env=bare, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    assert proc.stderr.strip() == (
        f"error: {launcher} is outside the ReTool checkout and no installed recipe is "
        "found: bash scripts/install_npu.sh in the checkout"
    )


def test_checkout_names_the_clone_or_says_how_to_install(tmp_path: Path, capsys) -> None:
    assert main(["checkout"]) == 0 and capsys.readouterr().out.strip() == str(REPO)
    with pytest.raises(RecipeInstallError, match="not a checkout .*bash scripts/install_npu.sh"):
        checkout(tmp_path)
