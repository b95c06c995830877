"""Sandbox benchmark: latency p50/p99 and requests/s of /run_code against bare ``subprocess`` Python.

For each workload (print(1), import numpy, import sympy, a sympy factorisation) and concurrency (1, 2, 8, 32) it
sends ``--requests`` requests after ``--warmup`` warm-ups, one new HTTP connection per request, from a thread pool
of that size; "bare" runs ``subprocess.run([python, "-c", code])`` from the same threads with the same interpreter,
in the same run, alternating halves with the sandbox side. With ``--sandboxfusion-url`` a real SandboxFusion server
is measured as a third side of every row, in the same run. Then a burst of 16 CPU-bound jobs checks for false
timeouts. With ``--output FILE`` the section for the server's mode (fork, fresh or external) in that Markdown file
is replaced, between its sandbox-bench markers (appended if absent).

Everything the section says is computed from what this run measured: the header (how, where, with which
settings), the table, the target verdicts and the readings. How the modes work is explained in docs/sandbox.md,
not here; nothing from other runs is quoted.

Run it alone (it loads every core): ``flock /tmp/retool-heavy.lock .venv/bin/python bench/sandbox_bench.py``.
By default it starts its own server (auto isolation, one slot per core); ``--url`` measures another server
instead, e.g. a real SandboxFusion, since only the URL changes. ``--fresh-sandbox-per-run`` measures fresh mode.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from retool.markdown_sections import replace_section  # noqa: E402
from retool_sandbox import host, proctree  # noqa: E402
from retool_sandbox.client import ClientPolicy, SandboxClient  # noqa: E402
from retool_sandbox.spawn import running_sandbox  # noqa: E402

WORKLOADS = {
    "print(1)": "print(1)",
    "import numpy": "import numpy\nprint(numpy.__version__)",
    "import sympy": "import sympy\nprint(sympy.__version__)",
    "sympy factorint(2**64-1)": "from sympy import factorint\nprint(factorint(2**64 - 1))",
}
CPU_JOB = "s = 0\nfor i in range(4_000_000):\n    s += i\nprint(s)"
# Not in the default table: a CPU-bound program (~0.3 s of one core), to see what slots beyond the cores do.
EXTRA_WORKLOADS = {"cpu loop": CPU_JOB}
# Targets checked on every run (docs/sandbox.md says where they come from).
PRINT_OVERHEAD_MS = 25.0
THROUGHPUT_AT_CORES = 0.9
PREIMPORT_SPEEDUP = 5.0
PREIMPORT_ROWS = (("import numpy", "numpy"), ("import sympy", "sympy"))
PREIMPORT_LEVELS = (1, 2)


def _post(url: str, code: str, memory_mb: int = 1024) -> dict:
    """One /run_code call through the recipe's client, without retries (a 504 would hide an overloaded server): the
    decoded reply, or RuntimeError when there was none."""
    policy = ClientPolicy(
        run_timeout=30, memory_limit_mb=memory_mb, queue_timeout_s=120, max_retries=0, reconnect_budget_s=0
    )
    reply = SandboxClient(url, policy).run_sync(code)
    if reply.body is None:
        raise RuntimeError(f"no reply from {url}: {reply.problem}")
    return reply.body


def _sandbox_call(url: str, code: str, memory_mb: int = 1024) -> float:
    started = time.perf_counter()
    body = _post(url, code, memory_mb=memory_mb)
    elapsed = time.perf_counter() - started
    if body["status"] != "Success":
        raise RuntimeError(f"sandbox run failed: {json.dumps(body)[:500]}")
    return elapsed


def _bare_call(python: str, code: str) -> float:
    started = time.perf_counter()
    done = subprocess.run([python, "-c", code], capture_output=True, timeout=120)
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"bare run failed: {done.stderr[-500:]!r}")
    return elapsed


def _run_batch(pool: ThreadPoolExecutor, call, code: str, n: int) -> tuple[list[float], float]:
    started = time.perf_counter()
    latencies = list(pool.map(lambda _: call(code), range(n)))
    return latencies, time.perf_counter() - started


def _cells(sides: dict, code: str, concurrency: int, requests: int, warmup: int) -> dict[str, dict]:
    """Every side of one row, alternating halves (S, B, S, B) so drifting background load hits all alike."""
    samples: dict[str, list[float]] = {side: [] for side in sides}
    walls = dict.fromkeys(sides, 0.0)
    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        for call in sides.values():
            list(pool.map(call, [code] * warmup))
        for half in (requests // 2, requests - requests // 2):
            for side, call in sides.items():
                latencies, wall = _run_batch(pool, call, code, half)
                samples[side] += latencies
                walls[side] += wall
    out = {}
    for side, latencies in samples.items():
        ms = sorted(x * 1000 for x in latencies)
        out[side] = {
            "p50": statistics.median(ms),
            "p99": ms[min(len(ms) - 1, int(round(0.99 * (len(ms) - 1))))],
            "rps": len(ms) / walls[side],
        }
    return out


def _burst(url: str, jobs: int = 16) -> dict:
    """``jobs`` CPU-bound programs at once: how many time out, and how long the burst took."""
    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        bodies = list(pool.map(lambda _: _post(url, CPU_JOB), range(jobs)))
    statuses = [b.get("run_result", {}).get("status") for b in bodies]
    return {
        "jobs": jobs,
        "finished": statuses.count("Finished"),
        "timeouts": statuses.count("TimeLimitExceeded"),
        "seconds": time.perf_counter() - started,
    }


def _cpu_model() -> str:
    """The CPU's name: x86 says it in "model name"; arm64 (e.g. Kunpeng) only gives implementer and part codes."""
    fields: dict[str, str] = {}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            fields.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    if "model name" in fields:
        return fields["model name"]
    implementer, part = fields.get("CPU implementer", ""), fields.get("CPU part", "")
    if (implementer.lower(), part.lower()) == ("0x48", "0xd01"):
        return "HiSilicon Kunpeng 920"
    if implementer or part:
        return f"CPU implementer {implementer}, part {part}"
    return "unknown CPU"


