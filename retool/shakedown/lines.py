"""What the checklist's lines share: a line judged from its problems and evidence (retool/checklist.py: OK, or
FAIL with any problem; SKIP for what a kind of run is not asked), and the step arithmetic."""

from __future__ import annotations

from retool.checklist import FAIL, OK, Check
from retool.doctor.config import planned_steps
from retool.shakedown.runfolder import Run, Stage


def verdict(name: str, problems: list[str], evidence: list[str]) -> Check:
    """FAIL when there is any problem, else OK; the problems first, then the evidence."""
    return Check(FAIL if problems else OK, name, *problems, *evidence)


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
