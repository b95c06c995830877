"""Profiles: the choices that must go together from data preparation to the RL rollout, under one name.

``reference`` (the default) reproduces the reference run; ``improved`` is the recipe's improvements, all at once
(docs/reference.md lists each). A profile fixes three things that live in different places:

- the prompt wording the converters write (``prompt_style``, retool.data.prompt);
- the tool YAML, hence the tool's behaviour and the schema text the model reads, in SFT data and in RL rollouts;
- the config overlays ``configs/profile/{sft,rl}/<name>.yaml`` (the launchers pass ``profile/<stage>=<name>``).

Converters take ``--profile``; launchers take ``PROFILE`` and refuse data converted for another profile
(``check_data``: the SFT rows must carry the schema of the profile's tool YAML and its prompt wording, the RL rows
its prompt wording). ``python -m retool.profiles check --profile NAME --sft FILE --rl FILE...`` is that check.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

from retool.constants import REPO_ROOT
from retool.data.prompt import ANSWER_INSTRUCTION, PROMPT_STYLES, VERL_RETOOL_ANSWER_FORMAT
from retool.tool_yaml import load_tool_schema

ROWS_CHECKED = 16  # rows read from each file: conversion is all-or-nothing per file, so a few tell the profile


@dataclass(frozen=True)
class Profile:
    name: str
    prompt_style: str
    tool_config: str  # relative to the repository

    @property
    def tool_config_path(self) -> Path:
        return REPO_ROOT / self.tool_config


PROFILES = {
    "reference": Profile("reference", prompt_style="verl_retool", tool_config="configs/tool.yaml"),
    "improved": Profile("improved", prompt_style="qwen_boxed", tool_config="configs/tool_annotated.yaml"),
}
DEFAULT_PROFILE = "reference"


def get_profile(name: str) -> Profile:
    if name not in PROFILES:
        raise ValueError(f"unknown profile {name!r}; choose one of {sorted(PROFILES)} (PROFILE=... / --profile)")
    return PROFILES[name]


def add_profile_arguments(parser: argparse.ArgumentParser, tool_config: bool = False) -> None:
    """``--profile``, and ``--prompt-style`` (plus ``--tool-config`` when asked) that default to the profile's."""
    parser.add_argument(
        "--profile",
        choices=sorted(PROFILES),
        default=DEFAULT_PROFILE,
        help="reference (the reference run's prompts and tool, default) or improved; sets the "
        "defaults of the options below (docs/reference.md)",
    )
    parser.add_argument(
        "--prompt-style",
        choices=PROMPT_STYLES,
        default=None,
        help="user prompt wording: verl_retool (the reference's) or qwen_boxed (question + 'Please "
        "reason step by step, ...'); default: the profile's",
    )
    if tool_config:
        parser.add_argument(
            "--tool-config",
            type=Path,
            default=None,
            help="tool YAML whose schema the rows carry; default: the profile's (configs/tool.yaml "
            "or configs/tool_annotated.yaml)",
        )


def resolve_profile_arguments(args: argparse.Namespace) -> None:
    """Fill ``prompt_style`` (and ``tool_config``) left unset from ``args.profile``."""
    profile = get_profile(args.profile)
    if args.prompt_style is None:
        args.prompt_style = profile.prompt_style
    if hasattr(args, "tool_config") and args.tool_config is None:
        args.tool_config = profile.tool_config_path


def prompt_style_of(user_message: str) -> str | None:
    """Which prompt style wrote ``user_message`` (an RL or validation prompt); None when neither did."""
    if user_message.endswith(ANSWER_INSTRUCTION):
        return "qwen_boxed"
    if user_message.endswith(VERL_RETOOL_ANSWER_FORMAT):
        return "verl_retool"
    return None


def _rows(path: Path, columns: list[str]) -> list[dict]:
    import pyarrow.parquet as pq

    table = pq.ParquetFile(path).read_row_group(0, columns=columns) if path.is_file() else None
    if table is None:
        raise FileNotFoundError(path)
    return table.slice(0, ROWS_CHECKED).to_pylist()


def check_data(profile: Profile, sft: Path | None = None, rl: tuple[Path, ...] = ()) -> list[str]:
    """Problems that show ``sft`` / ``rl`` were converted for another profile ([] when they match)."""
    problems = []
    fix = f"convert it again: retool-data prepare --profile {profile.name}"
    if sft is not None:
        schema = load_tool_schema(profile.tool_config_path)
        for number, row in enumerate(_rows(sft, ["messages", "tools"])):
            tools = row["tools"] or []
            if tools and tools[0] != schema:
                problems.append(
                    f"{sft} row {number}: its tool schema is not the {profile.name} profile's "
                    f"({profile.tool_config}): the model would learn a schema text that RL never shows; "
                    f"{fix}"
                )
                break
            user = next((m["content"] for m in row["messages"] if m["role"] == "user"), "")
            wording = "qwen_boxed" if user.rstrip().endswith(ANSWER_INSTRUCTION) else "verl_retool"
            if wording != profile.prompt_style:
                problems.append(
                    f"{sft} row {number}: its user turn has the {wording} wording, the {profile.name} "
                    f"profile writes {profile.prompt_style}; {fix}"
                )
                break
    for path in rl:
        for number, row in enumerate(_rows(path, ["prompt"])):
            user = next((m["content"] for m in row["prompt"] if m["role"] == "user"), "")
            style = prompt_style_of(user)
            if style != profile.prompt_style:
                problems.append(
                    f"{path} row {number}: its prompt has the {style or 'unknown'} wording, the "
                    f"{profile.name} profile writes {profile.prompt_style}; {fix}"
                )
                break
    return problems


def data_files(resolved: Path) -> tuple[Path | None, list[Path]]:
    """(SFT training file, RL files) named by a resolved stage config."""
    import yaml

    config = yaml.safe_load(resolved.read_text())
    data = config.get("data") or {}
    files = []
    for key in ("train_files", "val_files"):
        value = data.get(key)
        files += [Path(v) for v in ([] if value is None else value if isinstance(value, list) else [value])]
    if "actor_rollout_ref" in config:
        return None, files
    return (files[0] if files else None), []


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m retool.profiles", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    check = sub.add_parser("check", help="refuse data converted for another profile (exit 1 with the reasons)")
    check.add_argument("--profile", choices=sorted(PROFILES), required=True)
    check.add_argument("--sft", type=Path, default=None, help="an SFT parquet (retool_sft_preprocess.py)")
    check.add_argument("--rl", type=Path, action="append", default=[], help="an RL parquet (retool-prepare-rl)")
    check.add_argument(
        "--config",
        type=Path,
        default=None,
        help="a resolved stage config (<stage>.resolved.yaml): check its data.train_files and "
        "data.val_files (the launchers do this before every run)",
    )
    args = parser.parse_args(argv)
    sft, rl = args.sft, list(args.rl)
    if args.config is not None:
        stage_sft, stage_rl = data_files(args.config)
        sft, rl = sft or stage_sft, rl + stage_rl
    try:
        problems = check_data(get_profile(args.profile), sft, tuple(rl))
    except FileNotFoundError as exc:
        print(f"error: {exc.args[0]} not found", file=sys.stderr)
        return 1
    for problem in problems:
        print(f"error: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
