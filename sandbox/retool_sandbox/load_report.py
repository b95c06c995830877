"""What a load test (``loadtest.LoadResult``) comes to: ``summarize`` makes the numbers (a JSON-able dict),
``render`` the text ``retool-sandbox loadtest`` prints, ``verdict`` the answer to "can this sandbox serve the reference
step's call rate with p99 below the tool's timeout, and how many cores would it need".

Each call ends with one verdict (``VERDICTS``): ``right`` (the idle sandbox's outcome and stdout), ``wrong`` (another
outcome or stdout), ``false_timeout`` (a timeout of a program that finished on the idle sandbox), ``killed`` (it died
by a signal although it finished on the idle sandbox: the out-of-memory killer, a kill from outside; a session's reply
also says the session ended), ``expected_timeout`` (the timeout burst's programs), ``fails_when_idle`` (a program
the server did not run as it should on the idle sandbox either: each of its calls is the server's failure, listed per
program), ``sandbox_error`` (the server could not run it: a killed slot), ``unavailable`` (the client gave up within its
call deadline: counted, the tool masks the trajectory), ``hung`` (no outcome after ``loadtest.HUNG_AFTER_DEADLINES``
deadlines) and ``crashed`` (the client raised). A call is past its deadline when it spent longer than that on the
sandbox (its time less its waits for the worker's max_concurrency). Lost calls = hung + crashed + calls a trajectory
never made; the target is 0, like wrong answers, kills, false timeouts and failures when idle.

Throughput "while saturated" counts the calls that ended while the server held at least as many calls as it has
slots (from each call's last HTTP attempt), per second of such time: what the sandbox delivers when it is the
bottleneck, comparable between a flood of 1,024 trajectories and the baseline's 2 (the sandbox's own throughput).
"""

from __future__ import annotations

import math
from dataclasses import asdict
from typing import Any

from retool_sandbox import host
from retool_sandbox.load_model import REFERENCE_TOKENS_PER_S
from retool_sandbox.load_settings import summary as settings_summary
from retool_sandbox.loadtest import LoadResult

VERDICTS = (
    "right",
    "wrong",
    "false_timeout",
    "killed",
    "expected_timeout",
    "fails_when_idle",
    "sandbox_error",
    "unavailable",
    "hung",
    "crashed",
)
# The counts that make a run unclean, with the words the verdict uses for them.
PROBLEMS = (
    ("lost", "lost"),
    ("wrong", "wrong"),
    ("killed", "killed"),
    ("false_timeout", "false timeouts"),
    ("fails_when_idle", "calls of programs the idle server fails"),
    ("unavailable", "unavailable"),
    ("over_deadline", "past the deadline"),
)
RUNTIME_CLASSES = ((0.05, "< 50 ms"), (0.5, "50-500 ms"), (math.inf, ">= 0.5 s"))
OUTPUT_CLASSES = ((1024, "< 1 KB"), (64 * 1024, "1-64 KB"), (math.inf, ">= 64 KB"))
TIMELINE_ROWS = 20
MIN_SATURATED_SHARE = 0.1  # a capacity is claimed only from at least this share of the run spent saturated


def percentiles(values: list[float]) -> dict[str, float | None]:
    """p50, p99 and max (nearest rank); None for no values."""
    if not values:
        return {"p50": None, "p99": None, "max": None}
    ordered = sorted(values)

    def rank(q: float) -> float:
        return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]

    return {"p50": rank(0.5), "p99": rank(0.99), "max": ordered[-1]}


def _server_interval(record) -> tuple[float, float]:
    """When a call's last HTTP attempt was at the server (queued or running)."""
    return (record.end - record.last_attempt_s, record.end)


def saturated_throughput(records, slots: int) -> tuple[float | None, float]:
    """(calls/s ended while >= ``slots`` calls were at the server, seconds spent so); None when never saturated."""
    events = []
    for record in records:
        begin, end = _server_interval(record)
        events += [(begin, 1), (end, -1)]
    events.sort(key=lambda e: (e[0], -e[1]))  # at a tie a start counts first: the server was still that busy
    count, done, busy_s, last = 0, 0, 0.0, None
    for t, delta in events:
        if last is not None and count >= slots:
            busy_s += t - last
        if delta < 0 and count >= slots:
            done += 1
        count += delta
        last = t
    return (done / busy_s if busy_s > 0 else None), busy_s


