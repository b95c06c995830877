"""Which isolation tier a server runs with: each tier's start-up self-test and the choice among them.

``self_test`` runs a probe program through an executor's full path and checks what it reports (the sandbox uid, no
capability left, ``/etc/shadow`` invisible under bwrap). ``try_tier`` builds an executor for one tier and keeps it
only if the self-test passes; ``choose_isolation`` takes the strongest tier that passes (``auto``: bwrap, then
rlimit; ``none`` only when named). ``retool-sandbox probe`` reports every tier's verdict.
"""

from __future__ import annotations

import json

from retool_sandbox.executor import Executor, RunSpec
from retool_sandbox.isolation import TIERS, Interpreter, IsolationUnavailable, Limits, make_isolation

PROBE = (
    "import json, os, sys\n"
    "caps = [line.split()[1] for line in open('/proc/self/status') if line.startswith('CapEff:')]\n"
    "print(json.dumps({'uid': os.getuid(), 'shadow': os.path.exists('/etc/shadow'), 'cwd': os.getcwd(),"
    " 'env': sorted(os.environ), 'python': sys.version.split()[0], 'caps': int(caps[0], 16)}))\n"
)


# What bubblewrap says when the kernel or a container's profiles will not let it make namespaces, mounts or its
# loopback; docs/sandbox.md ("Containers") has the flags.
_DENIED = ("Operation not permitted", "Permission denied", "No permissions to create new namespace", "loopback: Failed")
CONTAINER_HINT = (
    " (inside a container bubblewrap needs the container started with --privileged, or with --cap-add CAP_SYS_ADMIN "
    "--cap-add CAP_NET_ADMIN and its syscall filter and AppArmor profile unconfined: see docs/sandbox.md, "
    '"Containers")'
)


async def self_test(executor: Executor) -> str | None:
    """Run a probe program through the full path; return None if the tier works, else the reason."""
    iso = executor.isolation
    try:
        iso.check()
        out = await executor.run(0, RunSpec(code=PROBE, timeout_s=30, memory_mb=1024))
    except (IsolationUnavailable, OSError) as exc:
        return str(exc)
    if out.status != "Finished" or out.return_code != 0:
        return f"probe program failed ({out.status}, exit {out.return_code}): {(out.stderr or out.error)[-800:]}"
    try:
        info = json.loads(out.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return f"probe program printed unexpected output: {out.stdout[-300:]!r}"
    expected_uid = iso.uid(0)  # slot 0's first sandbox
    if expected_uid is not None and info["uid"] != expected_uid:
        return f"probe ran as uid {info['uid']}, expected the sandbox uid {expected_uid}"
    if expected_uid is not None and info["caps"]:
        return f"probe kept capabilities {info['caps']:#x} after dropping to the sandbox uid"
    if iso.name == "bwrap" and info["shadow"]:
        return "probe could see /etc/shadow inside bubblewrap"
    return None


async def try_tier(
    tier: str,
    interpreter: Interpreter,
    *,
    ceiling: Limits,
    uid_base: int,
    work_root: str | None,
    max_output_bytes: int,
    fresh: bool = False,
    preimport: str = "",
) -> tuple[Executor | None, str | None]:
    """An executor for ``tier`` if its checks and self-test pass, else (None, the reason)."""
    if tier not in TIERS:
        raise IsolationUnavailable(f"unknown isolation tier {tier!r}; choose auto, {', '.join(TIERS)}")
    try:
        executor = Executor(
            make_isolation(tier, interpreter, uid_base), ceiling, work_root, max_output_bytes, fresh, preimport
        )
    except IsolationUnavailable as exc:
        return None, str(exc)
    reason = await self_test(executor)
    if reason is not None:
        await executor.close()
        if tier == "bwrap" and any(sign in reason for sign in _DENIED):
            reason += CONTAINER_HINT
        return None, reason
    return executor, None


async def choose_isolation(
    requested: str,
    interpreter: Interpreter,
    *,
    ceiling: Limits,
    uid_base: int,
    work_root: str | None,
    max_output_bytes: int,
    fresh: bool = False,
    preimport: str = "",
) -> tuple[Executor, list[str]]:
    """Build the executor for ``requested`` ('auto' = strongest tier whose self-test passes; 'none' only if named).

    Returns the executor and notes on tiers that were skipped. Raises IsolationUnavailable if nothing usable.
    """
    notes: list[str] = []
    for tier in ["bwrap", "rlimit"] if requested == "auto" else [requested]:
        executor, reason = await try_tier(
            tier,
            interpreter,
            ceiling=ceiling,
            uid_base=uid_base,
            work_root=work_root,
            max_output_bytes=max_output_bytes,
            fresh=fresh,
            preimport=preimport,
        )
        if executor is not None:
            return executor, notes
        notes.append(f"{tier}: {reason}")
    raise IsolationUnavailable(
        "no usable isolation tier:\n  "
        + "\n  ".join(notes)
        + "\nInstall bubblewrap (scripts/install_system_packages.sh) or, for trusted code only, --isolation none."
    )
