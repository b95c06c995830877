"""``retool-sandbox``: run the embedded SandboxFusion-compatible code sandbox."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys

from retool.sandbox.config import (
    DEFAULT_IDLE_TIMEOUT_S,
    DEFAULT_MAX_SESSIONS,
    ServerConfig,
    default_memory_floor_mb,
    default_slots,
)
from retool.sandbox.isolation import IsolationUnavailable


def _positive_float(text: str) -> float:
    value = float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="retool-sandbox", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="serve POST /run_code, GET /v1/ping and GET /health")
    serve.add_argument("--host", default="127.0.0.1", help="address to bind (default: %(default)s)")
    serve.add_argument("--port", type=int, default=8080, help="port; 0 picks a free one (default: %(default)s)")
    serve.add_argument("--slots", type=int, default=None,
                       help="programs run at once; more requests queue (default: every core up to 8, a quarter of "
                            f"the cores on bigger hosts, at most 64; here {default_slots()})")
    serve.add_argument("--isolation", choices=["auto", "bwrap", "rlimit", "none"], default="auto",
                       help="auto = strongest tier whose start-up self-test passes (bwrap, then rlimit); "
                            "none only when named (default: %(default)s)")
    serve.add_argument("--python", default=sys.executable,
                       help="interpreter for user code, e.g. an env built from requirements-runtime.txt "
                            "(default: this server's Python, %(default)s)")
    serve.add_argument("--default-timeout", type=_positive_float, default=10.0,
                       help="run timeout in seconds when a request sends none (default: %(default)s)")
    serve.add_argument("--max-timeout", type=_positive_float, default=60.0,
                       help="requested run timeouts are clamped to this (default: %(default)s)")
    serve.add_argument("--queue-timeout", type=_positive_float, default=30.0,
                       help="seconds a request may wait for a free slot before HTTP 504 (default: %(default)s)")
    serve.add_argument("--max-output-bytes", type=int, default=1 << 20,
                       help="bytes kept per stream (stdout, stderr); the rest is counted and dropped "
                            "(default: %(default)s)")
    serve.add_argument("--max-memory-mb", type=int, default=4096,
                       help="address-space limit when a request sends memory_limit_MB=-1, and the cap for larger "
                            "requests; 0 = no limit (default: %(default)s)")
    serve.add_argument("--max-processes", type=int, default=128,
                       help="processes+threads per run (RLIMIT_NPROC of the slot uid) (default: %(default)s)")
    serve.add_argument("--max-file-size-mb", type=int, default=64,
                       help="largest file a program may write (default: %(default)s)")
    serve.add_argument("--uid-base", type=int, default=None,
                       help="first of the 2 x slots + max_sessions uids this server's sandboxes run as when it is "
                            "root; default: the first range no other retool-sandbox holds, from 1879048192 "
                            "(from 61000 in a user namespace that maps only 65536 uids)")
    serve.add_argument("--fresh-sandbox-per-run", action="store_true",
                       help="start a new sandbox (namespaces, interpreter) for every run instead of forking runs "
                            "from one sandbox per slot that is swept clean after each run; slower for short "
                            "programs (see docs/sandbox.md)")
    serve.add_argument("--preimport", default=None, metavar="MODULES",
                       help="fork mode: comma-separated modules each slot's fork server imports before it forks "
                            "programs, so `import numpy` costs a program nothing; 'none' = nothing (default: "
                            "numpy,scipy,sympy,mpmath, the packages of requirements-runtime.txt, those installed)")
    serve.add_argument("--max-sessions", type=int, default=DEFAULT_MAX_SESSIONS,
                       help="stateful sessions (requests with a session_id) that may be open at once; an open one is "
                            "never evicted for a new one, which waits (then HTTP 504); 0 disables sessions (default: "
                            "%(default)s, one per trajectory of a 64 x 16 RL step)")
    serve.add_argument("--session-idle-timeout", type=_positive_float, default=DEFAULT_IDLE_TIMEOUT_S,
                       help="seconds a session may stay unused before it is evicted as a leak (default: %(default)s)")
    serve.add_argument("--session-memory-floor-mb", type=int, default=None,
                       help="while the host's MemAvailable is below this, idle sessions are evicted, least recently "
                            "used first; 0 = never (default: 5%% of the host's memory, at least 2048; here "
                            f"{default_memory_floor_mb()})")
    serve.add_argument("--work-root", default=None, help="where per-run work dirs are made (default: system temp)")
    serve.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    probe = sub.add_parser("probe", help="self-test every isolation tier and print a JSON report")
    probe.add_argument("--python", default=sys.executable, help="interpreter for user code")
    probe.add_argument("--uid-base", type=int, default=None, help="as for serve")
    return parser


async def _probe(python: str, uid_base: int | None) -> dict:
    from retool.sandbox.isolation import Interpreter
    from retool.sandbox.tier_choice import try_tier
    from retool.sandbox.uids import reserve_uids

    interpreter = Interpreter.probe(python)
    uid_base, _lock = reserve_uids(2, uid_base)  # slot 0's two uids, held until this process exits
    report: dict = {"python": interpreter.executable, "version": interpreter.version, "tiers": {}}
    for tier in ("bwrap", "rlimit", "none"):
        executor, reason = await try_tier(tier, interpreter, ceiling=ServerConfig().ceiling(), uid_base=uid_base,
                                          work_root=None, max_output_bytes=1 << 16)
        if executor is not None:
            await executor.close()
        report["tiers"][tier] = reason or "ok"
    return report


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=getattr(args, "log_level", "INFO"), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.command == "probe":
        try:
            print(json.dumps(asyncio.run(_probe(args.python, args.uid_base)), indent=2))
        except IsolationUnavailable as exc:
            print(f"retool-sandbox: {exc}", file=sys.stderr)
            return 2
        return 0
    from retool.sandbox.server import serve

    try:
        cfg = ServerConfig(
            host=args.host, port=args.port, slots=default_slots() if args.slots is None else args.slots,
            isolation=args.isolation, python=args.python,
            default_timeout=args.default_timeout, max_timeout=args.max_timeout, queue_timeout=args.queue_timeout,
            max_output_bytes=args.max_output_bytes, max_memory_mb=args.max_memory_mb,
            max_processes=args.max_processes, max_file_size_mb=args.max_file_size_mb, uid_base=args.uid_base,
            work_root=args.work_root, fresh_sandbox_per_run=args.fresh_sandbox_per_run, preimport=args.preimport,
            max_sessions=args.max_sessions, session_idle_timeout=args.session_idle_timeout,
            session_memory_floor_mb=args.session_memory_floor_mb,
        )
        asyncio.run(serve(cfg))
    except (ValueError, OSError, IsolationUnavailable) as exc:  # bad option, port in use, no usable tier
        print(f"retool-sandbox: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