def _machine() -> str:
    return (
        f"{_cpu_model()} ({platform.machine()}), {os.cpu_count()} cores, Linux {platform.release()}, "
        f"Python {platform.python_version()}"
    )


def display_path(path: str) -> str:
    """``path`` as the report may name it: relative to the repository, else only its file name."""
    if not os.path.isabs(path):  # already shown that way (saved runs keep the display form)
        return path
    try:
        return str(Path(os.path.abspath(path)).relative_to(ROOT))
    except ValueError:
        return Path(path).name


def _ratio(a: float, b: float) -> float:
    return a / b if b else float("inf")


def _find(results: list[dict], workload: str, concurrency: int) -> dict | None:
    return next((r for r in results if r["workload"] == workload and r["concurrency"] == concurrency), None)


def speedup(row: dict, side: str = "sandbox") -> float:
    """How many times faster than bare a side was in one row: the smaller of the p50 latency ratio and the
    throughput ratio, so a win in one at the price of the other does not count."""
    s, b = row[side], row["bare"]
    return min(_ratio(b["p50"], s["p50"]), _ratio(s["rps"], b["rps"]))


def targets(results: list[dict], burst: dict, meta: dict, cores: int) -> list[str]:
    """The target lines, each with the measured value and a verdict."""
    lines = []
    first = _find(results, "print(1)", 1)
    if first is not None:
        overhead = first["sandbox"]["p50"] - first["bare"]["p50"]
        lines.append(
            f"- p50 overhead of print(1) at concurrency 1 over bare python <= {PRINT_OVERHEAD_MS:g} ms: "
            f"**{overhead:.1f} ms** ({'met' if overhead <= PRINT_OVERHEAD_MS else 'NOT met'})."
        )
    at_cores = [r for r in results if r["concurrency"] == cores]
    if at_cores:
        ratio, name = min((r["sandbox"]["rps"] / r["bare"]["rps"], r["workload"]) for r in at_cores)
        lines.append(
            f"- throughput at concurrency = cores ({cores}) >= {THROUGHPUT_AT_CORES:g} x bare: worst "
            f"**{ratio:.2f} x** ({name}) ({'met' if ratio >= THROUGHPUT_AT_CORES else 'NOT met'})."
        )
    cells = []
    for workload, module in PREIMPORT_ROWS:
        for level in PREIMPORT_LEVELS:
            row = _find(results, workload, level)
            if row is not None:
                cells.append((workload, module, level, speedup(row)))
    if cells:
        preimported = meta.get("preimport")
        shown = ", ".join(f"{w} at {c}: **{x:.1f} x**" for w, _, c, x in cells)
        verdict = "met" if all(x >= PREIMPORT_SPEEDUP for *_, x in cells) else "NOT met"
        if len(cells) < len(PREIMPORT_ROWS) * len(PREIMPORT_LEVELS):
            verdict = "not judged: only these rows were measured" if verdict == "met" else verdict
        note = ""
        if preimported is not None:
            absent = sorted({m for _, m, _, _ in cells} - set(preimported))
            if absent:
                note = f"; the server did not preimport {', '.join(absent)}"
        lines.append(
            f"- `import numpy` and `import sympy` programs >= {PREIMPORT_SPEEDUP:g} x faster than bare at concurrency "
            f"{' and '.join(map(str, PREIMPORT_LEVELS))} (per row the smaller of the p50 ratio and the throughput "
            f"ratio): {shown} ({verdict}{note})."
        )
    lines.append(
        f"- no false timeouts when {burst['jobs']} CPU-bound jobs arrive at once on {cores} cores: "
        f"**{burst['timeouts']} timeouts**, {burst['finished']}/{burst['jobs']} finished in {burst['seconds']:.1f} s "
        f"({'met' if burst['timeouts'] == 0 and burst['finished'] == burst['jobs'] else 'NOT met'})."
    )
    return lines


