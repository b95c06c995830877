"""The two-node rehearsal on this host (`make rehearse-nodes`), its results into docs/performance.md.

    python bench/rehearse_nodes.py --output docs/performance.md

Runs the multi-node tests with the recipe's launchers on a real two-node Ray cluster of this host (a head on
127.0.0.1, a node on 127.0.0.2): the node check's failures, SFT on two torchrun nodes, RL sync killed in step 2 and
resumed, and RL separate_async with the trainer on one node and the rollout on the other (marked `rehearsal`, not in
make test). Each test's outcome and time come from pytest's JUnit report; what ran where, the times of the launches
and each sandbox's counters from the records the tests write ($RETOOL_REHEARSAL_RECORD). Exits 1 when a test failed.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from suite_times import read_cases  # bench/, on sys.path as this script's folder

from retool.constants import REPO_ROOT
from retool.markdown_sections import replace_section
from retool.platform.cpu_dtype import host_report
from retool.smoke.learning_run import checkout_commit

SECTION = "rehearse-nodes"
TESTS = [
    "tests/integration/test_node_check_cluster.py",
    "tests/integration/test_multinode_sft.py",
    "tests/integration/test_multinode_rl.py",
]


def section(cases: list[dict], records: list[dict], wall_s: float) -> str:
    host = host_report()
    when = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    lines = [
        f"Measured {when} on {host['cpu_model']}, {host['cores']} cores, commit {checkout_commit()}: "
        f"`make rehearse-nodes`, {wall_s / 60:.1f} min. Two Ray nodes on this host (127.0.0.1 and 127.0.0.2), "
        "one bookkeeping device and one sandbox each; the smoke's tiny model and tool task, sessions per "
        "trajectory.",
        "",
        "| test | outcome | s |",
        "|---|---|---|",
    ]
    lines += [f"| `{c['name'].rsplit('.', 1)[-1]}` | {c['outcome']} | {c['seconds']:.0f} |" for c in cases]
    for entry in records:
        lines += ["", f"**{entry.pop('part')}**", ""]
        for key, value in entry.items():
            if key == "placed":
                value = "; ".join(f"{name}: {', '.join(nodes)}" for name, nodes in sorted(value.items()))
            elif isinstance(value, dict):
                value = json.dumps(value)
            lines.append(f"- {key}: {value}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, help="the markdown file whose rehearse-nodes section is replaced")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="rehearse-") as folder:
        report, records_file = Path(folder) / "report.xml", Path(folder) / "records.jsonl"
        started = datetime.datetime.now().timestamp()
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "-m", "verl", f"--junitxml={report}", *TESTS],
            cwd=REPO_ROOT,
            env={**os.environ, "RETOOL_REHEARSAL_RECORD": str(records_file)},
        )
        wall_s = datetime.datetime.now().timestamp() - started
        cases, _ = read_cases(report)
        records = [json.loads(line) for line in records_file.read_text().splitlines()] if records_file.is_file() else []
    text = section(cases, records, wall_s)
    print(text)
    if args.output:
        replace_section(args.output, SECTION, text)
    return 1 if done.returncode else 0


if __name__ == "__main__":
    sys.exit(main())