def occupancy(intervals: list[tuple[float, float]], edges: list[float]) -> list[float]:
    """Average number of open intervals in each bin between consecutive ``edges``."""
    out = []
    for lo, hi in zip(edges, edges[1:]):
        overlap = sum(max(0.0, min(hi, b) - max(lo, a)) for a, b in intervals)
        out.append(overlap / (hi - lo))
    return out


def timeline(result: LoadResult, rows: int = TIMELINE_ROWS, bin_s: float | None = None) -> list[dict[str, Any]]:
    """Per time bin: calls ended per second, their latency p50/p99/max, calls open in the trajectories and at the
    server (averages), and the server's own view (slots in use, queue, live sessions, memory) at its last sample."""
    if not result.records:
        return []
    span = max(result.wall_s, max(r.end for r in result.records))
    width = bin_s or max(1.0, math.ceil(span / rows))
    edges = [i * width for i in range(math.ceil(span / width) + 1)]
    if edges[-1] < span:
        edges.append(edges[-1] + width)
    open_calls = occupancy([(r.start, r.end) for r in result.records], edges)
    at_server = occupancy([_server_interval(r) for r in result.records], edges)
    out = []
    for i, (lo, hi) in enumerate(zip(edges, edges[1:])):
        ended = [r.end - r.start for r in result.records if lo <= r.end < hi or (i == len(edges) - 2 and r.end == hi)]
        sample = next((s for s in reversed(result.samples) if lo <= s.t < hi), None)
        health = (sample.health or {}) if sample else {}
        out.append(
            {
                "t0": lo,
                "t1": hi,
                "ended_per_s": len(ended) / (hi - lo),
                **{f"latency_{k}": v for k, v in percentiles(ended).items()},
                "open": open_calls[i],
                "at_server": at_server[i],
                "server_in_flight": health.get("in_flight"),
                "server_queued": health.get("queued"),
                "sessions": (health.get("sessions") or {}).get("live"),
                "pss_mib": sample.pss_mib if sample else None,
                "mem_available_mb": sample.mem_available_mb if sample else None,
            }
        )
    return out


def _session_counters(result: LoadResult) -> dict[str, int] | None:
    seen = [
        s.health["sessions"]["counters"]
        for s in result.samples
        if s.health and isinstance(s.health.get("sessions"), dict)
    ]
    if not seen:
        return None
    return {key: seen[-1][key] - seen[0].get(key, 0) for key in seen[-1]}


def _memory(result: LoadResult) -> dict[str, Any]:
    with_pss = [s for s in result.samples if s.pss_mib is not None]
    live = [((s.health or {}).get("sessions") or {}).get("live") or 0 for s in result.samples]
    out: dict[str, Any] = {
        "pss_first_mib": with_pss[0].pss_mib if with_pss else None,
        "pss_peak_mib": max(s.pss_mib for s in with_pss) if with_pss else None,
        "processes_peak": max((s.processes or 0) for s in result.samples) if result.samples else None,
        "mem_available_min_mb": min(
            (s.mem_available_mb for s in result.samples if s.mem_available_mb is not None), default=None
        ),
        "sessions_peak": max(live, default=0),
        "per_session_mib": None,
        "sessions_at_reading": None,
    }
    readings = [s for s in with_pss if ((s.health or {}).get("sessions") or {}).get("live")]
    if readings and with_pss:
        best = max(readings, key=lambda s: s.health["sessions"]["live"])
        live_then = best.health["sessions"]["live"]
        out["per_session_mib"] = max(0.0, best.pss_mib - with_pss[0].pss_mib) / live_then
        out["sessions_at_reading"] = live_then
    return out


