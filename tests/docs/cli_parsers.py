"""The argparse parsers of the project's commands, taken from the commands themselves without running them, and a
check of documented arguments against them.

A parser is captured by calling the command's ``main([])`` while ``ArgumentParser.parse_known_args`` raises with
the parser it was called on: nothing ``main`` would do after parsing runs. Only a ``main`` whose module builds an
argparse parser is called (any other would run for real); a command without one is reported, not run.
"""

from __future__ import annotations

import argparse
import ast
import difflib
import importlib
import importlib.util
import inspect
import re
import sys
from functools import cache
from pathlib import Path
from collections.abc import Callable, Sequence

NUMBER = re.compile(r"-?\d+(\.\d+)?")


class NoParser(Exception):
    """The command's parser could not be taken (no such module or function, or no argparse in it)."""


class _Captured(Exception):
    def __init__(self, parser: argparse.ArgumentParser):
        super().__init__(parser.prog)
        self.parser = parser


def _grab(self, *args, **kwargs):
    raise _Captured(self)


def capture_parser(main: Callable) -> argparse.ArgumentParser:
    source = Path(inspect.getsourcefile(main) or "")
    if "ArgumentParser" not in (source.read_text() if source.is_file() else ""):
        raise NoParser(f"{main.__module__}.{main.__name__} builds no argparse parser")
    saved = argparse.ArgumentParser.parse_known_args, argparse.ArgumentParser.parse_known_intermixed_args
    saved_argv = sys.argv
    argparse.ArgumentParser.parse_known_args = argparse.ArgumentParser.parse_known_intermixed_args = _grab
    try:
        if inspect.signature(main).parameters:
            main([])
        else:
            sys.argv = [main.__module__]
            main()
    except _Captured as captured:
        return captured.parser
    finally:
        argparse.ArgumentParser.parse_known_args, argparse.ArgumentParser.parse_known_intermixed_args = saved
        sys.argv = saved_argv
    raise NoParser(f"{main.__module__}.{main.__name__} returned without parsing arguments")


def _attribute(module_name: str, attr: str) -> Callable:
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise NoParser(f"cannot import {module_name}: {exc}") from exc
    if not callable(getattr(module, attr, None)):
        raise NoParser(f"{module_name} has no function {attr}")
    return getattr(module, attr)


@cache
def entry_point_parser(target: str) -> argparse.ArgumentParser:
    """The parser of a ``module:function`` entry point ([project.scripts])."""
    module_name, _, attr = target.partition(":")
    return capture_parser(_attribute(module_name, attr or "main"))


@cache
def module_parser(module_name: str) -> argparse.ArgumentParser:
    """The parser ``python -m module_name`` uses. A package's ``__main__`` is read, not imported (some call ``main()``
    at import): the ``main`` it imports is the one captured."""
    try:
        main_spec = importlib.util.find_spec(f"{module_name}.__main__")
    except ImportError:
        main_spec = None
    if main_spec is None or main_spec.origin is None:
        return capture_parser(_attribute(module_name, "main"))
    tree = ast.parse(Path(main_spec.origin).read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and any(a.name == "main" for a in node.names):
            return capture_parser(_attribute(node.module, "main"))
    raise NoParser(f"{module_name}/__main__.py imports no main function")


@cache
def script_parser(path: Path) -> argparse.ArgumentParser:
    """The parser of ``python path`` (a script of the repository, imported under another name than __main__)."""
    spec = importlib.util.spec_from_file_location(f"_docs_check_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if not callable(getattr(module, "main", None)):
        raise NoParser(f"{path.name} has no main function")
    return capture_parser(module.main)


def is_placeholder(word: str) -> bool:
    """A value the docs leave to the reader: <cores>, ..., $RUN_DIR, runs/rl-*/..."""
    return any(mark in word for mark in ("<", "...", "$", "*"))


def _subcommands(parser: argparse.ArgumentParser) -> argparse._SubParsersAction | None:
    return next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)


def _is_option(word: str) -> bool:
    return word.startswith("-") and len(word) > 1 and not NUMBER.fullmatch(word)


def _value_count(action: argparse.Action, rest: Sequence[str]) -> int:
    following = 0
    while following < len(rest) and not _is_option(rest[following]):
        following += 1
    if action.nargs is None:
        return min(1, len(rest))
    if action.nargs == argparse.OPTIONAL:
        return min(1, following)
    if action.nargs in (argparse.ZERO_OR_MORE, argparse.ONE_OR_MORE, argparse.REMAINDER):
        return following
    return min(int(action.nargs), len(rest))


def _value_problems(prog: str, flag: str, action: argparse.Action, values: Sequence[str]) -> list[str]:
    problems = []
    for value in values:
        if is_placeholder(value):
            continue
        if action.choices is not None and value not in action.choices:
            problems.append(f"{prog}: {flag} {value!r} is not one of {', '.join(map(str, action.choices))}")
        elif action.type in (int, float):
            try:
                action.type(value)
            except ValueError:
                problems.append(f"{prog}: {flag} takes {action.type.__name__} values, not {value!r}")
    return problems


def argument_problems(parser: argparse.ArgumentParser, args: Sequence[str]) -> list[str]:
    """Every documented option must be one the parser defines (exactly, not an abbreviation), a subcommand one it
    offers, and a value one its choices or int/float type accept; placeholders are not judged."""
    problems: list[str] = []
    i = 0
    while i < len(args):
        word, i = args[i], i + 1
        if word == "--":
            break
        if word == "..." or word.startswith("<"):
            continue
        if _is_option(word):
            flag, has_value, value = word.partition("=")
            action = parser._option_string_actions.get(flag)
            if action is None:
                near = difflib.get_close_matches(flag, list(parser._option_string_actions), n=1)
                hint = f" (did you mean {near[0]}?)" if near else ""
                problems.append(f"{parser.prog}: unknown option {flag}{hint}")
                continue
            if has_value:
                values = [value]
            else:
                count = _value_count(action, args[i:])
                values, i = list(args[i : i + count]), i + count
            problems += _value_problems(parser.prog, flag, action, values)
            continue
        subcommands = _subcommands(parser)
        if subcommands is None:
            continue  # a positional argument
        if word not in subcommands.choices:
            problems.append(f"{parser.prog}: unknown subcommand {word!r} (it has {', '.join(subcommands.choices)})")
            break
        parser = subcommands.choices[word]
    return problems
