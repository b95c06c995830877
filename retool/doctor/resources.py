"""Memory and disk: the estimator's numbers (retool.doctor.estimate) for this config against the device's memory
and the free space where the checkpoints go."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

from retool.checklist import FAIL, OK, SKIP, WARN, Check
from retool.doctor.config import ConfigError, capped, config_kind, dig, model_path, parquet_rows, planned_steps
from retool.doctor.devices import KNOWN_DEVICE_MEMORY_GB, Devices
from retool.doctor.estimate import GIB, KNOWN_MODELS, checkpoint_saves, estimate_checkpoints, estimate_memory

FP32 = ("fp32", "float32")
DEFAULT_SAVE_CONTENTS = ["model", "optimizer", "extra"]  # verl's default for the actor and for SFT
DISK_WARN_SHARE = 0.8  # warn when checkpoints would take more than this share of the free space


def model_shape(
    cfg: dict[str, Any], hf: dict[str, Any] | None, override: str | None = None
) -> tuple[dict[str, Any] | None, str]:
    """The model's config: ``override`` (a known name or a config.json path), the model folder, or a known name
    found in the model path."""
    if override:
        if override.lower() in KNOWN_MODELS:
            return KNOWN_MODELS[override.lower()], f"built-in {override.lower()} shape"
        path = Path(override)
        if path.is_dir():
            path = path / "config.json"
        try:
            return json.loads(path.read_text()), str(path)
        except (OSError, json.JSONDecodeError) as e:
            raise ConfigError(
                f"--model-config {override}: neither a known model ({', '.join(KNOWN_MODELS)}) nor "
                f"a readable config.json ({e})"
            ) from e
    if hf:
        return hf, "config.json"
    name = str(model_path(cfg) or "").lower()
    for key, shape in KNOWN_MODELS.items():
        if key in name.replace("_", "-"):
            return shape, f"built-in {key} shape"
    return None, ""


def _shape_or_check(
    name: str, cfg: dict[str, Any], hf: dict[str, Any] | None, model_config: str | None
) -> tuple[dict[str, Any] | None, str, Check | None]:
    """model_shape, or the Check that says why there is none."""
    try:
        shape, source = model_shape(cfg, hf, model_config)
    except ConfigError as e:
        return None, "", Check(FAIL, name, str(e))
    if shape is None:
        return (
            None,
            "",
            Check(
                SKIP,
                name,
                "model config unavailable (model folder missing): pass --model-config "
                f"{'|'.join(KNOWN_MODELS)} or a config.json",
            ),
        )
    return shape, source, None


# ---------------------------------------------------------------- memory


def memory_inputs(cfg: dict[str, Any]) -> dict[str, Any]:
    """The estimator's keyword arguments from a resolved RL or SFT config."""
    world = int(dig(cfg, "trainer.nnodes", 1) or 1) * int(dig(cfg, "trainer.n_gpus_per_node", 1) or 1)
    if config_kind(cfg) == "rl":
        actor, rollout = dig(cfg, "actor_rollout_ref.actor", {}), dig(cfg, "actor_rollout_ref.rollout", {})
        fsdp = actor.get("fsdp_config", {}) or {}
        prompt = int(rollout.get("prompt_length") or dig(cfg, "data.max_prompt_length", 512))
        response = int(rollout.get("response_length") or dig(cfg, "data.max_response_length", 512))
        sp = int(actor.get("ulysses_sequence_parallel_size") or fsdp.get("ulysses_sequence_parallel_size") or 1)
        if actor.get("use_dynamic_bsz"):
            tokens = int(actor.get("ppo_max_token_len_per_gpu") or prompt + response)
        else:
            tokens = int(actor.get("ppo_micro_batch_size_per_gpu") or 1) * (prompt + response) // sp
        return dict(
            world=world,
            tokens=max(tokens, 1),
            grad_ckpt=bool(dig(cfg, "actor_rollout_ref.model.enable_gradient_checkpointing", True)),
            param_offload=bool(fsdp.get("param_offload")),
            optimizer_offload=bool(fsdp.get("optimizer_offload")),
            offload_policy=bool(fsdp.get("offload_policy")),
            fp32_master=str(fsdp.get("model_dtype", "fp32")) in FP32,
            rollout_util=float(rollout.get("gpu_memory_utilization") or 0.5),
            rollout_tp=int(rollout.get("tensor_model_parallel_size") or 1),
            max_model_len=int(rollout.get("max_model_len") or prompt + response),
        )
    engine, data = dig(cfg, "engine", {}) or {}, dig(cfg, "data", {}) or {}
    sp = int(engine.get("ulysses_sequence_parallel_size") or dig(cfg, "ulysses_sequence_parallel_size", 1) or 1)
    if data.get("use_dynamic_bsz", True):
        tokens = int(data.get("max_token_len_per_gpu") or data.get("max_length") or 1024)
    else:
        tokens = int(data.get("micro_batch_size_per_gpu") or 1) * int(data.get("max_length") or 1024) // sp
    return dict(
        world=world,
        tokens=max(tokens, 1),
        grad_ckpt=bool(dig(cfg, "model.enable_gradient_checkpointing", True)),
        param_offload=bool(engine.get("param_offload")),
        optimizer_offload=bool(engine.get("optimizer_offload")),
        offload_policy=bool(engine.get("offload_policy")),
        fp32_master=str(engine.get("model_dtype", "fp32")) in FP32,
    )


