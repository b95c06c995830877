"""Where the recipe's data lives: the folders ``retool-data download`` fills and the files the launchers read.

Relative paths, as the commands take them: the README runs every command from the checkout, where the launchers
look (``DATA_DIR=data/$PROFILE``, ``MODEL_PATH=models/Qwen3-4B-Instruct-2507``).
"""

from __future__ import annotations

from pathlib import Path

DEFAULT_RAW = Path("data/raw")  # the downloaded sets, one folder each (retool.data.fetch.ASSETS)
DEFAULT_MODELS = Path("models")
# The file names the launchers read from DATA_DIR (run_qwen3_4b_*.sh), written by `retool-data prepare`.
SFT_FILE = "retool_sft.parquet"
RL_TRAIN_FILE = "dapo_math_17k.parquet"
RL_VAL_FILE = "aime_2025.parquet"


def data_dir(profile: str) -> Path:
    """The launchers' default DATA_DIR for a profile."""
    return Path("data") / profile
