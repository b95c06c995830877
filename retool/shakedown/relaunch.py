"""The shakedown's resume: after its first RL launch ended at step 1's checkpoint, launch again in the same folder.

    python -m retool.shakedown.relaunch --run-dir RUN_DIR     # prints "relaunch" when the launcher must start again

scripts/launch.sh runs it after a ``SHAKEDOWN=1`` RL launch ends well. The first launch stops after step 1's
checkpoint (retool/shakedown/first_launch.py); this records what it left (the steps saved, the prompts step 1 drew,
from verl's rollout dumps) in ``shakedown/resume.json`` and prints ``relaunch``. The launcher then starts again with
the same RUN_DIR and arguments: an ordinary resume (retool/resume.py, then verl loads step 1's model, optimizer and
dataloader state) that runs step 2. After that second launch it marks the record done and prints nothing.
``retool-shakedown`` checks what the second launch did.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from retool.failures.limits import read_records
from retool.resume import ResumeError, kept_checkpoints, latest_checkpoint
from retool.shakedown.runfolder import RESUME_RECORD


class RelaunchError(RuntimeError):
    """The first launch did not leave what the resume needs; the message says what."""


def prompt_digests(dump: Path) -> list[str]:
    """The distinct prompts of a step's rollout dump (verl's ``rollout_data_dir/<step>.jsonl``), hashed, sorted."""
    return sorted(
        {hashlib.sha1(record["input"].encode()).hexdigest()[:16] for record in read_records(dump) if "input" in record}
    )


def after_launch(run_dir: Path) -> bool:
    """Called after each ``SHAKEDOWN=1`` RL launch that ended well; True when the launcher must start again."""
    trainer = yaml.safe_load((run_dir / "rl.resolved.yaml").read_text())["trainer"]
    checkpoints, last = Path(trainer["default_local_dir"]), int(trainer["total_training_steps"])
    try:
        latest = latest_checkpoint(checkpoints)
    except ResumeError as exc:
        raise RelaunchError(str(exc)) from exc
    path = run_dir / RESUME_RECORD
    if path.is_file():  # the second launch ended
        record = json.loads(path.read_text())
        if latest != last:
            raise RelaunchError(
                f"the resumed launch ended at step {latest} of {last} (latest checkpoint in "
                f"{checkpoints}); see logs/rl.log"
            )
        record.update(resumed=True, resumed_end=time.time())
        path.write_text(json.dumps(record, indent=2) + "\n")
        return False
    if last < 2 or latest != 1:
        raise RelaunchError(
            f"the shakedown's first RL launch should have ended at the checkpoint of step 1 of "
            f"{last} (latest checkpoint: {latest}; saved: {kept_checkpoints(checkpoints) or 'none'}): "
            "there is nothing to resume from. See logs/rl.log"
        )
    dumps = Path(trainer.get("rollout_data_dir") or run_dir / "rollouts")
    record: dict[str, Any] = {
        "first_launch": {
            "saved": kept_checkpoints(checkpoints),
            "latest": latest,
            "prompts": {"1": prompt_digests(dumps / "1.jsonl")},
        },
        "stopped_after": 1,
        "stopped_at": time.time(),
        "resumed": False,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=2) + "\n")
    print(
        "[shakedown] the first launch ended at step 1's checkpoint: launching again in the same RUN_DIR to resume "
        "from it",
        file=sys.stderr,
    )
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m retool.shakedown.relaunch", description=__doc__.split("\n\n")[0])
    parser.add_argument("--run-dir", type=Path, required=True)
    args = parser.parse_args(argv)
    try:
        again = after_launch(args.run_dir.resolve())
    except (RelaunchError, OSError, KeyError, ValueError) as exc:
        print(f"error: the shakedown cannot test the resume: {exc}", file=sys.stderr)
        return 1
    print("relaunch" if again else "", end="\n" if again else "")
    return 0


if __name__ == "__main__":
    sys.exit(main())
