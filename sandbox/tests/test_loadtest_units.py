"""The load test's model and arithmetic on their own: calls per trajectory from verl's num_turns, the plan (mix,
pauses, burst), how a reply is judged, throughput while saturated, the verdict, the client's call deadline, the
CPU meter of a process tree, and the sandbox package's imports (no circle)."""

from __future__ import annotations

import ast
import asyncio
import collections
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from retool_sandbox import client as client_module
from retool_sandbox import proctree
from retool_sandbox.client import ClientPolicy, Reply, SandboxClient
from retool_sandbox.load_programs import PROGRAMS, TIMEOUT_PROGRAM
from retool_sandbox.load_model import LoadSpec, call_count_distribution, calls_mean, like_lengths, plan
from retool_sandbox.load_report import saturated_throughput, summarize
from retool_sandbox.load_settings import LoadSettings
from retool_sandbox.loadtest import Calibration, CallRecord, LoadResult, Sample, judge

SANDBOX_PACKAGE = Path(__file__).resolve().parents[1] / "retool_sandbox"


def test_calls_per_trajectory_come_from_verls_num_turns():
    # k calls = k tool replies (user turns) + k + 1 assistant turns + 1: the reference's 7.0 and 5.4
    assert calls_mean(7.0) == 2.5 and calls_mean(5.4) == pytest.approx(1.7)
    for mean in (2.5, 1.7):
        p = call_count_distribution(mean, 15)
        assert len(p) == 16 and p[0] == 0 and math.isclose(sum(p), 1)
        assert sum(k * pk for k, pk in enumerate(p)) == pytest.approx(mean, abs=1e-6)
        assert all(a > b for a, b in zip(p[1:], p[2:])) and p[15] > 0  # a long tail, to the cap
    assert LoadSpec().max_calls == 15  # verl stops after the 16th assistant turn without running its call
    with pytest.raises(ValueError, match="--num-turns-mean"):
        LoadSpec(num_turns_mean=3.0)


def test_the_shipped_programs_add_up_to_100_and_have_their_own_names():
    assert sum(p.weight for p in PROGRAMS) == 100 and all(p.weight > 0 for p in PROGRAMS)
    assert len({p.name for p in PROGRAMS}) == len(PROGRAMS) and TIMEOUT_PROGRAM not in PROGRAMS
    assert {p.expect for p in PROGRAMS} == {"ok", "error_exit"}


def test_the_plan_is_the_reference_step_drawn_from_its_seed():
    spec = LoadSpec()
    first, again = plan(spec), plan(spec)
    assert first == again and plan(LoadSpec(seed=1)) != first
    calls = [c for t in first for c in t.calls]
    assert len(first) == 1024 and abs(len(calls) / 1024 - 2.5) < 0.15
    assert {t.worker for t in first} == set(range(16)) and all(1 <= len(t.calls) <= 15 for t in first)
    # dealt from decks of 100: every full deck holds each program exactly `weight` times
    decks = len(calls) // 100
    counts = collections.Counter(c.program.name for c in calls)
    for program in PROGRAMS:
        assert program.weight * decks <= counts[program.name] <= program.weight * (decks + 1)
    # pauses: exponential tokens at 30 tokens/s, 1,100 between calls on average
    pauses = [c.think_s for c in calls] + [t.final_think_s for t in first]
    assert abs(sum(pauses) / len(pauses) - 1100 / 30) < 0.1 * 1100 / 30


def test_no_pauses_given_lengths_and_a_timeout_burst():
    spec = LoadSpec(trajectories=2, tokens_per_s=math.inf, timeout_burst=3, timeout_burst_at_s=4.0)
    trajectories = plan(spec, lengths=[15, 1, 9, 12])
    regular, burst = trajectories[:-3], trajectories[-3:]
    assert [len(t.calls) for t in regular] == [15, 1, 9, 12] and sum(len(t.calls) for t in regular) == 37
    assert all(c.think_s == 0 for t in regular for c in t.calls)
    assert [(t.calls[0].program, t.calls[0].think_s, len(t.calls)) for t in burst] == [(TIMEOUT_PROGRAM, 4.0, 1)] * 3


def _reply(status: str, stdout: str = "", rc: int | None = 0) -> Reply:
    run_status = {"timeout": "TimeLimitExceeded"}.get(status, "Finished")
    return Reply(
        status, {"status": "Success", "run_result": {"status": run_status, "stdout": stdout, "return_code": rc}}
    )


