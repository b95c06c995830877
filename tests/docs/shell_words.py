"""Read documented shell text the way bash splits it, far enough to check the commands: words with their quotes
removed, ``<placeholder>`` kept as one word, ``#`` comments, ``\\`` line continuations, here-documents, the
operators that separate commands (``&&``, ``||``, ``;``, ``|``, ``&``, newline) and redirections (dropped with
their target). Nothing is expanded: ``$VAR`` and ``$(...)`` stay in the word as written."""

from __future__ import annotations

import re
from dataclasses import dataclass

SEPARATORS = {"&&", "||", ";", ";;", "|", "&", "\n"}
REDIRECTIONS = {">", ">>", "<", "<<", "<<-", ">&", "&>", "<&"}
OPERATOR = re.compile(r"&&|\|\||;;|<<-|<<|>>|>&|&>|<&|[;|&<>]")
ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
PLACEHOLDER = re.compile(r"<[A-Za-z][^<>\n]*>")  # docs write <this repo>, <cores>: part of a word, not a redirection


@dataclass(frozen=True)
class SimpleCommand:
    """One command of a pipeline or list: ``VAR=value`` prefixes apart, then the command and its arguments."""

    line: int  # 1-based line of its first word within the text it was read from
    env: tuple[tuple[str, str], ...]
    words: tuple[str, ...]
    redirects: tuple[tuple[str, str], ...] = ()  # (operator, target): (">>", "runs/sandbox.log"), (">&", "1")


@dataclass(frozen=True)
class _Token:
    kind: str  # "word" or "op"
    text: str
    line: int


def _tokens(text: str) -> list[_Token]:
    out: list[_Token] = []
    word: list[str] | None = None  # None: between words ('' quoted is still a word)
    word_line = line = 1
    heredoc_pending = heredoc_word = False
    delimiter = ""
    i = 0

    def end_word() -> None:
        nonlocal word, heredoc_word, delimiter
        if word is not None:
            out.append(_Token("word", "".join(word), word_line))
            if heredoc_word:
                delimiter, heredoc_word = "".join(word), False
            word = None

    def start_word() -> list[str]:
        nonlocal word, word_line
        if word is None:
            word, word_line = [], line
        return word

    while i < len(text):
        ch = text[i]
        if ch == "\\" and text[i + 1 : i + 2] == "\n":
            i, line = i + 2, line + 1
        elif ch == "\\":
            start_word().append(text[i + 1 : i + 2])
            i += 2
        elif ch == "\n":
            end_word()
            out.append(_Token("op", "\n", line))
            i, line = i + 1, line + 1
            if heredoc_pending and delimiter:  # skip the here-document's body up to its delimiter line
                while i < len(text):
                    end = text.find("\n", i)
                    end = len(text) if end < 0 else end
                    body_line, i, line = text[i:end], end + 1, line + 1
                    if body_line.strip() == delimiter:
                        break
                heredoc_pending, delimiter = False, ""
        elif ch in " \t":
            end_word()
            i += 1
        elif ch == "#" and word is None:
            end = text.find("\n", i)
            i = len(text) if end < 0 else end
        elif ch == "'":
            end = text.find("'", i + 1)
            end = len(text) if end < 0 else end
            start_word().append(text[i + 1 : end])
            line += text.count("\n", i, end)
            i = end + 1
        elif ch == '"':
            buf, i = start_word(), i + 1
            while i < len(text) and text[i] != '"':
                if text[i] == "\\" and text[i + 1 : i + 2] in ('"', "\\", "$", "`"):
                    i += 1
                line += text[i] == "\n"
                buf.append(text[i])
                i += 1
            i += 1
        elif text.startswith("$(", i):
            depth, start = 0, i
            while i < len(text):
                depth += {"(": 1, ")": -1}.get(text[i], 0)
                i += 1
                if depth == 0 and text[i - 1] == ")":
                    break
            start_word().append(text[start:i])
        elif PLACEHOLDER.match(text, i):
            placeholder = PLACEHOLDER.match(text, i).group()
            start_word().append(placeholder)
            i += len(placeholder)
        elif OPERATOR.match(text, i):
            op = OPERATOR.match(text, i).group()
            if op in REDIRECTIONS and word is not None and "".join(word).isdigit():
                word = None  # the "2" of "2>": part of the redirection
            end_word()
            out.append(_Token("op", op, line))
            if op in ("<<", "<<-"):
                heredoc_pending = heredoc_word = True
            i += len(op)
        else:
            start_word().append(ch)
            i += 1
    end_word()
    return out


def simple_commands(text: str) -> list[SimpleCommand]:
    """The simple commands of ``text`` in order; comment-only and empty lines give none."""
    commands: list[SimpleCommand] = []
    words: list[_Token] = []
    redirects: list[tuple[str, str]] = []
    pending: str | None = None  # a redirection whose target word comes next

    def flush() -> None:
        env: list[tuple[str, str]] = []
        rest = [t.text for t in words]
        while rest and ASSIGNMENT.match(rest[0]):
            name, _, value = rest.pop(0).partition("=")
            env.append((name, value))
        if env or rest:
            line = words[0].line if words else 1
            commands.append(SimpleCommand(line, tuple(env), tuple(rest), tuple(redirects)))
        words.clear()
        redirects.clear()

    for token in _tokens(text):
        if token.kind == "op" and token.text in SEPARATORS:
            flush()
        elif token.kind == "op":
            pending = token.text
        elif pending is not None:
            redirects.append((pending, token.text))
            pending = None
        else:
            words.append(token)
    flush()
    return commands