def summarize(
    result: LoadResult, reference_tokens_per_s: float = REFERENCE_TOKENS_PER_S, judged: bool = True
) -> dict[str, Any]:
    """Every number the report and the verdict (unless not ``judged``: a baseline) use, as a JSON-able dict."""
    records, spec, settings = result.records, result.spec, result.settings
    policy = settings.policy
    health = result.health or {}
    slots = health.get("slots") if isinstance(health.get("slots"), int) else 1
    counts = {verdict: sum(1 for r in records if r.verdict == verdict) for verdict in VERDICTS}
    never_made = max(0, result.planned_calls - len(records))
    answered = [r for r in records if r.verdict not in ("hung", "crashed")]
    deadline = policy.call_deadline()
    span = (max(r.end for r in records) - min(r.start for r in records)) if records else 0.0
    saturated, saturated_s = saturated_throughput(answered, slots)
    cpu = [s.cpu_s for s in result.samples if s.cpu_s is not None]
    server_cpu = (cpu[-1] - cpu[0]) if len(cpu) >= 2 else None
    ran = [r for r in records if r.execution_s is not None]
    summary: dict[str, Any] = {
        "spec": {**asdict(spec), "calls_mean": spec.calls_mean, "max_calls": spec.max_calls},
        "tool": settings_summary(settings),
        "url": result.url,
        "server": {
            **{key: health.get(key) for key in ("isolation", "mode", "slots", "preimport", "python_version")},
            "queue_timeout_s": (health.get("limits") or {}).get("queue_timeout"),
        }
        if health
        else None,
        "sessions_max": (health.get("sessions") or {}).get("max") if health else None,
        "host_cores": host.cores(),
        "mix": mix(result),
        "failing_programs": failing_programs(result),
        "calls": {
            "planned": result.planned_calls,
            "ended": len(records),
            **counts,
            "never_made": never_made,
            "lost": counts["hung"] + counts["crashed"] + never_made,
            "over_deadline": sum(1 for r in answered if r.end - r.start - r.limit_wait_s > deadline + 1.0),
            "busy_answers": sum(r.busy_answers for r in records),
            "retries": sum(r.retries for r in records),
            "session_lost": sum(1 for r in records if r.session_lost),
        },
        "latency_s": percentiles([r.end - r.start for r in answered]),
        "limit_wait_s": percentiles([r.limit_wait_s for r in answered]),
        "server_wait_s": percentiles([max(0.0, r.last_attempt_s - r.execution_s) for r in ran]),
        # the programs' own run time: what a call costs the sandbox's cores beyond the server's handling of it
        "run_s_mean": sum(r.execution_s for r in ran) / len(ran) if ran else None,
        "throughput": {
            "overall": len(answered) / span if span else None,
            "saturated": saturated,
            "saturated_s": saturated_s,
            "slots": slots,
            "span_s": span,
        },
        "cpu": {
            "server_s": server_cpu,
            "per_call_s": server_cpu / len(answered) if server_cpu and answered else None,
            "client_s": result.client_cpu_s,
            "host_kernel_share": _kernel_share(result),
        },
        "memory": _memory(result),
        "timeline": timeline(result),
        "sessions": _session_counters(result),
        "wall_s": result.wall_s,
        "notes": list(result.notes),
        "reference_tokens_per_s": reference_tokens_per_s,
    }
    bases = [
        summarize(run, reference_tokens_per_s, judged=False)
        for run in (result.baseline, result.baseline_after)
        if run is not None
    ]
    if bases:
        # Measured before and after the load, the sandbox's own throughput is their mean: the load is compared with
        # the host as it was around it, not with one short reading of a host whose speed drifts.
        summary["baseline"] = {key: bases[0][key] for key in ("throughput", "cpu", "calls", "latency_s", "run_s_mean")}
        readings = [base["throughput"]["saturated"] for base in bases]
        own = sum(readings) / len(readings) if all(readings) else 0.0
        summary["baseline"]["throughput"] = {**bases[0]["throughput"], "saturated": own, "readings": readings}
        if saturated and own:
            summary["throughput"]["vs_baseline"] = saturated / own
    if judged:
        summary["verdict"] = verdict(summary)
    return summary


def failing_programs(result: LoadResult) -> list[dict[str, Any]]:
    """The programs the server did not run as it should on the idle sandbox: what it answered then, and the outcomes
    of their calls in this run."""
    out = []
    for name, idle in result.calibration.items():
        if idle.problem:
            outcomes: dict[str, int] = {}
            for record in result.records:
                if record.program == name:
                    outcomes[record.status] = outcomes.get(record.status, 0) + 1
            out.append({"name": name, "weight": idle.weight, "idle": idle.problem[:300], "outcomes": outcomes})
    return out


def mix(result: LoadResult) -> dict[str, Any]:
    """The program set as measured on the idle sandbox: each program, and the call shares by run time and output."""
    rows = [
        {"name": name, "weight": c.weight, "idle_s": c.execution_s, "output_bytes": c.output_bytes, "status": c.status}
        for name, c in result.calibration.items()
    ]
    total = sum(row["weight"] for row in rows) or 1

    def shares(key: str, classes) -> dict[str, float]:
        out = {label: 0.0 for _, label in classes}
        for row in rows:
            label = next(label for bound, label in classes if row[key] < bound)
            out[label] += row["weight"] / total
        return out

    return {
        "programs": rows,
        "runtime_shares": shares("idle_s", RUNTIME_CLASSES),
        "output_shares": shares("output_bytes", OUTPUT_CLASSES),
        "mean_idle_s": sum(row["weight"] * row["idle_s"] for row in rows) / total,
    }


