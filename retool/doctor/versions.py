"""Versions: Python and the pinned packages (pyproject.toml), the verl patches, and the Ascend image's stack.

The pins are read from the checkout's pyproject.toml (or, for an installed retool, its metadata): the core and
per-device requirements, the patched verl release ``[tool.retool.verl]`` and the NPU image ``[tool.retool.npu_image]``
(CANN, torch, torch_npu, vllm, vllm_ascend), which pip must never replace.
"""

from __future__ import annotations

import importlib.metadata as md
import os
import platform
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from retool.checklist import FAIL, OK, SKIP, WARN, Check
from retool.constants import REPO_ROOT
from retool.doctor.config import dig

# The image's Python packages the NPU run takes as they are (pins in [tool.retool.npu_image]).
NPU_IMAGE_PACKAGES = ("torch", "torch_npu", "vllm", "vllm_ascend")
# Where CANN's toolkit records its version (``version=...``): the classic layout the vllm-ascend images use, then
# CANN 8.5+'s ``Ascend/cann`` and versioned ``Ascend/cann-<version>`` folders. set_env.sh exports the first two
# variables with the toolkit folder in use.
CANN_HOME_VARIABLES = ("ASCEND_TOOLKIT_HOME", "ASCEND_HOME_PATH")
CANN_DEFAULT_HOMES = ("/usr/local/Ascend/ascend-toolkit/latest", "/usr/local/Ascend/cann", "/usr/local/Ascend/cann-*")
CANN_INFO_FILE = "ascend_toolkit_install.info"


def load_pins(pyproject: Path = REPO_ROOT / "pyproject.toml") -> dict[str, Any]:
    """{"requires_python", "core": [...], "extras": {name: [...]}, "verl": {...}, "npu_image": {...}} from the
    checkout or the installed metadata."""
    if pyproject.is_file():
        import tomllib

        data = tomllib.loads(pyproject.read_text())
        project, retool = data.get("project", {}), data.get("tool", {}).get("retool", {})
        return {
            "requires_python": project.get("requires-python"),
            "core": project.get("dependencies", []),
            "extras": project.get("optional-dependencies", {}),
            "verl": retool.get("verl", {}),
            "npu_image": retool.get("npu_image", {}),
            "source": str(pyproject),
        }
    # An installed (non-editable) retool: the same requirements from its metadata; the verl and image pins are not
    # there.
    try:
        meta = md.metadata("retool")
        requires = md.requires("retool") or []
    except md.PackageNotFoundError:
        return {}
    core, extras = [], {}
    for req in requires:
        found = re.search(r"extra\s*==\s*['\"]([^'\"]+)['\"]", req)
        spec = req.split(";")[0].strip()
        (extras.setdefault(found.group(1), []) if found else core).append(spec)
    return {
        "requires_python": meta.get("Requires-Python"),
        "core": core,
        "extras": extras,
        "verl": {},
        "npu_image": {},
        "source": "installed retool metadata",
    }


def install_command(extra: str) -> str:
    """The README's install command for a device's stack (what puts the pinned packages and patched verl in place)."""
    return {
        "npu": "bash scripts/install_npu.sh (in the vllm-ascend container; docs/install.md)",
        "cuda": "pip install -e '.[cuda]' && python -m retool.verl_install install",
    }.get(extra, "make setup")


def check_python(pins: dict[str, Any], extra: str = "cpu") -> Check:
    from packaging.specifiers import SpecifierSet

    version = platform.python_version()
    spec = pins.get("requires_python")
    if not spec:
        return Check(WARN, "python", f"{version}; cannot read requires-python (no pyproject.toml or retool metadata)")
    if version in SpecifierSet(spec):
        return Check(OK, "python", f"{version} ({sys.executable}) satisfies {spec}")
    where = (
        "the image's python3"
        if extra == "npu"
        else "the project's .venv (make setup)"
        if extra == "cpu"
        else f"a Python {spec}"
    )
    return Check(
        FAIL,
        "python",
        f"{version} ({sys.executable}) does not satisfy {spec}: run retool-doctor and the "
        f"launchers with {where} ({install_command(extra)})",
    )


def check_packages(pins: dict[str, Any], extra: str) -> Check:
    """Installed versions against the core pins and those of ``extra``."""
    from packaging.requirements import Requirement

    if not pins:
        return Check(WARN, "packages", "cannot read the pins: run from the repository checkout or install retool")
    wanted = list(pins.get("core", [])) + list(pins.get("extras", {}).get(extra, []))
    problems, checked = [], 0
    for text in wanted:
        req = Requirement(text)
        try:
            version = md.version(req.name)
        except md.PackageNotFoundError:
            problems.append(f"{req.name} missing (want {req.specifier or 'any'})")
            continue
        checked += 1
        if req.specifier and not req.specifier.contains(version, prereleases=True):
            problems.append(f"{req.name} {version} (want {req.specifier})")
    verl_pin = pins.get("verl", {}).get("version")
    if verl_pin:
        try:
            installed = md.version("verl")
            checked += 1
            if installed != verl_pin:
                problems.append(f"verl {installed} (want {verl_pin})")
        except md.PackageNotFoundError:
            problems.append(f"verl missing (want {verl_pin})")
    if problems:
        return Check(FAIL, "packages", f"[{extra}] {'; '.join(problems)} -> {install_command(extra)}")
    return Check(OK, "packages", f"{checked} pinned packages of core + [{extra}] match ({pins.get('source')})")


