"""The resilience figures of docs/performance.md, from a finished run of tests/e2e/test_resilience.py.

That test kills the CPU RL run with SIGKILL after step 3 of 6, resumes it in its folder, stops the sandbox for
about 10 s while the resumed run rolls out step 4, and runs every call as a per-trajectory session; with
E2E_RESILIENCE_DIR set it keeps its folder and writes resilience.json there. This renders that file (its date and host
are the run's own):

    E2E_RESILIENCE_DIR=runs/resilience .venv/bin/python -m pytest tests/e2e/test_resilience.py
    python bench/resilience.py --from-run runs/resilience [--output docs/performance.md]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from retool.constants import REPO_ROOT
from retool.markdown_sections import replace_section

SECTION = "resilience"
COLUMNS = ("tool_calls", "tool_retried", "tool_unavailable", "trajectory_masked", "tool_session_lost")


def render(facts: dict) -> str:
    host = facts["host"]
    steps = sorted({int(step) for counts in facts["per_step"].values() for step in counts})
    lines = [
        "## Resilience (`tests/e2e/test_resilience.py`)",
        "",
        f"Measured {facts['date']} on {host['cpu_model']}, {host['cores']} cores (compute dtype {host['dtype']}): the "
        f"smoke's RL stage with the SFT'd tiny model, {facts['steps']} GRPO steps of {facts['trajectories_per_step']} "
        f"trajectories, a checkpoint every {facts['save_every']} steps, the tool in `session_mode: per_trajectory` "
        f"with a 2 s reconnect budget. The run was killed with SIGKILL after step {facts['killed_after_step']} and "
        f"resumed in its folder from the step-{facts['resumed_from_checkpoint']} checkpoint, launched with another "
        f"sandbox and TensorBoard folder{first_sandbox(facts)}; that sandbox was down for "
        f"{facts['outage_s']:g} s while the resumed run rolled out step 4, then came back on the same port. The run "
        f"finished, TensorBoard holds every step once, and every step drew the uninterrupted run's prompts "
        f"({facts['wall_s']:.0f} s in all).",
        "",
        "Tool calls per step (the training batch's `train-reward/<key>/mean` x trajectories):",
        "",
        "| step | " + " | ".join(COLUMNS) + " |",
        "|---" * (len(COLUMNS) + 1) + "|",
    ]
    for step in steps:
        cells = [f"{facts['per_step'][key].get(str(step), facts['per_step'][key].get(step, 0)):g}" for key in COLUMNS]
        lines.append(f"| {step} | " + " | ".join(cells) + " |")
    before, after = facts["sessions_before_outage"], facts["sessions_after_restart"]
    lines += [
        "",
        f"Sessions: before the outage the sandbox had started {before['started']} and closed "
        f"{before['closed']} (each at its trajectory's end); the restarted sandbox started "
        f"{after['started']} and closed {after['closed']}, {after.get('died', 0)} died, and evicted "
        f"{sum(v for k, v in after.items() if k.startswith('evicted'))}.",
        "",
    ]
    return "\n".join(lines)


def first_sandbox(facts: dict) -> str:
    counts = facts.get("first_sandbox_requests")
    if not counts:
        return ""
    return (
        f" (the crashed run made {counts['first_launch']} requests to its sandbox; a fresh sandbox on that URL "
        f"counted {counts['during_resume']} from the resumed run)"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--from-run", type=Path, required=True, help="E2E_RESILIENCE_DIR of a finished test run")
    parser.add_argument("--output", type=Path, default=REPO_ROOT / "docs" / "performance.md")
    args = parser.parse_args(argv)
    facts_file = args.from_run / "resilience.json"
    if not facts_file.is_file():
        print(f"error: {facts_file} not found: run the test with E2E_RESILIENCE_DIR={args.from_run}", file=sys.stderr)
        return 1
    replace_section(args.output, SECTION, render(json.loads(facts_file.read_text())))
    print(f"wrote the {SECTION} section of {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
