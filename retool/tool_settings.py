"""The code tool's settings: the ``config:`` block of a tool YAML (configs/tool*.yaml), validated.

Kept free of verl: the SFT converter reads the same block to show the model the schema the RL rollout will show.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from retool_sandbox.client import SESSION_MODES, ClientPolicy, SandboxURLError, run_code_url

# `behaviour`: how code is prepared and the reply worded (retool.tool_text).
#   verl_retool  the tool the reference run used (verl's recipe/retool CustomSandboxFusionTool)
#   annotated    this recipe's tool: every python block, shell-like printing, labelled stderr, notes, its own cut
BEHAVIOURS = ("verl_retool", "annotated")
# `session_mode`: one of SESSION_MODES, "stateless" or "per_trajectory" (retool_sandbox.client says what each does)
WHERE = "code_interpreter tool config (the `config:` block of the tool YAML)"


@dataclass(frozen=True)
class ToolSettings:
    """Validated tool config. Defaults are the reference run's where it had the setting."""

    sandbox_fusion_url: str
    default_timeout: float = 30.0
    memory_limit_mb: int = 1024
    max_concurrency: int = 8
    max_retries: int = 3
    max_output_chars: int = 2048
    retry_backoff_s: float = 1.0
    reconnect_budget_s: float = 60.0
    queue_timeout_s: float = 30.0
    http_timeout_margin_s: float = 10.0
    behaviour: str = "verl_retool"
    session_mode: str = "stateless"

    def client_policy(self) -> ClientPolicy:
        return ClientPolicy(
            run_timeout=self.default_timeout,
            memory_limit_mb=self.memory_limit_mb,
            queue_timeout_s=self.queue_timeout_s,
            http_timeout_margin_s=self.http_timeout_margin_s,
            max_retries=self.max_retries,
            retry_backoff_s=self.retry_backoff_s,
            reconnect_budget_s=self.reconnect_budget_s,
        )

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> ToolSettings:
        """Build from verl's tool config dict; raises ValueError naming the bad key."""
        known = {f.name for f in fields(cls)} | {"type"}  # `type: native` is read by verl's loader
        unknown = sorted(set(config) - known)
        if unknown:
            raise ValueError(f"{WHERE}: unknown keys {unknown}; known keys are {sorted(known)}")
        url = config.get("sandbox_fusion_url")
        if not isinstance(url, str) or not url.strip():
            raise ValueError(f"{WHERE}: set sandbox_fusion_url (or the RETOOL_SANDBOX_URL environment variable)")
        try:
            url = run_code_url(url)
        except SandboxURLError as exc:
            raise ValueError(f"{WHERE}: sandbox_fusion_url: {exc}") from None

        def number(key: str, minimum: float, integer: bool = False) -> Any:
            value = config.get(key, getattr(cls, key))
            ok = isinstance(value, int) if integer else isinstance(value, (int, float))
            if isinstance(value, bool) or not ok or value < minimum:
                kind = "an integer" if integer else "a number"
                raise ValueError(f"{WHERE}: {key} must be {kind} >= {minimum}, got {value!r}")
            return value

        def choice(key: str, allowed: tuple[str, ...]) -> str:
            value = config.get(key, getattr(cls, key))
            if value not in allowed:  # exact spelling: a typo must not silently pick the default
                raise ValueError(f"{WHERE}: {key} must be one of {list(allowed)}, got {value!r}")
            return value

        memory = config.get("memory_limit_mb", cls.memory_limit_mb)
        if isinstance(memory, bool) or not isinstance(memory, int) or (memory <= 0 and memory != -1):
            raise ValueError(f"{WHERE}: memory_limit_mb must be a positive integer or -1 (no limit), got {memory!r}")
        timeout = number("default_timeout", 0)
        if timeout == 0:
            raise ValueError(f"{WHERE}: default_timeout must be > 0 seconds")
        return cls(
            sandbox_fusion_url=url,
            default_timeout=float(timeout),
            memory_limit_mb=memory,
            max_concurrency=number("max_concurrency", 1, integer=True),
            max_retries=number("max_retries", 0, integer=True),
            max_output_chars=number("max_output_chars", 200, integer=True),
            retry_backoff_s=float(number("retry_backoff_s", 0)),
            reconnect_budget_s=float(number("reconnect_budget_s", 0)),
            queue_timeout_s=float(number("queue_timeout_s", 0)),
            http_timeout_margin_s=float(number("http_timeout_margin_s", 0.1)),
            behaviour=choice("behaviour", BEHAVIOURS),
            session_mode=choice("session_mode", SESSION_MODES),
        )
