"""The load test at the real run's scale: 1,024 trajectories against a retool-sandbox on this host, in both session
modes, written into docs/performance.md (section ``sandbox-loadtest``) with a picture (docs/img/sandbox_loadtest.png).

Per session mode it starts nothing new: one server (the defaults of ``retool-sandbox serve``: auto isolation, one slot
per core here, 1,024 sessions) serves both. For each mode ``retool_sandbox.loadtest`` first calibrates the programs
and measures the sandbox's own throughput at concurrency 2 without pauses (the baseline); then it replays the
reference step, 1,024 trajectories with the tool's client, with the generation speed raised so that the calls arrive
at ``OVERLOAD`` x that throughput: the two cores, not the arrival pattern, are the bottleneck; after the load it
measures the baseline again, and the load's throughput is compared with the mean of the two. The section states what
was measured (settings, the program mix, per mode the calls, throughput, latency, waits, CPU, memory), the targets of
issue 27 with their verdicts, and paper figures for hosts of 192 and 320 cores computed from the measured CPU per call
and memory per session.

Run it alone (it loads both cores for 15-30 minutes):
``flock /tmp/retool-heavy.lock .venv/bin/python bench/sandbox_loadtest.py --output docs/performance.md`` (``make
bench-loadtest``); ``--from-json`` re-renders a saved run.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import math
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from retool.markdown_sections import replace_section  # noqa: E402
from retool_sandbox import host  # noqa: E402
from retool_sandbox.config import default_slots  # noqa: E402
from retool_sandbox.load_report import (  # noqa: E402
    occupancy,
    percentiles,
    reference_rate,
    summarize,
    to_json,
    verdict_text,
)
from retool_sandbox.load_model import REFERENCE_TOKENS_PER_S, LoadSpec  # noqa: E402
from retool_sandbox.load_settings import load_settings  # noqa: E402
from retool_sandbox.loadtest import LoadTest  # noqa: E402
from retool_sandbox.spawn import running_sandbox  # noqa: E402

SECTION = "sandbox-loadtest"
PICTURE = ROOT / "docs" / "img" / "sandbox_loadtest.png"
MODES = ("stateless", "per_trajectory")
OVERLOAD = 2.0  # calls offered per call the sandbox can serve: it must be the bottleneck
BASELINE_CALLS = 400
PAPER_CORES = (192, 320)
THROUGHPUT_TARGET = 0.9
LEAVE_FREE_MB = 6144  # the memory floor here: the sandbox may use what is free above it
PROBE_GIB = 4  # new memory the host probe touches before the runs (a virtual machine may price it per page)
DEAR_MEMORY = 3.0  # the probe's dearest GiB over its cheapest from which the section explains what that does


def scaled_tokens_per_s(spec: LoadSpec, capacity: float) -> float:
    """The generation speed at which ``spec``'s trajectories offer OVERLOAD x ``capacity`` calls/s on average."""
    segments_s = (spec.calls_mean + 1) * spec.tokens_between_calls  # tokens per trajectory
    return OVERLOAD * capacity * segments_s / (spec.trajectories * spec.calls_mean)


async def measure(url: str, mode: str, trajectories: int, baseline_calls: int) -> dict:
    settings = load_settings(str(ROOT / "configs" / "tool.yaml"), session_mode=mode)
    test = LoadTest(
        url, LoadSpec(trajectories=trajectories, session_mode=mode), settings, baseline_calls=baseline_calls
    )
    await test.prepare()
    baseline = await test.baseline()
    capacity = summarize(baseline, judged=False)["throughput"]["saturated"]
    if not capacity:
        raise RuntimeError(f"{mode}: the baseline never kept 2 calls at the sandbox; nothing to scale from")
    spec = LoadSpec(
        trajectories=trajectories,
        session_mode=mode,
        tokens_per_s=scaled_tokens_per_s(LoadSpec(trajectories=trajectories), capacity),
    )
    print(f"{mode}: baseline {capacity:.2f} calls/s -> {spec.tokens_per_s:.1f} tokens/s per trajectory", flush=True)
    result = await test.load(spec)
    result.baseline = baseline
    result.baseline_after = await test.baseline()  # the host's speed drifts: compare with it around the load
    summary = summarize(result)
    print(json.dumps({mode: summary["calls"]}), flush=True)
    return to_json(result, summary)


# ---- the section --------------------------------------------------------------------------------------------------


def _f(value, digits: int = 1, scale: float = 1.0) -> str:
    return "-" if value is None else f"{value * scale:.{digits}f}"


