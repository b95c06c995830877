"""retool-report on event files this test writes itself (TensorBoard's own writer, simple_value scalars
as torch's SummaryWriter writes them for verl)."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from retool.report import REFERENCE_RESULTS, ReportError, build_report, load_reference, main

from tensorboard.compat.proto import event_pb2, summary_pb2
from tensorboard.summary.writer.event_file_writer import EventFileWriter

# Curves shaped like the smoke run (small mean@N) plus the training scalars the report plots.
CURVES: dict[str, list[tuple[int, float]]] = {
    "val-core/aime_2025/acc/mean@4": [(0, 0.25), (5, 0.5), (10, 0.375)],
    "val-core/synthetic_arith/acc/mean@4": [(0, 0.0), (5, 0.125), (10, 0.75)],
    "val-aux/num_turns/mean": [(0, 7.0), (5, 6.0), (10, 5.5)],
    "critic/rewards/mean": [(1, -0.5), (2, 0.25), (3, 0.125), (4, 0.625)],
    "response_length/mean": [(1, 300.0), (2, 280.0), (3, 250.0), (4, 240.0)],
    "num_turns/mean": [(1, 2.0), (2, 3.5), (3, 4.0), (4, 4.0)],
    "actor/pg_loss": [(1, 0.1), (2, 0.2)],  # not plotted: must not break anything
}


def write_events(folder: Path, curves: dict[str, list[tuple[int, float]]]) -> None:
    writer = EventFileWriter(str(folder))
    for tag, points in curves.items():
        for step, value in points:
            summary = summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag=tag, simple_value=value)])
            writer.add_event(event_pb2.Event(wall_time=time.time(), step=step, summary=summary))
    writer.close()


def f32(x: float) -> float:
    return struct.unpack("f", struct.pack("f", x))[0]


def check_png(path: Path) -> None:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    assert len(data) > 10_000, f"{path} is suspiciously small ({len(data)} bytes)"
    from matplotlib import image

    pixels = image.imread(path)
    assert pixels.shape[0] > 200 and pixels.shape[1] > 300
    # A drawn figure has many distinct colours; a blank canvas has one or two.
    assert len(np.unique(pixels.reshape(-1, pixels.shape[-1]), axis=0)) > 20


def test_report_tables_and_pngs(tmp_path: Path) -> None:
    logdir = tmp_path / "tb" / "retool" / "smoke"
    write_events(logdir, CURVES)
    out = tmp_path / "report"
    assert main(["--logdir", str(tmp_path / "tb"), "--output", str(out)]) == 0

    report = json.loads((out / "report.json").read_text())
    rows = {r["tag"]: r for r in report["rows"]}
    plotted = {t for t in CURVES if t != "actor/pg_loss"}
    assert set(rows) == plotted
    for tag in plotted:
        points = CURVES[tag]
        assert rows[tag]["start"] == pytest.approx(f32(points[0][1]))
        assert rows[tag]["start_step"] == points[0][0]
        assert rows[tag]["last"] == pytest.approx(f32(points[-1][1]))
        assert rows[tag]["last_step"] == points[-1][0]
    assert rows["val-core/aime_2025/acc/mean@4"]["best"] == pytest.approx(0.5)
    assert rows["val-core/aime_2025/acc/mean@4"]["best_step"] == 5
    assert rows["critic/rewards/mean"]["best_step"] == 4
    assert rows["val-aux/num_turns/mean"]["best"] is None  # no "better" direction for turns

    # The reference applies across mean@N, and only to the AIME curve.
    assert rows["val-core/aime_2025/acc/mean@4"]["reference"] == {
        "tag": "val-core/aime_2025/acc/mean@30", "start": 0.29, "end": 0.57}
    assert rows["val-core/synthetic_arith/acc/mean@4"]["reference"] is None
    assert rows["val-aux/num_turns/mean"]["reference"]["end"] == 5.4

    md = (out / "report.md").read_text()
    assert "| `val-core/aime_2025/acc/mean@4` | 0.25 (0) | 0.5 (5) | 0.375 (10) | 0.29 -> 0.57 (as " in md
    assert "| `val-aux/num_turns/mean` | 7 (0) | — | 5.5 (10) | 7 -> 5.4 |" in md
    assert "| `critic/rewards/mean` | -0.5 (1) | 0.625 (4) | 0.625 (4) | — |" in md
    assert "| `response_length/mean` | 300 (1) | — | 240 (4) | — |" in md

    pngs = {p["name"]: p["png"] for p in report["panels"] if p["png"]}
    assert pngs == {"val_accuracy": "val_accuracy.png", "val_num_turns": "val_num_turns.png",
                    "rewards": "rewards.png", "response_length": "response_length.png", "tools": "tools.png"}
    for name in pngs.values():
        check_png(out / name)
        assert f"]({name})" in md


def test_missing_tags_are_reported(tmp_path: Path) -> None:
    write_events(tmp_path / "tb", {"critic/rewards/mean": [(1, 0.5), (2, 0.75)]})
    report = build_report(tmp_path / "tb", tmp_path / "out", REFERENCE_RESULTS)
    md = (tmp_path / "out" / "report.md").read_text()
    assert [r["tag"] for r in report["rows"]] == ["critic/rewards/mean"]
    assert "## Not logged by this run" in md
    assert "Validation accuracy" in md.split("## Not logged by this run")[1]
    assert "reference metric `val-core/aime_2025/acc/mean@30`" in md
    assert sorted(p.name for p in (tmp_path / "out").glob("*.png")) == ["rewards.png"]


def test_reference_file_overrides_and_exact_match_wins(tmp_path: Path) -> None:
    write_events(tmp_path / "tb", {"val-core/aime_2025/acc/mean@4": [(0, 0.1), (1, 0.2)]})
    ref = tmp_path / "ref.json"
    ref.write_text(json.dumps({"name": "my baseline", "metrics": {
        "val-core/aime_2025/acc/mean@30": {"start": 0.3, "end": 0.4},
        "val-core/aime_2025/acc/mean@4": {"start": 0.11, "end": 0.22}}}))
    report = build_report(tmp_path / "tb", tmp_path / "out", load_reference(ref))
    assert report["rows"][0]["reference"] == {"tag": "val-core/aime_2025/acc/mean@4", "start": 0.11, "end": 0.22}
    assert "Reference: my baseline." in (tmp_path / "out" / "report.md").read_text()


def test_bad_inputs_fail_clearly(tmp_path: Path) -> None:
    with pytest.raises(ReportError, match="is not a folder"):
        build_report(tmp_path / "nope", tmp_path / "out", REFERENCE_RESULTS)
    (tmp_path / "empty").mkdir()
    with pytest.raises(ReportError, match="no TensorBoard event files"):
        build_report(tmp_path / "empty", tmp_path / "out", REFERENCE_RESULTS)
    bad = tmp_path / "bad.yaml"
    bad.write_text("metrics:\n  val-aux/num_turns/mean: {start: 7}\n")
    with pytest.raises(ReportError, match="needs 'start' and 'end'"):
        load_reference(bad)


def test_console_script_reports_errors_with_exit_code(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "retool.report", "--logdir", str(tmp_path / "missing"),
                           "--output", str(tmp_path / "out")], capture_output=True, text=True)
    assert proc.returncode == 2
    assert "is not a folder" in proc.stderr


def test_run_folder_with_two_stages_reads_the_rl_one(tmp_path: Path) -> None:
    # A smoke run folder: tensorboard/sft (loss only) and tensorboard/dapo (the RL curves); never mixed.
    write_events(tmp_path / "tb" / "sft", {"train/loss": [(1, 2.0), (2, 1.5)], "critic/rewards/mean": [(1, 9.0)]})
    write_events(tmp_path / "tb" / "dapo", {"critic/rewards/mean": [(1, 0.25), (2, 0.5)],
                                            "val-aux/num_turns/mean": [(0, 2.0)]})
    report = build_report(tmp_path / "tb", tmp_path / "out", REFERENCE_RESULTS)
    assert report["event_dirs"] == [str(tmp_path / "tb" / "dapo")]
    assert report["ignored_dirs"] == [str(tmp_path / "tb" / "sft")]
    rows = {r["tag"]: r for r in report["rows"]}
    assert rows["critic/rewards/mean"]["start"] == 0.25 and "train/loss" not in rows
    assert "not read (pass one as --logdir)" in (tmp_path / "out" / "report.md").read_text()
    # The SFT folder on its own gets its loss curve.
    sft = build_report(tmp_path / "tb" / "sft", tmp_path / "out-sft", REFERENCE_RESULTS)
    assert {r["tag"] for r in sft["rows"]} == {"train/loss", "critic/rewards/mean"}
    assert (tmp_path / "out-sft" / "sft_loss.png").is_file()