def _faster(ratio: float) -> str:
    if ratio >= 1.005:
        return f"sandbox {ratio:.2f} x faster"
    if ratio <= 0.995:
        return f"sandbox {1 / ratio:.2f} x slower"
    return "equal"


def readings(results: list[dict]) -> list[str]:
    """Sentences that restate what the table shows: nothing in them is not computed from ``results``."""
    if not results:
        return []
    out = []
    ones = [r for r in results if r["concurrency"] == 1]
    if ones:
        parts = [
            f"{r['workload']} {r['sandbox']['p50']:.1f} vs {r['bare']['p50']:.1f} ms "
            f"({_faster(_ratio(r['bare']['p50'], r['sandbox']['p50']))})"
            for r in ones
        ]
        out.append("At concurrency 1, p50 latency sandbox vs bare: " + "; ".join(parts) + ".")
    ratios = [(r["sandbox"]["rps"] / r["bare"]["rps"], r["workload"], r["concurrency"]) for r in results]
    low, high = min(ratios), max(ratios)
    out.append(
        f"Throughput relative to bare ranged from {low[0]:.2f} x ({low[1]}, concurrency {low[2]}) to "
        f"{high[0]:.2f} x ({high[1]}, concurrency {high[2]}); "
        f"{sum(1 for x, *_ in ratios if x < 1)} of {len(ratios)} rows were below 1 x."
    )
    worst = max(results, key=lambda r: r["sandbox"]["p99"])
    out.append(
        f"The highest sandbox p99 was {worst['sandbox']['p99']:.1f} ms ({worst['workload']}, concurrency "
        f"{worst['concurrency']}), where bare's p99 was {worst['bare']['p99']:.1f} ms."
    )
    fusion = [r for r in results if "sandboxfusion" in r]
    if fusion:
        ratios = [(r["sandboxfusion"]["rps"] / r["bare"]["rps"], r["workload"], r["concurrency"]) for r in fusion]
        low, high = min(ratios), max(ratios)
        slowest = max(fusion, key=lambda r: r["sandboxfusion"]["p99"])
        out.append(
            f"SandboxFusion, measured in this run, reached {low[0]:.2f} x ({low[1]}, concurrency {low[2]}) to "
            f"{high[0]:.2f} x ({high[1]}, concurrency {high[2]}) of bare throughput; its highest p99 was "
            f"{slowest['sandboxfusion']['p99']:.1f} ms ({slowest['workload']}, concurrency "
            f"{slowest['concurrency']})."
        )
    return out


