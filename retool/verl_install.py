"""Install the pinned verl release with the recipe's patches applied, and report which patches an install carries.

    python -m retool.verl_install install [--source sdist|git] [--python PY]
    python -m retool.verl_install status

The pin (version, sdist sha256, tag, digest of the package tree) lives in pyproject.toml under [tool.retool.verl].
Two sources give the same tree:
- ``sdist`` (default): ``pip download verl==V --no-binary :all:`` from PyPI; the archive's sha256 must match.
- ``git``: a shallow clone of the release tag, for sites that reach GitHub but not PyPI's sdists.
Either way the digest of the ``verl/`` package tree (every file's path and bytes) must match before any patch is
applied, so a moved tag or a tampered mirror fails loudly. Patches are applied with GNU ``patch`` and the result is
pip-installed (non-editable) into the target interpreter.

``status`` checks the installed verl itself: a patch counts as applied when it reverse-applies cleanly to the
installed files, so the answer never depends on a marker file that could go stale.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

from retool.constants import REPO_ROOT

PATCH_DIR = REPO_ROOT / "patches"
DEFAULT_GIT_URL = "https://github.com/volcengine/verl.git"


class InstallError(RuntimeError):
    """A step of the verl install failed; the message says which and what to do."""


@dataclass(frozen=True)
class VerlPin:
    version: str
    sdist_sha256: str
    git_tag: str
    tree_sha256: str


def _load_toml(path: Path) -> dict:
    try:
        import tomllib  # Python >= 3.11
    except ModuleNotFoundError:  # pragma: no cover - Python 3.10 images
        import tomli as tomllib  # type: ignore[no-redef]
    with open(path, "rb") as fh:
        return tomllib.load(fh)


def read_pin(pyproject: Path = REPO_ROOT / "pyproject.toml") -> VerlPin:
    if not pyproject.is_file():
        raise InstallError(f"{pyproject} not found: run this from a checkout of the recipe repository")
    table = _load_toml(pyproject).get("tool", {}).get("retool", {}).get("verl")
    if not table:
        raise InstallError(f"{pyproject}: missing [tool.retool.verl] (version, sdist_sha256, git_tag, tree_sha256)")
    missing = [k for k in ("version", "sdist_sha256", "git_tag", "tree_sha256") if not table.get(k)]
    if missing:
        raise InstallError(f"{pyproject}: [tool.retool.verl] lacks {', '.join(missing)}")
    return VerlPin(table["version"], table["sdist_sha256"], table["git_tag"], table["tree_sha256"])


def patch_files(patch_dir: Path = PATCH_DIR) -> list[Path]:
    return sorted(patch_dir.glob("*.patch"))


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def tree_sha256(package_dir: Path) -> str:
    """Digest of every file under the ``verl`` package (relative path + bytes), independent of archive format."""
    digest = hashlib.sha256()
    files = sorted(p for p in package_dir.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    for path in files:
        digest.update(path.relative_to(package_dir).as_posix().encode() + b"\0")
        digest.update(sha256_file(path).encode() + b"\n")
    return digest.hexdigest()


def _run(cmd: list[str], what: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise InstallError(f"{what} failed ({' '.join(cmd)}):\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    return proc


def fetch_sdist(pin: VerlPin, cache: Path, python: str) -> Path:
    """The verified source tree of the pinned sdist, downloaded once into ``cache``."""
    archive = cache / f"verl-{pin.version}.tar.gz"
    if not archive.is_file():
        cache.mkdir(parents=True, exist_ok=True)
        _run(
            [
                python,
                "-m",
                "pip",
                "download",
                f"verl=={pin.version}",
                "--no-deps",
                "--no-binary",
                ":all:",
                "-d",
                str(cache),
            ],
            "downloading the verl sdist from PyPI",
        )
    actual = sha256_file(archive)
    if actual != pin.sdist_sha256:
        raise InstallError(
            f"{archive}: sha256 {actual} != pinned {pin.sdist_sha256}. Delete the file and retry; if PyPI really "
            "serves a different archive, do not install it."
        )
    workdir = Path(tempfile.mkdtemp(prefix="verl-src-"))
    with tarfile.open(archive) as tar:
        tar.extractall(workdir, filter="data")
    return workdir / f"verl-{pin.version}"


def fetch_git(pin: VerlPin, url: str) -> Path:
    workdir = Path(tempfile.mkdtemp(prefix="verl-git-"))
    _run(
        ["git", "clone", "--depth", "1", "--branch", pin.git_tag, url, str(workdir / "verl")],
        f"cloning {url} at {pin.git_tag}",
    )
    return workdir / "verl"


def verify_tree(src: Path, pin: VerlPin) -> None:
    actual = tree_sha256(src / "verl")
    if actual != pin.tree_sha256:
        raise InstallError(
            f"{src}/verl: package tree digest {actual} != pinned {pin.tree_sha256}. The source is not verl "
            f"{pin.version} as pinned; refusing to patch it."
        )


def apply_patches(src: Path, patches: list[Path]) -> None:
    for patch in patches:
        base = ["patch", "-p1", "--forward", "--batch", "-d", str(src), "-i", str(patch)]
        dry = subprocess.run(base + ["--dry-run"], capture_output=True, text=True)
        if dry.returncode != 0:
            raise InstallError(
                f"{patch.name} does not apply to {src}:\n{dry.stdout}{dry.stderr}\n"
                "Was the pin in pyproject.toml changed without refreshing patches/?"
            )
        _run(base, f"applying {patch.name}")


def install(source: str, python: str, cache: Path, git_url: str) -> Path:
    pin = read_pin()
    src = fetch_sdist(pin, cache, python) if source == "sdist" else fetch_git(pin, git_url)
    verify_tree(src, pin)
    patches = patch_files()
    apply_patches(src, patches)
    # Uninstall first so the patched tree always replaces an installed verl of the same version; verl's own
    # dependencies are resolved normally (already satisfied ones are kept).
    subprocess.run([python, "-m", "pip", "uninstall", "--yes", "--quiet", "verl"], capture_output=True)
    _run([python, "-m", "pip", "install", "--quiet", str(src)], "pip install of patched verl")
    shutil.rmtree(src.parent, ignore_errors=True)
    return src


def installed_verl_root(python: str = sys.executable) -> Path:
    """The directory that holds the installed ``verl`` package (site-packages)."""
    proc = _run(
        [python, "-c", "import importlib.util as u; print(u.find_spec('verl').origin)"], "locating the installed verl"
    )
    return Path(proc.stdout.strip()).parent.parent


def applied_patches_status(python: str = sys.executable) -> list[tuple[str, bool]]:
    """(patch name, applied?) for every patch in patches/, judged on the installed files."""
    root = installed_verl_root(python)
    status = []
    for patch in patch_files():
        proc = subprocess.run(
            ["patch", "-p1", "-R", "--dry-run", "--batch", "--force", "-d", str(root), "-i", str(patch)],
            capture_output=True,
            text=True,
        )
        status.append((patch.name, proc.returncode == 0))
    return status


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m retool.verl_install", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    inst = sub.add_parser("install", help="fetch, verify, patch and pip-install the pinned verl")
    inst.add_argument("--source", choices=["sdist", "git"], default="sdist")
    inst.add_argument("--python", default=sys.executable, help="interpreter whose environment receives verl")
    inst.add_argument(
        "--cache",
        type=Path,
        default=Path(os.environ.get("RETOOL_CACHE", REPO_ROOT / ".cache")),
        help="where the sdist is kept (default: .cache/ in the repository or $RETOOL_CACHE)",
    )
    inst.add_argument("--git-url", default=DEFAULT_GIT_URL)
    sub.add_parser("status", help="which patches the installed verl carries")
    args = parser.parse_args(argv)
    try:
        if args.command == "install":
            install(args.source, args.python, args.cache, args.git_url)
            for name, ok in applied_patches_status(args.python):
                print(f"{'applied' if ok else 'MISSING'}  {name}")
            print(f"verl {read_pin().version} installed with {len(patch_files())} patches")
        else:
            status = applied_patches_status()
            for name, ok in status:
                print(f"{'applied' if ok else 'MISSING'}  {name}")
            if not all(ok for _, ok in status):
                return 1
    except InstallError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
