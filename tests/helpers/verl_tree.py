"""A folder laid out like the verl checkout the CANN 样例 runs in: verl (at 95470480) with verl-recipe as recipe/, whose
retool/ holds verl's own retool.py. The files carry the real names (the Python ones of verl-recipe's retool/, the
reward.py and tool.py other recipe folders hold, the verl/ package at the root) and none of their code: each is a
stand-in that, imported or run, appends a line to the tree's IMPORTED file and raises. A launch that imports from
the folder it runs in therefore fails loudly and leaves the evidence, in whichever process (a Ray worker, a
torchrun rank) did it."""

from __future__ import annotations

from pathlib import Path

STAND_INS = (
    "verl/__init__.py",
    "recipe/retool/retool.py",
    "recipe/retool/retool_dataset_utils.py",
    "recipe/retool/reward.py",
    "recipe/retool/tool.py",
)
IMPORTED = "IMPORTED"

_STAND_IN = """import os, sys
with open({record!r}, "a") as handle:
    handle.write(f"{{__file__}} pid={{os.getpid()}} argv={{sys.argv}}\\n")
raise ImportError("stand-in {name} of the verl checkout was imported from " + __file__)
"""


def verl_tree(root: Path) -> Path:
    """Write the tree under ``root`` (the checkout's folder) and return it."""
    for name in STAND_INS:
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(_STAND_IN.format(record=str(root / IMPORTED), name=name))
    (root / "recipe" / "retool" / "sandbox_fusion_tool_config.yaml").write_text("tools: []  # stand-in\n")
    return root


def imported(root: Path) -> list[str]:
    """The stand-ins some process imported, one line each (empty: none was)."""
    record = root / IMPORTED
    return record.read_text().splitlines() if record.exists() else []
