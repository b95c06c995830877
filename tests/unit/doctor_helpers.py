"""Shared by the retool-doctor tests: real parquet files from the recipe's converters, a tiny model folder, a small
resolved RL config, a tool YAML in either session mode, and a free loopback port."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from retool.data.rl import convert_row
from retool.doctor.estimate import KNOWN_MODELS

REPO = Path(__file__).resolve().parents[2]
QWEN3_4B = KNOWN_MODELS["qwen3-4b"]


def clear_run_choices(monkeypatch: pytest.MonkeyPatch) -> None:
    """The profile and the isolation risk come from the environment; tests set them only where they mean to."""
    monkeypatch.delenv("PROFILE", raising=False)
    monkeypatch.delenv("RETOOL_ACCEPT_WEAK_ISOLATION", raising=False)


def rl_parquet(path: Path, with_agent: bool = True, prompt_style: str = "verl_retool", rows: int = 1) -> Path:
    """An RL parquet file as retool-prepare-rl writes it (AIME rows in ``prompt_style``)."""
    table = [
        convert_row(
            {"id": f"2025-I-{i}", "problem": f"What is {i} + 1?", "answer": str(i + 1)},
            "aime2025",
            prompt_style=prompt_style,
        )
        for i in range(rows)
    ]
    if not with_agent:
        for row in table:
            del row["agent_name"]
    pq.write_table(pa.Table.from_pylist(table), path)
    return path


def tiny_model_dir(path: Path) -> Path:
    path.mkdir()
    (path / "config.json").write_text(
        json.dumps(
            {
                "model_type": "qwen3",
                "hidden_size": 128,
                "num_hidden_layers": 2,
                "intermediate_size": 384,
                "vocab_size": 1000,
                "num_attention_heads": 4,
                "num_key_value_heads": 2,
                "head_dim": 32,
                "tie_word_embeddings": True,
            }
        )
    )
    (path / "tokenizer.json").write_text("{}")
    (path / "model.safetensors").write_bytes(b"\0")
    return path


def resolved_rl_config(tmp_path: Path, model: Path, train: Path, val: Path, **trainer: object) -> dict:
    return {
        "trainer": {"device": "cpu", "nnodes": 1, "n_gpus_per_node": 1, **trainer},
        "data": {
            "train_files": str(train),
            "val_files": [str(val)],
            "max_prompt_length": 256,
            "max_response_length": 256,
        },
        "actor_rollout_ref": {
            "model": {"path": str(model), "enable_gradient_checkpointing": True},
            "actor": {
                "use_dynamic_bsz": True,
                "ppo_max_token_len_per_gpu": 512,
                "fsdp_config": {"param_offload": False, "optimizer_offload": False},
            },
            "rollout": {
                "prompt_length": 256,
                "response_length": 256,
                "gpu_memory_utilization": 0.5,
                "multi_turn": {"enable": True, "tool_config_path": str(REPO / "configs" / "tool.yaml")},
            },
        },
    }


def write_yaml(path: Path, data: dict) -> Path:
    path.write_text(yaml.safe_dump(data))
    return path


def tool_yaml(path: Path, session_mode: str) -> Path:
    """configs/tool.yaml with ``session_mode`` set."""
    data = yaml.safe_load((REPO / "configs" / "tool.yaml").read_text())
    for tool in data["tools"]:
        tool["config"]["session_mode"] = session_mode
    return write_yaml(path, data)
