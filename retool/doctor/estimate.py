"""Rough sizes of a run, from the model's shape: per-device memory and the disk its checkpoints take.

Pure arithmetic on a Hugging Face config dict and numbers read from the run's config; the checks that compare these
with a device or a disk live in ``retool.doctor.resources``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

GIB = 1024**3

# Shapes for when the model folder is not on this machine (public config.json values).
KNOWN_MODELS: dict[str, dict[str, Any]] = {
    "qwen3-4b": {
        "hidden_size": 2560,
        "num_hidden_layers": 36,
        "intermediate_size": 9728,
        "vocab_size": 151936,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "tie_word_embeddings": True,
    },
}
# The model the recipe trains (Qwen3-4B-Instruct-2507): the run's size before its folder is downloaded.
RECIPE_MODEL = "qwen3-4b"


def param_count(hf: dict[str, Any]) -> int:
    """Parameters of a dense decoder from its Hugging Face config (Qwen/Llama layout)."""
    text = hf.get("text_config") or hf
    h, layers = int(text["hidden_size"]), int(text["num_hidden_layers"])
    inter, vocab = int(text["intermediate_size"]), int(text["vocab_size"])
    heads = int(text["num_attention_heads"])
    kv = int(text.get("num_key_value_heads") or heads)
    hd = int(text.get("head_dim") or h // heads)
    attn = h * heads * hd * 2 + h * kv * hd * 2  # q, o and k, v
    if text.get("attention_bias"):
        attn += heads * hd + 2 * kv * hd
    per_layer = attn + 3 * h * inter + 2 * h + 2 * hd  # gated MLP, two norms, q/k norms (Qwen3)
    embed = vocab * h * (1 if text.get("tie_word_embeddings", False) else 2)
    return layers * per_layer + embed + h


# ---------------------------------------------------------------- memory


@dataclass
class MemoryEstimate:
    train_gb: dict[str, float]
    rollout_gb: dict[str, float] = field(default_factory=dict)
    vllm_needs_gb: float | None = None  # weights per TP rank + KV cache for one max-length sequence
    vllm_budget_gb: float | None = None

    @property
    def train_total(self) -> float:
        return sum(self.train_gb.values())

    @property
    def rollout_total(self) -> float:
        return sum(self.rollout_gb.values())


def estimate_memory(
    hf: dict[str, Any],
    *,
    world: int,
    tokens: int,
    grad_ckpt: bool,
    param_offload: bool,
    optimizer_offload: bool,
    offload_policy: bool = False,
    fp32_master: bool = True,
    rollout_util: float | None = None,
    rollout_tp: int = 1,
    max_model_len: int | None = None,
    device_gb: float | None = None,
) -> MemoryEstimate:
    """A rough per-device peak under FSDP full sharding over ``world`` devices, in GiB.

    Training peak: sharded fp32 master weights, fp32 grads and Adam moments (verl's param/optimizer offload moves
    them to the host between phases but loads them back for the update; only FSDP2 ``offload_policy`` keeps them
    off the device), the unsharded bf16 embedding/largest layer, activations for ``tokens`` tokens per micro-batch
    on one device (all layer inputs with gradient checkpointing, else every layer's intermediates), bf16 logits
    and their gradient, and ~2 GiB of runtime. ``tokens`` is the worst case (every sequence at full length). Rollout
    peak (colocated vLLM): its ``rollout_util`` share of the device plus whatever training state stays resident
    (none with both offloads).
    """
    text = hf.get("text_config") or hf
    p = param_count(hf)
    h, layers, inter, vocab = (
        int(text[k]) for k in ("hidden_size", "num_hidden_layers", "intermediate_size", "vocab_size")
    )
    heads = int(text["num_attention_heads"])
    kv = int(text.get("num_key_value_heads") or heads)
    hd = int(text.get("head_dim") or h // heads)
    master = 4 if fp32_master else 2
    gb = 1 / GIB
    shard = 0.0 if offload_policy else 1.0
    train = {
        "weights": master * p / world * shard * gb,
        "grads": 4 * p / world * shard * gb,
        "optimizer": 8 * p / world * shard * gb,
        "gathered layer": 2 * 2 * max(vocab * h, 4 * h * h + 3 * h * inter) * gb,  # current + prefetched, bf16
        "activations": (
            layers * tokens * h * 2 + tokens * (16 * h + 4 * inter) * 2
            if grad_ckpt
            else layers * tokens * (16 * h + 4 * inter) * 2
        )
        * gb,
        "logits": tokens * vocab * (2 + 2) * gb,  # bf16 logits and their gradient (log-probs are chunked)
        "runtime": 2.0,
    }
    est = MemoryEstimate(train_gb=train)
    if rollout_util is not None and device_gb is not None:
        est.rollout_gb = {"vllm (gpu_memory_utilization)": rollout_util * device_gb}
        if not param_offload and not offload_policy:
            est.rollout_gb["resident weights"] = train["weights"]
        if not optimizer_offload and not offload_policy:
            est.rollout_gb["resident optimizer"] = train["optimizer"]
        est.vllm_budget_gb = rollout_util * device_gb
        kv_per_token = 2 * layers * kv * hd * 2  # K and V, bf16
        est.vllm_needs_gb = (2 * p / rollout_tp + kv_per_token * (max_model_len or 0) / rollout_tp) * gb + 1.0
    return est


# ---------------------------------------------------------------- disk


@dataclass
class CheckpointEstimate:
    """What a run's checkpoints take on disk: the parts of one checkpoint (GiB), how often it saves, how many stay."""

    per_checkpoint_gb: dict[str, float]
    saves: int
    kept: int

    @property
    def per_checkpoint(self) -> float:
        return sum(self.per_checkpoint_gb.values())

    @property
    def total_gb(self) -> float:
        return self.kept * self.per_checkpoint


def checkpoint_saves(total_steps: int, save_freq: int, *, last_step_always: bool) -> int:
    """How many checkpoints a run of ``total_steps`` writes: one every ``save_freq`` steps plus the last step (verl
    saves the last step even off the beat). With ``save_freq`` <= 0 verl's RL trainer saves nothing and its SFT
    trainer (``last_step_always``) only the last step."""
    if total_steps <= 0:
        return 0
    if save_freq > 0:
        return -(-total_steps // save_freq)
    return 1 if last_step_always else 0


def estimate_checkpoints(
    hf: dict[str, Any], *, save_contents: list[str], saves: int, keep: int | None, fp32_master: bool = True
) -> CheckpointEstimate:
    """Disk of ``saves`` checkpoints of which verl keeps the newest ``keep`` (None or <= 0: all).

    One checkpoint (verl's FSDP checkpoint manager) holds what ``save_contents`` names: ``model`` (the sharded
    weights in the training dtype: fp32 master weights unless model_dtype says bf16), ``optimizer`` (Adam's two
    fp32 moments) and ``hf_model`` (a gathered Hugging Face copy, in the same dtype); ``extra`` (RNG and scheduler
    state) is negligible. verl deletes the oldest before it writes a new one, so ``keep`` bounds the peak too.
    """
    p = param_count(hf)
    master = 4 if fp32_master else 2
    sizes = {"model": master * p, "optimizer": 8 * p, "hf_model": master * p}
    parts = {name: size / GIB for name, size in sizes.items() if name in save_contents}
    kept = min(saves, keep) if keep is not None and keep > 0 else saves
    return CheckpointEstimate(per_checkpoint_gb=parts, saves=saves, kept=kept)
