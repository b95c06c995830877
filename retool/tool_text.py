"""What the code tool sends to the sandbox and what the model reads back, for both tool behaviours.

Pure text functions: no verl, no HTTP (the reply they format comes from ``retool_sandbox.client``), so the rules
the model lives by are tested on their own.

``annotated`` (the improved profile's tool):
1. Code: every ```python (or untagged) fenced block of the ``code`` argument, joined; the argument as it is when it
   has none. A final bare expression (found with ``ast``) is printed like a Python shell prints it: ``repr``,
   nothing for None. Print calls and string literals are left alone.
2. Reply: stdout, then ``[stderr]`` and stderr, then a note (exit code, timeout with the partial output kept,
   sandbox error), cut in the middle to ``max_output_chars`` with the number of characters cut; "(no output)" when
   there is nothing; "sandbox unavailable: ..." when no usable reply came.

``verl_retool`` (the reference run's tool, verl's recipe/retool ``CustomSandboxFusionTool``), faults included:
1. Code: the body of the first closed ```python fence, stripped; then the last non-empty line, if it does not
   start with ``print``, becomes ``print(<line>)`` (textually: assignments and multi-line statements break).
2. Reply: stdout + stderr, unlabelled, when the run finished (whatever the exit code), else the bare text
   "no stdout here" (time limit, sandbox error, no usable reply). The tool does not cut; verl's agent loop cuts to
   ``max_tool_response_length`` (256 characters in the reference run).

Either way a session cell that found its session's state gone starts with a one-line note saying so.
"""

from __future__ import annotations

import ast
import re
from typing import Any

from retool_sandbox.client import Reply
from retool.tool_settings import BEHAVIOURS

NO_STDOUT = "no stdout here"  # the reference tool's whole reply when the run did not finish
_VALUE_NAME = "_retool_value"
_PYTHON_FENCE_LANGS = ("", "python", "python3", "py")
# an opening fence at a line start with an optional language tag; the body runs to the closing fence or to the
# end (unclosed fence). The line-start rule keeps print("```") in raw code from looking like a fence.
_FENCE = re.compile(r"^[ \t]*```[ \t]*([\w+-]*)[^\n]*\n(.*?)(?:```|\Z)", re.DOTALL | re.MULTILINE)
_NEWLINE = re.compile(rb"\r\n|\r|\n")  # the line ends Python's tokenizer counts (str.splitlines knows more)
_VERL_RETOOL_OPENING = "```python"


# ---- annotated ----------------------------------------------------------------------------------------------------


def join_python_blocks(text: str) -> str:
    """The Python to run: the ```python (or untagged) fenced blocks joined, else the text itself."""
    blocks = [body for lang, body in _FENCE.findall(text) if lang.lower() in _PYTHON_FENCE_LANGS]
    return "\n".join(block.rstrip() for block in blocks) + "\n" if blocks else text


def print_trailing_expression(code: str) -> str:
    """Make a final bare expression print its value like a Python shell (repr, skipped when None).

    Only the last top-level statement is rewritten, by source offsets, so the rest of the code (comments,
    formatting) reaches the sandbox untouched. Code that does not parse is returned as is: the sandbox then
    reports the SyntaxError to the model.
    """
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError):  # ValueError: null bytes
        return code
    if not tree.body or not isinstance(tree.body[-1], ast.Expr):
        return code
    last = tree.body[-1]
    value = last.value
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == "print":
        return code
    if isinstance(value, ast.Constant) and isinstance(value.value, str):  # a trailing note/docstring
        return code
    # ast offsets are UTF-8 byte columns on lines split the way the tokenizer splits them
    data = code.encode("utf-8")
    starts = [0] + [m.end() for m in _NEWLINE.finditer(data)]
    begin = starts[last.lineno - 1] + last.col_offset
    end = starts[last.end_lineno - 1] + last.end_col_offset
    expr = data[begin:end].decode("utf-8")
    rest = data[end:].decode("utf-8")  # only comments, blanks or a ';' can follow the last statement
    return (
        f"{data[:begin].decode('utf-8')}{_VALUE_NAME} = ({expr}){rest}\n"
        f"if {_VALUE_NAME} is not None:\n    print(repr({_VALUE_NAME}))\n"
    )


def truncate_middle(text: str, limit: int) -> tuple[str, int]:
    """Cut ``text`` to at most ``limit`` characters keeping head and tail; returns (text, characters cut)."""
    if len(text) <= limit:
        return text, 0
    marker_len = len(f"\n... [{len(text)} characters cut] ...\n")  # an upper bound on the marker's length
    keep = max(limit - marker_len, 0)
    head, tail = keep // 2, keep - keep // 2
    cut = len(text) - head - tail
    return f"{text[:head]}\n... [{cut} characters cut] ...\n{text[len(text) - tail :]}", cut


