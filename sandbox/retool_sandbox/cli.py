"""``retool-sandbox``: run the embedded SandboxFusion-compatible code sandbox, probe its isolation tiers, or load-test
any ``/run_code`` server with one RL step's tool calls."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys

from retool_sandbox.config import (
    DEFAULT_IDLE_TIMEOUT_S,
    DEFAULT_MAX_SESSIONS,
    ServerConfig,
    default_memory_floor_mb,
    default_slots,
)
from retool_sandbox.isolation import IsolationUnavailable


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
    serve.add_argument(
        "--slots",
        type=int,
        default=None,
        help="programs run at once; more requests queue (default: every core up to 8, a quarter of "
        f"the cores on bigger hosts, at most 64; here {default_slots()})",
    )
    serve.add_argument(
        "--isolation",
        choices=["auto", "bwrap", "rlimit", "none"],
        default="auto",
        help="auto = strongest tier whose start-up self-test passes (bwrap, then rlimit); "
        "none only when named (default: %(default)s)",
    )
    serve.add_argument(
        "--python",
        default=sys.executable,
        help="interpreter for user code, e.g. an env built from requirements-runtime.txt "
        "(default: this server's Python, %(default)s)",
    )
    serve.add_argument(
        "--default-timeout",
        type=_positive_float,
        default=10.0,
        help="run timeout in seconds when a request sends none (default: %(default)s)",
    )
    serve.add_argument(
        "--max-timeout",
        type=_positive_float,
        default=60.0,
        help="requested run timeouts are clamped to this (default: %(default)s)",
    )
    serve.add_argument(
        "--queue-timeout",
        type=_positive_float,
        default=30.0,
        help="seconds a request may wait for a free slot before HTTP 504 (default: %(default)s)",
    )
    serve.add_argument(
        "--max-output-bytes",
        type=int,
        default=1 << 20,
        help="bytes kept per stream (stdout, stderr); the rest is counted and dropped (default: %(default)s)",
    )
    serve.add_argument(
        "--max-memory-mb",
        type=int,
        default=4096,
        help="address-space limit when a request sends memory_limit_MB=-1, and the cap for larger "
        "requests; 0 = no limit (default: %(default)s)",
    )
    serve.add_argument(
        "--max-processes",
        type=int,
        default=128,
        help="processes+threads per run (RLIMIT_NPROC of the slot uid) (default: %(default)s)",
    )
    serve.add_argument(
        "--max-file-size-mb", type=int, default=64, help="largest file a program may write (default: %(default)s)"
    )
    serve.add_argument(
        "--uid-base",
        type=int,
        default=None,
        help="first of the 2 x slots + max_sessions uids this server's sandboxes run as when it is "
        "root; default: the first range no other retool-sandbox holds, from 1879048192 "
        "(from 61000 in a user namespace that maps only 65536 uids)",
    )
    serve.add_argument(
        "--fresh-sandbox-per-run",
        action="store_true",
        help="start a new sandbox (namespaces, interpreter) for every run instead of forking runs "
        "from one sandbox per slot that is swept clean after each run; slower for short "
        "programs (see docs/sandbox.md)",
    )
    serve.add_argument(
        "--preimport",
        default=None,
        metavar="MODULES",
        help="fork mode: comma-separated modules each slot's fork server imports before it forks "
        "programs, so `import numpy` costs a program nothing; 'none' = nothing (default: "
        "the packages of requirements-runtime.txt, numpy,scipy,sympy,mpmath, and the submodules "
        "math code loads on first use, such as scipy.optimize; those installed; /health lists "
        "them)",
    )
    serve.add_argument(
        "--max-sessions",
        type=int,
        default=DEFAULT_MAX_SESSIONS,
        help="stateful sessions (requests with a session_id) that may be open at once; an open one is "
        "never evicted for a new one, which waits (then HTTP 504); 0 disables sessions (default: "
        "%(default)s, one per trajectory of a 64 x 16 RL step)",
    )
    serve.add_argument(
        "--session-idle-timeout",
        type=_positive_float,
        default=DEFAULT_IDLE_TIMEOUT_S,
        help="seconds a session may stay unused before it is evicted as a leak (default: %(default)s)",
    )
    serve.add_argument(
        "--session-memory-floor-mb",
        type=int,
        default=None,
        help="while the host's MemAvailable is below this, idle sessions are evicted, least recently "
        "used first; 0 = never (default: 5%% of the host's memory, at least 2048; here "
        f"{default_memory_floor_mb()})",
    )
    serve.add_argument("--work-root", default=None, help="where per-run work dirs are made (default: system temp)")
    serve.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    probe = sub.add_parser("probe", help="self-test every isolation tier and print a JSON report")
    probe.add_argument("--python", default=sys.executable, help="interpreter for user code")
    probe.add_argument("--uid-base", type=int, default=None, help="as for serve")
    _loadtest_parser(sub)
    return parser


def _loadtest_parser(sub) -> None:
    from retool_sandbox import load_model as model
    from retool_sandbox.loadtest import default_url

    load = sub.add_parser(
        "loadtest",
        help="replay one RL step's tool calls against a /run_code server and say whether it keeps up",
        description="Replays the reference RL step's tool calls (N trajectories, the tool's client with its deadlines, "
        "retries and sessions, pauses from a generation model) against any /run_code server, "
        "retool-sandbox or SandboxFusion, and reports throughput, latency over time, queue waits, 504s, "
        "timeouts, lost calls, the server's CPU and memory, and a verdict. A program of the mix that the "
        "idle server does not run as it should is run anyway and counted as the server's failure. Exit "
        "status 1 when a call was lost, answered wrongly, killed, falsely timed out, of a program the idle "
        'server fails, or outlived its deadline. See README.md, "Load test".',
    )
    load.add_argument(
        "--url",
        default=default_url(),
        help="the sandbox (http://host:port or its /run_code URL) (default: $RETOOL_SANDBOX_URL or %(default)s)",
    )
    load.add_argument(
        "--trajectories",
        type=int,
        default=model.REFERENCE_TRAJECTORIES,
        help="trajectories in flight together (default: %(default)s = 64 prompts x 16 samples)",
    )
    load.add_argument(
        "--session-mode",
        choices=["stateless", "per_trajectory"],
        default=None,
        help="the tool's session mode (default: the tool config's, stateless in configs/tool.yaml)",
    )
    load.add_argument(
        "--num-turns-mean",
        type=float,
        default=model.REFERENCE_NUM_TURNS,
        help="verl's num_turns mean, which sets the calls per trajectory (2 x calls + 2); the reference "
        "run had 7.0 at step 0 and 5.4 at step 130 (default: %(default)s)",
    )
    load.add_argument(
        "--max-assistant-turns",
        type=int,
        default=model.REFERENCE_MAX_ASSISTANT_TURNS,
        help="the rollout's max_assistant_turns; at most one call fewer per trajectory (default: %(default)s)",
    )
    load.add_argument(
        "--tokens-per-s",
        type=_positive_float,
        default=model.REFERENCE_TOKENS_PER_S,
        help="generation speed per trajectory; raise it to load the sandbox harder (default: %(default)s)",
    )
    load.add_argument(
        "--tokens-between-calls",
        type=float,
        default=model.REFERENCE_TOKENS_BETWEEN_CALLS,
        help="mean tokens generated before each call and after the last (default: %(default)s)",
    )
    load.add_argument(
        "--reference-tokens-per-s",
        type=_positive_float,
        default=model.REFERENCE_TOKENS_PER_S,
        help="the generation speed of the step the verdict is about (default: %(default)s)",
    )
    load.add_argument(
        "--workers",
        type=int,
        default=model.REFERENCE_WORKERS,
        help="agent-loop workers, each with its own client and max_concurrency (default: %(default)s)",
    )
    load.add_argument(
        "--tool-config",
        default=None,
        metavar="YAML",
        help="take the client settings (timeout, memory, max_concurrency, retries, queue timeout, "
        "session mode) from this tool YAML, e.g. the ReTool recipe's configs/tool.yaml (default: "
        "the same values; needs PyYAML: the `load` extra)",
    )
    load.add_argument("--timeout", type=_positive_float, default=None, help="the tool's timeout in seconds")
    load.add_argument(
        "--memory-limit-mb",
        type=int,
        default=None,
        help="memory_limit_MB sent with each call; -1 = none (a real SandboxFusion needs -1 for numpy)",
    )
    load.add_argument(
        "--baseline-calls",
        type=int,
        default=100,
        help="first measure the sandbox's own throughput with this many calls at concurrency 2 and "
        "no pauses; 0 = skip (default: %(default)s)",
    )
    load.add_argument(
        "--timeout-burst",
        type=int,
        default=0,
        metavar="N",
        help="also send N programs that spin until their timeout, all at --timeout-burst-at",
    )
    load.add_argument("--timeout-burst-at", type=float, default=0.0, metavar="S", help="seconds after the start")
    load.add_argument(
        "--server-pid",
        type=int,
        default=None,
        help="measure this process tree's CPU and memory (a local retool-sandbox is found by itself)",
    )
    load.add_argument("--seed", type=int, default=0, help="draws of calls, programs and pauses (default: %(default)s)")
    load.add_argument("--json", default=None, metavar="FILE", help="also write every number and call record here")


async def _probe(python: str, uid_base: int | None) -> dict:
    from retool_sandbox.isolation import Interpreter
    from retool_sandbox.tier_choice import try_tier
    from retool_sandbox.uids import reserve_uids

    interpreter = Interpreter.probe(python)
    uid_base, _lock = reserve_uids(2, uid_base)  # slot 0's two uids, held until this process exits
    report: dict = {"python": interpreter.executable, "version": interpreter.version, "tiers": {}}
    for tier in ("bwrap", "rlimit", "none"):
        executor, reason = await try_tier(
            tier,
            interpreter,
            ceiling=ServerConfig().ceiling(),
            uid_base=uid_base,
            work_root=None,
            max_output_bytes=1 << 16,
        )
        if executor is not None:
            await executor.close()
        report["tiers"][tier] = reason or "ok"
    return report


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=getattr(args, "log_level", "INFO"),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if args.command == "loadtest":
        return _loadtest(args)
    if args.command == "probe":
        try:
            print(json.dumps(asyncio.run(_probe(args.python, args.uid_base)), indent=2))
        except IsolationUnavailable as exc:
            print(f"retool-sandbox: {exc}", file=sys.stderr)
            return 2
        return 0
    from retool_sandbox.server import serve

    try:
        cfg = ServerConfig(
            host=args.host,
            port=args.port,
            slots=default_slots() if args.slots is None else args.slots,
            isolation=args.isolation,
            python=args.python,
            default_timeout=args.default_timeout,
            max_timeout=args.max_timeout,
            queue_timeout=args.queue_timeout,
            max_output_bytes=args.max_output_bytes,
            max_memory_mb=args.max_memory_mb,
            max_processes=args.max_processes,
            max_file_size_mb=args.max_file_size_mb,
            uid_base=args.uid_base,
            work_root=args.work_root,
            fresh_sandbox_per_run=args.fresh_sandbox_per_run,
            preimport=args.preimport,
            max_sessions=args.max_sessions,
            session_idle_timeout=args.session_idle_timeout,
            session_memory_floor_mb=args.session_memory_floor_mb,
        )
        asyncio.run(serve(cfg))
    except (ValueError, OSError, IsolationUnavailable) as exc:  # bad option, port in use, no usable tier
        print(f"retool-sandbox: {exc}", file=sys.stderr)
        return 2
    return 0


def _loadtest(args: argparse.Namespace) -> int:
    import json

    from retool_sandbox import load_report
    from retool_sandbox.client import SandboxUnreachable, run_code_url
    from retool_sandbox.load_model import LoadSpec
    from retool_sandbox.load_settings import load_settings
    from retool_sandbox.loadtest import LoadTest

    try:
        url = run_code_url(args.url)
        settings = load_settings(
            args.tool_config, timeout=args.timeout, memory_limit_mb=args.memory_limit_mb, session_mode=args.session_mode
        )
        spec = LoadSpec(
            trajectories=args.trajectories,
            session_mode=settings.session_mode,
            num_turns_mean=args.num_turns_mean,
            max_assistant_turns=args.max_assistant_turns,
            tokens_per_s=args.tokens_per_s,
            tokens_between_calls=args.tokens_between_calls,
            workers=args.workers,
            timeout_burst=args.timeout_burst,
            timeout_burst_at_s=args.timeout_burst_at,
            seed=args.seed,
        )
        if args.baseline_calls < 0:
            raise ValueError("--baseline-calls must be >= 0")
        test = LoadTest(url, spec, settings, server_pid=args.server_pid, baseline_calls=args.baseline_calls)
        result = asyncio.run(test.run())
    except (ValueError, OSError, SandboxUnreachable) as exc:
        print(f"retool-sandbox loadtest: {exc}", file=sys.stderr)
        return 2
    summary = load_report.summarize(result, args.reference_tokens_per_s)
    print(load_report.render(summary), end="")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(load_report.to_json(result, summary), fh, indent=1)
    calls = summary["calls"]
    failed = ("lost", "wrong", "killed", "false_timeout", "fails_when_idle", "over_deadline")
    return 1 if any(calls[key] for key in failed) else 0


if __name__ == "__main__":
    raise SystemExit(main())
