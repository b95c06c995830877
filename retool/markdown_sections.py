"""Generated sections of a Markdown file (between ``<!-- NAME:start -->`` and ``<!-- NAME:end -->``): benchmarks and
run summaries rewrite their own section of docs/performance.md and leave the rest alone."""

from __future__ import annotations

import re
from pathlib import Path


def markers(name: str) -> tuple[str, str]:
    return f"<!-- {name}:start -->", f"<!-- {name}:end -->"


def replace_section(path: Path, name: str, section: str) -> None:
    """Put ``section`` between the markers of ``name`` in ``path`` (appended when absent); the rest stays."""
    start, end = markers(name)
    block = f"{start}\n{section}{end}\n"
    text = path.read_text() if path.exists() else "# Performance\n\n"
    if start in text and end in text:
        head, rest = text.split(start, 1)
        text = head + block + "\n" + rest.split(end, 1)[1].lstrip("\n")
    else:
        text = text.rstrip("\n") + "\n\n" + block
    path.write_text(text)


def slug(label: str) -> str:
    """A marker name from a free-text label: "AVX2-only (emulated)" -> "avx2-only-emulated"."""
    return re.sub(r"[^a-z0-9]+", "-", label.lower()).strip("-")