def _pct(value) -> str:
    return "-" if value is None else f"{value:.0%}"


def targets(summary: dict) -> list[tuple[str, str, bool]]:
    """(target, measured, met) for issue 27's item 4."""
    calls, t, memory = summary["calls"], summary["throughput"], summary["memory"]
    ratio = t.get("vs_baseline")
    per_session = memory["per_session_mib"]
    bounded = memory["pss_peak_mib"] is not None and memory["mem_available_min_mb"] is not None
    return [
        (
            "0 lost calls",
            f"{calls['lost']} lost of {calls['planned']} (hung {calls['hung']}, crashed "
            f"{calls['crashed']}, never made {calls['never_made']}); {calls['wrong']} wrong answers, "
            f"{calls['killed']} killed",
            calls["lost"] == 0 and calls["wrong"] == 0 and calls["killed"] == 0,
        ),
        (
            "0 false timeouts",
            f"{calls['false_timeout']} false timeouts, {calls['over_deadline']} past the call deadline",
            calls["false_timeout"] == 0 and calls["over_deadline"] == 0,
        ),
        (
            f"throughput >= {THROUGHPUT_TARGET:g} x the sandbox's own at concurrency 2",
            f"{_f(t['saturated'], 2)} vs {_f(summary['baseline']['throughput']['saturated'], 2)} calls/s = "
            f"{_f(ratio, 3)} x (the programs themselves ran {_f(summary['run_s_mean'], 0, 1000)} ms per call under the "
            f"load, {_f(summary['baseline'].get('run_s_mean'), 0, 1000)} ms in the baseline)",
            ratio is not None and ratio >= THROUGHPUT_TARGET,
        ),
        (
            "memory bounded and stated",
            f"Pss of the server's process tree at most {_f(memory['pss_peak_mib'], 0)} MiB"
            + (f" ({_f(per_session, 1)} MiB per live session)" if per_session is not None else "")
            + f"; host MemAvailable never below {memory['mem_available_min_mb']} MiB",
            bounded,
        ),
    ]


def paper(summary: dict) -> list[str]:
    """Hosts of 192 and 320 cores from the measured CPU per call and memory per session (arithmetic, not run)."""
    per_call = summary["cpu"]["per_call_s"]
    rate = reference_rate(summary)
    lines = []
    for cores in PAPER_CORES:
        slots = default_slots(cores)
        if per_call:
            capacity = slots / per_call
            lines.append(
                f"{cores} cores: the default {slots} slots, one core each, serve about "
                f"{capacity:.0f} calls/s at {per_call * 1000:.0f} ms of CPU per call, "
                f"{capacity / rate:.0f} x the reference step's {rate:.1f} calls/s"
            )
    per_session = summary["memory"]["per_session_mib"]
    if per_session:
        need = per_session * summary["spec"]["trajectories"] / 1024
        lines.append(
            f"sessions: {summary['spec']['trajectories']} of them hold about {need:.1f} GiB at "
            f"{per_session:.1f} MiB each; a node that leaves the sandbox 64 GiB holds "
            f"{int(64 * 1024 / per_session)} such sessions, 16 GiB {int(16 * 1024 / per_session)}"
        )
    return lines


# ---- what new memory costs on this host ---------------------------------------------------------------------------
# A per_trajectory load keeps hundreds of sessions alive, each with pages of its own, and starts new ones as old ones
# end; the concurrency-2 baseline has a few alive, and each reuses the pages the last one freed. A virtual machine
# that hands freed memory back to its hypervisor (virtio-balloon free page reporting) pays a hypervisor fault on every
# such page touched again, many times a kept page's cost: the probe below puts the figures into the section, so that
# the reader can tell the host from the sandbox.


def free_page_reporting() -> int | None:
    """The page order from which this machine reports freed memory to its hypervisor, None when it does not
    (no virtio-balloon device with VIRTIO_BALLOON_F_REPORTING, feature bit 5)."""
    for features in Path("/sys/bus/virtio/drivers/virtio_balloon").glob("virtio*/features"):
        try:
            if features.read_text().strip()[5:6] == "1":
                return int(Path("/sys/module/page_reporting/parameters/page_reporting_order").read_text())
        except (OSError, ValueError):
            continue
    return None


