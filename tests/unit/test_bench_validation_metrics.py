"""bench/validation_metrics.py: verl's validation metrics with patch 0007 and without, on a validation dump."""

from __future__ import annotations

import importlib.util
import json

import pytest

from retool.constants import REPO_ROOT

pytestmark = pytest.mark.verl

spec = importlib.util.spec_from_file_location("validation_metrics", REPO_ROOT / "bench" / "validation_metrics.py")
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)


def test_both_ways_agree_on_a_dump_shaped_like_verl_s(tmp_path, capsys):
    dump = tmp_path / "0.jsonl"
    rows = [
        {
            "input": f"user\nWhat is {p} + 1?",
            "output": "...",
            "gts": str(p + 1),
            "step": 0,
            "uid": f"{p}-{s}",
            "score": float(s % 2),
            "acc": float(s % 2),
            "pred": str(p + s % 2),
            "used_tool": float(s > 1),
        }
        for p in range(3)
        for s in range(4)
    ]
    dump.write_text("".join(json.dumps(row) + "\n" for row in rows))
    assert bench.main([str(dump)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("12 samples, 3 prompts, 4 fields") and "identical: True" in out


def test_a_file_without_samples_is_a_clear_error(tmp_path, capsys):
    empty = tmp_path / "0.jsonl"
    empty.write_text("")
    assert bench.main([str(empty)]) == 2
    assert "a validation_data_dir dump of verl's" in capsys.readouterr().err