def test_a_reply_is_judged_against_the_idle_sandbox():
    program = PROGRAMS[0]
    idle = {program.name: Calibration("ok", 0.1, 3, __import__("hashlib").sha1(b"42\n").hexdigest(), 10)}
    assert judge(_reply("ok", "42\n"), program, idle) == "right"
    assert judge(_reply("ok", "41\n"), program, idle) == "wrong"
    assert judge(_reply("error_exit", "42\n", 1), program, idle) == "wrong"
    assert judge(_reply("timeout", "4"), program, idle) == "false_timeout"
    assert judge(_reply("error_exit", "", -9), program, idle) == "killed"
    assert judge(Reply("unavailable", problem="refused"), program, idle) == "unavailable"
    assert judge(Reply("sandbox_error"), program, idle) == "sandbox_error"
    assert judge(_reply("timeout"), TIMEOUT_PROGRAM, idle) == "expected_timeout"
    assert judge(_reply("ok"), TIMEOUT_PROGRAM, idle) == "wrong"


def _record(start: float, end: float, at_server: float, verdict: str = "right", **fields) -> CallRecord:
    return CallRecord(0, 0, "p", start, end, "ok", verdict, last_attempt_s=at_server, **fields)


def test_throughput_while_saturated_counts_only_busy_time():
    # 2 slots: [0, 4] has two calls at the server throughout (one ends at 2, the next starts at 2), [4, 6] only one
    records = [_record(0, 2, 2), _record(0, 4, 4), _record(2, 4, 2), _record(4, 6, 2)]
    rate, busy = saturated_throughput(records, 2)
    assert busy == pytest.approx(4) and rate == pytest.approx(3 / 4)
    assert saturated_throughput(records, 3) == (None, 0.0)


def _result(records, samples, spec=None, calibration=None, planned=None) -> LoadResult:
    spec = spec or LoadSpec(trajectories=4)
    return LoadResult(
        spec=spec,
        settings=LoadSettings(),
        url="http://127.0.0.1:1",
        health={"slots": 2, "isolation": "bwrap", "mode": "fork"},
        calibration=calibration or {"p": Calibration("ok", 0.1, 10, "x", 100)},
        records=records,
        samples=samples,
        planned_calls=len(records) if planned is None else planned,
        wall_s=max(r.end for r in records),
        client_cpu_s=0.5,
        server_pid=1,
    )


def test_the_summary_counts_lost_calls_and_the_verdict_says_no():
    records = [_record(i, i + 1, 1, execution_s=0.5) for i in range(20)]
    samples = [
        Sample(0, {"slots": 2}, 1000, cpu_s=0.0, pss_mib=100),
        Sample(20, {"slots": 2}, 900, cpu_s=4.0, pss_mib=150),
    ]
    good = summarize(_result(records, samples))
    assert good["calls"]["lost"] == 0 and good["cpu"]["per_call_s"] == pytest.approx(0.2)
    assert good["memory"]["pss_peak_mib"] == 150 and good["server_wait_s"]["p50"] == pytest.approx(0.5)
    # 4 trajectories x 2.5 calls over 3.5 x 1,100 tokens at 30 tokens/s; 0.2 core-s per call
    assert good["verdict"]["reference_rate"] == pytest.approx(4 * 2.5 / (3.5 * 1100 / 30))
    assert good["verdict"]["cores_needed"] == 1
    assert good["verdict"]["answer"] == "yes"
    hung = [*records, _record(20, 400, 0, verdict="hung")]
    bad = summarize(_result(hung, samples, planned=len(hung) + 2))
    assert (bad["calls"]["hung"], bad["calls"]["never_made"], bad["calls"]["lost"]) == (1, 2, 3)
    assert bad["verdict"]["answer"] == "no" and not bad["verdict"]["clean"]


def test_per_session_memory_is_the_growth_over_the_live_sessions():
    records = [_record(0, 1, 1)]
    sessions = {"live": 0, "counters": {"started": 0, "evicted_memory": 0}}
    samples = [
        Sample(0, {"slots": 2, "sessions": sessions}, 1000, pss_mib=100),
        Sample(
            5,
            {"slots": 2, "sessions": {"live": 10, "counters": {"started": 12, "evicted_memory": 2}}},
            800,
            pss_mib=400,
        ),
    ]
    summary = summarize(_result(records, samples, spec=LoadSpec(trajectories=4, session_mode="per_trajectory")))
    assert summary["memory"]["per_session_mib"] == pytest.approx(30) and summary["memory"]["sessions_peak"] == 10
    assert summary["sessions"] == {"started": 12, "evicted_memory": 2}


