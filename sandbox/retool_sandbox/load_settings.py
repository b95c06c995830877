"""The client settings a load test calls with: each call's deadlines and retries (``client.ClientPolicy``), the calls
in flight per agent-loop worker and the session mode. The defaults are ClientPolicy's, which are the ReTool recipe's
tool defaults (configs/tool.yaml there); ``load_settings`` reads them from such a tool YAML instead.

The caller builds them (``retool-sandbox loadtest`` from its options, a benchmark from its tool YAML) and passes them
to ``loadtest.LoadTest``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from retool_sandbox.client import SESSION_MODES, ClientPolicy

# tool YAML key -> ClientPolicy field (the tool's names are verl's SandboxFusion tool's)
_POLICY_KEYS = {
    "default_timeout": "run_timeout",
    "memory_limit_mb": "memory_limit_mb",
    "queue_timeout_s": "queue_timeout_s",
    "http_timeout_margin_s": "http_timeout_margin_s",
    "max_retries": "max_retries",
    "retry_backoff_s": "retry_backoff_s",
    "reconnect_budget_s": "reconnect_budget_s",
}


@dataclass(frozen=True)
class LoadSettings:
    """How the load test's clients call: ``policy`` per call, ``max_concurrency`` calls in flight per worker."""

    policy: ClientPolicy = field(default_factory=ClientPolicy)
    max_concurrency: int = 8
    session_mode: str = "stateless"

    def __post_init__(self) -> None:
        p = self.policy
        problems = [
            message
            for bad, message in (
                (p.run_timeout <= 0, f"the timeout must be > 0 s, got {p.run_timeout!r}"),
                (
                    p.memory_limit_mb <= 0 and p.memory_limit_mb != -1,
                    f"memory_limit_mb must be > 0 or -1 (no limit), got {p.memory_limit_mb!r}",
                ),
                (
                    min(p.queue_timeout_s, p.http_timeout_margin_s, p.retry_backoff_s, p.reconnect_budget_s) < 0,
                    "queue_timeout_s, http_timeout_margin_s, retry_backoff_s and reconnect_budget_s must be >= 0",
                ),
                (p.max_retries < 0, f"max_retries must be >= 0, got {p.max_retries!r}"),
                (self.max_concurrency < 1, f"max_concurrency must be >= 1, got {self.max_concurrency!r}"),
                (
                    self.session_mode not in SESSION_MODES,
                    f"session_mode must be one of {list(SESSION_MODES)}, got {self.session_mode!r}",
                ),
            )
            if bad
        ]
        if problems:
            raise ValueError("load test settings: " + "; ".join(problems))


def load_settings(
    tool_config: str | None = None,
    *,
    timeout: float | None = None,
    memory_limit_mb: int | None = None,
    session_mode: str | None = None,
) -> LoadSettings:
    """The settings of the code tool in ``tool_config`` (a tool YAML with a ``tools:`` list, such as the recipe's
    configs/tool.yaml; its URL is not used), else the defaults; the keyword overrides that are not None win.
    ValueError names the file and key that are wrong."""
    config: dict[str, Any] = _tool_entry(tool_config) if tool_config is not None else {}
    policy: dict[str, Any] = {}
    for key, name in _POLICY_KEYS.items():
        if key in config:
            policy[name] = _number(config[key], f"{tool_config}: {key}")
    if timeout is not None:
        policy["run_timeout"] = timeout
    if memory_limit_mb is not None:
        policy["memory_limit_mb"] = memory_limit_mb
    for name in ("max_retries", "memory_limit_mb"):
        if name in policy and not isinstance(policy[name], int):
            raise ValueError(f"{tool_config}: {name} must be an integer, got {policy[name]!r}")
    settings = LoadSettings(policy=replace(ClientPolicy(), **policy))
    concurrency = config.get("max_concurrency", settings.max_concurrency)
    if isinstance(concurrency, bool) or not isinstance(concurrency, int):
        raise ValueError(f"{tool_config}: max_concurrency must be an integer, got {concurrency!r}")
    mode = session_mode or config.get("session_mode", settings.session_mode)
    return replace(settings, max_concurrency=concurrency, session_mode=mode)


def _number(value: Any, where: str) -> float | int:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{where} must be a number, got {value!r}")
    return value


def _tool_entry(tool_config: str) -> dict[str, Any]:
    """The ``config:`` block of the code tool's entry (the CodeInterpreterTool one, else the first)."""
    try:
        import yaml
    except ImportError:
        raise ValueError("--tool-config needs PyYAML: pip install 'retool-sandbox[load]'") from None
    with open(tool_config) as fh:
        document = yaml.safe_load(fh) or {}
    tools = document.get("tools") if isinstance(document, dict) else None
    if not isinstance(tools, list) or not tools or not all(isinstance(t, dict) for t in tools):
        raise ValueError(f"{tool_config}: no `tools:` list with the code tool's entry")
    entry = next((t for t in tools if str(t.get("class_name", "")).endswith("CodeInterpreterTool")), tools[0])
    config = entry.get("config") or {}
    if not isinstance(config, dict):
        raise ValueError(f"{tool_config}: the code tool's `config:` is not a mapping")
    return config


def summary(settings: LoadSettings) -> dict[str, Any]:
    """The settings as the report states them."""
    p = settings.policy
    return {
        "timeout_s": p.run_timeout,
        "memory_limit_mb": p.memory_limit_mb,
        "max_concurrency": settings.max_concurrency,
        "max_retries": p.max_retries,
        "queue_timeout_s": p.queue_timeout_s,
        "reconnect_budget_s": p.reconnect_budget_s,
        "call_deadline_s": p.call_deadline(),
    }
