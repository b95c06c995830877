"""The one checklist every check of the recipe prints: ``retool-doctor``, ``retool-shakedown``, and the launch's
preflight (``retool/failures/preflight.py``) and node check (``retool/node_check.py``).

A check has a status, a short name and the lines it found, and prints as

    [ OK ] name: the first line
           every further line, under the name

The statuses, from the best to the worst:

- ``OK``: checked and fine;
- ``SKIP``: not checked, and the line says why (an input the check needs is missing, or this kind of run is not
  asked for it: a CPU smoke does not resume);
- ``NEXT``: not there yet, and not needed yet (the doctor right after the install: the data, the model);
- ``WARN``: works, but the line says what to look at;
- ``FAIL``: will not work; the line says what to do. A command exits 1 when any check fails.

A check's lines are one line each, never wrapped, so a message can be found with grep in a log and in the docs.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

OK, SKIP, NEXT, WARN, FAIL = "OK", "SKIP", "NEXT", "WARN", "FAIL"
STATUSES = (OK, SKIP, NEXT, WARN, FAIL)  # best first: a check that finds two things takes the worse
COUNTED = {OK: "ok", WARN: "warning(s)", FAIL: "failure(s)", SKIP: "skipped", NEXT: "not there yet"}


@dataclass(init=False)
class Check:
    """One line of a checklist: ``Check(FAIL, "sandbox", "does not answer ...")``, or built up as it goes with
    ``ok`` / ``warn`` / ``bad``, which keep the lines in the order found. ``step`` is the doctor's: on a failure that
    only means "not there yet", the README step that makes it (retool/doctor/stages.py)."""

    status: str
    name: str
    details: list[str]
    step: str | None

    def __init__(self, status: str, name: str, *details: str, step: str | None = None):
        if status not in STATUSES:
            raise ValueError(f"check {name!r}: status {status!r} is not one of {', '.join(STATUSES)}")
        self.status, self.name, self.details, self.step = status, name, list(details), step

    def add(self, status: str, text: str) -> None:
        self.details.append(text)
        self.status = worst([self.status, status])

    def ok(self, text: str) -> None:
        self.add(OK, text)

    def warn(self, text: str) -> None:
        self.add(WARN, text)

    def bad(self, text: str) -> None:
        self.add(FAIL, text)


def worst(statuses: Iterable[str]) -> str:
    return max(statuses, key=STATUSES.index, default=OK)


def render(checks: Iterable[Check]) -> str:
    lines = []
    for check in checks:
        label = f"[{check.status:^4}] "
        first, *more = check.details or [""]
        lines.append(f"{label}{check.name}: {first}" if first else f"{label}{check.name}")
        lines += [" " * len(label) + text for text in more]
    return "\n".join(lines)


def summary(checks: list[Check]) -> str:
    """``3 ok, 1 warning(s), 2 skipped``: how many checks ended in each status (those with none left out)."""
    counts = [(sum(c.status == status for c in checks), COUNTED[status]) for status in COUNTED]
    return ", ".join(f"{n} {word}" for n, word in counts if n) or "nothing checked"


def exit_status(checks: Iterable[Check]) -> int:
    return 1 if any(check.status == FAIL for check in checks) else 0
