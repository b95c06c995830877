"""Make the reference's habit work: run the launchers from ``<verl>/recipe/retool`` (``retool-verl-recipe install``).

Users of the reference recipe copy its scripts into ``verl/recipe/retool`` and run ``bash run_qwen3_4b_dapo_npu.sh``
there. This recipe's launchers cannot be copied (they source ``scripts/`` and read ``configs/`` beside them), so

    retool-verl-recipe install /path/to/verl

writes a thin launcher per ``run_qwen3_4b_*.sh`` into ``/path/to/verl/recipe/retool/``: it ``exec``s this checkout's
launcher (its absolute path written in), with every argument and the whole environment passed on, so
``DRY_RUN=1``, ``PROFILE``, ``MODEL_PATH`` and Hydra overrides work as in the checkout. A README there says where
the real files are. Data, runs and checkpoints stay in the checkout (``data/$PROFILE``, ``runs/``) unless
``DATA_DIR`` / ``RUN_DIR`` say otherwise. Files of the same name that this command did not write are left alone
(``--force`` replaces them).
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
    return (f"#!/usr/bin/env bash\n# {MARKER}: runs the ReTool recipe's own launcher from its checkout.\n"
            f"# Arguments (Hydra overrides) and the environment (DRY_RUN, PROFILE, MODEL_PATH, DATA_DIR, ...) pass on.\n"
            f"exec bash {quoted} \"$@\"\n")


def readme(checkout: Path, names: list[str]) -> str:
    listed = "\n".join(f"- `{name}` -> `{checkout / name}`" for name in names)
    return (f"<!-- {MARKER} -->\n# ReTool recipe launchers\n\n"
            f"These files only start the launchers of the ReTool recipe checkout at `{checkout}`:\n\n{listed}\n\n"
            f"Configs, patches, the data (`{checkout}/data/$PROFILE` unless `DATA_DIR` is set) and the run folders "
            f"(`{checkout}/runs/` unless `RUN_DIR` is set) live there; its README.md describes the run. Run "
            "`bash run_qwen3_4b_sft_npu.sh` here as in the checkout; `DRY_RUN=1` prints the resolved verl config. "
            "If the checkout moves, run `retool-verl-recipe install` again.\n")


def install(verl: Path, checkout: Path = REPO_ROOT, force: bool = False) -> list[Path]:
    """Write the thin launchers and the README into ``<verl>/recipe/retool``; return the written paths."""
    verl = verl.expanduser().resolve()
    if not (verl / "verl").is_dir():
        raise RecipeInstallError(
            f"{verl} does not look like a verl checkout (no verl/ package folder in it); pass the folder you cloned "
            "verl into (the one holding verl/ and recipe/)")
    checkout = checkout.resolve()
    targets = launchers(checkout)
    dest = verl / "recipe" / "retool"
    files = {dest / target.name: thin_launcher(target) for target in targets}
    files[dest / README] = readme(checkout, [target.name for target in targets])
    foreign = [path for path in files if path.exists() and MARKER not in path.read_text(errors="replace")]
    if foreign and not force:
        raise RecipeInstallError(
            f"{', '.join(str(p) for p in foreign)} already exist and were not written by retool-verl-recipe; move "
            "them away or pass --force to replace them")
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
    args = parser.parse_args(argv)
    try:
        written = install(args.verl, force=args.force)
    except RecipeInstallError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print("\n".join(f"wrote {path}" for path in written))
    print(f"then: cd {written[0].parent} && bash run_qwen3_4b_sft_npu.sh   (DRY_RUN=1 prints the resolved config)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