def check_patches(status_fn: Callable[[], list[tuple[str, bool]]] | None = None, extra: str = "cpu") -> Check:
    """verl patches from retool.verl_install.applied_patches_status (judged on the installed files)."""
    if status_fn is None:
        try:
            from retool.verl_install import applied_patches_status as status_fn
        except ImportError as e:
            return Check(WARN, "verl patches", f"cannot check: retool.verl_install is not available ({e})")
    try:
        status = status_fn()
    except Exception as e:  # a missing `patch` binary or verl: say so, do not crash the doctor
        return Check(WARN, "verl patches", f"cannot check: {type(e).__name__}: {e}")
    if not status:
        return Check(OK, "verl patches", "the recipe carries no patches")
    missing = [name for name, applied in status if not applied]
    if missing:
        return Check(
            FAIL,
            "verl patches",
            f"not applied: {', '.join(missing)} -> {install_command(extra)} "
            "(reinstalls the pinned verl with patches/; never pip install a verl clone "
            "over it)",
        )
    return Check(OK, "verl patches", f"all {len(status)} applied ({', '.join(n for n, _ in status)})")


# ---------------------------------------------------------------- the NPU image


def installed_version(name: str, search_path: Sequence[str] | None = None) -> str | None:
    """The installed version of distribution ``name`` (on sys.path, or on ``search_path``); None if absent."""
    found = md.distributions(name=name) if search_path is None else md.distributions(name=name, path=list(search_path))
    return next((dist.version for dist in found), None)


def cann_info_candidates() -> list[Path]:
    """Where CANN's version file may be, most specific first: the toolkit set_env.sh selected, then the defaults."""
    homes = [os.environ[v] for v in CANN_HOME_VARIABLES if os.environ.get(v)] + list(CANN_DEFAULT_HOMES)
    found: list[Path] = []
    for home in homes:
        for folder in sorted(Path("/").glob(home.lstrip("/"))) if "*" in home else [Path(home)]:
            found += sorted(folder.glob(f"*-linux/{CANN_INFO_FILE}"))
    return found


def cann_version(info: Path) -> str | None:
    """The ``version=`` value of a CANN ``ascend_toolkit_install.info`` file."""
    for line in info.read_text(errors="replace").splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "version" and value.strip():
            return value.strip()
    return None


def same_release(installed: str, pinned: str) -> bool:
    """Equal versions, ignoring a local build label (``2.10.0+cpu``, ``0.23.0+empty``)."""
    from packaging.version import InvalidVersion, Version

    try:
        return Version(Version(installed).public) == Version(pinned)
    except InvalidVersion:
        return installed.strip() == pinned.strip()


def check_npu_stack(
    cfg: dict[str, Any], pins: dict[str, Any], cann_info: Path | None = None, search_path: Sequence[str] | None = None
) -> Check:
    """On an NPU config: CANN and the image's torch, torch_npu, vllm and vllm_ascend against [tool.retool.npu_image].

    ``cann_info`` is the toolkit's version file (default: found through ASCEND_TOOLKIT_HOME or the usual install
    folders); ``search_path`` where to look for installed packages (default: sys.path).
    """
    device = dig(cfg, "trainer.device", "cuda")
    if device != "npu":
        return Check(SKIP, "npu stack", f"not an NPU config (trainer.device {device})")
    image = pins.get("npu_image") or {}
    if not image:
        return Check(WARN, "npu stack", "no [tool.retool.npu_image] pins to compare with (run from the checkout)")
    versions = {name: installed_version(name, search_path) for name in NPU_IMAGE_PACKAGES}
    infos = [cann_info] if cann_info is not None else cann_info_candidates()
    info = next((path for path in infos if path.is_file()), None)
    if versions["torch_npu"] is None and info is None:
        return Check(
            SKIP,
            "npu stack",
            "no torch_npu and no CANN here: not the NPU image; run retool-doctor inside "
            "the container to compare its stack with the pins",
        )
    problems, matched = [], []
    for name in NPU_IMAGE_PACKAGES:
        pinned, installed = str(image.get(name, "")), versions[name]
        if not pinned:
            continue
        if installed is None:
            problems.append(f"{name} is not installed (the image pins {pinned})")
        elif not same_release(installed, pinned):
            problems.append(f"{name} {installed} is installed, the image pins {pinned}")
        else:
            matched.append(f"{name} {installed}")
    pinned_cann = str(image.get("cann", ""))
    if pinned_cann:
        found = cann_version(info) if info is not None else None
        if info is None:
            looked = ", ".join(str(p) for p in infos) or f"$ASCEND_TOOLKIT_HOME/*-linux/{CANN_INFO_FILE}"
            problems.append(
                f"CANN's version file is not found (looked for {looked}; pass --cann-info FILE); the "
                f"image pins CANN {pinned_cann}"
            )
        elif found is None or not same_release(found, pinned_cann):
            problems.append(f"CANN {found or '(no version= line)'} is installed ({info}), the image pins {pinned_cann}")
        else:
            matched.append(f"CANN {found}")
    if problems:
        return Check(
            FAIL,
            "npu stack",
            "; ".join(problems) + f" -> use the pinned image {image.get('image', '')} "
            "as it is: do not pip-install torch, torch_npu, vllm or vllm_ascend over "
            "the image's stack (they must match CANN and each other; requirements.txt "
            "leaves them alone)",
        )
    return Check(OK, "npu stack", f"{', '.join(matched)} match [tool.retool.npu_image] ({pins.get('source')})")