def check_memory(
    cfg: dict[str, Any],
    hf: dict[str, Any] | None,
    devices: Devices,
    device_gb: float | None,
    model_config: str | None = None,
) -> Check:
    shape, source, problem = _shape_or_check("memory", cfg, hf, model_config)
    if problem is not None:
        return problem
    want_kind = dig(cfg, "trainer.device", devices.kind)
    if device_gb is None:
        if devices.kind == want_kind and devices.memory_gb:
            device_gb = devices.memory_gb
        else:
            device_gb = KNOWN_DEVICE_MEMORY_GB.get(want_kind)
    if device_gb is None:
        return Check(WARN, "memory", f"cannot tell the memory of a {want_kind} device here: pass --device-memory-gb")
    kwargs = memory_inputs(cfg)
    if want_kind == "cpu":
        kwargs["rollout_util"] = None  # vLLM-CPU takes VLLM_CPU_KVCACHE_SPACE GiB of host RAM instead
    est = estimate_memory(shape, device_gb=device_gb, **kwargs)
    parts = ", ".join(f"{k} {v:.1f}" for k, v in est.train_gb.items())
    total = est.train_total
    capacity = device_gb
    if want_kind == "cpu":
        total *= kwargs["world"]  # every CPU worker shares the host's RAM
    msg = (
        f"~{total:.1f} GiB per device for training ({parts}; up to {kwargs['tokens']} tokens per micro-batch, "
        f"{kwargs['world']} device(s), {source}) of {capacity:.0f} GiB"
    )
    problems = []
    if total > capacity:
        problems.append(
            "training does not fit: enable actor fsdp_config param_offload/optimizer_offload (or "
            "offload_policy), raise ulysses_sequence_parallel_size, lower ppo_max_token_len_per_gpu / "
            "micro batch, or use more devices"
        )
    if est.rollout_gb:
        msg += f"; rollout phase ~{est.rollout_total:.1f} GiB"
        if est.rollout_total > capacity:
            problems.append(
                "rollout phase does not fit: offload params/optimizer during rollout or lower "
                "rollout.gpu_memory_utilization"
            )
        if est.vllm_needs_gb and est.vllm_budget_gb and est.vllm_needs_gb > est.vllm_budget_gb:
            problems.append(
                f"vLLM needs ~{est.vllm_needs_gb:.1f} GiB for weights + one {kwargs['max_model_len']}-"
                f"token sequence but gets {est.vllm_budget_gb:.1f}: raise gpu_memory_utilization or "
                "tensor_model_parallel_size"
            )
    if problems:
        return Check(WARN, "memory", msg + " -> " + "; ".join(problems))
    return Check(OK, "memory", msg + " (a rough estimate)")


# ---------------------------------------------------------------- disk


def training_steps(cfg: dict[str, Any]) -> tuple[int | None, str]:
    """The run's optimizer steps as verl counts them (``planned_steps``), and how they were counted."""
    steps = planned_steps(cfg)
    if steps is None:
        return None, (
            "the step count is unknown (no trainer.total_training_steps, and the train files are "
            "unreadable or data.train_batch_size is unset)"
        )
    if dig(cfg, "trainer.total_training_steps"):
        return steps, f"{steps} steps (trainer.total_training_steps)"
    rows = capped(parquet_rows(dig(cfg, "data.train_files")), dig(cfg, "data.train_max_samples"))
    return steps, (
        f"{steps} steps ({rows} train rows // batch {dig(cfg, 'data.train_batch_size')} x "
        f"{dig(cfg, 'trainer.total_epochs', 1)} epochs)"
    )


