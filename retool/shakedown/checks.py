"""The shakedown's checklist: one line per question, OK or FAIL with the evidence, or SKIP with why.

What a line demands depends on the kind of run (logs/launches.jsonl): a shakedown (``SHAKEDOWN=1``) must have
everything, the resume included; a CPU smoke everything but the resume (it never relaunches); a plain run what it
did (no merge, no resume). A line that was not checked says so (SKIP) and never passes. The lines about what the
run logged are in ``curves.py``, about what it left on disk in ``artifacts.py``; the projection is
``projection.py``'s.
"""

from __future__ import annotations

import json

from retool.checklist import Check
from retool.shakedown.artifacts import (
    check_checkpoints,
    check_config,
    check_devices,
    check_merge,
    check_resume,
)
from retool.shakedown.curves import (
    check_failures,
    check_memory,
    check_reward,
    check_stages,
    check_tensorboard,
    check_tool_calls,
    check_validation,
)
from retool.shakedown.lines import verdict
from retool.shakedown.projection import PAPER_ESTIMATE, full_run_name, hours, project
from retool.shakedown.runfolder import Run


def check_speed(run: Run) -> Check:
    projections, _ = project(run)
    failures = [f"{p.stage}: cannot project without {', '.join(p.missing)}" for p in projections if p.missing]
    lines = [line for p in projections for line in p.lines]
    done = [p.seconds for p in projections if p.seconds is not None]
    if done and not failures:
        lines.append(f"{full_run_name(run)}: {hours(sum(done))} in all")
    elsewhere = "" if run.device in ("npu", None) else f"; this run is on {run.device}, not comparable"
    lines.append(PAPER_ESTIMATE + elsewhere)
    if run.kind == "smoke":
        for name, stage in run.stages.items():
            took = [float(r["time"]) - float(r["start"]) for r in stage.ends if "start" in r and "time" in r]
            if took:
                lines.append(
                    f"{name}: the smoke's own stage took {hours(sum(took))} (its projection above is of the "
                    "same config)"
                )
    return verdict("speed", failures, lines)


CHECKS = (
    check_stages,
    check_config,
    check_devices,
    check_tensorboard,
    check_validation,
    check_tool_calls,
    check_reward,
    check_failures,
    check_checkpoints,
    check_resume,
    check_merge,
    check_memory,
    check_speed,
)


def checklist(run: Run) -> list[Check]:
    return [check(run) for check in CHECKS]


def as_json(checks: list[Check]) -> str:
    return json.dumps([{"status": c.status, "name": c.name, "details": c.details} for c in checks], indent=2)
