"""Suite-wide fixtures. ``host_note`` records what a test saw that depends on this host (its CPU, dtype or core
count) without making that the test's verdict; the notes are printed at the end of the run. tests/helpers/ holds
modules several test folders share (a misbehaving /run_code server, ...); it is put on the import path here."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).with_name("helpers")))

from fake_sandbox import server  # noqa: E402, F401  (the misbehaving /run_code server fixture, for every folder)

_NOTES: list[str] = []


@pytest.fixture
def host_note(request):
    def note(text: str) -> None:
        _NOTES.append(f"{request.node.nodeid}: {text}")

    return note


def pytest_terminal_summary(terminalreporter):
    if _NOTES:
        terminalreporter.section("what this host did (reported, not asserted)")
        for line in _NOTES:
            terminalreporter.write_line(line)