def checkpoint_plan(cfg: dict[str, Any]) -> tuple[dict[str, Any], str, str]:
    """(estimate_checkpoints keyword arguments, with ``saves`` None when it cannot be counted; how the saves were
    counted; the config key that bounds the kept checkpoints). RL counts the actor's checkpoints, SFT the trainer's."""
    rl = config_kind(cfg) == "rl"
    prefix = "actor_rollout_ref.actor." if rl else ""
    keep_key = "trainer.max_actor_ckpt_to_keep" if rl else "trainer.max_ckpt_to_keep"
    dtype = dig(cfg, "actor_rollout_ref.actor.fsdp_config.model_dtype" if rl else "engine.model_dtype", "fp32")
    keep = dig(cfg, keep_key)
    kwargs: dict[str, Any] = dict(
        save_contents=list(dig(cfg, prefix + "checkpoint.save_contents", None) or DEFAULT_SAVE_CONTENTS),
        keep=int(keep) if keep is not None else None,
        fp32_master=str(dtype) in FP32,
        saves=None,
    )
    freq = dig(cfg, "trainer.save_freq", -1)
    steps, how = training_steps(cfg)
    if freq == "after_each_epoch":  # verl's SFT option: one save per epoch
        kwargs["saves"] = int(dig(cfg, "trainer.total_epochs", 1) or 1)
        how = f"trainer.save_freq after_each_epoch: {kwargs['saves']} epochs"
    elif int(freq) <= 0:
        kwargs["saves"] = checkpoint_saves(1, int(freq), last_step_always=not rl)
        how = f"trainer.save_freq {freq}: " + ("the last step only" if kwargs["saves"] else "no saves")
    elif steps is not None:
        kwargs["saves"] = checkpoint_saves(steps, int(freq), last_step_always=not rl)
        how = f"{how}, a save every {freq} steps and at the last"
    return kwargs, how, keep_key


def existing_folder(path: Path) -> Path:
    """``path`` or its first parent that exists (a run folder is created only when the run starts)."""
    path = path.absolute()
    while not path.exists():
        path = path.parent
    return path


def check_disk(cfg: dict[str, Any], hf: dict[str, Any] | None, model_config: str | None = None) -> Check:
    """The checkpoints the run keeps fit the free space of trainer.default_local_dir's disk."""
    local_dir = dig(cfg, "trainer.default_local_dir")
    if not local_dir:
        return Check(SKIP, "disk", "the config sets no trainer.default_local_dir")
    shape, source, problem = _shape_or_check("disk", cfg, hf, model_config)
    if problem is not None:
        return problem
    kwargs, how, keep_key = checkpoint_plan(cfg)
    if kwargs["saves"] is None:
        if not kwargs["keep"]:
            return Check(
                WARN, "disk", f"cannot count the checkpoints: {how}; set trainer.total_training_steps or {keep_key}"
            )
        kwargs["saves"] = kwargs["keep"]  # at most that many stay, however many are written
        how = f"at most {keep_key} {kwargs['keep']} kept"
    if kwargs["saves"] == 0:
        return Check(OK, "disk", f"the run saves no checkpoints ({how})")
    est = estimate_checkpoints(shape, **kwargs)
    folder = existing_folder(Path(os.path.expanduser(str(local_dir))))
    free = shutil.disk_usage(folder).free / GIB
    parts = ", ".join(f"{k} {v:.1f}" for k, v in est.per_checkpoint_gb.items())
    msg = (
        f"~{est.total_gb:.1f} GiB of checkpoints ({est.kept} kept of {est.saves} saved x {est.per_checkpoint:.1f} "
        f"GiB: {parts}; {how}; {source}) under {local_dir}; {free:.1f} GiB free on {folder}"
    )
    fix = (
        f"free space, point trainer.default_local_dir (RUN_DIR for the launchers) at a larger disk, or keep fewer "
        f"checkpoints: {keep_key}=N or a larger trainer.save_freq"
    )
    if est.total_gb > free:
        return Check(FAIL, "disk", f"{msg} -> they do not fit: {fix}")
    if est.total_gb > DISK_WARN_SHARE * free:
        return Check(WARN, "disk", f"{msg} -> they would fill over {DISK_WARN_SHARE:.0%} of it: {fix}")
    return Check(OK, "disk", msg)
