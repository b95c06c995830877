"""The English and Chinese pages show the same commands: README.md pairs with README.zh-CN.md, docs/<page>.md with
docs/zh/<page>.md. Every shell block of one page needs a block of the other with the same commands, and every
inline command of one (a span the docs check reads, doc_commands.command_spans) must appear inline in the other.
Commands are compared as bash reads them, so whitespace, line continuations and comments (which are translated)
do not count. English pages without a Chinese version are not paired; a Chinese page without its English page is
a problem, except the pages of CHINESE_ONLY.

The pages of a pair also state the same figures: every decimal number (0.57, 12.3, 1.96) and every number with
thousands separators (1,791,700, written 1791700 or 1,791,700 alike) of one page is in the other, in prose, tables
and code alike (HTML comments and link targets aside; signs are ignored, and ``2.1x`` reads as 2.1). A Chinese page
that is a summary of its English page (SUMMARIES) may leave figures out, but every figure it shows must be in the
English page."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

from doc_commands import Problem, Project, command_spans
from doc_pages import Page, chinese_name, console_commands, is_chinese, read_page
from shell_words import simple_commands

# Chinese pages that have no English page by design.
CHINESE_ONLY = {"docs/zh/glossary.md"}  # the terms the Chinese pages use for the English ones

Commands = tuple[tuple[tuple[tuple[str, str], ...], tuple[str, ...]], ...]
# English pages whose Chinese page is a summary rather than a translation of all of it.
SUMMARIES = {"docs/performance.md", "docs/sandbox.md"}
FIGURE = re.compile(r"(?<![\w.])(?:\d{1,3}(?:,\d{3})+|\d+\.\d+)(?![\d.]\d|[A-Za-wyz_])")
NOT_READ = re.compile(r"<!--.*?-->|\]\([^)]*\)", re.S)  # comments (quote markers) and link targets
PLAIN = re.compile(r"(?<![\w.,])\d{4,}(?![\w.,]\d)")  # 1791700: matches a 1,791,700 of the other page


def _commands(text: str) -> Commands:
    return tuple((c.env, c.words) for c in simple_commands(text))


def _shown(commands: Commands) -> str:
    env, words = commands[0]
    return " ".join([*(f"{k}={v}" for k, v in env), *words])[:100]


def _blocks(page: Page) -> dict[Commands, list[int]]:
    found: dict[Commands, list[int]] = {}
    for block in page.shell_blocks():
        commands = _commands(console_commands(block))
        if commands:
            found.setdefault(commands, []).append(block.line)
    return found


def _inline(page: Page, project: Project) -> dict[Commands, int]:
    found: dict[Commands, int] = {}
    for span, _ in command_spans(page, project):
        found.setdefault(_commands(span.text), span.line)
    return found


def _unmatched(one: Page, other: Page, project: Project) -> list[Problem]:
    problems = []
    blocks, other_blocks = _blocks(one), Counter({k: len(v) for k, v in _blocks(other).items()})
    for commands, lines in blocks.items():
        for line in lines[other_blocks[commands] :]:
            problems.append(
                Problem(one.name, line, f"this command block has no counterpart in {other.name}: {_shown(commands)}")
            )
    other_inline = _inline(other, project)
    for commands, line in _inline(one, project).items():
        if commands not in other_inline:
            problems.append(Problem(one.name, line, f"this inline command is not in {other.name}: {_shown(commands)}"))
    return problems


def figures(page: Page) -> dict[str, int]:
    """{figure: the first line it is on} of a page, thousands separators dropped."""
    text = NOT_READ.sub(lambda m: "\n" * m.group().count("\n"), page.path.read_text(encoding="utf-8"))
    found: dict[str, int] = {}
    for match in FIGURE.finditer(text):
        found.setdefault(match.group().replace(",", ""), text.count("\n", 0, match.start()) + 1)
    return found


def figure_problems(english: Page, chinese: Page, summary: bool) -> list[Problem]:
    problems = []
    english_figures, chinese_figures = figures(english), figures(chinese)

    def written(page: Page, found: dict[str, int]) -> set[str]:
        return set(found) | set(PLAIN.findall(NOT_READ.sub("", page.path.read_text(encoding="utf-8"))))

    in_english, in_chinese = written(english, english_figures), written(chinese, chinese_figures)
    for figure, line in chinese_figures.items():
        if figure not in in_english:
            problems.append(Problem(chinese.name, line, f"{figure} is not in {english.name}"))
    if not summary:
        for figure, line in english_figures.items():
            if figure not in in_chinese:
                problems.append(Problem(english.name, line, f"{figure} is not in {chinese.name}"))
    return problems


def english_name(chinese: str) -> str:
    return "README.md" if chinese == "README.zh-CN.md" else chinese.replace("docs/zh/", "docs/", 1)


def translation_problems(root: Path, names: list[str], project: Project) -> tuple[list[Problem], int]:
    """Problems of every English/Chinese pair under ``root``, and how many pairs were compared."""
    problems: list[Problem] = []
    pairs = 0
    for name in names:
        if is_chinese(name):
            if english_name(name) not in names and name not in CHINESE_ONLY:
                problems.append(Problem(name, 1, f"Chinese page without its English page {english_name(name)}"))
            continue
        chinese = chinese_name(name)
        if chinese in names:
            english_page, chinese_page = read_page(root / name, name), read_page(root / chinese, chinese)
            problems += _unmatched(english_page, chinese_page, project) + _unmatched(
                chinese_page, english_page, project
            )
            problems += figure_problems(english_page, chinese_page, name in SUMMARIES)
            pairs += 1
    return problems, pairs
