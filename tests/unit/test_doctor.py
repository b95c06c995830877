"""retool-doctor: each check's verdict and line, on real files, a real sandbox and real launch scripts."""

from __future__ import annotations

import stat
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from ports import free_port
from doctor_helpers import QWEN3_4B, REPO, clear_run_choices, resolved_rl_config, rl_parquet, tiny_model_dir

from retool.checklist import FAIL, OK, SKIP, WARN
from retool.doctor.cli import main
from retool.doctor.config import ConfigError, load_config
from retool.doctor.devices import Devices, check_devices
from retool.doctor.estimate import estimate_memory, param_count
from retool.doctor.inputs import check_data
from retool.doctor.resources import check_memory
from retool.doctor.sandbox import check_sandbox
from retool.doctor.tool_config import check_tool_config
from retool.doctor.versions import check_packages, check_patches
from retool_sandbox.spawn import running_sandbox


@pytest.fixture(autouse=True)
def _no_run_choices(monkeypatch: pytest.MonkeyPatch) -> None:
    clear_run_choices(monkeypatch)


# ---------------------------------------------------------------- whole command


def test_failing_check_exits_nonzero_with_actionable_line(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    cfg = resolved_rl_config(
        tmp_path, tmp_path / "no-model", tmp_path / "no-train.parquet", tmp_path / "no-val.parquet"
    )
    path = tmp_path / "rl.resolved.yaml"
    path.write_text(yaml.safe_dump(cfg))
    assert main(["--config", str(path), "--sandbox-url", f"http://127.0.0.1:{free_port()}"]) == 1
    out = capsys.readouterr().out
    assert (
        f"[FAIL] model: {tmp_path / 'no-model'} does not exist: RL starts from the SFT model -> run the SFT "
        "stage, then set MODEL_PATH" in out
    )
    assert (
        f"[FAIL] data: {tmp_path / 'no-train.parquet'}, {tmp_path / 'no-val.parquet'} not there -> retool-data "
        "download, then retool-data prepare --profile reference --out " in out
    )
    assert "[FAIL] sandbox:" in out and "start it: retool-sandbox serve --host 127.0.0.1" in out
    assert "[ OK ] python:" in out
    assert "failure(s)" in out.splitlines()[-1]


def test_all_good_config_exits_zero(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    cfg = resolved_rl_config(
        tmp_path,
        tiny_model_dir(tmp_path / "model"),
        rl_parquet(tmp_path / "train.parquet"),
        rl_parquet(tmp_path / "val.parquet"),
    )
    path = tmp_path / "rl.resolved.yaml"
    path.write_text(yaml.safe_dump(cfg))
    with running_sandbox() as url:
        code = main(["--config", str(path), "--sandbox-url", url + "/run_code"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "[FAIL]" not in out
    assert "[ OK ] memory:" in out and "[ OK ] data: train train.parquet (1 rows)" in out
    assert (
        "[ OK ] profile data: train.parquet, val.parquet match the reference profile (PROFILE unset: the "
        "launchers' default)"
    ) in out
    assert "[ OK ] sandbox:" in out and "isolation bwrap" in out  # an RL config accepts nothing weaker
    names = [line.split("]", 1)[1].split(":", 1)[0].strip() for line in out.splitlines()[:-1]]
    assert names == [
        "python",
        "packages",
        "verl patches",
        "npu stack",
        "devices",
        "config",
        "model",
        "data",
        "profile data",
        "tool config",
        "sandbox url",
        "sandbox",
        "sessions",
        "ray",
        "memory",
        "disk",
    ]
    # The tool config's own URL (port 8080) differs from the one checked: said, but not a failure.
    assert "[WARN] sandbox url:" in out


def test_doctor_checks_the_url_the_ray_workers_will_use(
    tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The launcher puts RETOOL_SANDBOX_URL into the Ray job's runtime env; this shell may say something else.
    monkeypatch.setenv("RETOOL_SANDBOX_URL", f"http://127.0.0.1:{free_port()}/run_code")
    cfg = resolved_rl_config(
        tmp_path,
        tiny_model_dir(tmp_path / "model"),
        rl_parquet(tmp_path / "train.parquet"),
        rl_parquet(tmp_path / "val.parquet"),
    )
    with running_sandbox() as url:
        cfg["ray_kwargs"] = {"ray_init": {"runtime_env": {"env_vars": {"RETOOL_SANDBOX_URL": url + "/run_code"}}}}
        path = tmp_path / "rl.resolved.yaml"
        path.write_text(yaml.safe_dump(cfg))
        code = main(["--config", str(path)])
    out = capsys.readouterr().out
    assert code == 0, out
    assert f"-> {url}/run_code" in out and f"[ OK ] sandbox: {url} runs code" in out
    assert "[WARN] sandbox url:" not in out


# ---------------------------------------------------------------- single checks


def test_sandbox_check_against_real_server() -> None:
    with running_sandbox() as url:
        check = check_sandbox(url)
        assert check.status in (OK, WARN)  # WARN only if the server fell back to isolation "none"
        assert f"{url} runs code; isolation " in check.details[0]
        assert check_sandbox(url + "/run_code").details[0] == check.details[0]
    dead = check_sandbox(url)  # the server is stopped now
    assert dead.status == FAIL and "does not answer GET /v1/ping" in dead.details[0]
    assert check_sandbox(None).status == SKIP
    assert check_sandbox("localhost:8080").status == FAIL


def test_python_m_retool_doctor_runs_the_checks() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "retool.doctor", "--sandbox-url", "localhost:8080"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
    )
    assert proc.returncode == 1, proc.stderr
    assert "[FAIL] sandbox: 'localhost:8080' is not an http(s) URL" in proc.stdout
    assert proc.stdout.splitlines()[-1].startswith("retool-doctor (install stage): ") and "failure(s)" in proc.stdout


def test_launcher_dry_run_is_parsed(tmp_path: Path) -> None:
    script = tmp_path / "run_fake.sh"
    script.write_text(
        "#!/usr/bin/env bash\nset -e\n"
        'if [[ "$DRY_RUN" != 1 ]]; then echo "would train" >&2; exit 3; fi\n'
        'echo "warning: model missing" >&2\n'
        'echo "[launcher] resolved config:"\n'
        "cat <<EOF\ntrainer:\n  device: npu\n  n_gpus_per_node: 16\n  extra: $1\nEOF\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    cfg = load_config(script, ["trainer.nnodes=2"])
    assert cfg == {"trainer": {"device": "npu", "n_gpus_per_node": 16, "extra": "trainer.nnodes=2"}}

    broken = tmp_path / "run_broken.sh"
    broken.write_text("#!/usr/bin/env bash\necho 'error: DATA_DIR not set' >&2\nexit 2\n")
    with pytest.raises(ConfigError, match="exited 2: error: DATA_DIR not set"):
        load_config(broken)
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "missing.sh")


def test_recipe_hydra_config_is_composed() -> None:
    cfg = load_config(REPO / "configs" / "rl.yaml", ["device/rl=cpu"])
    assert cfg["trainer"]["device"] == "cpu"
    assert cfg["actor_rollout_ref"]["rollout"]["multi_turn"]["tool_config_path"].endswith("configs/tool.yaml")


def test_packages_against_pins() -> None:
    pins = {"core": ["pyyaml>=6.0"], "extras": {"cpu": ["retool-no-such-package>=1.0", "pyarrow<1"]}, "verl": {}}
    check = check_packages(pins, "cpu")
    assert check.status == FAIL
    assert "retool-no-such-package missing (want >=1.0)" in check.details[0]
    assert "pyarrow " in check.details[0] and "(want <1)" in check.details[0]
    assert check.details[0].endswith("-> make setup")
    npu = check_packages({**pins, "extras": {"npu": ["retool-no-such-package>=1.0"]}}, "npu")
    assert npu.details[0].endswith("-> bash scripts/install_npu.sh (in the vllm-ascend container; docs/install.md)")
    assert check_packages({"core": ["pyyaml>=6.0"], "extras": {}, "verl": {}}, "cpu").status == OK


def test_patch_status() -> None:
    missing = check_patches(lambda: [("0001-a.patch", True), ("0002-b.patch", False)])
    assert missing.status == FAIL and "not applied: 0002-b.patch" in missing.details[0]
    assert "-> make setup (reinstalls the pinned verl with patches/" in missing.details[0]
    on_npu = check_patches(lambda: [("0002-b.patch", False)], extra="npu")
    (text,) = on_npu.details
    assert "-> bash scripts/install_npu.sh" in text and "never pip install a verl clone" in text
    assert check_patches(lambda: [("0001-a.patch", True)]).status == OK

    def broken() -> list:
        raise FileNotFoundError("patch")

    assert check_patches(broken).status == WARN


def test_devices_against_request() -> None:
    cpu = Devices("cpu", 1, 24.0, "2 CPU cores")
    npu_cfg = {"trainer": {"device": "npu", "n_gpus_per_node": 16, "nnodes": 1}}
    wrong = check_devices(cpu, npu_cfg)
    assert wrong.status == FAIL and "16 x npu" in wrong.details[0] and "torch_npu" in wrong.details[0]
    few = check_devices(Devices("npu", 8, 64.0), npu_cfg)
    assert few.status == FAIL and "only 8 are visible" in few.details[0]
    assert check_devices(Devices("cuda", 8, 80.0), {"trainer": {"device": "cuda", "n_gpus_per_node": 4}}).status == OK
    assert check_devices(cpu, {"trainer": {"device": "cpu", "n_gpus_per_node": 1}}).status == OK


def test_data_columns(tmp_path: Path) -> None:
    good = rl_parquet(tmp_path / "good.parquet")
    no_agent = rl_parquet(tmp_path / "no_agent.parquet", with_agent=False)
    sft = tmp_path / "sft.parquet"
    pq.write_table(pa.table({"text": ["x"]}), sft)
    cfg = {"actor_rollout_ref": {}, "data": {"train_files": str(good), "val_files": str(no_agent)}}
    check = check_data(cfg)
    assert check.status == FAIL and "no agent_name column" in check.details[0]
    assert check_data({"actor_rollout_ref": {}, "data": {"train_files": [str(good)]}}).status == OK
    sft_check = check_data({"data": {"train_files": str(sft), "messages_key": "messages"}})
    assert sft_check.status == FAIL and "lacks columns ['messages']" in sft_check.details[0]
    (tmp_path / "junk.parquet").write_text("not parquet")
    assert (
        "not a readable parquet"
        in check_data({"data": {"train_files": str(tmp_path / "junk.parquet"), "messages_key": "messages"}}).details[0]
    )


def test_tool_config_loads_with_verls_loader(tmp_path: Path) -> None:
    cfg = resolved_rl_config(tmp_path, tmp_path, tmp_path, tmp_path)
    check, url = check_tool_config(cfg)
    assert check.status == OK and "code_interpreter (retool.tool.CodeInterpreterTool)" in check.details[0]
    assert url and url.endswith("/run_code")
    bad = tmp_path / "tool.yaml"
    bad.write_text(
        "tools:\n  - class_name: retool.tool.CodeInterpreterTool\n    config: {type: native, "
        "sandbox_fusion_url: 'ftp://x', bogus: 1}\n"
    )
    cfg["actor_rollout_ref"]["rollout"]["multi_turn"]["tool_config_path"] = str(bad)
    check, _ = check_tool_config(cfg)
    assert check.status == FAIL and "does not load" in check.details[0]


# ---------------------------------------------------------------- memory


def test_qwen3_4b_parameter_count() -> None:
    # The model card: 4.0 B parameters, 3.6 B without embeddings (tied).
    assert param_count(QWEN3_4B) == pytest.approx(4.02e9, rel=0.005)
    non_embedding = param_count(QWEN3_4B) - QWEN3_4B["vocab_size"] * QWEN3_4B["hidden_size"]
    assert non_embedding == pytest.approx(3.6e9, rel=0.02)


def test_memory_estimate_sharding_and_offload() -> None:
    common = dict(tokens=4096, grad_ckpt=True, optimizer_offload=False, param_offload=False)
    one = estimate_memory(QWEN3_4B, world=1, **common)
    sixteen = estimate_memory(QWEN3_4B, world=16, **common)
    # 16 bytes per parameter of sharded state (fp32 weights + grads + Adam), divided by the world size.
    state = lambda e: e.train_gb["weights"] + e.train_gb["grads"] + e.train_gb["optimizer"]  # noqa: E731
    assert state(one) == pytest.approx(16 * 4.02e9 / 2**30, rel=0.01)
    assert state(sixteen) == pytest.approx(state(one) / 16)
    policy = estimate_memory(QWEN3_4B, world=16, offload_policy=True, **{**common, "param_offload": True})
    assert state(policy) == 0
    rollout = estimate_memory(
        QWEN3_4B,
        world=16,
        rollout_util=0.8,
        device_gb=64,
        max_model_len=18432,
        **{**common, "param_offload": True, "optimizer_offload": True},
    )
    assert rollout.rollout_total == pytest.approx(0.8 * 64)


def test_memory_check_warns_when_it_cannot_fit(tmp_path: Path) -> None:
    cfg = {
        "trainer": {"device": "cuda", "nnodes": 1, "n_gpus_per_node": 1},
        "data": {"max_prompt_length": 2048, "max_response_length": 16384},
        "actor_rollout_ref": {
            "model": {"path": "/nowhere/Qwen3-4B-Instruct-2507"},
            "actor": {"use_dynamic_bsz": True, "ppo_max_token_len_per_gpu": 18432, "fsdp_config": {}},
            "rollout": {"gpu_memory_utilization": 0.8, "tensor_model_parallel_size": 1},
        },
    }
    gpu = Devices("cuda", 1, 24.0)
    check = check_memory(cfg, None, gpu, None)
    assert check.status == WARN and "training does not fit" in check.details[0] and "qwen3-4b" in check.details[0]
    # The reference layout: 16 A3 dies of 64 GB, both offloads, SP 4, TP 4.
    cfg["trainer"].update(device="npu", n_gpus_per_node=16)
    cfg["actor_rollout_ref"]["actor"].update(
        ulysses_sequence_parallel_size=4, fsdp_config={"param_offload": True, "optimizer_offload": True}
    )
    cfg["actor_rollout_ref"]["rollout"]["tensor_model_parallel_size"] = 4
    fits = check_memory(cfg, None, Devices("cpu", 1, 24.0), None)
    assert fits.status == OK and "of 64 GiB" in fits.details[0]
    assert (
        check_memory({"trainer": {}, "actor_rollout_ref": {"model": {"path": "/x/other"}}}, None, gpu, None).status
        == SKIP
    )
