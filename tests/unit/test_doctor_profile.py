"""retool-doctor's profile check: the data a launcher or a resolved config names was converted for the run's
profile (PROFILE, default reference), judged by retool.profiles on parquet files the recipe's converters wrote."""

from __future__ import annotations

import stat
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from doctor_helpers import REPO, clear_run_choices, rl_parquet, write_yaml
from retool_data_helpers import two_call_row

from retool.data.sft import preprocess
from retool.checklist import FAIL, OK, SKIP
from retool.doctor.config import LAUNCHER, RECIPE, RESOLVED, load_config
from retool.doctor.inputs import check_profile_data


@pytest.fixture(autouse=True)
def _no_run_choices(monkeypatch: pytest.MonkeyPatch) -> None:
    clear_run_choices(monkeypatch)


def rl_resolved(tmp_path: Path, prompt_style: str) -> Path:
    train = rl_parquet(tmp_path / f"train_{prompt_style}.parquet", prompt_style=prompt_style)
    val = rl_parquet(tmp_path / f"val_{prompt_style}.parquet", prompt_style=prompt_style)
    return write_yaml(
        tmp_path / "rl.resolved.yaml",
        {
            "actor_rollout_ref": {},
            "trainer": {"device": "cpu"},
            "data": {"train_files": str(train), "val_files": [str(val)]},
        },
    )


def sft_parquet(tmp_path: Path, profile_tool: str, prompt_style: str) -> Path:
    raw = tmp_path / "raw.parquet"
    pq.write_table(pa.Table.from_pylist([two_call_row()]), raw)
    out = tmp_path / f"sft_{prompt_style}.parquet"
    preprocess(raw, out, REPO / "configs" / profile_tool, prompt_style=prompt_style)
    return out


def test_rl_data_against_the_profile(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = rl_resolved(tmp_path, "verl_retool")
    cfg = load_config(path)
    ok = check_profile_data(cfg, RESOLVED, path)
    assert ok.status == OK, ok.details[0]
    assert ok.details[0] == (
        "train_verl_retool.parquet, val_verl_retool.parquet match the reference profile "
        "(PROFILE unset: the launchers' default)"
    )
    monkeypatch.setenv("PROFILE", "improved")
    wrong = check_profile_data(cfg, RESOLVED, path)
    assert wrong.status == FAIL
    assert (
        "train_verl_retool.parquet row 0: its prompt has the verl_retool wording, the improved profile writes "
        "qwen_boxed; convert it again: retool-data prepare --profile improved" in wrong.details[0]
    )
    assert "(checked against the improved profile, PROFILE=improved)" in wrong.details[0]
    monkeypatch.setenv("PROFILE", "bogus")
    unknown = check_profile_data(cfg, RESOLVED, path)
    assert unknown.status == FAIL and "unknown profile 'bogus'" in unknown.details[0]


def test_sft_data_carries_the_profiles_tool_schema(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    improved = sft_parquet(tmp_path, "tool_annotated.yaml", "qwen_boxed")
    path = write_yaml(
        tmp_path / "sft.resolved.yaml",
        {"trainer": {"device": "cpu"}, "data": {"train_files": str(improved), "val_files": None}},
    )
    cfg = load_config(path)
    reference = check_profile_data(cfg, RESOLVED, path)
    assert reference.status == FAIL and "its tool schema is not the reference profile's" in reference.details[0]
    monkeypatch.setenv("PROFILE", "improved")
    matched = check_profile_data(cfg, RESOLVED, path)
    assert matched.status == OK and "match the improved profile (PROFILE=improved)" in matched.details[0]


def test_a_launchers_printed_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    train = rl_parquet(tmp_path / "train.parquet", prompt_style="qwen_boxed")
    script = tmp_path / "run_fake.sh"
    printed = f"actor_rollout_ref: {{}}\\ndata:\\n  train_files: {train}\\n  val_files: [{train}]\\n"
    script.write_text(f"#!/usr/bin/env bash\nprintf '{printed}'\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    cfg = load_config(script)
    assert check_profile_data(cfg, LAUNCHER, script).status == FAIL
    monkeypatch.setenv("PROFILE", "improved")
    assert check_profile_data(cfg, LAUNCHER, script).status == OK


def test_what_is_not_checked(tmp_path: Path) -> None:
    recipe = check_profile_data({"actor_rollout_ref": {}}, RECIPE, REPO / "configs" / "rl.yaml")
    assert recipe.status == SKIP and "recipe config" in recipe.details[0]
    missing = {"actor_rollout_ref": {}, "data": {"train_files": str(tmp_path / "gone.parquet")}}
    path = write_yaml(tmp_path / "rl.resolved.yaml", missing)
    check = check_profile_data(missing, RESOLVED, path)
    assert check.status == SKIP and f"{tmp_path / 'gone.parquet'}: see the data line" in check.details[0]
