"""The sandbox: it answers and runs code (through retool_sandbox.client), how strongly it isolates the model's code,
and whether it keeps enough sessions for a per-trajectory tool."""

from __future__ import annotations

import os
from typing import Any
from urllib.parse import urlsplit

from retool.checklist import FAIL, OK, SKIP, WARN, Check
from retool.doctor.config import dig, tool_config_path
from retool.doctor.stages import SANDBOX
from retool.doctor.tool_config import tool_session_mode
from retool_sandbox.client import ClientPolicy, SandboxClient, SandboxUnreachable, SandboxURLError
from retool.sandbox_gate import ACCEPT_VARIABLE, HOW_TO_FIX, STRONG_TIERS

# The launchers' rule (retool.sandbox_gate): an RL run needs bwrap, or the risk accepted by name.
ACCEPT_WEAK_ISOLATION, HOW_TO_ISOLATE = ACCEPT_VARIABLE, HOW_TO_FIX
# One quick attempt: the doctor reports a server that is not there, it does not wait for it to come back.
PROBE_POLICY = ClientPolicy(run_timeout=10, queue_timeout_s=10, max_retries=0, reconnect_budget_s=0)


def weak_isolation_accepted() -> bool:
    return os.environ.get(ACCEPT_WEAK_ISOLATION) == "1"


def check_sandbox(url: str | None, rl: bool = False) -> Check:
    """The sandbox answers /v1/ping and runs print(6*7); /health (retool-sandbox) names the isolation tier.

    For an RL config (``rl``) a tier weaker than bwrap, or a server without /health (SandboxFusion isolates
    nothing by default), fails unless RETOOL_ACCEPT_WEAK_ISOLATION=1 accepts it (then it warns).
    """
    if not url:
        return Check(SKIP, "sandbox", "no --sandbox-url and no tool config to take it from")
    try:
        client = SandboxClient(url, PROBE_POLICY)
    except SandboxURLError:
        return Check(FAIL, "sandbox", f"{url!r} is not an http(s) URL")
    base, parts = client.base, urlsplit(client.base)
    try:
        client.wait_ready()  # a retool-sandbox still warming up (/health state warming) is waited for
    except SandboxUnreachable as e:
        if e.__cause__ is None:  # it answered, but not "pong"
            return Check(FAIL, "sandbox", str(e))
        start_hint = f"start it: retool-sandbox serve --host {parts.hostname} --port {parts.port or 8080}"
        return Check(
            FAIL, "sandbox", f"{base} does not answer GET /v1/ping ({e.__cause__}) -> {start_hint}", step=SANDBOX
        )
    reply = client.run_sync("print(6*7)")
    if reply.status == "unavailable":
        return Check(FAIL, "sandbox", f"{base}/run_code failed on print(6*7): {reply.problem}")
    if str(reply.run_result.get("stdout", "")).strip() != "42":
        return Check(FAIL, "sandbox", f"{base}/run_code ran print(6*7) but returned {reply.body!r:.300}")
    health = client.health()
    if health is None:
        detail = (
            f"{base} runs code but has no /health (SandboxFusion?): its default isolation is none (code runs "
            "as the server user); prefer retool-sandbox"
        )
        if not rl:
            return Check(WARN, "sandbox", detail)
        return _weak_for_rl(detail, "this RL run executes the code the model writes")
    isolation = health.get("isolation", "?")
    detail = (
        f"{base} runs code; isolation {isolation} ({health.get('mode', '?')} mode), "
        f"{health.get('slots', '?')} slots, python {health.get('python_version', '?')}"
    )
    if rl and isolation not in STRONG_TIERS:
        return _weak_for_rl(
            detail, f"isolation {isolation} is weaker than bwrap and this RL run executes the code the model writes"
        )
    if isolation == "none":
        return Check(WARN, "sandbox", detail + " -> model code is not isolated; restart with --isolation auto")
    return Check(OK, "sandbox", detail)


def _weak_for_rl(detail: str, why: str) -> Check:
    if weak_isolation_accepted():
        return Check(WARN, "sandbox", f"{detail} -> {why}; accepted with {ACCEPT_WEAK_ISOLATION}=1")
    return Check(FAIL, "sandbox", f"{detail} -> {why}: {HOW_TO_ISOLATE}")


def trajectories_per_node(cfg: dict[str, Any]) -> tuple[int, str]:
    """Trajectories in flight on one node during training rollouts, and the arithmetic in words.

    Every prompt of a batch is rolled out ``rollout.n`` times at once, spread over the nodes. Validation is not
    counted: its prompt count is not in the config.
    """
    batch = int(dig(cfg, "data.train_batch_size", 1) or 1)
    n = int(dig(cfg, "actor_rollout_ref.rollout.n", 1) or 1)
    nnodes = int(dig(cfg, "trainer.nnodes", 1) or 1)
    how = (
        f"data.train_batch_size {batch} x actor_rollout_ref.rollout.n {n} / trainer.nnodes {nnodes}; validation "
        "not counted"
    )
    return -(-batch * n // nnodes), how


def check_sessions(cfg: dict[str, Any], url: str | None) -> Check:
    """With session_mode per_trajectory, the sandbox keeps a session per trajectory in flight (/health sessions.max)."""
    tool_path = tool_config_path(cfg)
    mode = tool_session_mode(tool_path)
    if mode != "per_trajectory":
        return Check(SKIP, "sessions", f"the tool is {mode or 'not configured'} (no sessions needed)")
    if not url:
        return Check(SKIP, "sessions", "no sandbox URL to ask")
    try:
        client = SandboxClient(url, PROBE_POLICY)
        client.ping()
    except (SandboxURLError, SandboxUnreachable):
        return Check(SKIP, "sessions", "the sandbox does not answer: see the sandbox line")
    needed, how = trajectories_per_node(cfg)
    health = client.health()
    if health is None:
        return Check(
            FAIL,
            "sessions",
            f"{client.base} has no /health: not a retool-sandbox, so it keeps no sessions "
            f"(SandboxFusion ignores session_id), but {tool_path} has session_mode "
            f"per_trajectory -> serve retool-sandbox with --max-sessions {needed} ({how}), "
            "or set session_mode: stateless",
        )
    sessions = health.get("sessions")
    most = sessions.get("max") if isinstance(sessions, dict) else None
    if not isinstance(most, int) or most < needed:
        keeps = f"keeps at most {most} sessions" if isinstance(most, int) else "has sessions disabled"
        return Check(
            FAIL,
            "sessions",
            f"{client.base} {keeps} but {tool_path} has "
            f"session_mode per_trajectory and {needed} trajectories are in flight per node "
            f"({how}) -> restart it with --max-sessions {needed}",
        )
    return Check(
        OK, "sessions", f"{client.base} keeps up to {most} sessions; {needed} trajectories in flight per node ({how})"
    )
