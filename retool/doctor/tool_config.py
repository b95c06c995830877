"""Tool config: the rollout's tool YAML loads with verl's own loader; which sandbox URL and session mode it uses."""

from __future__ import annotations

import contextlib
import io
import os
from pathlib import Path
from typing import Any

import yaml

from retool.checklist import FAIL, OK, SKIP, WARN, Check
from retool.doctor.config import config_kind, dig, tool_config_path


@contextlib.contextmanager
def _environment(values: dict[str, Any]):
    """os.environ with ``values`` set, restored afterwards."""
    saved = {key: os.environ.get(key) for key in values}
    os.environ.update({key: str(value) for key, value in values.items()})
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def check_tool_config(cfg: dict[str, Any]) -> tuple[Check, str | None]:
    """The tool YAML loads with verl's own loader (it instantiates the tool classes); returns the sandbox URL."""
    if config_kind(cfg) != "rl":
        return Check(SKIP, "tool config", "SFT config: no rollout tools"), None
    path = tool_config_path(cfg)
    if not path:
        return Check(
            FAIL,
            "tool config",
            "actor_rollout_ref.rollout.multi_turn.tool_config_path is not set: the "
            "model cannot call the code tool (use configs/tool.yaml)",
        ), None
    if not Path(path).is_file():
        return Check(FAIL, "tool config", f"{path} does not exist (RETOOL_REPO_DIR points the recipe at it)"), None
    # The tool YAML is resolved in Ray workers, which see the job's runtime env (scripts/launch.sh puts
    # RETOOL_SANDBOX_URL there): check the URL training will post to, not this shell's.
    worker_env = dig(cfg, "ray_kwargs.ray_init.runtime_env.env_vars", None) or {}
    try:
        from verl.tools.tool_registry import initialize_tools_from_config

        with contextlib.redirect_stdout(io.StringIO()), _environment(worker_env):  # verl prints each schema
            tools = initialize_tools_from_config(path)
    except Exception as e:  # any import or validation error of the tool is what the user must fix
        return Check(FAIL, "tool config", f"{path} does not load: {type(e).__name__}: {e}"), None
    url = None
    for tool in tools:
        settings = getattr(tool, "settings", None)
        url = (
            url
            or getattr(settings, "sandbox_fusion_url", None)
            or (getattr(tool, "config", {}) or {}).get("sandbox_fusion_url")
        )
    names = ", ".join(f"{t.name} ({type(t).__module__}.{type(t).__name__})" for t in tools)
    if not dig(cfg, "actor_rollout_ref.rollout.multi_turn.enable", False):
        return Check(WARN, "tool config", f"{path} loads ({names}) but multi_turn.enable is false"), url
    return Check(OK, "tool config", f"{path}: {names}" + (f" -> {url}" if url else "")), url


def tool_session_mode(path: str | None) -> str | None:
    """The ``session_mode`` of the tool YAML's tools ("per_trajectory" if any tool has it; None when unreadable).

    Read as plain YAML (no verl needed): the key is a literal in the ``config:`` block of each tool.
    """
    if not path or not Path(path).is_file():
        return None
    try:
        tools = (yaml.safe_load(Path(path).read_text()) or {}).get("tools") or []
    except (yaml.YAMLError, AttributeError):
        return None
    modes = {
        str((tool.get("config") or {}).get("session_mode", "stateless")) for tool in tools if isinstance(tool, dict)
    }
    return "per_trajectory" if "per_trajectory" in modes else "stateless"