async def test_a_call_is_given_up_once_it_spent_its_call_deadline_on_the_sandbox(monkeypatch, unused_tcp_port):
    # A server that accepts every request and drops the connection half a second later: each attempt fails like a
    # server restarting, and the reconnect budget (waits only) would allow 100 more; the call deadline ends it.
    from aiohttp import web

    async def drop(request: web.Request) -> web.Response:
        await asyncio.sleep(0.5)
        request.transport.close()
        return web.Response()

    app = web.Application()
    app.router.add_post("/run_code", drop)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", unused_tcp_port).start()
    monkeypatch.setattr(client_module, "MAX_BACKOFF_S", 0.05)
    policy = ClientPolicy(
        run_timeout=1,
        queue_timeout_s=0,
        http_timeout_margin_s=0.5,
        max_retries=0,
        retry_backoff_s=0.05,
        reconnect_budget_s=5,
    )
    assert policy.call_deadline() == pytest.approx(1.55 + 5)
    try:
        started = time.monotonic()
        reply = await SandboxClient(f"http://127.0.0.1:{unused_tcp_port}", policy).run("print(1)")
        took = time.monotonic() - started
    finally:
        await runner.cleanup()
    assert reply.status == "unavailable" and "call deadline of 6.55 s" in reply.problem, reply.problem
    assert 6.0 < took < 6.55 + 1.0 and reply.retries >= 8


BURN = "import time\nt = time.process_time()\nwhile time.process_time() - t < {s}:\n    pass\n"


def _tree(tmp_path: Path) -> subprocess.Popen:
    """root (sleeps) -> mid (starts two children, waits for the first, then sleeps) -> a: burns 0.3 s and exits;
    b: burns 0.3 s and sleeps. mid's pid file says when both have burned."""
    mid = (
        "import subprocess, sys, time\n"
        f"a = subprocess.Popen([sys.executable, '-c', {BURN.format(s=0.3)!r}])\n"
        f"b = subprocess.Popen([sys.executable, '-c', {BURN.format(s=0.3)!r} + 'time.sleep(60)'])\n"
        "a.wait()\n"
        "time.sleep(0.6)\n"
        f"open({str(tmp_path / 'ready')!r}, 'w').write(str(b.pid))\n"
        "time.sleep(60)\n"
    )
    root = f"import subprocess, sys, time\np = subprocess.Popen([sys.executable, '-c', {mid!r}])\ntime.sleep(60)\n"
    return subprocess.Popen([sys.executable, "-c", root])


def test_the_cpu_meter_keeps_the_time_of_killed_processes_and_counts_waited_ones_once(tmp_path):
    root = _tree(tmp_path)
    try:
        meter = proctree.CpuMeter(root.pid)
        while not (tmp_path / "ready").exists():
            meter.read()
            time.sleep(0.05)
        reading = meter.read()
        assert len(reading.pids) == 3 and reading.cpu_s >= 0.6  # a (waited for by mid) and b (alive)
        mid = next(pid for pid in reading.pids if pid != root.pid and pid != int((tmp_path / "ready").read_text()))
        os.kill(mid, signal.SIGKILL)  # mid dies unwaited (root sleeps): b is orphaned and leaves the tree
        os.kill(int((tmp_path / "ready").read_text()), signal.SIGKILL)
        time.sleep(0.3)
        after = meter.read()
        assert after.cpu_s == pytest.approx(reading.cpu_s, abs=0.1)  # nothing vanished, nothing counted twice
    finally:
        root.kill()
        root.wait()


def test_the_memory_of_a_process_that_holds_a_heap_is_read_by_field():
    # 64 MiB written in a child: its anonymous share holds them, its PSS holds them and its libraries' pages
    child = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; b = bytearray(64 << 20); print(flush=True); time.sleep(60)"],
        stdout=subprocess.PIPE,
    )
    try:
        child.stdout.readline()
        memory = proctree.rollup_mib((child.pid, 2**22 + 1), ("Pss", "Pss_Anon", "Pss_Shmem"))
        assert 64 <= memory["Pss_Anon"] < memory["Pss"], memory  # the pid that does not exist counts 0
        assert memory["Pss_Shmem"] >= 0 and proctree.pss_mib((child.pid,)) == pytest.approx(memory["Pss"], abs=1)
    finally:
        child.kill()
        child.wait()


