"""The checklist's lines: pass or FAIL with the evidence in the order found, or "not checked" with why, and the
step arithmetic every check shares."""

from __future__ import annotations

from dataclasses import dataclass, field

from retool.shakedown.projection import planned_steps
from retool.shakedown.runfolder import Run, Stage

PASS, FAIL, NOT_CHECKED = "pass", "FAIL", "not checked"


@dataclass
class Line:
    name: str
    status: str
    evidence: list[str] = field(default_factory=list)


class Findings:
    """What one line found, in the order found: evidence, and problems (any problem fails the line)."""

    def __init__(self, name: str):
        self.name, self.texts, self.failed = name, [], False

    def ok(self, text: str) -> None:
        self.texts.append(text)

    def bad(self, text: str) -> None:
        self.texts.append(text)
        self.failed = True

    def line(self) -> Line:
        return Line(self.name, FAIL if self.failed else PASS, self.texts)


def verdict(name: str, problems: list[str], evidence: list[str]) -> Line:
    found = Findings(name)
    for text in problems:
        found.bad(text)
    for text in evidence:
        found.ok(text)
    return found.line()


def required_stages(run: Run) -> tuple[str, ...]:
    return ("sft", "rl") if run.kind in ("shakedown", "smoke") else tuple(run.stages)


def span(steps) -> str:
    """'1-12' for consecutive steps, '3' for one, '1, 4' otherwise, 'none' for none."""
    steps = sorted(steps)
    if not steps:
        return "none"
    if len(steps) == 1:
        return str(steps[0])
    if steps == list(range(steps[0], steps[-1] + 1)):
        return f"{steps[0]}-{steps[-1]}"
    return ", ".join(map(str, steps))


def expected_steps(stage: Stage) -> list[int]:
    last = planned_steps(stage.config)
    return list(range(1, last + 1)) if last else []
