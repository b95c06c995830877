"""retool.report.band: the range a faithful run's AIME 2025 mean@30 lands in, and retool-report's verdict on a run."""

from __future__ import annotations

import math

import numpy as np
import pytest

from retool.report import band


def simulated_sd(per_problem: np.ndarray, samples: int, repeats: int = 20000) -> float:
    """The spread of mean@samples of one model over repeated validations, by drawing every sample."""
    rng = np.random.default_rng(0)
    solved = rng.binomial(samples, per_problem, size=(repeats, len(per_problem)))
    return float((solved / samples).mean(axis=1).std())


def test_sampling_sd_is_the_spread_of_repeated_validations():
    equal = np.full(30, 0.57)
    assert band.sampling_sd(0.57) == pytest.approx(simulated_sd(equal, 30), rel=0.03)
    # Problems of unequal difficulty (some always solved, some never): less noise at the same mean accuracy.
    mixed = np.array([1.0] * 10 + [0.0] * 8 + [0.6] * 6 + [0.3] * 6)
    between = float(mixed.var())
    assert band.sampling_sd(mixed.mean(), between=between) == pytest.approx(simulated_sd(mixed, 30), rel=0.03)
    assert band.sampling_sd(mixed.mean(), between=between) < band.sampling_sd(mixed.mean())


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"accuracy": 1.2}, "must be in \\[0, 1\\]"),
        ({"accuracy": 0.5, "samples": 0}, "samples 0"),
        ({"accuracy": 0.5, "between": 0.3}, "between-problem variance 0.3"),
    ],
)
def test_sampling_sd_refuses_impossible_inputs(kwargs, message):
    with pytest.raises(ValueError, match=message):
        band.sampling_sd(**kwargs)


def test_the_bands_of_the_published_figures():
    start, end = band.bands()
    assert (start.step, start.published, start.low, start.high) == (0, 0.29, 0.21, 0.37)
    assert (end.step, end.published, end.low, end.high) == (130, 0.57, 0.49, 0.65)
    # run minus published: two measurements' sampling noise and the assumed run-to-run spread
    assert end.total_sd == pytest.approx(math.sqrt(2 * 0.57 * 0.43 / 900 + 1 / 900))
    assert band.band(0.57, 130, run_to_run_sd=0.0).low == 0.52


def test_judge_counts_the_printed_edges_as_inside():
    end = band.bands()[1]
    assert [band.judge(v, end) for v in (0.48, 0.49, 0.57, 0.65, 0.66)] == [
        "below",
        "inside",
        "inside",
        "inside",
        "above",
    ]


def test_verdicts_of_a_run():
    tags = [band.TAG, "val-aux/num_turns/mean"]
    lines = band.verdicts([0, 10, 130], [0.3, 0.33, 0.4556], tags)
    assert lines == [
        "Step 0: AIME 2025 mean@30 0.300, inside the reproduction band 0.21-0.37 around the published 0.29.",
        "Step 130: AIME 2025 mean@30 0.456, below the reproduction band 0.49-0.65 around the published 0.57.",
    ]
    stopped = band.verdicts([0, 60], [0.2, 0.4], tags)
    assert stopped[0].endswith("below the reproduction band 0.21-0.37 around the published 0.29.")
    assert stopped[1] == (
        "Step 130: not validated in this run (last validation at step 60); the band there is "
        "0.49-0.65 around the published 0.57."
    )


def test_without_mean_at_30_the_verdict_says_why():
    assert band.verdicts([], [], ["val-core/aime_2025/acc/mean@4", "critic/rewards/mean"]) == [
        "The reproduction band needs `val-core/aime_2025/acc/mean@30`: this run validated AIME 2025 as "
        "`val-core/aime_2025/acc/mean@4`, not mean@30."
    ]
    assert band.verdicts([], [], ["critic/rewards/mean"])[0].endswith("this run logged no AIME 2025 validation.")


def test_the_section_is_written_between_its_markers(tmp_path, capsys):
    page = tmp_path / "reference.md"
    page.write_text(
        "# Ref\n\nbefore\n\n<!-- reproduction-band:start -->\nold\n<!-- reproduction-band:end -->\n\nafter\n"
    )
    assert band.main(["--write", str(page)]) == 0
    text = page.read_text()
    assert "old" not in text and text.startswith("# Ref\n\nbefore\n") and text.endswith("\nafter\n")
    assert "| band: published +- 1.96 x total SD (95%) | **0.21 - 0.37** | **0.49 - 0.65** |" in text
    assert band.main([]) == 0 and capsys.readouterr().out == band.section()
    assert band.main(["--write", str(tmp_path / "missing.md")]) == 1
    assert "no such file" in capsys.readouterr().err
