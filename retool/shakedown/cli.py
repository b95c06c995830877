"""``retool-shakedown RUN_DIR``: the checklist of a shakedown (or smoke) run folder; exit status 1 when a line fails.

    SHAKEDOWN=1 RUN_DIR=runs/shakedown ./run_qwen3_4b_sft_npu.sh
    SHAKEDOWN=1 RUN_DIR=runs/shakedown MODEL_PATH=runs/shakedown/sft_merged ./run_qwen3_4b_dapo_npu.sh
    retool-shakedown runs/shakedown

Each line is ``[ OK ]`` or ``[FAIL]`` with its evidence (read from the folder's files: TensorBoard events,
logs/failures.jsonl, checkpoints, logs/merge.json, shakedown/resume.json, logs/launches.jsonl), or ``[SKIP]`` with why
(retool/checklist.py); then the full run's wall time projected from what was measured, beside the docs' paper
estimate.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from retool.checklist import exit_status, render, summary
from retool.shakedown.checks import as_json, checklist
from retool.shakedown.runfolder import Run, RunFolderError, read_run

KIND = {"shakedown": "a shakedown (SHAKEDOWN=1)", "smoke": "a CPU smoke run", "run": "a run"}


def header(run: Run) -> str:
    kind = KIND.get(run.kind or "", "a run of unknown kind (no logs/launches.jsonl; checked as a plain run)")
    return f"retool-shakedown {run.folder}: {kind} on {run.device}, stages {', '.join(run.stages)}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="retool-shakedown", description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir", type=Path, help="the run folder (RUN_DIR) of a SHAKEDOWN=1 run or a CPU smoke")
    parser.add_argument("--json", action="store_true", help="print the lines as JSON")
    args = parser.parse_args(argv)
    try:
        run = read_run(args.run_dir.resolve())
    except RunFolderError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    checks = checklist(run)
    if args.json:
        print(as_json(checks))
    else:
        print(header(run))
        print(render(checks))
        print(
            f"retool-shakedown: {summary(checks)}"
            + (
                ": the long run is not ready; fix what failed and run the shakedown again"
                if exit_status(checks)
                else ""
            )
        )
    return exit_status(checks)


if __name__ == "__main__":
    sys.exit(main())
