"""Documented commands write only into folders that exist when they run: a redirection (``> file``, ``>> file``,
``&> file``) into a relative folder that a fresh clone lacks needs a ``mkdir -p`` of it earlier in the same block
(or the same inline span). The shell opens the file before the command starts, so ``nohup retool-sandbox serve >>
runs/sandbox.log`` fails on a fresh clone, where the launchers have not created ``runs/`` yet.

A fresh clone holds the folders of the repository's tracked files (``git ls-files``). Absolute paths, ``$VAR`` and
``<placeholder>`` folders are the reader's and are not checked, as in doc_commands.py.
"""

from __future__ import annotations

import posixpath
import subprocess
from pathlib import Path

from doc_commands import Problem
from doc_pages import Page, console_commands
from shell_words import SimpleCommand, simple_commands

FILE_REDIRECTIONS = {">", ">>", "&>", ">|"}


def fresh_clone_folders(repo: Path) -> set[str]:
    """Every folder a fresh clone of ``repo`` has: the parents of its tracked files."""
    listed = subprocess.run(["git", "-C", str(repo), "ls-files"], capture_output=True, text=True, check=True)
    folders = set()
    for name in listed.stdout.split("\n"):
        parent = posixpath.dirname(name)
        while parent:
            folders.add(parent)
            parent = posixpath.dirname(parent)
    return folders


def _made(command: SimpleCommand) -> set[str]:
    """The folders a ``mkdir`` command creates (with -p, their parents too)."""
    words = command.words
    if not words or words[0] != "mkdir":
        return set()
    made = set()
    for word in words[1:]:
        if word.startswith("-"):
            continue
        folder = word.removeprefix("./").rstrip("/")
        while folder not in ("", "/"):  # mkdir -p a/b makes a too; a plain mkdir a/b needs a, which then existed
            made.add(folder)
            folder = posixpath.dirname(folder)
    return made


def missing_folder_problems(
    commands: list[SimpleCommand], folders: set[str], page: str, first_line: int
) -> list[Problem]:
    """Redirections of ``commands`` (in the order they run) into a folder neither the clone nor an earlier
    ``mkdir`` made. ``first_line`` is the page line of the text's line 1."""
    made: set[str] = set()
    problems = []
    for command in commands:
        for op, target in command.redirects:
            folder = posixpath.dirname(target.removeprefix("./"))
            if (
                op not in FILE_REDIRECTIONS
                or not folder
                or folder.startswith(("/", "~", ".."))
                or "$" in folder
                or "<" in folder
                or folder in folders
                or folder in made
            ):
                continue
            problems.append(
                Problem(
                    page,
                    first_line + command.line - 1,
                    f"{' '.join(command.words[:3])} ... {op} {target}: the shell opens {target} before "
                    f"the command runs, and a fresh clone has no {folder}/: create it earlier in the "
                    f"same block (mkdir -p {folder} && ...)",
                )
            )
        made |= _made(command)
    return problems


def folder_problems(page: Page, folders: set[str]) -> tuple[list[Problem], int]:
    """Problems of one page's shell blocks and inline spans, and how many redirections into a file were read."""
    problems, redirections = [], 0
    texts = [(console_commands(b), b.first_line) for b in page.shell_blocks()]
    texts += [(span.text, span.line) for span in page.spans]
    for text, first_line in texts:
        commands = simple_commands(text)
        redirections += sum(op in FILE_REDIRECTIONS for c in commands for op, _ in c.redirects)
        problems += missing_folder_problems(commands, folders, page.name, first_line)
    return problems, redirections
