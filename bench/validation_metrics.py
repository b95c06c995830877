"""How long verl's validation metrics take on a run's own validation dump, with patch 0007 and without.

    python bench/validation_metrics.py runs/smoke-<time>/validation/0.jsonl

verl's process_validation_metrics runs twice on the dump's samples (grouped by prompt, as verl groups them): as
installed (patched: best@n, worst@n and maj@n as array operations) and with the patch's fast path turned off (the
per-draw loop of the pristine code). Prints both times and whether every metric is identical.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from unittest import mock

# what the dump holds besides the reward's fields (verl's own columns)
NOT_METRICS = {"input", "output", "gts", "step", "uid"}


def load(dump: Path) -> tuple[list[str], list[str], dict[str, list]]:
    rows = [json.loads(line) for line in dump.read_text().splitlines() if line.strip()]
    if not rows or "input" not in rows[0]:
        raise ValueError(f"{dump}: no validation samples with an 'input' (a validation_data_dir dump of verl's)")
    infos = {key: [row.get(key) for row in rows] for key in rows[0] if key not in NOT_METRICS}
    # the dump's uid is the sample's; verl groups a prompt's n samples, which share their input
    return [row.get("data_source", "val") for row in rows], [row["input"] for row in rows], infos


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dump", type=Path, help="a validation dump: <run>/validation/<step>.jsonl")
    args = parser.parse_args(argv)
    try:
        sources, uids, infos = load(args.dump)
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    import verl.trainer.ppo.metric_utils as metric_utils

    if not hasattr(metric_utils, "_bootstrap_numbers"):
        print("error: the installed verl lacks patch 0007 (make setup applies it)", file=sys.stderr)
        return 2
    started = time.perf_counter()
    patched = metric_utils.process_validation_metrics(sources, uids, infos)
    patched_s = time.perf_counter() - started
    with mock.patch.object(metric_utils, "_bootstrap_numbers", lambda values: None):
        started = time.perf_counter()
        loop = metric_utils.process_validation_metrics(sources, uids, infos)
        loop_s = time.perf_counter() - started

    def flat(out: dict) -> dict:
        return {(s, v, m): x for s, d in out.items() for v, mm in d.items() for m, x in mm.items()}

    same = flat(patched) == flat(loop)
    print(
        f"{len(uids)} samples, {len(set(uids))} prompts, {len(infos)} fields, {len(flat(loop))} metrics: "
        f"per-draw loop {loop_s:.1f} s, patched {patched_s:.2f} s ({loop_s / patched_s:.0f}x); identical: {same}"
    )
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