def _imports(path: Path) -> set[str]:
    """The retool_sandbox modules ``path`` imports (TYPE_CHECKING blocks included: a circle there is one too)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        found |= {n.split(".")[1] for n in names if n.startswith("retool_sandbox.")}
    return found - {path.stem}


def test_the_sandbox_modules_import_one_another_without_a_circle():
    modules = {path.stem for path in SANDBOX_PACKAGE.glob("*.py")}
    graph = {path.stem: _imports(path) & modules for path in SANDBOX_PACKAGE.glob("*.py")}
    done: set[str] = set()

    def visit(module: str, stack: tuple[str, ...]) -> None:
        assert module not in stack, f"import circle: {' -> '.join((*stack[stack.index(module) :], module))}"
        if module not in done:
            for other in sorted(graph[module]):
                visit(other, (*stack, module))
            done.add(module)

    for module in sorted(graph):
        visit(module, ())
    assert "forkserver" in graph["executor"] and "runs" in graph["forkserver"] and "forkserver" not in graph["runs"]


def test_the_summary_says_how_much_of_the_host_cpu_went_to_the_kernel():
    from retool_sandbox import host
    from retool_sandbox.load_report import render

    records = [_record(i, i + 1, 1, execution_s=0.5) for i in range(4)]
    samples = [
        Sample(0, {"slots": 2}, 1000, cpu_s=0.0, host_cpu_s=(100.0, 50.0)),
        Sample(2, {"slots": 2}, 1000, host_cpu_s=(103.0, 51.0)),
        Sample(4, {"slots": 2}, 1000, cpu_s=2.0, host_cpu_s=(106.0, 52.0)),
    ]
    summary = summarize(_result(records, samples))
    assert summary["cpu"]["host_kernel_share"] == pytest.approx(0.25)  # 2 of 8 busy seconds
    assert "host CPU in the kernel: 25% of what the host used" in render(summary)
    assert summarize(_result(records, samples[:1]))["cpu"]["host_kernel_share"] is None
    remote = _result(records, samples)
    remote.server_pid = None  # a sandbox on another host: this host's kernel says nothing about it
    assert summarize(remote)["cpu"]["host_kernel_share"] is None
    before = host.cpu_seconds()
    deadline = time.monotonic() + 0.5
    while time.monotonic() < deadline:
        sum(range(1000))  # user code
    after = host.cpu_seconds()
    assert after[0] - before[0] >= 0.3 and after[1] >= before[1]


def test_the_command_refuses_bad_options_and_an_absent_sandbox_at_once(capsys, unused_tcp_port):
    from retool_sandbox.cli import main

    nobody = f"http://127.0.0.1:{unused_tcp_port}"
    assert main(["loadtest", "--url", nobody, "--num-turns-mean", "3"]) == 2
    assert "--num-turns-mean between 4 and" in capsys.readouterr().err
    started = time.monotonic()
    assert main(["loadtest", "--url", nobody, "--trajectories", "4"]) == 2
    assert "does not answer GET /v1/ping" in capsys.readouterr().err and time.monotonic() - started < 15


def test_the_baseline_makes_as_many_calls_per_session_as_the_load():
    # in per_trajectory a session's start costs about as much as its calls: a baseline of drawn trajectories
    # (200 calls ~ 80 sessions) was off by +-9% in sessions per call, which moved the throughput ratio as much
    load = [len(t.calls) for t in plan(LoadSpec())]
    picked = like_lengths(load, 200, seed=1)
    assert abs(sum(picked) - 200) <= max(load)
    assert sum(picked) / len(picked) == pytest.approx(sum(load) / len(load), rel=0.03)
    assert max(picked) > 4 and min(picked) == 1  # the tail and the head are both there
    assert like_lengths(load, 200, seed=1) == picked and like_lengths([], 200, seed=1) == []
    baseline = plan(LoadSpec(trajectories=2, tokens_per_s=math.inf), lengths=picked)
    assert [len(t.calls) for t in baseline] == picked
