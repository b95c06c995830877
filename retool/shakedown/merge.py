"""Merge the SFT stage's last checkpoint to Hugging Face format and load the merge, as RL will.

    python -m retool.shakedown.merge --run-dir RUN_DIR

The CPU smoke's merge stage runs it, and so does a ``SHAKEDOWN=1`` SFT launch (scripts/launch.sh) on node 0. verl's
merger (``python -m verl.model_merger merge --backend fsdp``) writes ``RUN_DIR/sft_merged`` (its output goes to
``logs/merge.log``); then a fresh process loads that folder as RL's workers will: the config, the tokenizer with its
chat template, the weights, and one forward pass, whose logits must be finite. What it found goes to
``logs/merge.json`` for ``retool-shakedown``; a merge or load that fails stops with the reason.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from retool.resume import ResumeError, latest_checkpoint
from retool.shakedown.runfolder import MERGE_RECORD, MERGED

PROBE = "What is 12 * 34? Use the code tool."


class MergeError(RuntimeError):
    """The merge or its load failed; the message says where to look."""


def sft_checkpoint(run_dir: Path) -> tuple[int, Path]:
    """The step and folder of the SFT stage's last checkpoint in ``run_dir``."""
    config_path = run_dir / "sft.resolved.yaml"
    if not config_path.is_file():
        raise MergeError(f"{run_dir} holds no sft.resolved.yaml: run the SFT stage in this RUN_DIR first")
    checkpoints = Path(yaml.safe_load(config_path.read_text())["trainer"]["default_local_dir"])
    try:
        step = latest_checkpoint(checkpoints)
    except ResumeError as exc:
        raise MergeError(str(exc)) from exc
    if step is None:
        raise MergeError(
            f"{checkpoints} holds no checkpoint (no latest_checkpointed_iteration.txt): the SFT stage "
            "did not finish; see logs/sft.log"
        )
    return step, checkpoints / f"global_step_{step}"


def merge(checkpoint: Path, target: Path, log: Path) -> None:
    command = [
        sys.executable,
        "-m",
        "verl.model_merger",
        "merge",
        "--backend",
        "fsdp",
        "--local_dir",
        str(checkpoint),
        "--target_dir",
        str(target),
    ]
    with log.open("a") as out:
        out.write(f"$ {' '.join(command)}\n")
        out.flush()
        done = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT)
    if done.returncode != 0:
        raise MergeError(f"verl's merger exited {done.returncode} on {checkpoint}; its output is in {log}")


def load(target: Path) -> dict[str, Any]:
    """Load ``target`` the way a fresh process does and run one forward pass; what it found."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()  # one line on the console, not a bar per shard
    started = time.monotonic()
    tokenizer = AutoTokenizer.from_pretrained(target)
    model = AutoModelForCausalLM.from_pretrained(target, dtype="auto")
    loaded_s = time.monotonic() - started
    ids = tokenizer.apply_chat_template(
        [{"role": "user", "content": PROBE}], add_generation_prompt=True, return_tensors="pt", return_dict=True
    )["input_ids"]
    with torch.no_grad():
        logits = model(input_ids=ids).logits
    return {
        "architectures": list(model.config.architectures or []),
        "parameters": sum(p.numel() for p in model.parameters()),
        "dtype": str(next(model.parameters()).dtype).removeprefix("torch."),
        "prompt_tokens": int(ids.shape[-1]),
        "logits_finite": bool(torch.isfinite(logits).all()),
        "load_s": round(loaded_s, 1),
    }


def merge_and_load(run_dir: Path) -> dict[str, Any]:
    step, checkpoint = sft_checkpoint(run_dir)
    target = run_dir / MERGED
    started = time.monotonic()
    merge(checkpoint, target, run_dir / "logs" / "merge.log")
    merged_s = time.monotonic() - started
    try:
        facts = load(target)
    except Exception as exc:  # noqa: BLE001 -- whatever stops the load is the finding; it is reported, not hidden
        raise MergeError(f"the merged model {target} does not load: {exc!r}") from exc
    record = {
        "checkpoint": str(checkpoint),
        "step": step,
        "model": str(target),
        "merge_s": round(merged_s, 1),
        **facts,
        "time": time.time(),
    }
    (run_dir / MERGE_RECORD).write_text(json.dumps(record, indent=2) + "\n")
    if not facts["logits_finite"]:
        raise MergeError(
            f"the merged model {target} loads but its logits are not finite: the checkpoint or the merge is broken"
        )
    return record


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m retool.shakedown.merge", description=__doc__.split("\n\n")[0])
    parser.add_argument("--run-dir", type=Path, required=True, help="the run folder whose SFT stage is merged")
    args = parser.parse_args(argv)
    try:
        record = merge_and_load(args.run_dir.resolve())
    except (MergeError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(
        f"merged SFT step {record['step']} into {record['model']} ({record['merge_s']:.0f} s) and loaded it: "
        f"{record['architectures'][0] if record['architectures'] else '?'}, {record['parameters'] / 1e6:.1f} M "
        f"parameters, {record['dtype']}, finite logits"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
