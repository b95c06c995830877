"""Make the reference's habit work: run the launchers from ``<verl>/recipe/retool``, as the CANN 样例 does.

Users of the reference recipe copy its scripts into ``verl/recipe/retool`` and run ``bash run_qwen3_4b_dapo_npu.sh``
there. This recipe's launchers source ``scripts/`` and read ``configs/`` of their checkout, so two ways serve:

    retool-verl-recipe install /path/to/verl

writes a thin launcher per ``run_qwen3_4b_*.sh`` into ``/path/to/verl/recipe/retool/``: it ``exec``s this checkout's
launcher (its absolute path written in), with every argument and the whole environment passed on, so
``DRY_RUN=1``, ``PROFILE``, ``MODEL_PATH`` and Hydra overrides work as in the checkout, and the checkout's launcher
is always the one that runs. A README there says where the real files are. Files of the same name that this command
did not write are left alone (``--force`` replaces them).

A launcher copied by hand finds no ``scripts/`` beside it and asks ``retool-verl-recipe checkout`` for the installed
recipe's checkout (the package is installed editable, so that is the clone), then runs with its configs and
scripts; without an installed recipe it stops at that line and says what to do. Either way data, runs and
checkpoints stay in the checkout (``data/$PROFILE``, ``runs/``) unless ``DATA_DIR`` / ``RUN_DIR`` say otherwise.

verl's own files in that folder (its ``retool.py``, which would hide the recipe's package) are never imported: the
launch keeps the folder it runs in off the import path of every process it starts, Ray workers included
(``scripts/launch.sh``, ``retool/launch_path.py``), and relative paths still mean that folder's.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from retool.constants import REPO_ROOT

MARKER = "written by retool-verl-recipe"  # a file carrying it may be rewritten without --force
README = "README_retool.md"


class RecipeInstallError(RuntimeError):
    """The target is not a verl checkout, or a file there would be overwritten; the text says what to do."""


def launchers(checkout: Path = REPO_ROOT) -> list[Path]:
    """The checkout's real-run launchers (the CPU smoke launcher runs from the checkout only)."""
    found = sorted(checkout.glob("run_qwen3_4b_*.sh"))
    if not found:
        raise RecipeInstallError(f"{checkout} holds no run_qwen3_4b_*.sh: run this from a clone of the recipe")
    return found


def thin_launcher(target: Path) -> str:
    """A launcher that runs ``target`` with the same arguments and environment."""
    quoted = "'" + str(target).replace("'", "'\\''") + "'"
    return (
        f"#!/usr/bin/env bash\n# {MARKER}: runs the ReTool recipe's own launcher from its checkout.\n"
        f"# Arguments (Hydra overrides) and the environment (DRY_RUN, PROFILE, MODEL_PATH, DATA_DIR, ...) "
        f"pass on.\n"
        f'exec bash {quoted} "$@"\n'
    )


def readme(checkout: Path, names: list[str]) -> str:
    listed = "\n".join(f"- `{name}` -> `{checkout / name}`" for name in names)
    return (
        f"<!-- {MARKER} -->\n# ReTool recipe launchers\n\n"
        f"These files only start the launchers of the ReTool recipe checkout at `{checkout}`:\n\n{listed}\n\n"
        f"Configs, patches, the data (`{checkout}/data/$PROFILE` unless `DATA_DIR` is set) and the run folders "
        f"(`{checkout}/runs/` unless `RUN_DIR` is set) live there; its README.md describes the run. Run "
        "`bash run_qwen3_4b_sft_npu.sh` here as in the checkout; `DRY_RUN=1` prints the resolved verl config. "
        "If the checkout moves, run `retool-verl-recipe install` again.\n"
    )


def checkout(root: Path = REPO_ROOT) -> Path:
    """The installed recipe's checkout, which a launcher copied out of it runs from."""
    if not (root / "scripts" / "launch.sh").is_file():
        raise RecipeInstallError(
            f"the installed recipe at {root} is not a checkout (no scripts/launch.sh): install it from a clone "
            "(bash scripts/install_npu.sh, or pip install -e . there)"
        )
    return root


def install(verl: Path, checkout: Path = REPO_ROOT, force: bool = False) -> list[Path]:
    """Write the thin launchers and the README into ``<verl>/recipe/retool``; return the written paths."""
    verl = verl.expanduser().resolve()
    if not (verl / "verl").is_dir():
        raise RecipeInstallError(
            f"{verl} does not look like a verl checkout (no verl/ package folder in it); pass the folder you cloned "
            "verl into (the one holding verl/ and recipe/)"
        )
    checkout = checkout.resolve()
    targets = launchers(checkout)
    dest = verl / "recipe" / "retool"
    files = {dest / target.name: thin_launcher(target) for target in targets}
    files[dest / README] = readme(checkout, [target.name for target in targets])
    foreign = [path for path in files if path.exists() and MARKER not in path.read_text(errors="replace")]
    if foreign and not force:
        raise RecipeInstallError(
            f"{', '.join(str(p) for p in foreign)} already exist and were not written by retool-verl-recipe; move "
            "them away or pass --force to replace them"
        )
    dest.mkdir(parents=True, exist_ok=True)
    for path, text in files.items():
        path.write_text(text)
        if path.suffix == ".sh":
            path.chmod(0o755)
    return list(files)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="retool-verl-recipe", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    inst = sub.add_parser("install", help="write launchers into <verl>/recipe/retool that run this checkout's")
    inst.add_argument("verl", type=Path, help="the verl checkout (the folder holding verl/ and recipe/)")
    inst.add_argument("--force", action="store_true", help="replace files of the same name not written by this")
    sub.add_parser("checkout", help="print the recipe checkout a launcher copied out of it runs from")
    args = parser.parse_args(argv)
    try:
        if args.command == "checkout":
            print(checkout())
            return 0
        written = install(args.verl, force=args.force)
    except RecipeInstallError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print("\n".join(f"wrote {path}" for path in written))
    print(f"then: cd {written[0].parent} && bash run_qwen3_4b_sft_npu.sh   (DRY_RUN=1 prints the resolved config)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
