"""Model and data inputs: the model folder, the parquet files and their columns, and that the data was converted for
the run's profile (retool.profiles)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from retool.checklist import FAIL, OK, SKIP, Check
from retool.data.layout import DEFAULT_RAW
from retool.doctor.config import RECIPE, RESOLVED, as_list, config_kind, dig, model_path
from retool.doctor.estimate import param_count
from retool.doctor.stages import DOWNLOAD, PREPARE, SFT


# What the RL launcher's DRY_RUN puts in the config when MODEL_PATH is not set (run_qwen3_4b_dapo_npu.sh).
MODEL_PATH_NOT_SET = "MODEL_PATH-not-set"


def check_model(cfg: dict[str, Any]) -> tuple[Check, dict[str, Any] | None]:
    """The model folder exists with a parsable config.json, tokenizer and weights; returns its config."""
    path_text = model_path(cfg)
    if not path_text:
        return Check(FAIL, "model", "the config sets no model path"), None
    path = Path(os.path.expanduser(str(path_text)))
    if config_kind(cfg) == "rl" and (str(path_text) == MODEL_PATH_NOT_SET or not path.exists()):
        what = "MODEL_PATH is not set" if str(path_text) == MODEL_PATH_NOT_SET else f"{path} does not exist"
        return Check(
            FAIL,
            "model",
            f"{what}: RL starts from the SFT model -> run the SFT stage, then set MODEL_PATH "
            "to the model it printed at its end (python -m retool.next_step sft "
            "runs/sft-<time> prints it again)",
            step=SFT,
        ), None
    if not path.exists():
        return Check(
            FAIL,
            "model",
            f"{path} does not exist -> retool-data download (it puts Qwen3-4B-Instruct-2507 "
            "in models/; MODEL_PATH names another folder); the hub is not reachable at run "
            "time",
            step=DOWNLOAD,
        ), None
    try:
        hf = json.loads((path / "config.json").read_text())
    except (OSError, json.JSONDecodeError) as e:
        return Check(
            FAIL,
            "model",
            f"{path}/config.json cannot be read ({e}): is this a Hugging Face folder? "
            "FSDP checkpoints need `python -m verl.model_merger merge` first",
        ), None
    missing = []
    if not any((path / f).is_file() for f in ("tokenizer.json", "tokenizer_config.json", "vocab.json")):
        missing.append("tokenizer files")
    if not list(path.glob("*.safetensors")) and not list(path.glob("*.bin")):
        missing.append("weights (*.safetensors)")
    if missing:
        return Check(FAIL, "model", f"{path} lacks {' and '.join(missing)}"), hf
    params = param_count(hf)
    return Check(OK, "model", f"{path} ({hf.get('model_type', '?')}, {params / 1e9:.2f} B parameters)"), hf


def data_paths(cfg: dict[str, Any]) -> list[tuple[str, Path]]:
    """(role, path) of every train and val file the config names."""
    files = [("train", f) for f in as_list(dig(cfg, "data.train_files"))]
    files += [("val", f) for f in as_list(dig(cfg, "data.val_files"))]
    return [(role, Path(os.path.expanduser(name))) for role, name in files]


def check_data(cfg: dict[str, Any]) -> Check:
    """Train/val parquet files exist and carry the columns the stage reads."""
    import pyarrow.parquet as pq

    kind = config_kind(cfg)
    if kind == "rl":
        needed = ["data_source", str(dig(cfg, "data.prompt_key", "prompt")), "reward_model"]
    else:
        needed = [str(dig(cfg, "data.messages_key", "messages"))]
    files = data_paths(cfg)
    if not files:
        return Check(FAIL, "data", "the config sets no data.train_files")
    problems, described, missing = [], [], []
    for role, path in files:
        if not path.is_file():
            missing.append(path)
            continue
        try:
            meta = pq.read_metadata(path)
            columns = set(pq.read_schema(path).names)
        except Exception as e:  # pyarrow raises ArrowInvalid/OSError for non-parquet files
            problems.append(f"{path} is not a readable parquet file ({e})")
            continue
        lacking = [c for c in needed if c not in columns]
        if lacking:
            problems.append(f"{path} lacks columns {lacking} (has {sorted(columns)})")
        if kind == "rl" and "agent_name" not in columns:
            problems.append(
                f"{path} has no agent_name column: rows would use the single-turn loop, not the tool "
                f"loop (convert it with retool-data prepare --profile {run_profile()[0]})"
            )
        described.append(f"{role} {path.name} ({meta.num_rows} rows)")
    if missing:
        step, how = preparation(missing[0])
        problems.insert(0, f"{', '.join(str(p) for p in missing)} not there -> {how}")
        return Check(FAIL, "data", "; ".join(problems), step=None if len(problems) > 1 else step)
    if problems:
        return Check(FAIL, "data", "; ".join(problems))
    return Check(OK, "data", ", ".join(described))


def preparation(missing: Path) -> tuple[str, str]:
    """(README step, its commands) that write a missing data file: `retool-data prepare` when the downloaded sets
    are beside its folder (``<DATA_DIR>/../raw``, as `retool-data download` lays them out), else the download first."""
    from retool.data.prepare import Inputs

    raw = missing.parent.parent / DEFAULT_RAW.name
    prepare = f"retool-data prepare --profile {run_profile()[0]}"
    if missing.parent.name != run_profile()[0]:
        prepare += f" --out {missing.parent}"
    inputs = Inputs.under(raw)
    if all(folder.exists() for folder in (inputs.sft, inputs.dapo, inputs.aime)):
        return PREPARE, prepare
    return DOWNLOAD, f"retool-data download, then {prepare}"


def run_profile() -> tuple[str, str]:
    """(profile name, how it was chosen): PROFILE from the environment, as the launchers take it."""
    from retool.profiles import DEFAULT_PROFILE

    chosen = os.environ.get("PROFILE")
    return (chosen, f"PROFILE={chosen}") if chosen else (DEFAULT_PROFILE, "PROFILE unset: the launchers' default")


def check_profile_data(cfg: dict[str, Any], source: str, path: Path) -> Check:
    """The data files were converted for the run's profile (retool.profiles.check_data, as scripts/launch.sh runs it).

    ``source`` is how ``path`` was read (retool.doctor.config): a resolved YAML names its files through
    retool.profiles.data_files, a launcher's printed config through the same keys of ``cfg``.
    """
    from retool.profiles import check_data, data_files, get_profile

    if source == RECIPE:
        return Check(
            SKIP,
            "profile data",
            "a recipe config: its data paths follow RETOOL_DATA_DIR; check a launcher or a run's <stage>.resolved.yaml",
        )
    name, chosen = run_profile()
    try:
        profile = get_profile(name)
    except ValueError as e:
        return Check(FAIL, "profile data", str(e))
    if source == RESOLVED:
        sft, rl = data_files(path)
    else:
        named = [p for _, p in data_paths(cfg)]
        sft, rl = (None, named) if config_kind(cfg) == "rl" else (named[0] if named else None, [])
    files = ([sft] if sft is not None else []) + list(rl)
    missing = [str(f) for f in files if not f.is_file()]
    if not files or missing:
        return Check(SKIP, "profile data", f"{', '.join(missing) or 'no data files'}: see the data line")
    try:
        problems = check_data(profile, sft, tuple(rl))
    except Exception as e:  # unreadable parquet or missing columns: the data line says what is wrong
        return Check(SKIP, "profile data", f"cannot read the rows ({type(e).__name__}: {e}): see the data line")
    checked = ", ".join(f.name for f in files)
    if problems:
        return Check(
            FAIL,
            "profile data",
            "; ".join(problems) + f" (checked against the {name} profile, {chosen}); "
            "or set PROFILE to the profile the data was converted for",
        )
    return Check(OK, "profile data", f"{checked} match the {name} profile ({chosen})")
