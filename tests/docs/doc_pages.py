"""The Markdown side of the docs check: which pages there are, their fenced blocks, inline code spans, docs-check
markers (skip, elsewhere) and quoted-number markers, each with its line number.

Pages: README.md, README.zh-CN.md and docs/**/*.md; the Chinese version of README.md is README.zh-CN.md and that of
docs/<page>.md is docs/zh/<page>.md.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

SHELL_LANGS = {"bash", "sh", "shell", "console", "zsh"}
FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})\s*([^`\s]*)")
MARKER = re.compile(r"<!--\s*docs-check:\s*(?P<kind>skip|elsewhere)\s*(?:\((?P<reason>.*)\))?\s*-->")
SKIP, ELSEWHERE = "skip", "elsewhere"
ANY_DOCS_CHECK = re.compile(r"<!--\s*docs-check\b")
QUOTE = re.compile(r"<!--\s*from\s+(?P<file>[^#\s]+)#(?P<section>[\w.-]+)\s*-->")
NUMBER = re.compile(r"[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?")
CODE_SPAN = re.compile(r"(?<!`)(`+)(?!`)(.+?)(?<!`)\1(?!`)", re.DOTALL)


@dataclass(frozen=True)
class Block:
    """A fenced block: ``text`` is its body without the fence's indentation; body line k is page line
    ``first_line + k - 1``."""

    line: int  # the opening fence
    lang: str
    text: str
    first_line: int


@dataclass(frozen=True)
class Span:
    """An inline code span outside fenced blocks (line breaks inside it read as spaces)."""

    line: int
    text: str


@dataclass(frozen=True)
class Marker:
    line: int
    reason: str | None  # None: a marker without its "(reason)", or an unknown docs-check marker
    text: str
    kind: str = SKIP  # SKIP or ELSEWHERE (doc_commands.py says what each does)


@dataclass(frozen=True)
class Quote:
    """``<!-- from FILE#SECTION -->`` after a figure: the figure (None when the line has no number before it)."""

    line: int
    number: str | None
    file: str
    section: str


@dataclass
class Page:
    name: str  # how problems name it: relative to the repository, or to the folder of a copy
    path: Path
    blocks: list[Block] = field(default_factory=list)
    spans: list[Span] = field(default_factory=list)
    markers: list[Marker] = field(default_factory=list)
    quotes: list[Quote] = field(default_factory=list)

    def shell_blocks(self) -> list[Block]:
        return [b for b in self.blocks if b.lang in SHELL_LANGS]


def read_page(path: Path, name: str) -> Page:
    lines = path.read_text(encoding="utf-8").split("\n")
    page = Page(name, path)
    prose = list(lines)  # the page with fenced bodies blanked, so code spans and markers are read outside them
    open_fence: tuple[int, str, str, str] | None = None  # line index, indent, fence, lang
    for index, line in enumerate(lines):
        match = FENCE.match(line)
        if open_fence is None and match:
            open_fence = (index, match.group(1), match.group(2), match.group(3).lower())
            prose[index] = ""
        elif open_fence is not None:
            start, indent, fence, lang = open_fence
            prose[index] = ""
            if line.strip().startswith(fence[0] * len(fence)) and set(line.strip()) == {fence[0]}:
                body = [b[len(indent) :] if b.startswith(indent) else b.lstrip() for b in lines[start + 1 : index]]
                page.blocks.append(Block(start + 1, lang, "\n".join(body), start + 2))
                open_fence = None
    for index, line in enumerate(prose):
        for marker in ANY_DOCS_CHECK.finditer(line):
            known = MARKER.match(line, marker.start())
            reason = (known.group("reason") or "").strip() if known else ""
            page.markers.append(Marker(index + 1, reason or None, line.strip(), known["kind"] if known else SKIP))
        end = 0
        for quote in QUOTE.finditer(line):
            numbers = NUMBER.findall(line[end : quote.start()])
            page.quotes.append(Quote(index + 1, numbers[-1] if numbers else None, quote["file"], quote["section"]))
            end = quote.end()
    text = "\n".join(prose)
    for paragraph in re.finditer(r"(?:[^\n]+\n?)+", text):
        for span in CODE_SPAN.finditer(paragraph.group()):
            line = text.count("\n", 0, paragraph.start() + span.start()) + 1
            page.spans.append(Span(line, " ".join(span.group(2).split())))
    return page


def console_commands(block: Block) -> str:
    """A ``console`` block's commands are its ``$ `` lines (and their continuations); the rest is output, blanked so
    line numbers stay."""
    if block.lang != "console":
        return block.text
    kept, continued = [], False
    for line in block.text.split("\n"):
        is_command = line.startswith("$ ") or continued
        kept.append((line[2:] if line.startswith("$ ") else line) if is_command else "")
        continued = is_command and line.rstrip().endswith("\\")
    return "\n".join(kept)


def page_names(repo: Path) -> list[str]:
    """Every documentation page of the repository, English and Chinese."""
    names = [p.name for p in sorted(repo.glob("README*.md"))]
    names += [p.relative_to(repo).as_posix() for p in sorted((repo / "docs").rglob("*.md"))]
    return names


def chinese_name(english: str) -> str | None:
    """The Chinese counterpart's name of an English page (None for a page that is itself Chinese)."""
    if english == "README.md":
        return "README.zh-CN.md"
    parts = english.split("/")
    if len(parts) == 2 and parts[0] == "docs":
        return f"docs/zh/{parts[1]}"
    return None


def is_chinese(name: str) -> bool:
    return name == "README.zh-CN.md" or name.startswith("docs/zh/")
