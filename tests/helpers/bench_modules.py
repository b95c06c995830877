"""bench/ scripts as modules, for the tests of their pure parts (bench/ is not a package)."""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType

from retool.constants import REPO_ROOT


def load_bench(name: str) -> ModuleType:
    """bench/<name>.py, imported under ``name``, with bench/ on the import path as when it runs as a script (a bench
    imports its siblings by name)."""
    if str(REPO_ROOT / "bench") not in sys.path:
        sys.path.append(str(REPO_ROOT / "bench"))
    spec = importlib.util.spec_from_file_location(name, REPO_ROOT / "bench" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
