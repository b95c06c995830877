"""retool-doctor knows where the user is on the README's path: right after the install (``--stage install``) what is
not there yet is a next step, not a failure; before SFT and RL what that launch needs must be there. Every command
it prints next is one the README shows."""

from __future__ import annotations

import shutil
from collections import namedtuple
from pathlib import Path

import pytest
import yaml
from ports import free_port
from doctor_helpers import REPO, clear_run_choices, tiny_model_dir

import retool.doctor.cli as doctor_cli
from retool.checklist import FAIL, NEXT, OK, Check
from retool.doctor.devices import Devices
from retool.doctor.stages import DOWNLOAD, PREPARE, SANDBOX, SFT, Launchers, apply_stage, next_steps

A3 = Devices("npu", 16, 64.0, "Ascend910_9392")  # what an Atlas A3 node shows; there is no NPU here
GIB = 1024**3


@pytest.fixture(autouse=True)
def _no_run_choices(monkeypatch: pytest.MonkeyPatch) -> None:
    clear_run_choices(monkeypatch)


@pytest.fixture
def a3_node(monkeypatch: pytest.MonkeyPatch) -> None:
    """The A3 node's 16 dies and its 2 TiB data disk stand in for this host's CPU and disk."""
    monkeypatch.setattr(doctor_cli, "detect_devices", lambda: A3)
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage(2048 * GIB, 0, 2048 * GIB))


def quick_start() -> str:
    """The README's quick-start block, the commands the doctor may tell a user to run."""
    text = (REPO / "README.md").read_text()
    return text.split("## Quick start", 1)[1].split("```bash", 1)[1].split("```", 1)[0]


def lines(out: str) -> dict[str, str]:
    """{check name: its whole line} of the doctor's output."""
    found = {}
    for line in out.splitlines():
        if line.startswith("[") and "]" in line:
            found[line.split("]", 1)[1].split(":", 1)[0].strip()] = line
    return found


def test_a_stage_defers_only_what_comes_later() -> None:
    checks = [
        Check(OK, "python", "3.11"),
        Check(FAIL, "model", "models/Qwen3-4B-Instruct-2507 does not exist", step=DOWNLOAD),
        Check(FAIL, "data", "data/reference/retool_sft.parquet not there", step=PREPARE),
        Check(FAIL, "sandbox", "does not answer", step=SANDBOX),
        Check(FAIL, "packages", "verl 0.9.0 (want 0.9.1)"),
    ]
    install = apply_stage("install", checks)
    assert [c.status for c in install] == [OK, NEXT, NEXT, NEXT, FAIL]  # a wrong version fails at every stage
    assert [c.status for c in apply_stage("sft", checks)] == [OK, FAIL, FAIL, NEXT, FAIL]
    assert [c.status for c in apply_stage("rl", checks)] == [OK, FAIL, FAIL, FAIL, FAIL]
    npu = Launchers.of("npu")
    assert next_steps("install", install, npu, "reference") == [
        "retool-data download",
        "retool-data prepare --profile reference",
        "retool-doctor --config run_qwen3_4b_sft_npu.sh",
    ]
    done = [Check(OK, "model", "there"), Check(OK, "data", "there")]
    assert next_steps("install", done, npu, "improved") == ["retool-doctor --config run_qwen3_4b_sft_npu.sh"]
    assert next_steps("sft", done, npu, "reference") == ["./run_qwen3_4b_sft_npu.sh"]
    assert next_steps("rl", [Check(FAIL, "model", "no SFT model", step=SFT)], Launchers.of("cuda"), "reference") == [
        "./run_qwen3_4b_sft_cuda.sh",
        "retool-sandbox serve    # on every node, left running (docs/multinode.md)",
        "MODEL_PATH=<the model the SFT stage printed> retool-doctor --config run_qwen3_4b_dapo_cuda.sh",
        "MODEL_PATH=<the model the SFT stage printed> ./run_qwen3_4b_dapo_cuda.sh",
    ]


