"""retool-report on TensorBoard event files written here with torch's SummaryWriter (what verl logs with).

The run below is shaped like a smoke run: an SFT folder and an RL folder, two data sources validated with
mean@4 at steps 0, 6 and 12, tool outcomes as counts per trajectory (some zero at every step), and verl's other
validation statistics (best@N, std@N) that the report must not draw.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import to_hex

from retool.constants import PUBLISHED_RESULT
from retool.report import (
    ReportError,
    build_report,
    find_event_dirs,
    load_published,
    main,
    read_event_dir,
    read_run,
)
from retool.report.panels import build_panels, data_sources
from retool.report.plot import centred_mean, draw

VAL_STEPS = (0, 6, 12)
TRAIN_STEPS = tuple(range(1, 13))


def validation(values: list[float]) -> list[tuple[int, float]]:
    return list(zip(VAL_STEPS, values))


def training(values: list[float]) -> list[tuple[int, float]]:
    return list(zip(TRAIN_STEPS, values))


RL_CURVES: dict[str, list[tuple[int, float]]] = {
    "val-core/aime_2025/acc/mean@4": validation([0.25, 0.5, 0.375]),
    "val-core/synthetic_arith/acc/mean@4": validation([0.0, 0.0, 0.0]),  # zero: summarised, not drawn
    "val-core/aime_2025/acc/best@4/mean": validation([0.5, 0.75, 0.75]),  # not the panel's statistic
    "val-aux/aime_2025/used_tool/mean@4": validation([0.5, 0.75, 1.0]),
    "val-aux/synthetic_arith/used_tool/mean@4": validation([0.25, 0.5, 0.75]),
    "val-aux/aime_2025/tool_calls/mean@4": validation([2.0, 3.0, 4.0]),
    "val-aux/synthetic_arith/tool_calls/mean@4": validation([0.0, 1.0, 2.0]),  # no call at step 0: no rate there
    "val-aux/synthetic_arith/tool_calls/std@4": validation([0.5, 0.5, 0.5]),
    "val-aux/aime_2025/tool_ok/mean@4": validation([1.0, 2.25, 3.0]),
    "val-aux/synthetic_arith/tool_ok/mean@4": validation([0.0, 0.5, 2.0]),
    "val-aux/aime_2025/tool_error/mean@4": validation([1.0, 0.75, 1.0]),
    "val-aux/synthetic_arith/tool_error/mean@4": validation([0.0, 0.5, 0.0]),
    **{
        f"val-aux/{source}/{key}/mean@4": validation([0.0, 0.0, 0.0])
        for source in ("aime_2025", "synthetic_arith")
        for key in ("tool_timeout", "tool_unavailable", "tool_truncated")
    },
    "val-aux/aime_2025/tool_rounds/mean@4": validation([1.0, 1.5, 2.0]),
    "val-aux/aime_2025/score/mean@4": validation([-1.0, -0.5, -0.75]),
    "val-aux/synthetic_arith/score/mean@4": validation([-1.2, -1.0, -0.8]),
    "val-aux/num_turns/mean": validation([6.0, 5.5, 5.0]),
    "num_turns/mean": training([4.0, 4.5, 5.0, 4.0, 4.5, 5.0, 4.0, 4.5, 5.0, 4.0, 4.5, 5.0]),
    "training/num_turns/mean": training([4.0, 4.5, 5.0, 4.0, 4.5, 5.0, 4.0, 4.5, 5.0, 4.0, 4.5, 5.0]),
    "critic/rewards/mean": training([-1.0, -0.5, -0.75, -0.25, 0.0, -0.5, 0.25, 0.5, 0.0, 0.75, 0.5, 0.625]),
    "response_length/mean": training([300.0 - 10 * i for i in range(12)]),
    "response_length/clip_ratio": training([0.0] * 12),
    "actor/pg_loss": training([0.1] * 12),
    # the failure accounting: two trajectories kept out of the loss at step 6 (tool exceptions), else nothing
    "failures/share": training([0.0] * 5 + [0.0625] + [0.0] * 6),
    "val-failures/share": validation([0.0, 0.0, 0.0]),
    "failures/total/tool_exception": training([0.0] * 5 + [2.0] + [0.0] * 6),
    **{
        f"failures/total/{cause}": training([0.0] * 12)
        for cause in ("reward_error", "agent_loop_error", "sandbox_unavailable")
    },
    # an async trainer mode: one model version behind after step 1, a trajectory resumed across an update at step 4
    "training/off_policy/trajectory_staleness/mean": training([0.0] + [1.0] * 11),
    "training/off_policy/trajectory_staleness/max": training([0.0] + [1.0] * 11),
    "training/off_policy/trajectory_staleness_worst/max": training([0.0] + [1.0] * 2 + [2.0] + [1.0] * 8),
    "training/off_policy/trajectory_spans/mean": training([1.0] * 3 + [1.125] + [1.0] * 8),
    "training/off_policy/trajectory_spans/max": training([1.0] * 3 + [2.0] + [1.0] * 8),
}
SFT_CURVES: dict[str, list[tuple[int, float]]] = {
    "train/loss": [(s, 3.0 / s) for s in range(1, 21)],
    "val/loss": [(10, 0.5), (20, 0.25)],
}


def write_events(folder: Path, curves: dict[str, list[tuple[int, float]]]) -> None:
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(str(folder))
    for tag, points in curves.items():
        for step, value in points:
            writer.add_scalar(tag, value, step)
    writer.close()


@pytest.fixture(scope="module")
def logdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("tensorboard")
    write_events(root / "rl", RL_CURVES)
    write_events(root / "sft", SFT_CURVES)
    return root


@pytest.fixture(scope="module")
def report(logdir: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, Path]:
    out = tmp_path_factory.mktemp("report")
    assert main(["--logdir", str(logdir), "--output", str(out)]) == 0
    return json.loads((out / "report.json").read_text()), out


@pytest.fixture(scope="module")
def figures(logdir: Path) -> dict:
    """panel name -> (plots, drawn figure), laid out as when saved."""
    run = read_run(logdir)
    drawn, _ = build_panels({"rl": run.rl, "sft": run.sft}, PUBLISHED_RESULT)
    out = {}
    for spec, plots in drawn:
        figure = draw(spec, plots, data_sources(run.rl), run.step_span(spec.stage))
        FigureCanvasAgg(figure).draw()
        out[spec.name] = (plots, figure)
    return out


def panel(report: dict, name: str) -> dict:
    return next(p for p in report["panels"] if p["name"] == name)


def rows_by_tag(report: dict, name: str) -> dict[str, dict]:
    return {r["tag"]: r for r in panel(report, name)["rows"]}


def check_png(path: Path) -> None:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    from matplotlib import image

    pixels = image.imread(path)
    assert pixels.shape[0] > 300 and pixels.shape[1] > 600
    # A drawn figure has many distinct colours; a blank canvas has one or two.
    assert len(np.unique(pixels.reshape(-1, pixels.shape[-1]), axis=0)) > 50


def test_one_png_per_question_named_stably(report: tuple[dict, Path]) -> None:
    content, out = report
    names = [p["name"] for p in content["panels"]]
    assert names == [
        "accuracy",
        "tools",
        "num_turns",
        "reward",
        "response_length",
        "failures",
        "off_policy",
        "sft_loss",
    ]
    md = (out / "report.md").read_text()
    for name in names:
        check_png(out / f"{name}.png")
        assert f"![{name}]({name}.png)" in md
    assert content["rl_dir"].endswith("/rl") and content["sft_dir"].endswith("/sft")
    assert content["not_logged"] == [] and content["published_not_logged"] == []


def test_panels_hold_the_series_of_their_question(figures: dict) -> None:
    def tags(name: str) -> list[list[str]]:
        return [[c.series.tag for c in p.curves + p.zero] for p in figures[name][0]]

    assert tags("accuracy") == [["val-core/aime_2025/acc/mean@4", "val-core/synthetic_arith/acc/mean@4"]]
    assert [p.title for p in figures["tools"][0]] == ["aime_2025", "synthetic_arith"]  # one axes per data source
    assert tags("tools")[0][:3] == [
        "val-aux/aime_2025/used_tool/mean@4",
        "val-aux/aime_2025/tool_ok/mean@4 / tool_calls",
        "val-aux/aime_2025/tool_error/mean@4 / tool_calls",
    ]
    # Training turns are logged under two names by verl's v1 trainer: drawn once.
    assert tags("num_turns") == [
        [
            "val-aux/aime_2025/tool_calls/mean@4",
            "val-aux/synthetic_arith/tool_calls/mean@4",
            "num_turns/mean",
            "val-aux/num_turns/mean",
        ]
    ]
    assert tags("reward") == [
        ["val-aux/aime_2025/score/mean@4", "val-aux/synthetic_arith/score/mean@4", "critic/rewards/mean"]
    ]
    assert tags("sft_loss") == [["train/loss", "val/loss"]]
    assert tags("failures") == [
        ["failures/share", "val-failures/share"],
        [
            "failures/total/tool_exception",
            "failures/total/reward_error",
            "failures/total/agent_loop_error",
            "failures/total/sandbox_unavailable",
        ],
    ]
    shares, counts = figures["failures"][0]
    assert [c.series.tag for c in shares.zero] == ["val-failures/share"]  # zero: named in the note, not drawn
    assert [c.series.tag for c in counts.curves] == ["failures/total/tool_exception"]


def test_tool_outcomes_are_rates_of_calls(report: tuple[dict, Path]) -> None:
    rows = rows_by_tag(report[0], "tools")
    ok = rows["val-aux/aime_2025/tool_ok/mean@4 / tool_calls"]
    assert (ok["start"], ok["start_step"], ok["last"], ok["last_step"]) == (0.5, 0, 0.75, 12)
    assert (ok["best"], ok["best_step"]) == (0.75, 6)  # earliest of the ties
    error = rows["val-aux/aime_2025/tool_error/mean@4 / tool_calls"]
    assert (error["start"], error["best"], error["best_step"]) == (0.5, 0.25, 6)  # lower is better
    # synthetic_arith made no call at step 0: its rates start at step 6.
    synthetic_ok = rows["val-aux/synthetic_arith/tool_ok/mean@4 / tool_calls"]
    assert (synthetic_ok["start_step"], synthetic_ok["start"], synthetic_ok["last"]) == (6, 0.5, 1.0)
    assert rows["val-aux/synthetic_arith/used_tool/mean@4"]["last"] == 0.75  # already a rate
    for row in rows.values():
        assert 0 <= row["start"] <= 1 and 0 <= row["last"] <= 1, row


def test_zero_series_are_summarised_not_drawn_or_tabled(report: tuple[dict, Path], figures: dict) -> None:
    content, out = report
    tabled = {r["tag"] for p in content["panels"] for r in p["rows"]}
    zero = {z["tag"] for p in content["panels"] for z in p["zero"]}
    assert zero == {"val-core/synthetic_arith/acc/mean@4"} | {
        f"val-aux/{s}/{k}/mean@4 / tool_calls"
        for s in ("aime_2025", "synthetic_arith")
        for k in ("tool_timeout", "tool_unavailable", "tool_truncated")
    } | {"val-failures/share"} | {
        f"failures/total/{cause}" for cause in ("reward_error", "agent_loop_error", "sandbox_unavailable")
    }
    assert not zero & tabled
    md = (out / "report.md").read_text()
    assert md.count("Zero at every step") == 3
    assert (
        "Zero at every step (tags in report.json), so neither drawn nor tabled: aime_2025: calls: timed out, "
        "calls: no sandbox result, calls: output truncated; synthetic_arith: calls: timed out, "
    ) in md
    assert "neither drawn nor tabled: synthetic_arith." in md
    tools_table = [line for line in md.split("## Tool use")[1].split("## Turns")[0].splitlines() if line[:2] == "| "]
    assert len(tools_table) == 1 + 6 and not any("tool_timeout" in line for line in tools_table)
    for name, (plots, figure) in figures.items():
        drawn = {
            line.get_gid().split(":", 1)[1]
            for ax in figure.axes
            for line in ax.get_lines()
            if not line.get_gid().startswith("published:")
        }
        assert not drawn & zero, name
        notes = [t.get_text().replace("\n", " ") for ax in figure.axes for t in ax.texts if t.get_gid() == "note"]
        if any(p.zero for p in plots):
            assert notes and all("zero at every step (not drawn):" in n for n in notes), name
    tools_notes = [t.get_text().replace("\n", " ") for t in figures["tools"][1].axes[0].texts]
    assert tools_notes == [
        ("zero at every step (not drawn): calls: timed out, calls: no sandbox result, calls: output truncated")
    ]


def test_validation_is_drawn_as_markers_and_training_as_lines(figures: dict) -> None:
    kinds = set()
    for name, (_, figure) in figures.items():
        for ax in figure.axes:
            for line in ax.get_lines():
                kind = line.get_gid().split(":", 1)[0]
                kinds.add(kind)
                if kind == "validation":
                    assert line.get_linestyle() == "None" and line.get_marker() not in (None, "None", ""), name
                elif kind in ("training", "smoothed"):
                    assert line.get_linestyle() == "-" and len(line.get_xdata()) >= 2, name
    assert kinds == {"validation", "training", "smoothed", "published"}
    # The reward gets a smoothed line over the raw one: centred mean of 3 steps for 12 points.
    reward_lines = {line.get_gid(): line for line in figures["reward"][1].axes[0].get_lines()}
    raw = list(reward_lines["training:critic/rewards/mean"].get_ydata())
    smoothed = list(reward_lines["smoothed:critic/rewards/mean"].get_ydata())
    assert smoothed == pytest.approx(centred_mean(raw, 3)) and smoothed[1] == pytest.approx((-1.0 - 0.5 - 0.75) / 3)
    assert (
        reward_lines["training:critic/rewards/mean"].get_linewidth()
        < reward_lines["smoothed:critic/rewards/mean"].get_linewidth()
    )


def test_published_start_and_end_are_marked(figures: dict) -> None:
    for name, tag, start, end in (
        ("accuracy", "val-core/aime_2025/acc/mean@4", 0.29, 0.57),
        ("num_turns", "val-aux/num_turns/mean", 7.0, 5.4),
    ):
        lines = [line for line in figures[name][1].axes[0].get_lines() if line.get_gid() == f"published:{tag}"]
        assert [tuple(line.get_ydata()) for line in lines] == [(start, start), (end, end)], name
        assert [line.get_linestyle() for line in lines] == [":", "--"]
        assert "at step 130" in lines[1].get_label()
    # A zero curve is not drawn but its published figures would be: the synthetic source has none.
    assert not [line for line in figures["accuracy"][1].axes[0].get_lines() if "synthetic" in line.get_gid()]


def test_colours_are_distinct_within_a_panel_and_few_series_per_axes(figures: dict) -> None:
    for name, (_, figure) in figures.items():
        for ax in figure.axes:
            series = [line for line in ax.get_lines() if line.get_gid().split(":")[0] in ("validation", "training")]
            colours = [to_hex(line.get_color()) for line in series]
            assert len(set(colours)) == len(colours), (name, colours)
            assert 1 <= len(series) <= 6, name

    # A data source keeps its colour from panel to panel.
    def colour(name: str, tag: str) -> str:
        line = next(x for x in figures[name][1].axes[0].get_lines() if x.get_gid() == f"validation:{tag}")
        return to_hex(line.get_color())

    assert colour("accuracy", "val-core/aime_2025/acc/mean@4") == colour(
        "num_turns", "val-aux/aime_2025/tool_calls/mean@4"
    )
    assert colour("reward", "val-aux/synthetic_arith/score/mean@4") == colour(
        "num_turns", "val-aux/synthetic_arith/tool_calls/mean@4"
    )


def test_legend_is_outside_the_data_area(figures: dict) -> None:
    for name, (_, figure) in figures.items():
        renderer = figure.canvas.get_renderer()
        assert len(figure.legends) == 1, name
        legend = figure.legends[0].get_window_extent(renderer)
        assert figure.legends[0].get_texts(), name
        for ax in figure.axes:
            if ax.get_visible():
                box = ax.get_window_extent(renderer)
                assert not legend.overlaps(box), (name, legend, box)
                assert legend.x0 >= box.x1, name  # on the right
        assert legend.x1 <= figure.bbox.x1 + 1, name  # and inside the image


def test_report_md_tables_with_published_beside_accuracy_and_turns(report: tuple[dict, Path]) -> None:
    md = (report[1] / "report.md").read_text()
    assert (
        "| aime_2025 | `val-core/aime_2025/acc/mean@4` | 0.25 (0) | 0.5 (6) | 0.375 (12) | "
        "0.29 -> 0.57 (as `val-core/aime_2025/acc/mean@30`) |"
    ) in md
    assert "| turns, validation | `val-aux/num_turns/mean` | 6 (0) | — | 5 (12) | 7 -> 5.4 |" in md
    assert "| turns, training batches | `num_turns/mean` | 4 (1) | — | 5 (12) | — |" in md
    assert "| training batches | `critic/rewards/mean` | -1 (1) | 0.75 (10) | 0.625 (12) |" in md
    assert "| aime_2025: calls: ran OK (exit 0) | `val-aux/aime_2025/tool_ok/mean@4 / tool_calls` | 0.5 (0) |" in md
    assert "| training batches | `train/loss` | 3 (1) | 0.15 (20) | 0.15 (20) |" in md
    # Only the accuracy and turns tables carry the published column.
    assert md.count("published start -> end |") == 2
    assert "response_length/clip_ratio" not in md and "best@4" not in md


def test_published_file_replaces_the_published_result(logdir: Path, tmp_path: Path) -> None:
    baseline = tmp_path / "baseline.yaml"
    baseline.write_text(
        "name: my baseline\nsteps: 40\nmetrics:\n"
        "  val-core/aime_2025/acc/mean@30: {start: 0.3, end: 0.4}\n"
        "  val-core/aime_2025/acc/mean@4: {start: 0.11, end: 0.22}\n"
        "  val-aux/never/logged: {start: 1, end: 2}\n"
    )
    content = build_report(logdir, tmp_path / "out", load_published(baseline))
    row = rows_by_tag(content, "accuracy")["val-core/aime_2025/acc/mean@4"]
    assert row["published"] == {"tag": "val-core/aime_2025/acc/mean@4", "start": 0.11, "end": 0.22, "steps": 40}
    assert rows_by_tag(content, "num_turns")["val-aux/num_turns/mean"]["published"] is None
    md = (tmp_path / "out" / "report.md").read_text()
    assert "Published: my baseline." in md
    assert "- published metric `val-aux/never/logged`" in md


@pytest.mark.parametrize(
    "text, message",
    [
        ("metrics:\n  val-aux/num_turns/mean: {start: 7}\n", "needs 'start' and 'end'"),
        ("metrics:\n  val-aux/num_turns/mean: {start: 7, end: high}\n", "end must be a number"),
        ("steps: many\nmetrics:\n  val-aux/num_turns/mean: {start: 7, end: 5}\n", "steps must be the number"),
        ("name: nothing\n", "at least one metric"),
        ("metrics: [\n", "cannot read it as YAML/JSON"),
    ],
)
def test_bad_published_file_fails_clearly(tmp_path: Path, text: str, message: str) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(text)
    with pytest.raises(ReportError, match=message):
        load_published(bad)


def test_bad_logdir_fails_clearly(tmp_path: Path) -> None:
    with pytest.raises(ReportError, match="is not a folder"):
        build_report(tmp_path / "nope", tmp_path / "out", PUBLISHED_RESULT)
    (tmp_path / "empty").mkdir()
    with pytest.raises(ReportError, match="no TensorBoard event files"):
        build_report(tmp_path / "empty", tmp_path / "out", PUBLISHED_RESULT)
    write_events(tmp_path / "other", {"perf/mfu": [(1, 0.5)]})
    with pytest.raises(ReportError, match="neither RL tags"):
        build_report(tmp_path / "other", tmp_path / "out", PUBLISHED_RESULT)


def test_console_script_reports_errors_with_exit_code(tmp_path: Path) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "retool.report",
            "--logdir",
            str(tmp_path / "missing"),
            "--output",
            str(tmp_path / "out"),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 2
    assert "is not a folder" in proc.stderr


def test_stage_folders_are_read_apart(tmp_path: Path) -> None:
    # The RL stage of an old run next to the new one: the one with more tags is read, the other named.
    write_events(
        tmp_path / "tb" / "rl", {"critic/rewards/mean": [(1, 0.25), (2, 0.5)], "val-aux/num_turns/mean": [(0, 2.0)]}
    )
    write_events(tmp_path / "tb" / "dapo", {"critic/rewards/mean": [(1, 9.0)]})
    write_events(tmp_path / "tb" / "sft", {"train/loss": [(1, 2.0), (2, 1.5)]})
    content = build_report(tmp_path / "tb", tmp_path / "out", PUBLISHED_RESULT)
    assert content["rl_dir"] == str(tmp_path / "tb" / "rl") and content["sft_dir"] == str(tmp_path / "tb" / "sft")
    assert content["ignored_dirs"] == [str(tmp_path / "tb" / "dapo")]
    assert rows_by_tag(content, "reward")["critic/rewards/mean"]["start"] == 0.25
    assert rows_by_tag(content, "sft_loss")["train/loss"]["last"] == 1.5
    md = (tmp_path / "out" / "report.md").read_text()
    assert "not read (pass one as --logdir to read it): `" + str(tmp_path / "tb" / "dapo") in md
    # RL panels whose tags the RL folder lacks are listed; the published accuracy too.
    assert [p["name"] for p in content["not_logged"]] == [
        "accuracy",
        "tools",
        "response_length",
        "failures",
        "off_policy",
    ]
    assert "- Validation accuracy per data source: no tag among val-core/<data_source>/acc/mean@N" in md
    assert "- published metric `val-core/aime_2025/acc/mean@30`" in md
    # The SFT folder alone: its loss only, and no RL panel reported missing.
    sft = build_report(tmp_path / "tb" / "sft", tmp_path / "out-sft", PUBLISHED_RESULT)
    assert [p["name"] for p in sft["panels"]] == ["sft_loss"] and sft["not_logged"] == []
    assert sorted(p.name for p in (tmp_path / "out-sft").glob("*.png")) == ["sft_loss.png"]


def test_event_reading_used_by_the_smoke_summary(tmp_path: Path) -> None:
    # retool/smoke/summary.py merges folders with these two; a re-logged step keeps its latest value.
    write_events(tmp_path / "a" / "rl", {"critic/rewards/mean": [(1, 0.5), (1, 0.75), (2, 1.0)]})
    assert find_event_dirs(tmp_path / "a") == [tmp_path / "a" / "rl"]
    points = read_event_dir(tmp_path / "a" / "rl")["critic/rewards/mean"]
    assert {step: value for step, (_, value) in points.items()} == {1: 0.75, 2: 1.0}


def test_panels_of_a_stage_share_the_step_axis(figures: dict) -> None:
    # Validation runs at 0..12 and training at 1..12: every RL panel spans 0..12, the SFT panel its own steps.
    spans = {name: figure.axes[0].get_xlim() for name, (_, figure) in figures.items()}
    for name in ("accuracy", "tools", "num_turns", "reward", "response_length"):
        assert spans[name] == spans["accuracy"], name
        assert -1.5 < spans[name][0] < 0 and 12 < spans[name][1] < 13.5, name
    assert 0 <= spans["sft_loss"][0] < 1 and 20 < spans["sft_loss"][1] < 22


def test_off_policy_panel_tables_the_staleness_of_an_async_run(report: tuple[dict, Path]) -> None:
    rows = rows_by_tag(report[0], "off_policy")
    assert rows["training/off_policy/trajectory_staleness_worst/max"]["last"] == 1.0
    assert rows["training/off_policy/trajectory_spans/max"]["start"] == 1.0
    assert max(r["last"] for r in rows.values()) <= 1.0 and "training/off_policy/trajectory_staleness/mean" in rows


def test_the_report_says_whether_the_run_is_inside_the_reproduction_band(
    report: tuple[dict, Path], tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    content, out = report
    # The smoke-shaped run validates mean@4: the band cannot judge it, and says so.
    assert content["reproduction"] == [
        "The reproduction band needs `val-core/aime_2025/acc/mean@30`: this run "
        "validated AIME 2025 as `val-core/aime_2025/acc/mean@4`, not mean@30."
    ]
    assert "## Reproduction band\n\n- The reproduction band needs" in (out / "report.md").read_text()
    # A reference-shaped run: validated at step 0 and every 10 steps to 130.
    steps = list(range(0, 131, 10))
    write_events(
        tmp_path / "tb" / "rl",
        {
            "val-core/aime_2025/acc/mean@30": [(s, 0.29 + 0.3 * s / 130) for s in steps],
            "critic/rewards/mean": [(s, 0.1) for s in steps[1:]],
        },
    )
    assert main(["--logdir", str(tmp_path / "tb"), "--output", str(tmp_path / "out")]) == 0
    printed = capsys.readouterr().out
    inside = "Step 0: AIME 2025 mean@30 0.290, inside the reproduction band 0.21-0.37 around the published 0.29."
    end = "Step 130: AIME 2025 mean@30 0.590, inside the reproduction band 0.49-0.65 around the published 0.57."
    assert [inside, end] == printed.splitlines()[1:]
    md = (tmp_path / "out" / "report.md").read_text()
    assert f"- {inside}\n- {end}\n" in md
    assert json.loads((tmp_path / "out" / "report.json").read_text())["reproduction"] == [inside, end]