def reference_rate(summary: dict[str, Any]) -> float:
    """Calls/s of the reference step: N trajectories x calls each over the time one takes to generate its calls + 1
    segments at the reference tokens/s (an average over the step's generation, not its peak)."""
    spec = summary["spec"]
    seconds = (spec["calls_mean"] + 1) * spec["tokens_between_calls"] / summary["reference_tokens_per_s"]
    return spec["trajectories"] * spec["calls_mean"] / seconds if seconds else math.inf


def verdict(summary: dict[str, Any]) -> dict[str, Any]:
    """Can the sandbox serve the reference step's call rate with p99 below the tool's timeout; cores it would need."""
    calls, throughput = summary["calls"], summary["throughput"]
    rate = reference_rate(summary)
    per_call = summary["cpu"]["per_call_s"]
    enough_saturation = throughput["saturated"] is not None and throughput["saturated_s"] >= max(
        1.0, MIN_SATURATED_SHARE * (throughput["span_s"] or 0)
    )
    capacity = throughput["saturated"] if enough_saturation else None
    p99 = summary["latency_s"]["p99"]
    timeout = summary["tool"]["timeout_s"]
    harder = summary["spec"]["tokens_per_s"] >= summary["reference_tokens_per_s"]
    if capacity is not None:
        keeps_up: bool | None = capacity >= rate
    else:
        keeps_up = True if harder and calls["unavailable"] == 0 else None
    clean = all(calls[key] == 0 for key, _ in PROBLEMS)
    p99_ok = p99 is not None and p99 < timeout
    answer = (
        "yes" if clean and p99_ok and keeps_up else ("undecided" if keeps_up is None and clean and p99_ok else "no")
    )
    return {
        "answer": answer,
        "reference_rate": rate,
        "capacity": capacity,
        "keeps_up": keeps_up,
        "clean": clean,
        "p99_s": p99,
        "p99_below_timeout": p99_ok,
        "timeout_s": timeout,
        "cores_needed": math.ceil(rate * per_call) if per_call else None,
        "core_seconds_per_call": per_call,
    }


def _readings(throughput: dict[str, Any]) -> str:
    """``(before B, after A) `` when the baseline ran on both sides of the load, else nothing."""
    readings = throughput.get("readings", [])
    return f"(before {_s(readings[0])}, after {_s(readings[1])}) " if len(readings) == 2 else ""


def _kernel_share(result: LoadResult) -> float | None:
    """Of the CPU the host used during the run, the share its kernel used (page faults, forks, exits, namespaces):
    what grows when the sandbox makes many processes or touches much new memory. Only for a server on this host
    (one whose process the load test found): another host's kernel is not this one's."""
    readings = [s.host_cpu_s for s in result.samples if s.host_cpu_s is not None]
    if result.server_pid is None or len(readings) < 2:
        return None
    user, kernel = (last - first for first, last in zip(readings[0], readings[-1]))
    return kernel / (user + kernel) if user + kernel > 0 else None


def to_json(result: LoadResult, summary: dict[str, Any]) -> dict[str, Any]:
    """The summary with every call record and sample (of the baseline too), for plots and later reports."""

    def raw(run: LoadResult) -> dict[str, Any]:
        return {
            "records": [asdict(r) for r in run.records],
            "samples": [asdict(s) for s in run.samples],
            "wall_s": run.wall_s,
        }

    return {
        "summary": summary,
        "load": raw(result),
        "baseline": raw(result.baseline) if result.baseline is not None else None,
        "baseline_after": raw(result.baseline_after) if result.baseline_after is not None else None,
    }


# ---- text ---------------------------------------------------------------------------------------------------------


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1000:.0f}"


