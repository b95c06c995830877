"""The docs check states what it checked (commands, launcher dry-runs, paths, quoted numbers, skipped blocks) in a
section at the end of the run, whether or not pytest shows output (``docs_summary``)."""

from __future__ import annotations

import pytest

_LINES: list[str] = []


@pytest.fixture
def docs_summary():
    return _LINES.append


def pytest_terminal_summary(terminalreporter):
    if _LINES:
        terminalreporter.section("docs check")
        for line in _LINES:
            terminalreporter.write_line(line)