def unavailable_text(problem: str) -> str:
    return f"sandbox unavailable: {problem}. No result for this call; the tool may work again later."


def annotated_reply(reply: Reply, timeout: float, max_chars: int) -> tuple[str, int]:
    """The annotated tool's text for a classified reply; returns (text, characters cut)."""
    if reply.status == "unavailable":
        return unavailable_text(reply.problem), 0
    run = reply.run_result
    stdout, stderr = run.get("stdout") or "", run.get("stderr") or ""
    return_code = run.get("return_code")
    if reply.status == "timeout":
        note = f"[Execution timed out after {timeout:g} s; the output above is partial]"
    elif reply.status == "sandbox_error":
        note = f"[sandbox error, the code may not have run: {reply.problem}]"
    elif reply.status == "error_exit":
        signal_hint = f" (killed by signal {-return_code})" if isinstance(return_code, int) and return_code < 0 else ""
        note = f"[exit code {return_code}{signal_hint}]"
    else:
        note = "" if stdout or stderr else "(no output)"
    parts = [stdout.rstrip("\n")] if stdout else []
    if stderr:
        parts.append("[stderr]\n" + stderr.rstrip("\n"))
    output, cut = truncate_middle("\n".join(parts), max(max_chars - len(note) - 1, 0))
    return "\n".join(part for part in (output, note) if part), cut


# ---- verl_retool --------------------------------------------------------------------------------------------------


def first_python_block(text: str) -> str:
    """The reference tool's code: the body of the first closed ```python fence, stripped; else ``text`` unchanged.

    Only the literal `python` right after the backticks opens a block, anywhere in the text: ```py, ```Python
    and untagged fences do not (the fenced text then runs as is), ```python3 does and its `3` becomes code. A
    ```python with no closing ``` after it is no block. Later blocks are dropped. Unmatched text is not stripped.
    """
    opening = text.find(_VERL_RETOOL_OPENING)
    if opening < 0:
        return text
    body_start = opening + len(_VERL_RETOOL_OPENING)
    closing = text.find("```", body_start)
    if closing < 0:  # no later opening can have a closing either: there is no block at all
        return text
    return text[body_start:closing].strip()


def print_last_line(code: str) -> str:
    """The reference tool's implicit print, purely textual: the last line that is not "" becomes ``print(<line>)``
    unless it starts with ``print``.

    Lines are split on "\\n" only and a line of spaces counts as non-empty. Valid code often breaks: an
    assignment ``x = 1`` becomes ``print(x = 1)`` (TypeError), the closing line of a multi-line statement
    ``print())`` (SyntaxError), an indented last line leaves its block (IndentationError), a comment line
    ``print(# ...)`` (SyntaxError); ``printed = 1`` and ``print(a)  ;b`` are left alone. The reference did exactly this.
    """
    lines = code.split("\n")
    for index in range(len(lines) - 1, -1, -1):
        line = lines[index]
        if line == "":
            continue
        if not line.startswith("print"):
            lines[index] = f"print({line})"
        break
    return "\n".join(lines)


def verl_retool_reply(reply: Reply) -> str:
    """The reference tool's text: stdout + stderr when ``run_result.status`` is "Finished" (whatever the exit code
    and the top-level status), else NO_STDOUT, losing any partial output. No length cut here."""
    run = reply.run_result
    if reply.status == "unavailable" or run.get("status") != "Finished":
        return NO_STDOUT
    return (run.get("stdout") or "") + (run.get("stderr") or "")


# ---- both ---------------------------------------------------------------------------------------------------------


def prepare_code(text: str, behaviour: str) -> str:
    """What the tool sends for a ``code`` argument under ``behaviour``."""
    if behaviour == "annotated":
        return print_trailing_expression(join_python_blocks(text))
    if behaviour == "verl_retool":
        return print_last_line(first_python_block(text))
    raise ValueError(f"behaviour must be one of {list(BEHAVIOURS)}, got {behaviour!r}")


def reply_text(reply: Reply, behaviour: str, timeout: float, max_chars: int) -> tuple[str, int]:
    """The tool message for ``reply``; returns (text, characters the tool cut)."""
    if behaviour == "annotated":
        text, cut = annotated_reply(reply, timeout, max_chars)
    else:
        text, cut = verl_retool_reply(reply), 0  # verl's agent loop cuts, not this tool
    if reply.session_lost:
        text = f"[session lost: {reply.session_lost}]\n{text}"
    return text, cut


def bad_argument_text(code: Any) -> str:
    got = "no code" if code is None else "blank code" if isinstance(code, str) else type(code).__name__
    return f"Error: code_interpreter needs a non-empty string argument `code` with Python code, got {got}."


def usable_code(code: Any, behaviour: str) -> bool:
    """Whether to run ``code``: a string, and not blank unless the reference tool ran blanks (``print(   )``)."""
    return isinstance(code, str) and (bool(code.strip()) or behaviour == "verl_retool")