def render(results: list[dict], burst: dict, meta: dict) -> str:
    mode = meta.get("mode", "fresh")  # runs saved before fork mode existed were fresh
    flag = " --fresh-sandbox-per-run" if mode == "fresh" else " --url ..." if mode == "external" else ""
    fusion = any("sandboxfusion" in r for r in results)
    if fusion:
        flag += " --sandboxfusion-url ..."
    cores = meta.get("cores") or os.cpu_count() or 1
    preimport = meta.get("preimport")
    server = f"server: isolation `{meta['isolation']}`, {mode} mode, {meta['slots']} slots"
    if preimport is not None:
        server += f", preimported: {', '.join(preimport) if preimport else 'nothing'}"
    lines = [
        f"## Sandbox, {mode} mode" if mode != "external" else "## Sandbox, external server",
        "",
        f"Measured {meta['date']} by `bench/sandbox_bench.py{flag}` on {meta['machine']}; {server}; interpreter "
        f"`{display_path(meta['python'])}` for {'bare runs' if mode == 'external' else 'both sides'}. "
        f"{meta['requests']} requests per cell after "
        f"{meta['warmup']} warm-ups, a new HTTP connection per request. Load average {meta['load_before']} before "
        f"and {meta['load_after']} after: other work may have been running, so compare the sides of a row "
        "(measured in the same run), not absolute times.",
        "",
    ]
    head = "| workload | concurrency | sandbox p50 / p99 ms | sandbox req/s | bare p50 / p99 ms | bare req/s "
    rule = "|---|---|---|---|---|---"
    if fusion:
        head += "| SandboxFusion p50 / p99 ms | SandboxFusion req/s "
        rule += "|---|---"
    lines += [head + "| p50 overhead ms | throughput vs bare |", rule + "|---|---|"]
    for r in results:
        s, b = r["sandbox"], r["bare"]
        row = (
            f"| {r['workload']} | {r['concurrency']} | {s['p50']:.1f} / {s['p99']:.1f} | {s['rps']:.1f} "
            f"| {b['p50']:.1f} / {b['p99']:.1f} | {b['rps']:.1f} "
        )
        if fusion:
            f = r.get("sandboxfusion")
            row += f"| {f['p50']:.1f} / {f['p99']:.1f} | {f['rps']:.1f} " if f else "| - | - "
        lines.append(row + f"| {s['p50'] - b['p50']:+.1f} | {s['rps'] / b['rps']:.2f} |")
    lines += ["", "Targets:", *targets(results, burst, meta, cores), "", " ".join(readings(results))]
    return "\n".join(lines) + "\n"


# --sessions: what each session runs as its first cell; that state then stays in its interpreter while it is idle.
SESSION_CELLS = {
    "plain": "x = 1",
    "numpy+sympy": "import numpy, sympy\nx = numpy.arange(10)",
}
MIB = 1024 * 1024


