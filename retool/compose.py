"""Compose a stage's verl config as verl's entry points do, without importing verl.

``verl.trainer.main_ppo`` and ``verl.trainer.sft_trainer`` import torch, Ray and their trainers before Hydra parses
the command line, and the recipe's configs reach verl's through ``pkg://verl.trainer.config``, whose package
imports torch too: ~10 s on 2 cores for a config that needs none of it. The launchers' DRY_RUN and their resolve
step call this module instead, with the same ``--config-path/--config-name``, overrides and ``--cfg job
--resolve``: the same Hydra setup as both entry points (``version_base=None``; verl registers no resolver and no
structured config). ``tests/integration/test_launchers.py`` holds its output equal to verl's own for each stage.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import hydra

VERL_CONFIGS = "verl.trainer.config"


def register_verl_configs() -> None:
    """Let Hydra read ``pkg://verl.trainer.config`` from the installed verl without running its ``__init__``s."""
    spec = importlib.util.find_spec("verl")  # a top-level package: found, not imported
    if spec is None or spec.origin is None:
        raise SystemExit("retool.compose: verl is not installed in this Python (scripts/setup.sh installs it)")
    init = Path(spec.origin).parent / "trainer" / "config" / "__init__.py"
    # the package's spec with its file loader (which reads its resources), the module itself never executed
    module_spec = importlib.util.spec_from_file_location(
        VERL_CONFIGS, init, submodule_search_locations=[str(init.parent)]
    )
    module = importlib.util.module_from_spec(module_spec)
    sys.modules.setdefault(VERL_CONFIGS, module)


@hydra.main(config_path=None, config_name=None, version_base=None)
def main(config) -> None:
    raise SystemExit(
        "retool.compose prints a config and runs nothing: pass --cfg job --resolve "
        "(scripts/launch.sh does; to train, launch without DRY_RUN)"
    )


if __name__ == "__main__":
    register_verl_configs()
    main()
