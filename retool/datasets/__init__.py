"""Evaluation sets shipped inside the package (source and licence: README.md beside this file).

``dataset_path("aime2025")`` is the default validation file of the smoke run, the tests and ``retool-eval``, so a
plain clone or an installed wheel needs nothing from outside.
"""

from __future__ import annotations

from pathlib import Path

_HERE = Path(__file__).resolve().parent
SHIPPED = {
    "aime2025": _HERE / "aime2025" / "test.jsonl",
    "aime2024": _HERE / "aime2024" / "test.jsonl",
    "aime2024-maxwell": _HERE / "aime2024" / "aime_2024_problems.parquet",
}


def dataset_path(name: str) -> Path:
    """The file of a shipped evaluation set; ValueError naming the known sets otherwise."""
    try:
        return SHIPPED[name]
    except KeyError:
        raise ValueError(f"no shipped evaluation set {name!r}; known: {', '.join(sorted(SHIPPED))}") from None
