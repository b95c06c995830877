"""The reproduction band: the range of AIME 2025 acc mean@30 a faithful run of the reference lands in.

The published figures (retool.constants.PUBLISHED_RESULT: 0.29 at RL step 0, 0.57 at step 130) are each one
measurement: 30 problems x 30 samples of one trained model. A faithful run is compared with them through

- sampling noise, once in the run's number and once in the published one. For a model whose problem i is solved
  with probability p_i, mean@30 over 30 problems has variance sum p_i (1 - p_i) / (30 x 30 x 30) =
  (p (1 - p) - between) / 900, where p is the mean accuracy and ``between`` the variance of the p_i across problems.
  The band takes between = 0 (every problem equally hard), the largest noise: a bound, since AIME problems are not
  equally hard;
- run-to-run variance: another seed, data order and stack give another model, whose true accuracy on the same 30
  problems differs. The reference published one run, so this is an assumption (RUN_TO_RUN_SD).

The problems themselves are the same 30 in every run, so which problems AIME 2025 happens to hold adds nothing to
the comparison. docs/reference.md ("The reproduction band") holds the section ``section()`` renders, and
retool-report judges a run with ``judge``: both read the numbers here.

    python -m retool.report.band                      # print the section
    python -m retool.report.band --write docs/reference.md
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass
from pathlib import Path

from retool.constants import PUBLISHED_RESULT
from retool.markdown_sections import replace_section

TAG = "val-core/aime_2025/acc/mean@30"
PROBLEMS = 30  # AIME 2025
SAMPLES = 30  # samples per problem at validation (actor_rollout_ref.rollout.val_kwargs.n)
# Assumed standard deviation of the true accuracy between faithful runs: one problem of the 30. The reference gives
# one run per setting; verl's fully-async ReTool runs (0.204 async, 0.206 colocated, Qwen2.5-7B) are one pair only.
RUN_TO_RUN_SD = 1 / PROBLEMS
Z = 1.96  # two-sided 95%
SECTION = "reproduction-band"


def sampling_sd(accuracy: float, problems: int = PROBLEMS, samples: int = SAMPLES, between: float = 0.0) -> float:
    """Standard deviation of mean@``samples`` over ``problems`` problems for one model of mean accuracy
    ``accuracy``; ``between`` is the variance of the per-problem accuracies (0 gives the largest noise)."""
    if not 0 <= accuracy <= 1 or problems < 1 or samples < 1:
        raise ValueError(f"accuracy {accuracy} must be in [0, 1], problems {problems} and samples {samples} >= 1")
    if not 0 <= between <= accuracy * (1 - accuracy):
        raise ValueError(f"between-problem variance {between} must be in [0, accuracy x (1 - accuracy)]")
    return math.sqrt((accuracy * (1 - accuracy) - between) / (problems * samples))


@dataclass(frozen=True)
class Band:
    step: int
    published: float
    sampling_sd: float  # of one measurement (the run's, or the published one)
    run_to_run_sd: float
    z: float = Z

    @property
    def total_sd(self) -> float:
        """Of the run's figure minus the published one: two measurements' noise and the run-to-run spread."""
        return math.sqrt(2 * self.sampling_sd**2 + self.run_to_run_sd**2)

    @property
    def low(self) -> float:
        return round(self.published - self.z * self.total_sd, 2)

    @property
    def high(self) -> float:
        return round(self.published + self.z * self.total_sd, 2)


def band(published: float, step: int, run_to_run_sd: float = RUN_TO_RUN_SD, z: float = Z) -> Band:
    return Band(step, published, sampling_sd(published), run_to_run_sd, z)


def bands() -> list[Band]:
    """The band at RL step 0 (the SFT model) and at the last step, from the published figures."""
    figures = PUBLISHED_RESULT["metrics"][TAG]
    return [band(figures["start"], 0), band(figures["end"], PUBLISHED_RESULT["steps"])]


def judge(value: float, at: Band) -> str:
    """ "inside", "below" or "above" the band (its edges, as printed, count as inside)."""
    return "below" if value < at.low else "above" if value > at.high else "inside"


def verdicts(steps: list[int], values: list[float], tags: list[str]) -> list[str]:
    """What retool-report says about a run: for each band, the run's TAG at that step judged, or why it cannot be.
    ``steps`` and ``values`` are the run's TAG series (empty when absent); ``tags`` are the run's RL tags."""
    if not steps:
        other = sorted(t for t in tags if t.startswith("val-core/aime_2025/acc/mean@"))
        why = (
            f"this run validated AIME 2025 as {', '.join(f'`{t}`' for t in other)}, not mean@{SAMPLES}"
            if other
            else "this run logged no AIME 2025 validation"
        )
        return [f"The reproduction band needs `{TAG}`: {why}."]
    logged = dict(zip(steps, values))
    lines = []
    for b in bands():
        where = f"{b.low:.2f}-{b.high:.2f} around the published {b.published:.2f}"
        if b.step in logged:
            value = logged[b.step]
            lines.append(
                f"Step {b.step}: AIME 2025 mean@{SAMPLES} {value:.3f}, {judge(value, b)} the reproduction band {where}."
            )
        else:
            lines.append(
                f"Step {b.step}: not validated in this run (last validation at step {max(steps)}); the "
                f"band there is {where}."
            )
    return lines


def section() -> str:
    """The Markdown table of docs/reference.md's generated section."""
    b = bands()
    rows = [
        ("published mean@30", *(f"{x.published:.2f}" for x in b)),
        ("sampling SD of one measurement (bound)", *(f"{x.sampling_sd:.4f}" for x in b)),
        ("sampling SD of run minus published (x sqrt 2)", *(f"{math.sqrt(2) * x.sampling_sd:.4f}" for x in b)),
        ("run-to-run SD (assumed: 1 problem of 30)", *(f"{x.run_to_run_sd:.4f}" for x in b)),
        ("total SD", *(f"{x.total_sd:.4f}" for x in b)),
        (f"band: published +- {Z} x total SD (95%)", *(f"**{x.low:.2f} - {x.high:.2f}**" for x in b)),
        (
            "the same without run-to-run spread (sampling only)",
            *(f"{s.low:.2f} - {s.high:.2f}" for s in (band(x.published, x.step, 0.0) for x in b)),
        ),
    ]
    lines = [
        f"Computed by `retool/report/band.py` (`python -m retool.report.band`) from `{TAG}` in `retool/constants.py`:",
        "",
        f"| | step {b[0].step} (after SFT) | step {b[1].step} |",
        "|---|---|---|",
    ]
    lines += [f"| {name} | {start} | {end} |" for name, start, end in rows]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m retool.report.band", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--write",
        type=Path,
        default=None,
        metavar="FILE",
        help=f"replace the section {SECTION} of FILE (docs/reference.md) instead of printing it",
    )
    args = parser.parse_args(argv)
    if args.write is None:
        print(section(), end="")
    elif not args.write.is_file():
        print(f"error: --write {args.write}: no such file", file=sys.stderr)
        return 1
    else:
        replace_section(args.write, SECTION, section())
    return 0


if __name__ == "__main__":
    sys.exit(main())
