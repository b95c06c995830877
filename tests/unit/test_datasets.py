"""The evaluation sets shipped in retool/datasets: present, complete, and what the recipe reads by default."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

from retool.datasets import SHIPPED, dataset_path
from retool.smoke import build


def test_aime_2025_is_30_problems_with_integer_answers():
    rows = [json.loads(line) for line in dataset_path("aime2025").read_text().splitlines()]
    assert len(rows) == 30 and [r["id"] for r in rows] == [str(i) for i in range(30)]
    assert all(isinstance(r["answer"], int) and 0 <= r["answer"] <= 999 and r["problem"] for r in rows)
    assert rows[0]["answer"] == 70  # AIME 2025 I, problem 1


def test_aime_2024_in_both_layouts_agrees():
    jsonl = [json.loads(line) for line in dataset_path("aime2024").read_text().splitlines()]
    table = pq.read_table(dataset_path("aime2024-maxwell")).to_pylist()
    assert len(jsonl) == len(table) == 30
    assert sorted(int(r["answer"]) for r in jsonl) == sorted(r["Answer"] for r in table)


def test_every_shipped_file_is_inside_the_package_and_documented():
    readme = (dataset_path("aime2025").parents[1] / "README.md").read_text()
    for name, path in SHIPPED.items():
        assert path.is_file(), name
        assert str(path.relative_to(path.parents[1])) in readme
    with pytest.raises(ValueError, match="known: aime2024, aime2024-maxwell, aime2025"):
        dataset_path("aime2026")


def test_the_smoke_reads_the_shipped_aime_file(monkeypatch):
    monkeypatch.delenv("RETOOL_AIME2025", raising=False)
    assert build.default_aime2025() == dataset_path("aime2025")
