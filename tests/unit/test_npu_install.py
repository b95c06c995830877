"""The NPU install guard's pieces (retool/npu_install.py): the constraints it writes, how it reads a pip plan and a
changed stack, and its refusal outside the image. The pip runs themselves: tests/integration/test_npu_install_pip.py."""

from __future__ import annotations

import importlib.metadata as md
import sys
from pathlib import Path

import pytest

from retool.npu_install import (
    IMAGE_STACK,
    StackGuardError,
    canonical,
    changes,
    constraints_text,
    install,
    installed_versions,
    planned_changes,
)

IMAGE = {"torch": "2.10.0+cpu", "torch-npu": "2.10.0.post4", "vllm": "0.23.0+empty", "vllm-ascend": "0.23.0"}


def test_constraints_pin_exactly_what_the_image_has() -> None:
    text = constraints_text({**IMAGE, "vllm-ascend": None})
    pins = [line for line in text.splitlines() if not line.startswith("#")]
    assert pins == ["torch==2.10.0+cpu", "torch-npu==2.10.0.post4", "vllm==0.23.0+empty"]


def test_a_changed_or_removed_stack_package_is_named() -> None:
    after = {**IMAGE, "torch": "2.11.0", "vllm-ascend": None}
    assert changes(IMAGE, after) == ["torch 2.10.0+cpu -> 2.11.0", "vllm-ascend 0.23.0 -> (absent)"]
    assert changes(IMAGE, dict(IMAGE)) == []


def test_a_pip_plan_that_installs_a_stack_package_is_caught_under_any_spelling() -> None:
    report = {
        "install": [
            {"metadata": {"name": "transformers", "version": "5.10.4"}},
            {"metadata": {"name": "torch_npu", "version": "2.11.0"}},
            {"metadata": {"name": "Torch", "version": "2.11.0"}},
        ]
    }
    assert planned_changes(report, IMAGE) == ["torch-npu 2.10.0.post4 -> 2.11.0", "torch 2.10.0+cpu -> 2.11.0"]
    assert planned_changes({"install": report["install"][:1]}, IMAGE) == []
    assert canonical("Torch_NPU") == "torch-npu" and set(map(canonical, IMAGE_STACK)) == set(IMAGE_STACK)


def test_versions_are_read_from_the_target_interpreter() -> None:
    versions = installed_versions(sys.executable)
    assert set(versions) == set(IMAGE_STACK)
    assert versions["torch"] == md.version("torch")  # this venv's CPU torch
    assert versions["torch-npu"] is None


def test_outside_the_image_it_refuses_before_running_pip(tmp_path: Path) -> None:
    constraints = tmp_path / "c.txt"
    with pytest.raises(StackGuardError, match=r"no torch-npu.*not the vllm-ascend image") as caught:
        install(
            sys.executable,
            None,
            ["six"],
            constraints,
            dry_run=True,
            with_verl=False,
            verl_source="sdist",
            allow_missing=False,
        )
    assert "--allow-missing" in str(caught.value)
    assert not constraints.exists()  # stopped before writing or installing anything
