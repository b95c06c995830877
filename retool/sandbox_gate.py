"""Before an RL run: the sandbox the tool will post to answers, and isolates model code as well as bubblewrap does.

An RL run executes hundreds of thousands of programs written by a model that is being optimised, on hosts that hold
checkpoints, credentials and the cluster's network. retool-sandbox falls back to a weaker tier when bubblewrap cannot
start (a container without user namespaces, bwrap not installed): `rlimit` shares the host's network and files,
`none` runs code as the server's user. A real SandboxFusion defaults to no isolation. So the RL launchers and
retool-doctor stop unless the tier is bwrap, or the risk is accepted by name: RETOOL_ACCEPT_WEAK_ISOLATION=1.
``sandbox_verdict`` also runs one program (``print(6*7)``): a server that answers pings but cannot run code (an
interpreter it cannot reach, a broken tier) would otherwise mask every trajectory of the run. The launch runs it on
every node (retool/node_check.py); `make smoke` runs it right after starting its sandbox.

    python -m retool.sandbox_gate URL     # exit 0: fine (or accepted, with a warning); 1: the reason and the fix
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Mapping

from retool_sandbox.client import ClientPolicy, SandboxClient, SandboxUnreachable, SandboxURLError

ACCEPT_VARIABLE = "RETOOL_ACCEPT_WEAK_ISOLATION"
STRONG_TIERS = ("bwrap",)
HOW_TO_FIX = (
    "install bubblewrap where the sandbox runs (Debian/Ubuntu: apt-get install -y bubblewrap; openEuler, CentOS, "
    "RHEL: dnf install -y bubblewrap) and restart `retool-sandbox serve`; inside a container bwrap also needs "
    "--privileged, or --cap-add CAP_SYS_ADMIN --cap-add CAP_NET_ADMIN with the security options that "
    'docs/sandbox.md ("Containers") lists; `retool-sandbox probe` says why bwrap cannot start. To run with a weaker '
    f"tier anyway, accept the risk explicitly: {ACCEPT_VARIABLE}=1"
)
# The program runs once: the server answered /health a moment before, and the run's own client rides out restarts.
PROGRAM_POLICY = ClientPolicy(run_timeout=30, queue_timeout_s=30, max_retries=0, reconnect_budget_s=0)
# A port that refuses connections is waited for this long: a sandbox restarted by its supervisor
# (scripts/keep_sandbox_up.sh) is back within seconds, and a relaunch after a crash often falls on that restart.
# GRACE_VARIABLE sets another wait (a supervisor that takes longer, or 0 not to wait).
RESTART_GRACE_S = 30.0
GRACE_VARIABLE = "RETOOL_SANDBOX_RESTART_GRACE_S"


def restart_grace_s(environ: Mapping[str, str] = os.environ) -> float:
    """Seconds to wait for a port that refuses connections: GRACE_VARIABLE's, else RESTART_GRACE_S."""
    text = environ.get(GRACE_VARIABLE, "").strip()
    if not text:
        return RESTART_GRACE_S
    try:
        seconds = float(text)
    except ValueError:
        seconds = float("nan")
    if not 0 <= seconds < float("inf"):
        raise ValueError(
            f"{GRACE_VARIABLE}={text!r} is not a number of seconds (0 or more); unset it for the "
            f"default {RESTART_GRACE_S:g}"
        )
    return seconds


def isolation_verdict(
    url: str, environ: Mapping[str, str] = os.environ, restart_grace: float | None = None
) -> tuple[bool, str]:
    """(may the run go on, what to say). Unreachable sandboxes and bad URLs never may; a port that refuses
    connections is waited for ``restart_grace`` seconds (None: ``restart_grace_s(environ)``)."""
    try:
        client = SandboxClient(url)
        health = _ready(client, restart_grace_s(environ) if restart_grace is None else restart_grace)
    except (SandboxURLError, SandboxUnreachable, ValueError) as exc:
        return False, str(exc)
    tier = health.get("isolation") if health else None
    if tier in STRONG_TIERS:
        return True, f"sandbox {client.base}: isolation {tier}"
    what = (
        f"isolation '{tier}' (weaker than bwrap: model code shares the host's network and files)"
        if tier
        else "no /health, so its isolation is unknown (SandboxFusion's default is none: code runs as the server's user)"
    )
    if environ.get(ACCEPT_VARIABLE) == "1":
        return True, f"warning: sandbox {client.base} has {what}; accepted by {ACCEPT_VARIABLE}=1"
    return False, f"sandbox {client.base} has {what}. Fix: {HOW_TO_FIX}"


def _ready(client: SandboxClient, restart_grace_s: float) -> dict | None:
    """``/health`` once the server answers and has warmed up; connection refused is tried again until the grace ends
    (anything else, such as a timeout or a wrong answer, is reported at once)."""
    deadline = time.monotonic() + restart_grace_s
    while True:
        try:
            return client.wait_ready(ping_timeout=10)  # a retool-sandbox still warming up is waited for
        except SandboxUnreachable as exc:
            if not _refused(exc):
                raise
            if time.monotonic() >= deadline:
                raise SandboxUnreachable(f"{exc} (refused connections for {restart_grace_s:g} s)") from exc
        time.sleep(1.0)


def _refused(exc: SandboxUnreachable) -> bool:
    cause = exc.__cause__
    return isinstance(getattr(cause, "reason", cause), ConnectionRefusedError)


def sandbox_verdict(
    url: str, environ: Mapping[str, str] = os.environ, restart_grace: float | None = None
) -> tuple[bool, str]:
    """``isolation_verdict``, then one program: may the run go on, and what to say."""
    ok, message = isolation_verdict(url, environ, restart_grace)
    if not ok:
        return ok, message
    client = SandboxClient(url, PROGRAM_POLICY)
    reply = client.run_sync("print(6*7)")
    stdout = str(reply.run_result.get("stdout", "")).strip()
    if reply.status == "ok" and stdout == "42":
        return True, f"{message}; ran print(6*7)"
    detail = (
        reply.problem
        or f"outcome {reply.status}, stdout {stdout[:100]!r}, stderr {str(reply.run_result.get('stderr', ''))[-300:]!r}"
    )
    return False, (
        f"sandbox {client.base} answers but did not run print(6*7): {detail}. Fix: its log says why "
        "(the interpreter it runs, --python; limits such as --max-timeout); `retool-sandbox probe` tests "
        "every tier"
    )


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m retool.sandbox_gate URL", file=sys.stderr)
        return 2
    ok, message = sandbox_verdict(args[0])
    print(message if ok else f"error: {message}", file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
