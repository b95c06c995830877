"""Convert the downloaded sets for one profile (``retool-data prepare --profile reference|improved``).

Writes the three files the launchers read from ``DATA_DIR`` (default ``data/$PROFILE``):

- ``retool_sft.parquet``: ReTool-SFT through ``retool.data.sft.preprocess`` with the profile's prompt style and tool
  YAML, so the schema text the SFT rows carry is the one the RL rollout shows;
- ``dapo_math_17k.parquet``: DAPO-Math-17k through ``retool.data.rl.prepare``. ``reference`` keeps it as
  downloaded (1,791,700 rows, each problem 100 times, as the reference trained); ``improved`` keeps one row per
  problem (``dedupe``: 17,917 rows);
- ``aime_2025.parquet``: the 30 AIME 2025 problems, the validation set.

The written files are then checked against the profile (``retool.profiles.check_data``), as the launchers do before
every run.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from retool.data import rl, sft
from retool.data.fetch import ASSETS
from retool.data.layout import RL_TRAIN_FILE, RL_VAL_FILE, SFT_FILE
from retool.profiles import check_data, get_profile

DEDUPE = {"reference": False, "improved": True}  # the reference trained on every repeated row


@dataclass(frozen=True)
class Inputs:
    """The three downloaded inputs (folders or files)."""

    sft: Path
    dapo: Path
    aime: Path

    @classmethod
    def under(cls, raw: Path) -> Inputs:
        """The folders ``retool-data download --out raw`` writes."""
        return cls(
            raw / ASSETS["retool_sft"].folder, raw / ASSETS["dapo_math_17k"].folder, raw / ASSETS["aime_2025"].folder
        )


class ProfileMismatch(RuntimeError):
    """The written files do not carry the profile's prompt wording or tool schema (a converter bug)."""


def prepare_profile(profile_name: str, inputs: Inputs, out: Path, on_error: str = "skip") -> list[dict[str, Any]]:
    """Write SFT_FILE, RL_TRAIN_FILE and RL_VAL_FILE for ``profile_name`` into ``out``; return the three converter
    summaries (rows read, written, skipped with reasons). Input errors raise the converters' exceptions
    (DataSourceError, ConversionError under on_error="fail", ToolConfigError)."""
    profile = get_profile(profile_name)
    style = profile.prompt_style
    summaries = [
        sft.preprocess(inputs.sft, out / SFT_FILE, profile.tool_config_path, on_error=on_error, prompt_style=style),
        rl.prepare(
            inputs.dapo,
            out / RL_TRAIN_FILE,
            source="dapo",
            dedupe=DEDUPE[profile.name],
            on_error=on_error,
            prompt_style=style,
        ),
        rl.prepare(inputs.aime, out / RL_VAL_FILE, source="aime2025", on_error=on_error, prompt_style=style),
    ]
    problems = check_data(profile, out / SFT_FILE, (out / RL_TRAIN_FILE, out / RL_VAL_FILE))
    if problems:
        raise ProfileMismatch("; ".join(problems))
    return summaries


def describe(summaries: list[dict[str, Any]]) -> str:
    """The three converter reports, one after the other."""
    sft_summary, *rl_summaries = summaries
    return "\n".join([sft.format_summary(sft_summary), *(rl.format_summary(s) for s in rl_summaries)])
