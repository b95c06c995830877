"""The doctor's result type and the small helpers every check module shares."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

OK, WARN, FAIL, SKIP, NEXT = "OK", "WARN", "FAIL", "SKIP", "NEXT"
STATUSES = (OK, WARN, FAIL, SKIP, NEXT)


@dataclass
class Check:
    """One result: status (OK/WARN/FAIL/SKIP, or NEXT: not there yet, and the stage does not need it yet), the
    check's name and a line that says what to do. ``step`` is set on a failure that only means "not there yet": the
    README step that makes it (retool.doctor.stages)."""

    status: str
    name: str
    message: str
    step: str | None = None

    def line(self) -> str:
        return f"[{self.status:^4}] {self.name}: {self.message}"


def dig(cfg: dict[str, Any] | None, dotted: str, default: Any = None) -> Any:
    """``cfg["a"]["b"]`` for "a.b"; ``default`` when any step is missing."""
    node: Any = cfg
    for key in dotted.split("."):
        if not isinstance(node, dict) or key not in node:
            return default
        node = node[key]
    return node


def as_list(value: Any) -> list[str]:
    """A config value that may be one path, a list of paths or a list written as a string override."""
    if value is None:
        return []
    if isinstance(value, (list, tuple)):
        return [str(v) for v in value]
    text = str(value).strip()
    if text.startswith("["):  # a list given as a string override: "[a.parquet, b.parquet]"
        return [p.strip().strip("'\"") for p in text.strip("[]").split(",") if p.strip()]
    return [text]
