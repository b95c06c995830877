"""The pre-trained smoke model shipped in assets/smoke_model: it must fit what ./run_smoke_cpu.sh builds (or a clean
clone silently pre-trains for minutes), and it is installed only for the inputs it was made from."""

from __future__ import annotations

import re
import shlex

import pytest

from retool.constants import REPO_ROOT
from retool.smoke import build, shipped_model


def smoke_build_options(tmp_path) -> build.BuildOptions:
    """The options run_smoke_cpu.sh passes to retool.smoke.build, with its defaults filled in."""
    script = (REPO_ROOT / "run_smoke_cpu.sh").read_text()
    line = re.search(r"^stage assets \"\$PYTHON\" -m retool\.smoke\.build (.*)$", script, re.M)
    assert line, "run_smoke_cpu.sh no longer builds its assets with retool.smoke.build"
    profile = re.search(r'PROFILE="\$\{PROFILE:-(\w+)\}"', script).group(1)
    defaults = {"$ASSETS": str(tmp_path), "${SMOKE_AIME_ROWS:-8}": "8", "$PROFILE": profile}
    args = [defaults.get(word, word) for word in shlex.split(line.group(1).replace('"', ""))]
    return build.parse_args(args)


def test_the_shipped_model_fits_the_smoke_s_build(tmp_path):
    record = shipped_model.read_record()
    assert record is not None, f"{shipped_model.SHIPPED_DIR} is missing: the smoke would pre-train on every clone"
    opts = smoke_build_options(tmp_path)
    assert record["key"] == shipped_model.key(opts.model_inputs(), opts.data_inputs()), (
        "assets/smoke_model was made from other options than run_smoke_cpu.sh builds: refresh it "
        "(retool/smoke/shipped_model.py says how)"
    )
    for name in shipped_model.FILES:
        assert shipped_model.sha256(shipped_model.SHIPPED_DIR / name) == record["sha256"][name], name
    pretrain = record["summary"]["pretrain"]
    assert pretrain["train_seconds"] > 0 and pretrain["host"]["cpu_model"]  # its cost, stated
    assert pretrain["copy_after"]["digit_runs_exact"] >= 0.9


def _fake_model(folder, tokenizer="tok-a"):
    folder.mkdir(parents=True)
    for name in shipped_model.FILES:
        (folder / name).write_text(f"{name} of {folder.name}")
    (folder / "tokenizer.json").write_text(tokenizer)
    return folder


KEY = {"model": {"layers": 4}, "data": {"seed": 0}}
SUMMARY = {"architecture": "Qwen3ForCausalLM", "pretrain": {"train_seconds": 1.0}, "path": "/x", "files": {}}


def test_installed_only_for_the_same_inputs_and_tokenizer(tmp_path):
    shipped = tmp_path / "shipped"
    shipped_model.save(_fake_model(tmp_path / "made"), KEY, SUMMARY, "--out x", shipped)
    assert "path" not in shipped_model.read_record(shipped)["summary"]

    assert shipped_model.install_if_fits({**KEY, "data": {"seed": 1}}, _fake_model(tmp_path / "other"), shipped) is None
    assert shipped_model.install_if_fits(KEY, _fake_model(tmp_path / "new-tok", "tok-b"), shipped) is None
    target = _fake_model(tmp_path / "fits")
    summary = shipped_model.install_if_fits(KEY, target, shipped)
    assert summary["shipped"] == summary["pretrain"]["shipped"] == str(shipped)
    assert (target / "model.safetensors").read_text() == "model.safetensors of made"


def test_a_damaged_shipped_file_is_an_error_not_a_silent_model(tmp_path):
    shipped = tmp_path / "shipped"
    shipped_model.save(_fake_model(tmp_path / "made"), KEY, SUMMARY, "--out x", shipped)
    (shipped / "model.safetensors").write_text("truncated")
    with pytest.raises(ValueError, match="model.safetensors does not match the SHA-256"):
        shipped_model.install_if_fits(KEY, _fake_model(tmp_path / "fits"), shipped)


def test_only_a_model_this_build_pre_trained_can_be_shipped(tmp_path):
    with pytest.raises(ValueError, match="--no-shipped-model --force"):
        shipped_model.save(_fake_model(tmp_path / "made"), KEY, {**SUMMARY, "shipped": "/elsewhere"}, "", tmp_path)
    with pytest.raises(ValueError, match="--no-shipped-model --force"):
        shipped_model.save(_fake_model(tmp_path / "random"), KEY, {"architecture": "x"}, "", tmp_path)
