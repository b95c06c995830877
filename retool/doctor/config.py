"""Config loading: a launcher (run with DRY_RUN=1), a resolved YAML or a recipe Hydra YAML -> one resolved dict; and
reading a key of such a dict (``dig``, ``as_list``), for every module of the recipe that reads a resolved config."""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from retool.constants import REPO_ROOT

# What --config names: a launcher script, a run folder's <stage>.resolved.yaml, or a recipe config to compose.
LAUNCHER, RESOLVED, RECIPE = "launcher", "resolved", "recipe"


class ConfigError(RuntimeError):
    pass


def dig(cfg: dict[str, Any] | None, dotted: str, default: Any = None) -> Any:
    """``cfg["a"]["b"]`` for "a.b"; ``default`` when any step is missing."""
    node: Any = cfg
    for key in dotted.split("."):
        if not isinstance(node, dict) or key not in node:
            return default
        node = node[key]
    return node


def as_list(value: Any) -> list[str]:
    """A config value that may be one path, a list of paths or a list written as a string override."""
    if value is None:
        return []
    if isinstance(value, (list, tuple)):
        return [str(v) for v in value]
    text = str(value).strip()
    if text.startswith("["):  # a list given as a string override: "[a.parquet, b.parquet]"
        return [p.strip().strip("'\"") for p in text.strip("[]").split(",") if p.strip()]
    return [text]


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        raise ConfigError(f"{path} is not valid YAML: {e}") from e
    if not isinstance(data, dict):
        raise ConfigError(f"{path} is not a YAML mapping")
    return data


def _is_recipe(data: dict[str, Any], overrides: Sequence[str]) -> bool:
    """A Hydra config with a defaults list (or one given overrides) is composed; otherwise it is already resolved."""
    return "defaults" in data or bool(overrides)


def config_source(path: Path, overrides: Sequence[str] = ()) -> str:
    """LAUNCHER, RESOLVED or RECIPE: how ``load_config`` reads ``path`` (ConfigError if it cannot)."""
    if not path.is_file():
        raise ConfigError(f"{path} does not exist")
    if path.suffix == ".sh":
        return LAUNCHER
    return RECIPE if _is_recipe(_read_yaml(path), overrides) else RESOLVED


def load_config(path: Path, overrides: Sequence[str] = ()) -> dict[str, Any]:
    """A resolved config dict from a launcher (.sh, DRY_RUN=1), a resolved YAML, or a Hydra recipe YAML."""
    if not path.is_file():
        raise ConfigError(f"{path} does not exist")
    if path.suffix == ".sh":
        env = {**os.environ, "DRY_RUN": "1"}
        try:
            proc = subprocess.run(["bash", str(path), *overrides], capture_output=True, text=True, env=env, timeout=300)
        except subprocess.TimeoutExpired as e:
            raise ConfigError(f"DRY_RUN=1 {path} did not finish in 300 s") from e
        if proc.returncode != 0:
            raise ConfigError(f"DRY_RUN=1 {path} exited {proc.returncode}: {proc.stderr.strip()[-1500:]}")
        return parse_printed_yaml(proc.stdout, f"DRY_RUN=1 {path}")
    data = _read_yaml(path)
    if not _is_recipe(data, overrides):
        return data  # already resolved (a run folder's <stage>.resolved.yaml)
    return compose_recipe(path, overrides)


def parse_printed_yaml(text: str, what: str) -> dict[str, Any]:
    """YAML printed by Hydra's --cfg job, tolerating lines a launcher printed before it."""
    lines = text.splitlines()
    for start in range(len(lines)):
        if not re.match(r"^[A-Za-z_][\w-]*:", lines[start]):
            continue
        try:
            data = yaml.safe_load("\n".join(lines[start:]))
        except yaml.YAMLError:
            continue
        if isinstance(data, dict):
            return data
    raise ConfigError(f"{what} printed no YAML config (does the launcher support DRY_RUN=1?)")


def compose_recipe(path: Path, overrides: Sequence[str]) -> dict[str, Any]:
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    os.environ.setdefault("RETOOL_REPO_DIR", str(REPO_ROOT))
    try:
        with initialize_config_dir(config_dir=str(path.parent.resolve()), version_base=None):
            cfg = compose(config_name=path.stem, overrides=list(overrides))
        return OmegaConf.to_container(cfg, resolve=True)
    except Exception as e:  # Hydra and OmegaConf raise many types; all mean "this config does not compose"
        raise ConfigError(f"cannot compose {path} with {list(overrides)}: {e}") from e


def config_kind(cfg: dict[str, Any]) -> str:
    """ "rl" (main_ppo) or "sft" (sft_trainer)."""
    return "rl" if "actor_rollout_ref" in cfg else "sft"


def model_path(cfg: dict[str, Any]) -> str | None:
    return dig(cfg, "actor_rollout_ref.model.path") if config_kind(cfg) == "rl" else dig(cfg, "model.path")


def tool_config_path(cfg: dict[str, Any]) -> str | None:
    return dig(cfg, "actor_rollout_ref.rollout.multi_turn.tool_config_path")


def parquet_rows(files: Any) -> int | None:
    """Rows of a parquet file or list of them (the footer only); None when one cannot be read."""
    import pyarrow.parquet as pq

    paths = [files] if isinstance(files, str) else list(files or [])
    try:
        return sum(pq.ParquetFile(path).metadata.num_rows for path in paths) if paths else None
    except (OSError, ValueError):
        return None


def capped(rows: int | None, cap: Any) -> int | None:
    return min(rows, int(cap)) if rows is not None and cap and int(cap) > 0 else rows


def planned_steps(config: dict[str, Any], count_data: bool = True) -> int | None:
    """The training steps verl runs for ``config``: trainer.total_training_steps, else (``count_data``) one pass of
    the data per epoch (rows // batch; RL's filter of overlong prompts can make it a little less). The console's
    step counter passes count_data=False: verl prints its own count, exact, before step 1."""
    try:
        steps = int(dig(config, "trainer.total_training_steps") or 0)
    except (TypeError, ValueError):  # not a number: verl would refuse it, the console must not stop on it
        steps = 0
    if steps or not count_data:
        return steps or None
    rows = capped(parquet_rows(dig(config, "data.train_files")), dig(config, "data.train_max_samples"))
    batch = dig(config, "data.train_batch_size")
    if rows is None or not batch:
        return None
    return rows // int(batch) * int(dig(config, "trainer.total_epochs", 1))
