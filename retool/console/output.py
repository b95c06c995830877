"""Where the compact view goes: plain lines (a file, a pipe, nohup, CI), or a terminal with a live progress bar.

On a terminal the last line is a status bar redrawn in place (bar, step, pace, ETA, how long the current phase has
run); every other line scrolls above it. Anywhere else only whole lines are written, so a log viewer or
``tail -f nohup.out`` shows the same lines without control characters.
"""

from __future__ import annotations

import os
import shutil
import sys
from typing import TextIO


class Plain:
    """Whole lines, flushed one by one."""

    def __init__(self, stream: TextIO):
        self.stream = stream

    def line(self, text: str) -> None:
        self.stream.write(text + "\n")
        self.stream.flush()

    def status(self, text: str) -> None:
        """A terminal's status bar; nothing here."""

    def close(self) -> None:
        self.stream.flush()


class Terminal(Plain):
    """Lines scroll above a status bar that ``status`` redraws in place."""

    def __init__(self, stream: TextIO):
        super().__init__(stream)
        self.current = ""

    def _width(self) -> int:
        return max(20, shutil.get_terminal_size((100, 20)).columns - 1)

    def line(self, text: str) -> None:
        self.stream.write("\r\x1b[K" + text + "\n")
        if self.current:
            self.stream.write(self.current[: self._width()])
        self.stream.flush()

    def status(self, text: str) -> None:
        self.current = text
        self.stream.write("\r\x1b[K" + text[: self._width()])
        self.stream.flush()

    def close(self) -> None:
        if self.current:
            self.stream.write("\r\x1b[K")
        self.current = ""
        self.stream.flush()


def bar(done: int, total: int, width: int = 24) -> str:
    """``[#########---------------]``, done out of total."""
    filled = min(width, max(0, round(width * done / total))) if total else 0
    return "[" + "#" * filled + "-" * (width - filled) + "]"


def for_stdout(stream: TextIO = sys.stdout) -> Plain:
    """A Terminal when ``stream`` is an interactive terminal (TERM not dumb), else Plain."""
    interactive = stream.isatty() and os.environ.get("TERM", "") not in ("", "dumb")
    return Terminal(stream) if interactive else Plain(stream)