@pytest.mark.verl
def test_the_first_call_of_the_readme_passes_on_a_fresh_container(
    tmp_path: Path, a3_node, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The README's first doctor call, on the real RL launcher (DRY_RUN=1), before data, model, SFT and sandbox
    exist: the stack and the config are judged, the run is sized from the built-in Qwen3-4B shape, and the missing
    inputs are the next steps, which the README shows in this order."""
    monkeypatch.setenv("DATA_DIR", str(tmp_path / "data" / "reference"))  # nothing downloaded or prepared
    monkeypatch.setenv("RUN_DIR", str(tmp_path / "runs" / "rl-a3"))
    monkeypatch.setenv("RETOOL_SANDBOX_URL", f"http://127.0.0.1:{free_port()}/run_code")  # no sandbox yet
    monkeypatch.delenv("MODEL_PATH", raising=False)
    code = doctor_cli.main(["--stage", "install", "--config", str(REPO / "run_qwen3_4b_dapo_npu.sh")])
    out = capsys.readouterr().out
    assert code == 0, out
    found = lines(out)
    assert "[FAIL]" not in out
    assert found["devices"].startswith("[ OK ] devices: 16 x npu per node")
    assert found["model"].startswith("[NEXT] model: MODEL_PATH is not set: RL starts from the SFT model")
    assert (
        found["data"].startswith("[NEXT] data:")
        and "retool-data download, then retool-data prepare --profile reference" in found["data"]
    )
    assert found["sandbox"].startswith("[NEXT] sandbox:") and "retool-sandbox serve" in found["sandbox"]
    assert found["tool config"].startswith("[ OK ] tool config:")
    for name in ("memory", "disk"):
        assert found[name].startswith(f"[ OK ] {name}: ~") and "built-in qwen3-4b shape" in found[name]
    assert "retool-doctor (install stage): " in out and ", 3 not there yet" in out
    steps = out.split("next, as in the README:\n", 1)[1].splitlines()
    assert [s.strip() for s in steps] == [
        "retool-data download",
        "retool-data prepare --profile reference",
        "retool-doctor --config run_qwen3_4b_sft_npu.sh",
    ]
    readme = quick_start()
    assert all(step.strip() in readme for step in steps), readme


def sft_config(tmp_path: Path, model: Path, data_dir: Path) -> Path:
    """A resolved SFT config of the NPU launcher's shape, with its paths in tmp_path."""
    cfg = {
        "trainer": {
            "device": "npu",
            "nnodes": 1,
            "n_gpus_per_node": 16,
            "save_freq": 31,
            "total_epochs": 6,
            "max_ckpt_to_keep": 2,
            "default_local_dir": str(tmp_path / "runs" / "sft-a3" / "ckpt"),
        },
        "model": {"path": str(model)},
        "engine": {"strategy": "fsdp"},
        "data": {
            "train_files": str(data_dir / "retool_sft.parquet"),
            "val_files": None,
            "max_length": 16384,
            "train_batch_size": 64,
            "micro_batch_size_per_gpu": 8,
            "use_dynamic_bsz": False,
            "messages_key": "messages",
        },
    }
    path = tmp_path / "sft.resolved.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def test_before_sft_the_model_and_the_data_must_be_there(tmp_path: Path, a3_node, capsys) -> None:
    data = tmp_path / "data" / "reference"
    config = sft_config(tmp_path, tmp_path / "models" / "Qwen3-4B-Instruct-2507", data)
    assert doctor_cli.main(["--config", str(config)]) == 1
    out = capsys.readouterr().out
    found = lines(out)
    assert found["model"].startswith(
        f"[FAIL] model: {tmp_path / 'models' / 'Qwen3-4B-Instruct-2507'} does not exist -> retool-data download"
    )
    assert found["data"] == (
        f"[FAIL] data: {data / 'retool_sft.parquet'} not there -> retool-data download, then "
        "retool-data prepare --profile reference"
    )
    assert found["ray"].startswith("[SKIP] ray: SFT runs under torchrun")
    assert "retool-doctor (sft stage): " in out
    steps = [s.strip() for s in out.split("next, as in the README:\n", 1)[1].splitlines()]
    assert steps == [
        "retool-data download",
        "retool-data prepare --profile reference",
        "retool-doctor --config run_qwen3_4b_sft_npu.sh",
        "./run_qwen3_4b_sft_npu.sh",
    ]

    # Downloaded, not prepared: the data line asks for the prepare step only; the model is there.
    for folder in ("ReTool-SFT", "DAPO-Math-17k", "aime_2025"):
        (tmp_path / "data" / "raw" / folder).mkdir(parents=True)
    (tmp_path / "models").mkdir()
    config = sft_config(tmp_path, tiny_model_dir(tmp_path / "models" / "Qwen3-4B-Instruct-2507"), data)
    assert doctor_cli.main(["--config", str(config)]) == 1
    out = capsys.readouterr().out
    assert lines(out)["data"] == (
        f"[FAIL] data: {data / 'retool_sft.parquet'} not there -> retool-data prepare --profile reference"
    )
    assert lines(out)["model"].startswith("[ OK ] model:")
    steps = [s.strip() for s in out.split("next, as in the README:\n", 1)[1].splitlines()]
    assert steps == [
        "retool-data prepare --profile reference",
        "retool-doctor --config run_qwen3_4b_sft_npu.sh",
        "./run_qwen3_4b_sft_npu.sh",
    ]


def test_a_stage_that_does_not_match_the_config_is_refused(tmp_path: Path, a3_node, capsys) -> None:
    config = sft_config(tmp_path, tmp_path / "model", tmp_path / "data")
    assert doctor_cli.main(["--stage", "rl", "--config", str(config)]) == 1
    assert "[FAIL] config: --stage rl checks the RL launcher, but " in capsys.readouterr().out