def touch_cost_us(steps: int, step: int = 1 << 30) -> list[float]:
    """Microseconds per page to touch ``steps`` x ``step`` bytes of new anonymous memory, one figure per step."""
    import mmap

    page = mmap.PAGESIZE
    costs = []
    with mmap.mmap(-1, steps * step, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS) as memory:
        for start in range(0, steps * step, step):
            began = time.perf_counter()
            for offset in range(start, start + step, page):
                memory[offset] = 1
            costs.append((time.perf_counter() - began) / (step // page) * 1e6)
    return costs


def _memory_paragraph(meta: dict) -> list[str]:
    costs = meta.get("touch_us")
    if not costs:
        return []
    order = meta.get("page_reporting_order")
    page_kib = meta.get("page_kib", 4)
    reporting = (
        "this machine reports no freed memory to a hypervisor"
        if order is None
        else f"this machine hands freed memory back to its hypervisor: virtio-balloon free page reporting, free "
        f"blocks of order {order} ({(page_kib << order) / 1024:g} MiB) and up"
    )
    lines = [
        f"What new memory costs on this host (probed before the runs; {reporting}): touching {len(costs)} GiB of "
        f"it, 1 GiB at a time, took " + " / ".join(f"{c:.1f}" for c in costs) + f" µs per {page_kib} KiB page."
    ]
    if max(costs) > DEAR_MEMORY * min(costs):
        lines.append(
            f"The dearest GiB cost {max(costs) / min(costs):.0f} x the cheapest. A per_trajectory load keeps "
            "hundreds of sessions alive (Pss per live session in the table) and starts new ones as old ones "
            "end, so most pages its sessions touch are new to the host, while the concurrency-2 baseline "
            "keeps a few sessions alive, each reusing the pages the last one freed: a dear new page can cost "
            "the load more than its baseline (whether it is what the load loses, a run with the reporting "
            "off tells)."
        )
    return [" ".join(lines), ""]


def render(runs: dict[str, dict], meta: dict) -> str:
    first = runs[next(iter(runs))]["summary"]
    server, tool, spec = first["server"] or {}, first["tool"], first["spec"]
    mix = first["mix"]
    lines = [
        "## Sandbox load test: the reference step's tool calls (`make bench-loadtest`)",
        "",
        f"Measured {meta['date']} by `bench/sandbox_loadtest.py` (`retool-sandbox loadtest` with the same code) on "
        f"{meta['machine']}; server: `retool-sandbox serve` defaults, isolation `{server.get('isolation')}`, "
        f"{server.get('mode')} mode, {server.get('slots')} slots, preimport "
        f"{', '.join(server.get('preimport') or [])}, "
        f"--max-sessions {first['sessions_max']}, --session-memory-floor-mb {meta['floor_mb']} (MemAvailable was "
        f"{meta['mem_available_mb']} MiB at the start: the sandbox's sessions could use about "
        f"{meta['mem_available_mb'] - meta['floor_mb']} MiB before the oldest idle ones give way). Client: the tool's "
        f"(configs/tool.yaml): timeout {tool['timeout_s']:g} s, memory_limit_MB {tool['memory_limit_mb']}, "
        f"{spec['workers']} workers x max_concurrency {tool['max_concurrency']}, {tool['max_retries']} retries of "
        f"504, reconnect budget {tool['reconnect_budget_s']:g} s, call deadline {tool['call_deadline_s']:g} s. "
        f"Trajectories: {spec['trajectories']}, {spec['calls_mean']:.1f} calls each on average (num_turns "
        f"{spec['num_turns_mean']:g}), at most {spec['max_calls']}; {spec['tokens_between_calls']:g} tokens between "
        f"calls. The generation speed of each mode was set from its own baseline so that calls arrive at "
        f"{OVERLOAD:g} x what the sandbox served at concurrency 2: the two cores are the bottleneck (the reference "
        f"speed is {REFERENCE_TOKENS_PER_S:g} tokens/s per trajectory). The baseline ran again after the load; the "
        f"sandbox's own throughput is the mean of the two readings (both in the table), since the host's speed "
        f"drifts over a run. Load average {meta['load_before']} before "
        f"and {meta['load_after']} after.",
        "",
        "The program mix (`sandbox/retool_sandbox/load_programs.py`, one run each on the idle sandbox): run time "
        + ", ".join(f"{label} {share:.0%}" for label, share in mix["runtime_shares"].items())
        + "; output "
        + ", ".join(f"{label} {share:.0%}" for label, share in mix["output_shares"].items())
        + f" of the calls; {mix['mean_idle_s'] * 1000:.0f} ms per call on average.",
        "",
        "| program | share of calls | idle run time ms | output bytes |",
        "|---|---|---|---|",
    ]
    lines += [
        f"| {p['name']} | {p['weight']}% | {p['idle_s'] * 1000:.0f} | {p['output_bytes']} |" for p in mix["programs"]
    ]
    lines += ["", "| | " + " | ".join(f"`{mode}`" for mode in runs) + " |", "|---|" + "---|" * len(runs)]

    def row(label: str, cell) -> None:
        lines.append(f"| {label} | " + " | ".join(cell(run["summary"]) for run in runs.values()) + " |")

    row("tokens/s per trajectory (scaled)", lambda s: f"{s['spec']['tokens_per_s']:.1f}")
    row("calls planned / ended", lambda s: f"{s['calls']['planned']} / {s['calls']['ended']}")
    row(
        "right / wrong answers / killed",
        lambda s: f"{s['calls']['right']} / {s['calls']['wrong']} / {s['calls']['killed']}",
    )
    row(
        "lost (hung, crashed, never made)",
        lambda s: f"{s['calls']['lost']} ({s['calls']['hung']}, {s['calls']['crashed']}, {s['calls']['never_made']})",
    )
    row("unavailable / sandbox errors", lambda s: f"{s['calls']['unavailable']} / {s['calls']['sandbox_error']}")
    row(
        "false timeouts / past the deadline", lambda s: f"{s['calls']['false_timeout']} / {s['calls']['over_deadline']}"
    )
    row("504 answers / retries", lambda s: f"{s['calls']['busy_answers']} / {s['calls']['retries']}")
    row("calls told their session was lost", lambda s: str(s["calls"]["session_lost"]))
    row("wall time s", lambda s: f"{s['wall_s']:.0f}")
    row(
        "calls/s while saturated / baseline at concurrency 2 (before, after the load)",
        lambda s: (
            f"{_f(s['throughput']['saturated'], 2)} / {_f(s['baseline']['throughput']['saturated'], 2)} "
            f"({', '.join(_f(r, 2) for r in s['baseline']['throughput'].get('readings', []))})"
        ),
    )
    row("latency p50 / p99 / max s", lambda s: " / ".join(_f(s["latency_s"][k], 1) for k in ("p50", "p99", "max")))
    row(
        "wait for the worker's max_concurrency p50 / p99 s",
        lambda s: " / ".join(_f(s["limit_wait_s"][k], 1) for k in ("p50", "p99")),
    )
    row(
        "time at the server beyond the run p50 / p99 s",
        lambda s: " / ".join(_f(s["server_wait_s"][k], 1) for k in ("p50", "p99")),
    )
    row(
        "program run time per call, mean ms (load / baseline)",
        lambda s: f"{_f(s['run_s_mean'], 0, 1000)} / {_f(s['baseline'].get('run_s_mean'), 0, 1000)}",
    )
    row("sandbox CPU per call ms", lambda s: _f(s["cpu"]["per_call_s"], 0, 1000))
    row(
        "host CPU in the kernel, share of the host's busy time (load / baseline)",
        lambda s: " / ".join(_pct(c.get("host_kernel_share")) for c in (s["cpu"], s["baseline"]["cpu"])),
    )
    row("sandbox memory peak (Pss) MiB", lambda s: _f(s["memory"]["pss_peak_mib"], 0))
    row(
        "per live session MiB (at the reading with most sessions)",
        lambda s: (
            "-"
            if s["memory"]["per_session_mib"] is None
            else f"{s['memory']['per_session_mib']:.1f} ({s['memory']['sessions_at_reading']} live)"
        ),
    )
    row(
        "sessions started / evicted for memory / died",
        lambda s: (
            "-"
            if not s["sessions"]
            else " / ".join(str(s["sessions"].get(key, 0)) for key in ("started", "evicted_memory", "died"))
        ),
    )
    lines += ["", *_memory_paragraph(meta), "Targets (issue 27, item 4), per mode:", ""]
    for mode, run in runs.items():
        for name, measured, met in targets(run["summary"]):
            lines.append(f"- `{mode}`: {name}: {measured} ({'met' if met else 'NOT met'}).")
    lines += ["", "Verdicts (`retool-sandbox loadtest` prints the same):", ""]
    for mode, run in runs.items():
        lines.append(f"- `{mode}`: {verdict_text(run['summary'])[len('verdict: ') :]}")
    lines += ["", "Paper figures from these measurements (arithmetic, not run on such a host):", ""]
    for mode, run in runs.items():
        lines += [f"- `{mode}`: {line}." for line in paper(run["summary"])]
    lines += ["", f"![calls in flight and latency over time, per session mode](img/{PICTURE.name})"]
    return "\n".join(lines) + "\n"


def plot(runs: dict[str, dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, len(runs), figsize=(6 * len(runs), 7), squeeze=False, sharex="col")
    for col, (mode, run) in enumerate(runs.items()):
        records, samples = run["load"]["records"], run["load"]["samples"]
        span = max(r["end"] for r in records)
        width = max(1.0, math.ceil(span / 120))
        edges = [i * width for i in range(int(span / width) + 2)]
        mids = [(a + b) / 2 for a, b in zip(edges, edges[1:])]
        top, bottom = axes[0][col], axes[1][col]
        top.plot(mids, occupancy([(r["start"], r["end"]) for r in records], edges), label="calls open (trajectories)")
        top.plot(
            mids,
            occupancy([(r["end"] - r["last_attempt_s"], r["end"]) for r in records], edges),
            label="calls at the server",
        )
        busy = [(s["t"], (s["health"] or {}).get("in_flight")) for s in samples if s["health"]]
        top.plot([t for t, _ in busy], [b for _, b in busy], label="slots running a program", lw=1)
        sessions = [(s["t"], ((s["health"] or {}).get("sessions") or {}).get("live")) for s in samples if s["health"]]
        if mode == "per_trajectory":
            top.plot([t for t, _ in sessions], [n for _, n in sessions], label="live sessions", lw=1, ls="--")
        top.set_title(f"{mode}: {run['summary']['spec']['trajectories']} trajectories")
        top.set_ylabel("count")
        top.legend(fontsize=8)
        ends = [[r["end"] - r["start"] for r in records if lo <= r["end"] < hi] for lo, hi in zip(edges, edges[1:])]
        for key, label in (("p50", "p50"), ("p99", "p99"), ("max", "max")):
            bottom.plot(mids, [percentiles(e)[key] for e in ends], label=f"latency {label}")
        bottom.axhline(run["summary"]["tool"]["timeout_s"], color="red", ls=":", label="the tool's timeout")
        bottom.set_yscale("log")
        bottom.set_xlabel("seconds since the start")
        bottom.set_ylabel("seconds per call (calls ending then)")
        bottom.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trajectories", type=int, default=1024)
    parser.add_argument(
        "--baseline-calls",
        type=int,
        default=BASELINE_CALLS,
        help="calls of the baseline at concurrency 2 (default: %(default)s)",
    )
    parser.add_argument("--modes", default=",".join(MODES), help="comma-separated (default: %(default)s)")
    parser.add_argument("--output", type=Path, help="Markdown file whose sandbox-loadtest section gets the results")
    parser.add_argument("--picture", type=Path, default=PICTURE, help="where the PNG goes (default: %(default)s)")
    parser.add_argument("--json", type=Path, help="also write every number and call record here")
    parser.add_argument("--from-json", type=Path, help="only re-render (and re-plot) a run saved with --json")
    args = parser.parse_args(argv)
    if args.from_json:
        saved = json.loads(args.from_json.read_text())
        runs, meta = saved["runs"], saved["meta"]
    else:
        from sandbox_bench import _machine  # the same host description as the latency benchmark's

        modes = [m.strip() for m in args.modes.split(",") if m.strip()]
        available = host.mem_available_mb() or 0
        # before the runs: what the load's sessions will find (after them, the pages the load just freed are cheap)
        touch_us = touch_cost_us(PROBE_GIB) if available > LEAVE_FREE_MB + PROBE_GIB * 1024 else None
        load_before = " ".join(f"{x:.2f}" for x in os.getloadavg())
        with running_sandbox(session_memory_floor_mb=LEAVE_FREE_MB) as url:
            runs = {mode: asyncio.run(measure(url, mode, args.trajectories, args.baseline_calls)) for mode in modes}
        meta = {
            "date": datetime.date.today().isoformat(),
            "machine": _machine(),
            "floor_mb": LEAVE_FREE_MB,
            "mem_available_mb": available,
            "load_before": load_before,
            "load_after": " ".join(f"{x:.2f}" for x in os.getloadavg()),
            "page_reporting_order": free_page_reporting(),
            "page_kib": os.sysconf("SC_PAGE_SIZE") >> 10,
            "touch_us": touch_us,
        }
        if args.json:
            args.json.write_text(json.dumps({"meta": meta, "runs": runs}))
    section = render(runs, meta)
    print(section)
    plot(runs, args.picture)
    if args.output:
        replace_section(args.output, SECTION, section)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
