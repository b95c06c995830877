"""What every node of a run must see as the launching host sees it; retool/node_check.py checks it on each node.

A second node imports the recipe's tool, agent loop and reward from its own clone and verl from its own install,
loads the model from its own file system, and its trainer ranks write their checkpoint shards into the run folder
that the head resumes from. Where the node's workers run:

- ``retool``, ``retool_sandbox`` and ``verl`` are imported from the launching host's paths, and their files are the
  same (a digest of every file: another commit, local edits, another verl release or patch set all differ);
- the run folder and the checkpoint folder are shared: a file the launching host wrote into each just before the
  check is there. Its name is new to every node, so no file system client can answer from its cache;
- the model folder exists at its path as the node's workers resolve it (a relative path against their working
  directory).
"""

from __future__ import annotations

import importlib.util
import os
import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from retool.checklist import Check
from retool.verl_install import tree_sha256

PACKAGES = ("retool", "retool_sandbox", "verl")
MARKER_PREFIX = ".node-check-"
SAME_CLONE = (
    "Fix: one container image and the clone at the same path on every node, at the same commit (docs/multinode.md)"
)


@dataclass(frozen=True)
class Files:
    """The launching host's view, sent to every node's check."""

    packages: dict[str, tuple[str, str] | None]  # name: (folder, digest of its files); None: not importable
    shared: dict[str, str]  # folder: the name of the file just written there
    model: str | None = None  # a local model path as the config gives it; None: a hub id or no model


def package_files() -> dict[str, tuple[str, str] | None]:
    """Where this interpreter imports each package from, and a digest of its files (found without importing it)."""
    found: dict[str, tuple[str, str] | None] = {}
    for name in PACKAGES:
        spec = importlib.util.find_spec(name)
        locations = list(spec.submodule_search_locations or []) if spec else []
        folder = Path(locations[0]).resolve() if locations else None
        found[name] = (str(folder), tree_sha256(folder)) if folder else None
    return found


class UnwritableFolder(Exception):
    """The launching host cannot write into a folder of the run."""


@contextmanager
def shared_markers(folders: Iterable[Path]) -> Iterator[dict[str, str]]:
    """Write a file of a fresh name into each folder (created if missing) for the nodes to find; removed after."""
    name = f"{MARKER_PREFIX}{uuid.uuid4().hex}"
    written: list[Path] = []
    try:
        for folder in dict.fromkeys(folders):
            try:
                folder.mkdir(parents=True, exist_ok=True)
                (folder / name).write_text(name)
            except OSError as exc:
                raise UnwritableFolder(
                    f"cannot write into {folder} ({exc}). Fix: a RUN_DIR (and "
                    "trainer.default_local_dir) this user can write, on storage every node "
                    "mounts"
                ) from exc
            written.append(folder / name)
        yield {str(path.parent): name for path in written}
    finally:
        for path in written:
            path.unlink(missing_ok=True)


def local_model(path: str | None) -> str | None:
    """The config's model path when it names a folder here (so every node must have it), else None (a hub id)."""
    return path if path and Path(os.path.expanduser(path)).is_dir() else None


def check_files(files: Files, result: Check) -> None:
    """Compare this node with the launching host's ``files``; each difference is a failure that says what to fix."""
    before = len(result.details)
    here = package_files()
    for name, head in files.packages.items():
        mine = here.get(name)
        if head is None or mine == head:
            continue
        if mine is None:
            result.bad(f"{name} is not importable here (the launching host has it at {head[0]}). {SAME_CLONE}")
        elif mine[0] != head[0]:
            result.bad(
                f"{name} is imported from {mine[0]} here, from {head[0]} on the launching host: the config's "
                f"paths point into the launching host's clone. {SAME_CLONE}"
            )
        else:
            what = "another verl release or patch set" if name == "verl" else "another commit or local edits"
            result.bad(f"{name} at {mine[0]} holds other files than on the launching host ({what}). {SAME_CLONE}")
    for folder, marker in files.shared.items():
        if not (Path(folder) / marker).is_file():
            result.bad(
                f"{folder} is not the launching host's folder here: the file {marker} written there just now "
                "is missing, so this node's checkpoint shards and logs would never reach the head. Fix: the "
                "run folder (RUN_DIR) on storage every node mounts at the same path (docs/multinode.md)"
            )
    if files.model and not Path(os.path.expanduser(files.model)).is_dir():
        result.bad(
            f"the model {files.model} is not here (resolved in {os.getcwd()}). Fix: an absolute MODEL_PATH "
            "on storage every node mounts, or a copy at the same path on each node"
        )
    if len(result.details) == before:
        result.ok(
            "the recipe and verl as on the launching host (same paths, same files); the run folder shared"
            + ("; the model found" if files.model else "")
        )