def _proc_tree_pss_mib(uids: range) -> float | None:
    """Proportional set size (MiB) of every process of ``uids`` and of the bwrap processes above them (a session's
    own sandbox) or the session zygote they were forked from; None where /proc does not tell (not root)."""
    if os.geteuid() != 0:
        return None
    pids: set[int] = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            uid = int((entry / "status").read_text().split("\nUid:")[1].split()[0])
        except (OSError, IndexError, ValueError):
            continue
        if uid in uids:
            pid = int(entry.name)
            while pid > 1 and pid not in pids:
                pids.add(pid)
                try:
                    pid = int((Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[1])
                    if b"_retool_zygote" in (Path("/proc") / str(pid) / "cmdline").read_bytes():
                        pids.add(pid)  # the zygote's pages are shared with its sessions: its share is theirs
                        break
                    if (Path("/proc") / str(pid) / "comm").read_text().strip() != "bwrap":
                        break
                except (OSError, IndexError, ValueError):
                    break
    return proctree.pss_mib(tuple(pids)) if pids else None


def _mem_available_mib() -> float:
    available = host.mem_available_mb()
    if available is None:
        raise RuntimeError("/proc/meminfo has no MemAvailable")
    return float(available)


def measure_sessions(url: str, count: int, name: str, concurrency: int) -> dict:
    """Open ``count`` sessions (first cell ``SESSION_CELLS[name]``, then a second one), let them go idle, and measure
    what they hold: the host's MemAvailable before and after, and the Pss of their processes. Closes them again."""
    policy = ClientPolicy(run_timeout=60, memory_limit_mb=-1, queue_timeout_s=120, max_retries=0, reconnect_budget_s=0)
    client = SandboxClient(url, policy)
    health = client.health() or {}
    uids = health.get("uids")
    session_uids = range(uids[0] + 2 * health["slots"], uids[1] + 1) if uids else None
    ids = [f"bench-{os.getpid()}-{i}" for i in range(count)]

    def cell(session: str, code: str) -> float:
        started = time.perf_counter()
        reply = client.run_sync(code, session_id=session)
        if reply.status != "ok":
            raise RuntimeError(f"session cell failed: {reply.problem or json.dumps(reply.body)[:500]}")
        return (time.perf_counter() - started) * 1000

    time.sleep(1.0)
    before = _mem_available_mib()
    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        first = sorted(pool.map(lambda session: cell(session, SESSION_CELLS[name]), ids))
        opened_s = time.perf_counter() - started
        later = sorted(pool.map(lambda session: cell(session, "y = x"), ids))
    time.sleep(2.0)  # every session idle (stopped) and the kernel's counters settled
    after = _mem_available_mib()
    pss = _proc_tree_pss_mib(session_uids) if session_uids is not None else None
    live = (client.health() or {}).get("sessions", {}).get("live")
    for session in ids:
        asyncio.run(client.close_session(session))
    time.sleep(2.0)
    return {
        "cell": name,
        "sessions": count,
        "live": live,
        "opened_s": opened_s,
        "first_p50": statistics.median(first),
        "first_p99": first[min(count - 1, int(round(0.99 * (count - 1))))],
        "later_p50": statistics.median(later),
        "mem_before": before,
        "mem_idle": after,
        "mem_closed": _mem_available_mib(),
        "pss": pss,
        "floor_mb": (health.get("sessions") or {}).get("memory_floor_mb") or 0,
        "max_sessions": (health.get("sessions") or {}).get("max"),
    }


def per_session(row: dict) -> tuple[float, float | None]:
    """MiB one idle session took: by the fall of MemAvailable, and by the Pss of its processes (None if unknown)."""
    drop = (row["mem_before"] - row["mem_idle"]) / row["sessions"]
    return drop, (row["pss"] / row["sessions"] if row["pss"] is not None else None)


def render_sessions(rows: list[dict], meta: dict) -> str:
    """The sessions section: what this run measured, and how many idle sessions fit above the memory floor."""
    lines = [
        "## Sandbox sessions",
        "",
        f"Measured {meta['date']} by `bench/sandbox_bench.py {meta['command']}` on {meta['machine']}; "
        f"server: isolation `{meta['isolation']}`, {meta['slots']} slots, --max-sessions {rows[0]['max_sessions']}, "
        f"memory floor {rows[0]['floor_mb']} MiB. Per first cell: that many sessions opened "
        f"{meta['concurrency']} at a time, a second cell in each, then all idle (stopped) before memory was read. "
        "MemAvailable is the host's (other work moves it too); Pss counts the sessions' own processes (their "
        "interpreters, and bwrap's where a session has a sandbox of its own, else the session zygote they were forked "
        "from), shared pages split among the processes that map them.",
        "",
        "| first cell | sessions | live when idle | opened in s | first cell p50 / p99 ms | later cell p50 ms "
        "| MemAvailable fall per session MiB | Pss per session MiB | idle sessions that fit above the floor |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        drop, pss = per_session(row)
        cost = max(drop, pss or 0.0)
        fit = int((row["mem_before"] - row["floor_mb"]) / cost) if cost > 0 else None
        lines.append(
            f"| {row['cell']}: `{SESSION_CELLS[row['cell']].replace(chr(10), '; ')}` | {row['sessions']} "
            f"| {row['live']} | {row['opened_s']:.1f} "
            f"| {row['first_p50']:.1f} / {row['first_p99']:.1f} | {row['later_p50']:.1f} | {drop:.1f} "
            f"| {'-' if pss is None else f'{pss:.1f}'} | {'-' if fit is None else fit} |"
        )
    lines += [
        "",
        "The last column divides MemAvailable before the sessions, less the floor, by the larger of the two "
        "per-session figures: the idle sessions of that kind this host could hold before the floor evicts any.",
    ]
    return "\n".join(lines) + "\n"


def write_section(path: Path, section: str, mode: str) -> None:
    """Replace the ``mode`` sandbox section of ``path`` (between its markers) or append it; others stay."""
    replace_section(path, f"sandbox-bench-{mode}", section)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", help="benchmark this server instead of starting one (base URL)")
    parser.add_argument("--sandboxfusion-url", help="also measure this SandboxFusion server (base URL) in every row")
    parser.add_argument(
        "--sandboxfusion-memory-mb",
        type=int,
        default=-1,
        help="memory_limit_MB sent to SandboxFusion (default: %(default)s; its 1024 MB limit breaks numpy)",
    )
    parser.add_argument("--python", default=sys.executable, help="interpreter for bare runs and the started server")
    parser.add_argument("--requests", type=int, default=60, help="requests per cell (default: %(default)s)")
    parser.add_argument("--warmup", type=int, default=5, help="warm-up requests per cell (default: %(default)s)")
    parser.add_argument("--concurrency", default="1,2,8,32", help="comma-separated levels (default: %(default)s)")
    parser.add_argument(
        "--workloads",
        default=",".join(WORKLOADS),
        help=f"comma-separated workloads (default: %(default)s; also: {', '.join(EXTRA_WORKLOADS)})",
    )
    parser.add_argument("--burst-jobs", type=int, default=16, help="CPU-bound jobs sent at once (default: %(default)s)")
    parser.add_argument(
        "--fresh-sandbox-per-run",
        action="store_true",
        help="start the server in fresh mode (a new sandbox per run) instead of fork mode",
    )
    parser.add_argument(
        "--preimport", default=None, help="--preimport of the started server (default: the server's default)"
    )
    parser.add_argument(
        "--slots",
        type=int,
        default=None,
        help="--slots of the started server (default: the server's default for this host)",
    )
    parser.add_argument(
        "--sessions",
        type=int,
        default=0,
        help="instead of the latency table: open this many stateful sessions per first cell and "
        "measure the memory an idle one holds (see SESSION_CELLS)",
    )
    parser.add_argument(
        "--session-cells",
        default=",".join(SESSION_CELLS),
        help="first cells for --sessions, each NAME or NAME:COUNT (its own number of sessions) (default: %(default)s)",
    )
    parser.add_argument(
        "--session-concurrency",
        type=int,
        default=4,
        help="sessions opened at a time with --sessions (default: %(default)s)",
    )
    parser.add_argument("--output", type=Path, help="Markdown file whose Sandbox section (per mode) gets the table")
    parser.add_argument("--json", type=Path, help="also write the raw numbers here")
    parser.add_argument("--from-json", type=Path, help="only re-render a table from an earlier --json file")
    args = parser.parse_args(argv)
    if args.from_json:
        saved = json.loads(args.from_json.read_text())
        section = render(saved["results"], saved["burst"], saved["meta"])
        print(section)
        if args.output:
            write_section(args.output, section, saved["meta"].get("mode", "fresh"))
        return 0
    if args.sessions:
        return _sessions_main(args)
    levels = [int(x) for x in args.concurrency.split(",")]
    names = [w.strip() for w in args.workloads.split(",")]
    workloads = {**WORKLOADS, **EXTRA_WORKLOADS}
    unknown = [n for n in names if n not in workloads]
    if unknown:
        parser.error(f"unknown workloads {unknown}; choose from {list(workloads)}")
    load_before = " ".join(f"{x:.2f}" for x in os.getloadavg())
    server = (
        nullcontext(args.url)
        if args.url
        else running_sandbox(
            python=args.python,
            queue_timeout=120,
            max_timeout=60,
            fresh_sandbox_per_run=args.fresh_sandbox_per_run,
            preimport=args.preimport,
            slots=args.slots,
        )
    )
    with server as url:
        # None: not a retool-sandbox (SandboxFusion has no /health)
        health = SandboxClient(url).health(timeout=10) or {"mode": "external"}
        results = []
        for name in names:
            for level in levels:
                sides = {"sandbox": lambda c: _sandbox_call(url, c), "bare": lambda c: _bare_call(args.python, c)}
                if args.sandboxfusion_url:
                    sides["sandboxfusion"] = lambda c: _sandbox_call(
                        args.sandboxfusion_url, c, args.sandboxfusion_memory_mb
                    )
                row = {"workload": name, "concurrency": level}
                row.update(_cells(sides, workloads[name], level, args.requests, args.warmup))
                print(json.dumps(row), flush=True)
                results.append(row)
        burst = _burst(url, args.burst_jobs)
        print(json.dumps({"burst": burst}), flush=True)
    meta = {
        "date": datetime.date.today().isoformat(),
        "machine": _machine(),
        "cores": os.cpu_count() or 1,
        "isolation": health.get("isolation", "unknown"),
        "mode": health.get("mode", "fresh"),
        "slots": health.get("slots", "?"),
        "preimport": health.get("preimport"),
        "python": display_path(args.python),
        "requests": args.requests,
        "warmup": args.warmup,
        "load_before": load_before,
        "load_after": " ".join(f"{x:.2f}" for x in os.getloadavg()),
    }
    section = render(results, burst, meta)
    print(section)
    if args.output:
        write_section(args.output, section, meta["mode"])
    if args.json:
        args.json.write_text(json.dumps({"meta": meta, "results": results, "burst": burst}, indent=2))
    return 0


def _sessions_main(args: argparse.Namespace) -> int:
    cells = []  # (first cell, sessions): "name" takes --sessions, "name:N" its own count
    for entry in args.session_cells.split(","):
        name, _, count = entry.strip().partition(":")
        if name not in SESSION_CELLS or (count and not count.isdigit()):
            raise SystemExit(
                f"--session-cells: {entry!r} is not NAME or NAME:COUNT with NAME one of {list(SESSION_CELLS)}"
            )
        cells.append((name, int(count) if count else args.sessions))
    server = (
        nullcontext(args.url)
        if args.url
        else running_sandbox(
            python=args.python,
            queue_timeout=120,
            max_timeout=60,
            slots=args.slots,
            max_sessions=max(max(count for _, count in cells), 1024),
        )
    )
    with server as url:
        health = SandboxClient(url).health(timeout=10) or {}
        rows = []
        for name, count in cells:
            rows.append(measure_sessions(url, count, name, args.session_concurrency))
            print(json.dumps(rows[-1]), flush=True)
    meta = {
        "date": datetime.date.today().isoformat(),
        "machine": _machine(),
        "isolation": health.get("isolation"),
        "slots": health.get("slots"),
        "concurrency": args.session_concurrency,
        "command": f"--sessions {args.sessions} --session-cells {args.session_cells}",
    }
    section = render_sessions(rows, meta)
    print(section)
    if args.output:
        replace_section(args.output, "sandbox-bench-sessions", section)
    if args.json:
        args.json.write_text(json.dumps({"meta": meta, "sessions": rows}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
