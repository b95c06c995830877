"""The NPU install guard with real pip (retool/npu_install.py, scripts/install_npu.sh): in a throw-away venv that
holds only torch 2.13.0 (standing in for the image's torch; the CPU wheel this machine's pip finds), the recipe's
requirements resolve without touching torch, a package that needs torch installs beside it, and a request that
would replace torch stops with the message before anything is installed. About 2-3 minutes (pip resolves ~100
packages of the npu extra from the index)."""

from __future__ import annotations

import importlib.metadata as md
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TORCH = md.version("torch").split("+")[0]  # the project venv's torch release (2.13.0)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def image_python(tmp_path_factory) -> str:
    """A venv with torch as its only package, like an image whose torch must stay."""
    venv = tmp_path_factory.mktemp("image") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = str(venv / "bin" / "python")
    subprocess.run(
        [python, "-m", "pip", "install", "--quiet", "--no-deps", f"torch=={TORCH}"], check=True, capture_output=True
    )
    return python


def guard(python: str, *args: str, constraints: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            "bash",
            str(REPO / "scripts" / "install_npu.sh"),
            "--allow-missing",
            "--no-verl",
            "--constraints",
            str(constraints),
            *args,
        ],
        env={**os.environ, "PYTHON": python},
        capture_output=True,
        text=True,
        timeout=600,
    )


def torch_version(python: str) -> str:
    proc = subprocess.run(
        [python, "-c", "import importlib.metadata as m, json; print(json.dumps(m.version('torch')))"],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(proc.stdout)


def test_the_recipe_requirements_resolve_without_touching_torch(image_python: str, tmp_path: Path) -> None:
    before = torch_version(image_python)
    proc = guard(image_python, "--dry-run", constraints=tmp_path / "c.txt")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert f"torch=={before}" in (tmp_path / "c.txt").read_text()
    planned = proc.stdout.split("none of the image's stack:", 1)[1].split()
    assert "transformers" in planned and "ray" in planned and "tensordict" in planned  # the npu extra was resolved
    assert "torch" not in planned
    assert torch_version(image_python) == before


def test_a_package_that_needs_torch_installs_beside_the_images_torch(image_python: str, tmp_path: Path) -> None:
    before = torch_version(image_python)
    proc = guard(
        image_python, "--no-requirements", "tensordict>=0.8.0,<=0.10.0,!=0.9.0", constraints=tmp_path / "c.txt"
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert "the image's stack is unchanged: torch " + before in proc.stdout
    assert torch_version(image_python) == before
    subprocess.run([image_python, "-c", "import tensordict"], check=True)


def test_a_request_that_would_replace_torch_stops_with_the_message(image_python: str, tmp_path: Path) -> None:
    before = torch_version(image_python)
    older = f"torch<{TORCH}"
    proc = guard(image_python, "--no-requirements", older, constraints=tmp_path / "c.txt")
    assert proc.returncode == 1
    assert f"would replace the image's device stack: torch (the image has {before})" in proc.stderr
    assert "conflict is caused by" in proc.stderr  # pip's own reason travels with the message
    assert torch_version(image_python) == before
