"""What each part of the test suite costs on this host, from the JUnit XML reports of a `make test` run.

    make test TEST_REPORTS=/tmp/suite      # one report per phase: parallel.xml, e2e.xml
    python bench/suite_times.py /tmp/suite/parallel.xml /tmp/suite/e2e.xml --label "native bf16" \
        [--make-wall-s 2400] [--commit abc1234] --output docs/performance.md

Writes the section ``test-suite-<label>`` of docs/performance.md: per folder of tests/ the number of tests, their
outcomes and their summed time, the slowest tests, and the host the report came from (this machine's CPU and the
ISA limits in the environment, so run it on the host and in the environment that ran the suite).
"""

from __future__ import annotations

import argparse
import datetime
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

from retool.markdown_sections import replace_section, slug
from retool.platform.cpu_dtype import host_report
from retool.smoke.learning_run import checkout_commit


def read_cases(path: Path) -> tuple[list[dict], dict]:
    root = ET.parse(path).getroot()
    suite = root if root.tag == "testsuite" else root.find("testsuite")
    if suite is None:
        raise ValueError(f"{path} holds no <testsuite>: is it pytest's --junitxml output?")
    cases = []
    for case in suite.iter("testcase"):
        outcome = "passed"
        for child, name in (("failure", "failed"), ("error", "error"), ("skipped", "skipped")):
            if case.find(child) is not None:
                outcome = name
        part = "/".join(case.get("classname", "").split(".")[:2]) or "?"
        cases.append(
            {
                "part": part,
                "name": f"{case.get('classname')}::{case.get('name')}",
                "seconds": float(case.get("time") or 0),
                "outcome": outcome,
            }
        )
    return cases, dict(suite.attrib)


def render(
    reports: list[tuple[Path, list[dict], dict]], label: str, make_wall_s: float | None, commit: str | None = None
) -> str:
    """The section: per part the summed test time (a phase on several workers sums to more than its wall time),
    per phase (report) its wall time."""
    cases = [case for _, report_cases, _ in reports for case in report_cases]
    suite = reports[0][2]
    host = host_report()
    limits = ", ".join(f"{k}={v}" for k, v in host["isa_limits"].items())
    when = (suite.get("timestamp") or datetime.datetime.now().isoformat())[:10]
    parts: dict[str, dict] = defaultdict(lambda: {"tests": 0, "seconds": 0.0, "outcomes": defaultdict(int)})
    for case in cases:
        part = parts[case["part"]]
        part["tests"] += 1
        part["seconds"] += case["seconds"]
        part["outcomes"][case["outcome"]] += 1
    walls = [
        (path.stem, float(attrs.get("time") or sum(c["seconds"] for c in report_cases)))
        for path, report_cases, attrs in reports
    ]
    pytest_s = sum(wall for _, wall in walls)
    summed_s = sum(c["seconds"] for c in cases) or 1.0
    lines = [
        f"### Test suite: {label}",
        "",
        f"Measured {when} by `make test` at commit {commit or '(not recorded)'} (pytest's JUnit report, "
        f"`bench/suite_times.py`) on {host['cpu_model']}, "
        f"{host['cores']} cores{' with ' + limits if limits else ''}; compute dtype `{host['dtype']}`.",
        "",
        "| part | tests | outcomes | time (s) | share |",
        "|---|---|---|---|---|",
    ]
    for name, part in sorted(parts.items(), key=lambda kv: -kv[1]["seconds"]):
        outcomes = ", ".join(f"{n} {k}" for k, n in sorted(part["outcomes"].items()))
        lines.append(
            f"| `{name}` | {part['tests']} | {outcomes} | {part['seconds']:.0f} | {part['seconds'] / summed_s:.0%} |"
        )
    total = f"pytest {pytest_s:.0f} s ({pytest_s / 60:.1f} min)"
    if len(walls) > 1:
        total += " (" + ", ".join(f"{name} {wall:.0f} s" for name, wall in walls) + ")"
    if make_wall_s:
        total += f"; the whole `make test`, setup included, {make_wall_s:.0f} s ({make_wall_s / 60:.1f} min)"
    lines += ["", f"Total: {total}. Slowest tests:", ""]
    for case in sorted(cases, key=lambda c: -c["seconds"])[:5]:
        lines.append(f"- {case['seconds']:.0f} s `{case['name']}`")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("junit", type=Path, nargs="+", help="pytest --junitxml reports, one per phase of the run")
    parser.add_argument("--label", required=True, help='how this host and setting are named, e.g. "native bf16"')
    parser.add_argument("--make-wall-s", type=float, default=None, help="wall time of the whole make test, if timed")
    parser.add_argument(
        "--commit",
        default=None,
        help="the commit the suite ran on (default: that of the checkout "
        "the recipe is installed from, `git describe --always --dirty`)",
    )
    parser.add_argument("--output", type=Path, default=Path(__file__).resolve().parents[1] / "docs" / "performance.md")
    args = parser.parse_args(argv)
    try:
        reports = [(path, *read_cases(path)) for path in args.junit]
    except (OSError, ET.ParseError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    section = render(reports, args.label, args.make_wall_s, args.commit or checkout_commit())
    replace_section(args.output, f"test-suite-{slug(args.label)}", section)
    print(section)
    return 0


if __name__ == "__main__":
    sys.exit(main())
