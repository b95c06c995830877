"""retool-doctor's NPU image check: installed torch / torch_npu / vllm / vllm_ascend (real dist-info metadata read
by importlib.metadata) and CANN's version file against [tool.retool.npu_image] in pyproject.toml."""

from __future__ import annotations

import importlib.metadata as md
from pathlib import Path

import pytest
from doctor_helpers import clear_run_choices, write_yaml

from retool.checklist import FAIL, OK, SKIP
from retool.doctor.cli import main
from retool.doctor.versions import NPU_IMAGE_PACKAGES, cann_info_candidates, check_npu_stack, load_pins, same_release

NPU = {"trainer": {"device": "npu", "nnodes": 1, "n_gpus_per_node": 16}}


@pytest.fixture(autouse=True)
def _no_run_choices(monkeypatch: pytest.MonkeyPatch) -> None:
    clear_run_choices(monkeypatch)
    for variable in ("ASCEND_TOOLKIT_HOME", "ASCEND_HOME_PATH"):
        monkeypatch.delenv(variable, raising=False)


@pytest.fixture
def pins() -> dict:
    pins = load_pins()
    assert set(pins["npu_image"]) >= {"cann", *NPU_IMAGE_PACKAGES}
    return pins


def install(site: Path, name: str, version: str) -> None:
    """A distribution's metadata as pip leaves it in site-packages."""
    info = site / f"{name}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")


def image_site(site: Path, pins: dict, **changed: str) -> list[str]:
    """The image's four packages at their pinned versions (vllm with the local label a source build carries)."""
    image = pins["npu_image"]
    for name in NPU_IMAGE_PACKAGES:
        install(site, name, changed.get(name, image[name] + ("+empty" if name == "vllm" else "")))
    return [str(site)]


def cann_info(folder: Path, version: str) -> Path:
    """CANN's toolkit install record under ``folder`` (the toolkit home), as its installer writes it."""
    info = folder / "aarch64-linux" / "ascend_toolkit_install.info"
    info.parent.mkdir(parents=True)
    info.write_text(
        f"package_name=Ascend-cann-toolkit\nversion={version}\ninnerversion=V100R001C25B010\n"
        f"arch=aarch64\nos=linux\npath={folder}/aarch64-linux\n"
    )
    return info


def test_image_stack_matching_the_pins(tmp_path: Path, pins: dict) -> None:
    image = pins["npu_image"]
    check = check_npu_stack(
        NPU, pins, cann_info(tmp_path / "toolkit", image["cann"]), image_site(tmp_path / "site", pins)
    )
    assert check.status == OK, check.details[0]
    assert f"torch_npu {image['torch_npu']}" in check.details[0] and f"CANN {image['cann']}" in check.details[0]


def test_mismatches_name_both_versions(tmp_path: Path, pins: dict) -> None:
    image = pins["npu_image"]
    site = image_site(tmp_path / "site", pins, torch_npu="2.9.0.post1", vllm_ascend="0.11.0rc1")
    info = cann_info(tmp_path / "toolkit", "8.3.RC1")
    check = check_npu_stack(NPU, pins, info, site)
    assert check.status == FAIL
    assert f"torch_npu 2.9.0.post1 is installed, the image pins {image['torch_npu']}" in check.details[0]
    assert f"vllm_ascend 0.11.0rc1 is installed, the image pins {image['vllm_ascend']}" in check.details[0]
    assert f"CANN 8.3.RC1 is installed ({info}), the image pins {image['cann']}" in check.details[0]
    assert "do not pip-install torch, torch_npu, vllm or vllm_ascend over the image's stack" in check.details[0]
    assert image["image"] in check.details[0]
    assert "torch " + image["torch"] not in check.details[0]  # the matching ones are not blamed


def test_cann_found_through_the_toolkit_home(tmp_path: Path, pins: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "Ascend" / "ascend-toolkit" / "latest"
    info = cann_info(home, pins["npu_image"]["cann"])
    monkeypatch.setenv("ASCEND_TOOLKIT_HOME", str(home))
    assert cann_info_candidates()[0] == info
    assert check_npu_stack(NPU, pins, None, image_site(tmp_path / "site", pins)).status == OK
    info.write_text("package_name=Ascend-cann-toolkit\nversion=9.9.9\n")
    assert "CANN 9.9.9 is installed" in check_npu_stack(NPU, pins, None, image_site(tmp_path / "s2", pins)).details[0]


def test_missing_pieces(tmp_path: Path, pins: dict) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    nowhere = tmp_path / "no.info"
    assert check_npu_stack({"trainer": {"device": "cpu"}}, pins).status == SKIP
    not_image = check_npu_stack(NPU, pins, nowhere, [str(empty)])
    assert not_image.status == SKIP and "not the NPU image" in not_image.details[0]
    no_cann = check_npu_stack(NPU, pins, nowhere, image_site(tmp_path / "site", pins))
    assert no_cann.status == FAIL and f"CANN's version file is not found (looked for {nowhere}" in no_cann.details[0]
    site = tmp_path / "partial"
    install(site, "torch_npu", pins["npu_image"]["torch_npu"])
    partial = check_npu_stack(NPU, pins, cann_info(tmp_path / "toolkit", pins["npu_image"]["cann"]), [str(site)])
    assert (
        partial.status == FAIL
        and f"vllm is not installed (the image pins {pins['npu_image']['vllm']})" in partial.details[0]
    )


def test_local_build_labels_are_the_same_release() -> None:
    assert same_release("2.10.0+cpu", "2.10.0") and same_release("0.23.0+empty", "0.23.0")
    assert not same_release("2.10.0.post1", "2.10.0.post2") and not same_release("8.3.RC1", "9.0.0")


def test_doctor_compares_this_hosts_packages(tmp_path: Path, pins: dict, capsys: pytest.CaptureFixture) -> None:
    # This host has the CPU stack: no torch_npu, and its own torch; the CANN file is the pinned one.
    image = pins["npu_image"]
    config = write_yaml(tmp_path / "sft.resolved.yaml", {**NPU, "data": {}, "model": {}})
    info = cann_info(tmp_path / "toolkit", image["cann"])
    assert main(["--config", str(config), "--cann-info", str(info)]) == 1
    line = next(line for line in capsys.readouterr().out.splitlines() if "npu stack:" in line)
    assert line.startswith("[FAIL] npu stack: ")
    assert f"torch_npu is not installed (the image pins {image['torch_npu']})" in line
    torch = md.version("torch")
    assert (f"torch {torch} is installed, the image pins {image['torch']}" in line) != same_release(
        torch, image["torch"]
    )
