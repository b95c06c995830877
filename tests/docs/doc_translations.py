"""The English and Chinese pages show the same commands: README.md pairs with README.zh-CN.md, docs/<page>.md with
docs/zh/<page>.md. Every shell block of one page needs a block of the other with the same commands, and every
inline command of one (a span the docs check reads, doc_commands.command_spans) must appear inline in the other.
Commands are compared as bash reads them, so whitespace, line continuations and comments (which are translated)
do not count. English pages without a Chinese version are not paired; a Chinese page without its English page is
a problem."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from doc_commands import Problem, Project, command_spans
from doc_pages import Page, chinese_name, console_commands, is_chinese, read_page
from shell_words import simple_commands

Commands = tuple[tuple[tuple[tuple[str, str], ...], tuple[str, ...]], ...]


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
        for line in lines[other_blocks[commands]:]:
            problems.append(Problem(one.name, line, f"this command block has no counterpart in {other.name}: "
                                                    f"{_shown(commands)}"))
    other_inline = _inline(other, project)
    for commands, line in _inline(one, project).items():
        if commands not in other_inline:
            problems.append(Problem(one.name, line, f"this inline command is not in {other.name}: {_shown(commands)}"))
    return problems


def english_name(chinese: str) -> str:
    return "README.md" if chinese == "README.zh-CN.md" else chinese.replace("docs/zh/", "docs/", 1)


def translation_problems(root: Path, names: list[str], project: Project) -> tuple[list[Problem], int]:
    """Problems of every English/Chinese pair under ``root``, and how many pairs were compared."""
    problems: list[Problem] = []
    pairs = 0
    for name in names:
        if is_chinese(name):
            if english_name(name) not in names:
                problems.append(Problem(name, 1, f"Chinese page without its English page {english_name(name)}"))
            continue
        chinese = chinese_name(name)
        if chinese in names:
            english_page, chinese_page = read_page(root / name, name), read_page(root / chinese, chinese)
            problems += _unmatched(english_page, chinese_page, project) + _unmatched(chinese_page, english_page,
                                                                                     project)
            pairs += 1
    return problems, pairs