def _s(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _pct(shares: dict[str, float]) -> str:
    return ", ".join(f"{label} {share:.0%}" for label, share in shares.items())


def render(summary: dict[str, Any]) -> str:
    """The report ``retool-sandbox loadtest`` prints."""
    spec, tool, calls, server = summary["spec"], summary["tool"], summary["calls"], summary["server"]
    where = (
        f"retool-sandbox: isolation {server['isolation']}, {server['mode']} mode, {server['slots']} slots"
        if server
        else "not a retool-sandbox (no /health): server-side numbers are not available"
    )
    pace = (
        "no pauses"
        if math.isinf(spec["tokens_per_s"])
        else f"{spec['tokens_per_s']:g} tokens/s per trajectory, {spec['tokens_between_calls']:g} tokens between calls "
        "(exponential)"
    )
    mix_ = summary["mix"]
    lines = [
        f"retool-sandbox loadtest: {spec['trajectories']} trajectories, session mode {spec['session_mode']}, "
        f"against {summary['url']} ({where})",
        f"model: {spec['calls_mean']:.2f} calls per trajectory on average (num_turns {spec['num_turns_mean']:g}), "
        f"1 to {spec['max_calls']}; {pace}; {spec['workers']} workers x max_concurrency {tool['max_concurrency']}; "
        f"tool timeout {tool['timeout_s']:g} s, call deadline {tool['call_deadline_s']:g} s"
        + (
            f"; plus {spec['timeout_burst']} programs that spin to their timeout at {spec['timeout_burst_at_s']:g} s"
            if spec["timeout_burst"]
            else ""
        ),
        f"programs: {len(mix_['programs'])}, measured on the idle sandbox: run time {_pct(mix_['runtime_shares'])}; "
        f"output {_pct(mix_['output_shares'])}; mean {mix_['mean_idle_s'] * 1000:.0f} ms per call",
        f"calls: {calls['planned']} planned, {calls['ended']} ended: right {calls['right']}, wrong {calls['wrong']}, "
        f"killed {calls['killed']}, false timeouts {calls['false_timeout']}, expected timeouts "
        f"{calls['expected_timeout']}, failing when idle {calls['fails_when_idle']}, sandbox errors "
        f"{calls['sandbox_error']}, unavailable {calls['unavailable']}; "
        f"LOST {calls['lost']} (hung {calls['hung']}, crashed {calls['crashed']}, never made {calls['never_made']}); "
        f"past the call deadline "
        f"{calls['over_deadline']}; 504 answers {calls['busy_answers']}, retries {calls['retries']}, session lost "
        f"{calls['session_lost']}",
    ]
    for program in summary["failing_programs"]:
        outcomes = ", ".join(f"{status} {n}" for status, n in sorted(program["outcomes"].items())) or "no calls"
        lines.append(
            f"the server fails {program['name']!r} ({program['weight']}% of the calls) on the idle sandbox "
            f"too: {program['idle']}; its calls in this run: {outcomes}"
        )
    if summary["failing_programs"]:
        lines.append(
            "(the mix needs numpy, scipy, sympy and mpmath in the sandbox's Python and room for numpy: a real "
            "SandboxFusion needs --memory-limit-mb -1)"
        )
    t = summary["throughput"]
    lines.append(
        f"throughput: {_s(t['overall'])} calls/s over {t['span_s']:.0f} s; while saturated (>= {t['slots']} calls at "
        f"the server, {t['saturated_s']:.0f} s): {_s(t['saturated'])} calls/s"
        + (
            f"; the sandbox's own at concurrency 2: {_s(summary['baseline']['throughput']['saturated'])} calls/s "
            f"{_readings(summary['baseline']['throughput'])}({t['vs_baseline']:.3f} x)"
            if "vs_baseline" in t
            else ""
        )
    )
    for key, label in (
        ("latency_s", "latency per call"),
        ("limit_wait_s", "wait for the worker's max_concurrency"),
        ("server_wait_s", "time at the server beyond the run (queue + transport)"),
    ):
        p = summary[key]
        lines.append(f"{label} ms: p50 {_ms(p['p50'])}, p99 {_ms(p['p99'])}, max {_ms(p['max'])}")
    cpu, memory = summary["cpu"], summary["memory"]
    if cpu["server_s"] is not None:
        lines.append(
            f"sandbox CPU: {cpu['server_s']:.1f} core-s, {cpu['per_call_s'] * 1000:.0f} ms per call "
            f"(this load test: {cpu['client_s']:.1f} core-s)"
        )
    if cpu.get("host_kernel_share") is not None:
        base = (summary.get("baseline") or {}).get("cpu", {}).get("host_kernel_share")
        lines.append(
            f"host CPU in the kernel: {cpu['host_kernel_share']:.0%} of what the host used"
            + (f" (baseline: {base:.0%})" if base is not None else "")
        )
    if memory["pss_peak_mib"] is not None:
        per = (
            f", {memory['per_session_mib']:.1f} MiB per session ({memory['sessions_at_reading']} live)"
            if memory["per_session_mib"] is not None
            else ""
        )
        lines.append(
            f"sandbox memory (Pss of its process tree): {memory['pss_first_mib']:.0f} MiB at the start, peak "
            f"{memory['pss_peak_mib']:.0f} MiB{per}; host MemAvailable low point "
            f"{memory['mem_available_min_mb']} MiB"
        )
    if summary["sessions"]:
        s = summary["sessions"]
        lines.append(
            f"sessions: {s.get('started', 0)} started, peak {memory['sessions_peak']} live, "
            f"{s.get('evicted_memory', 0)} evicted for memory, {s.get('evicted_idle', 0)} idle-evicted, "
            f"{s.get('died', 0)} died"
        )
    lines += [
        "",
        "over time (calls ended per s; latency ms of the calls that ended; calls open in the trajectories / "
        "at the server, averages; the server's slots in use + queued and live sessions at the bin's end):",
        f"{'t s':>9} {'ended/s':>8} {'p50':>7} {'p99':>7} {'max':>7} {'open':>6} {'server':>7} {'busy+q':>7} "
        f"{'sess':>5}",
    ]
    for row in summary.get("timeline", []):
        busy = "-" if row["server_in_flight"] is None else f"{row['server_in_flight']}+{row['server_queued']}"
        lines.append(
            f"{row['t0']:4.0f}-{row['t1']:<4.0f} {row['ended_per_s']:8.1f} {_ms(row['latency_p50']):>7} "
            f"{_ms(row['latency_p99']):>7} {_ms(row['latency_max']):>7} {row['open']:6.1f} "
            f"{row['at_server']:7.1f} {busy:>7} {row['sessions'] if row['sessions'] is not None else '-':>5}"
        )
    lines += ["", verdict_text(summary)]
    lines += [f"note: {note}" for note in summary["notes"]]
    return "\n".join(lines) + "\n"


def verdict_text(summary: dict[str, Any]) -> str:
    v = summary["verdict"]
    rate = f"{v['reference_rate']:.1f} calls/s"
    capacity = (
        f"it served {v['capacity']:.1f} calls/s while saturated"
        if v["capacity"] is not None
        else "it was not saturated long enough to measure its capacity"
    )
    cores = (
        f"at {v['core_seconds_per_call'] * 1000:.0f} ms of CPU per call that rate needs {v['cores_needed']} busy cores"
        if v["cores_needed"] is not None
        else "its CPU per call was not measured (not a local "
        "retool-sandbox; --server-pid names another server's process)"
    )
    problems = [f"{summary['calls'][key]} {label}" for key, label in PROBLEMS if summary["calls"][key]]
    return (
        f"verdict: {v['answer'].upper()}: the reference step asks for {rate} (at "
        f"{summary['reference_tokens_per_s']:g} tokens/s per trajectory); {capacity}; p99 {_ms(v['p99_s'])} ms "
        f"{'<' if v['p99_below_timeout'] else '>='} the tool's timeout {v['timeout_s']:g} s; {cores}"
        + (f"; problems: {', '.join(problems)}" if problems else "")
        + "."
        + _busy_hint(summary)
    )


def _busy_hint(summary: dict[str, Any]) -> str:
    """Why 504s came, when they did: the workers keep more calls at the server than it runs within its queue
    timeout."""
    capacity, server = summary["verdict"]["capacity"], summary["server"] or {}
    if not summary["calls"]["busy_answers"] or not capacity or not server.get("queue_timeout_s"):
        return ""
    in_flight = summary["spec"]["workers"] * summary["tool"]["max_concurrency"]
    return (
        f" The {summary['calls']['busy_answers']} 504 answers: {summary['spec']['workers']} workers x "
        f"max_concurrency {summary['tool']['max_concurrency']} keep up to {in_flight} calls waiting at the server; "
        f"at {capacity:.1f} calls/s (this run's rate while saturated) the last of them waits "
        f"{in_flight / capacity:.0f} s, against the server's queue timeout of {server['queue_timeout_s']:g} s, "
        "and longer where calls run slower. Fewer calls in flight (the tool's max_concurrency) or more slots and "
        "cores avoid it."
    )
