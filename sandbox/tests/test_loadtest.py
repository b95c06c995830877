"""``retool-sandbox loadtest`` against real servers: the short load test through the command line in both session
modes, and the faults of a long RL step while the load runs: the sandbox killed and restarted, one slot's process
killed, a burst of programs that hit their timeout, and more sessions than the sandbox's memory holds. In every case
each call is answered or counted unavailable within its call deadline: none lost, none hung, none answered wrongly,
no false timeout (asserted from the load test's own accounting, which checks every reply against the idle
sandbox's)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from sandbox_helpers import descendants, get

from retool_sandbox.load_programs import PROGRAMS
from retool_sandbox.load_report import summarize
from retool_sandbox.load_model import LoadSpec
from retool_sandbox.loadtest import LoadTest
from retool_sandbox.spawn import running_sandbox
from retool_sandbox.client import ClientPolicy
from retool_sandbox.load_settings import LoadSettings

# Programs that take tens of milliseconds on an idle host (an error exit and a 300 KB output among them), so a short
# timeout tells the burst's spinning programs from the rest even on a loaded host.
QUICK = tuple(
    p
    for p in PROGRAMS
    if p.name
    in {
        "sympy factorint",
        "combinatorics",
        "exact fractions",
        "mpmath digits",
        "arithmetic",
        "table of values",
        "prints a lot (300 KB)",
        "traceback (a model's typo)",
    }
)
# About a second of CPU: long enough for a fault to find it running.
LONG = tuple(p for p in PROGRAMS if p.name == "loop over cases")


def _server(tmp_path: Path, **opts):
    if os.geteuid() != 0 or shutil.which("bwrap") is None:
        pytest.skip("the load test's sessions need a root server with bubblewrap")
    opts = {"slots": 2, "default_timeout": 20, "max_timeout": 20, "queue_timeout": 10, "work_root": tmp_path, **opts}
    return running_sandbox(**opts)


@pytest.fixture(scope="module")
def shared_url(tmp_path_factory):
    """One server for the tests that leave it running (a killed slot process is replaced by the server itself)."""
    with _server(tmp_path_factory.mktemp("load-work")) as url:
        yield url


def _settings(url: str, session_mode: str = "stateless", timeout: float = 10) -> LoadSettings:
    """The tool's client, with shorter waits between retries; a restart is ridden out, as with the tool, for 60 s."""
    policy = ClientPolicy(
        run_timeout=timeout,
        max_retries=3,
        retry_backoff_s=0.2,
        reconnect_budget_s=60,
        queue_timeout_s=10,
        http_timeout_margin_s=5,
    )
    return LoadSettings(policy=policy, session_mode=session_mode)


def _load(url: str, spec: LoadSpec, settings: LoadSettings, programs, strike=None) -> dict:
    """Run the load test; ``strike(test)`` (a coroutine) runs alongside it. Returns the summary, with the server's
    own view of MemAvailable at each sample under ``server_mem_available``."""

    async def both():
        test = LoadTest(url, spec, settings, programs=programs, sample_s=0.5, cpu_every_s=0.5, pss_every_s=2.0)
        run = asyncio.ensure_future(test.run())
        if strike is not None:
            await strike(test)
        return await run

    result = asyncio.run(both())
    return {
        **summarize(result),
        "server_mem_available": [
            s.health["sessions"]["mem_available_mb"]
            for s in result.samples
            if s.health and isinstance(s.health.get("sessions"), dict)
        ],
    }


def _assert_nothing_lost(summary: dict) -> None:
    calls = summary["calls"]
    assert calls["ended"] == calls["planned"] > 0, calls
    assert (
        calls["lost"],
        calls["hung"],
        calls["crashed"],
        calls["wrong"],
        calls["false_timeout"],
        calls["over_deadline"],
    ) == (0, 0, 0, 0, 0, 0), calls
    assert calls["killed"] == 0 or summary.get("fault"), calls


@pytest.mark.parametrize("mode", ["stateless", "per_trajectory"])
def test_the_short_load_test_through_the_command_line(shared_url, tmp_path, mode):
    before = get(shared_url + "/health")["sessions"]["counters"]
    out = tmp_path / "load.json"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "retool_sandbox",
            "loadtest",
            "--url",
            shared_url,
            "--trajectories",
            "16",
            "--session-mode",
            mode,
            "--tokens-per-s",
            "2000",
            "--baseline-calls",
            "0",
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    health = get(shared_url + "/health")
    assert done.returncode == 0, done.stdout + done.stderr
    summary = json.loads(out.read_text())["summary"]
    _assert_nothing_lost(summary)
    assert summary["calls"]["right"] + summary["calls"]["expected_timeout"] == summary["calls"]["planned"]
    assert summary["calls"]["unavailable"] == 0 and summary["mix"]["programs"]
    assert summary["cpu"]["per_call_s"] > 0 and summary["memory"]["pss_peak_mib"] > 0
    assert "verdict:" in done.stdout and "LOST 0" in done.stdout
    if mode == "per_trajectory":
        # one session per trajectory, each closed when its trajectory ended, as the recipe's agent loop does
        assert summary["sessions"]["started"] == 16 and summary["memory"]["per_session_mib"] > 0
        closed = health["sessions"]["counters"]["closed"] - before["closed"]
        assert health["sessions"]["live"] == 0 and closed == 16 + 1  # and the warm-up's session
    assert health["in_flight"] == 0 and health["queued"] == 0


def test_the_sandbox_killed_and_restarted_mid_run(tmp_path):
    # Sessions only: no preimport, so the new server is up sooner.
    spec = LoadSpec(trajectories=12, session_mode="per_trajectory", tokens_per_s=600, seed=3)
    with _server(tmp_path, preimport="none") as url, contextlib.ExitStack() as restarted:
        pid = get(url + "/health")["pid"]

        async def kill_and_restart(test: LoadTest) -> None:
            await test.wait_for_calls(6, timeout=120)
            os.kill(pid, signal.SIGKILL)  # its sandboxes die with it (bubblewrap's --die-with-parent)
            await asyncio.sleep(1.0)
            second = await asyncio.to_thread(
                restarted.enter_context, _server(tmp_path, preimport="none", port=urlsplit(url).port)
            )
            assert second == url

        summary = _load(url, spec, _settings(url, "per_trajectory"), QUICK, kill_and_restart)
    _assert_nothing_lost(summary)
    calls = summary["calls"]
    assert calls["unavailable"] == 0 and calls["right"] == calls["planned"], calls  # the restart was ridden out
    assert calls["retries"] > 0  # calls met the dead server and retried
    assert calls["session_lost"] > 0  # trajectories whose session died with it were told


def _comm(pid: int) -> str:
    with contextlib.suppress(OSError):
        return Path(f"/proc/{pid}/comm").read_text().strip()
    return ""


def _parent(pid: int) -> int:
    with contextlib.suppress(OSError, IndexError, ValueError):
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    return 0


def _uid(pid: int) -> int:
    with contextlib.suppress(OSError, IndexError, ValueError):
        return int(Path(f"/proc/{pid}/status").read_text().split("\nUid:")[1].split()[0])
    return -1


def _busy_slot_process(server_pid: int, mode: str) -> int | None:
    """A slot's process with a program of the load running in it: a fork server with a child program (stateless),
    or a session's interpreter (per_trajectory)."""
    below = descendants(server_pid)
    for pid in below:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes() if os.path.exists(f"/proc/{pid}/cmdline") else b""
        if mode == "stateless" and b"_retool_serve" in cmdline and _comm(_parent(pid)) == "bwrap":
            if any(_parent(child) == pid and _uid(child) not in (0, -1) for child in below):
                return pid
        if mode == "per_trajectory" and b"_retool_session" in cmdline and _uid(pid) not in (0, -1):
            return pid
    return None


@pytest.mark.parametrize("mode", ["stateless", "per_trajectory"])
def test_one_slots_process_killed_mid_run(shared_url, mode):
    spec = LoadSpec(trajectories=10, session_mode=mode, tokens_per_s=900, seed=4)
    before = get(shared_url + "/health")
    killed: list[int] = []

    async def kill_one(test: LoadTest) -> None:
        await test.wait_for_calls(2, timeout=120)
        deadline = time.monotonic() + 30
        while not killed and time.monotonic() < deadline:
            victim = await asyncio.to_thread(_busy_slot_process, before["pid"], mode)
            if victim is not None:
                os.kill(victim, signal.SIGKILL)
                killed.append(victim)
            await asyncio.sleep(0.02)

    # Only the long program: with the quick ones in the mix, the plan held one call long enough to be caught running,
    # and on a loaded host it could end between two scans.
    summary = _load(shared_url, spec, _settings(shared_url, mode), LONG, kill_one)
    health = get(shared_url + "/health")
    assert killed, "no slot process was found running a program"
    _assert_nothing_lost({**summary, "fault": "a kill"})
    calls = summary["calls"]
    # at most the program that was running there: a sandbox error (fork mode), or killed with its session
    assert calls["unavailable"] == 0 and calls["sandbox_error"] + calls["killed"] <= 1, calls
    assert calls["right"] + calls["sandbox_error"] + calls["killed"] == calls["planned"]
    if mode == "stateless":
        assert health["sandboxes"]["retired"] > before["sandboxes"]["retired"]  # the slot got a new sandbox
    else:
        assert health["sessions"]["counters"]["died"] > before["sessions"]["counters"]["died"]


def test_a_burst_of_programs_that_hit_their_timeout_mid_run(shared_url):
    # 4 programs spin to their 2 s timeout, arriving together half a second in, on 2 slots: 4 s in which the other
    # calls wait in the queue; their timeouts start when they run, so none of them times out.
    spec = LoadSpec(trajectories=12, tokens_per_s=900, timeout_burst=4, timeout_burst_at_s=0.5, seed=5)
    summary = _load(shared_url, spec, _settings(shared_url, timeout=2), QUICK)
    _assert_nothing_lost(summary)
    calls = summary["calls"]
    assert calls["expected_timeout"] == 4 and calls["unavailable"] == 0
    assert calls["right"] + calls["expected_timeout"] == calls["planned"]
    assert summary["server_wait_s"]["max"] > 1.5  # calls did queue behind the burst


# `retool-sandbox serve` on a node that leaves the sandbox ROOM MiB: what the server reads as MemAvailable is the floor
# plus that room less what its process tree has grown by since start-up (resident pages), whatever else the host does.
ON_A_SMALL_NODE = (
    "import os, sys\n"
    "import retool_sandbox.host as host\n"
    "from retool_sandbox import proctree\n"
    "room, floor = int(os.environ['RETOOL_TEST_ROOM_MB']), int(os.environ['RETOOL_TEST_FLOOR_MB'])\n"
    "def held():\n"
    "    return proctree.rss_mib(proctree.CpuMeter(os.getpid()).read().pids)\n"
    "start = []\n"
    "def available():\n"
    "    start or start.append(held())\n"
    "    return int(floor + room - (held() - start[0]))\n"
    "host.mem_available_mb = available\n"
    "from retool_sandbox.cli import main\n"
    "sys.exit(main(sys.argv[sys.argv.index('serve'):]))"
)


def test_sessions_that_do_not_fit_in_memory_give_way_and_say_so(tmp_path):
    # A node that leaves the sandbox's sessions 80 MiB: 10 trajectories' sessions (most import numpy, 20-30 MiB each)
    # cannot all stay. The oldest idle ones are evicted; their trajectories' next calls run in a new session and are
    # told; no session is killed, no call lost. No preimport: the fork servers are not what this is about.
    programs = tuple(p for p in PROGRAMS if p.name in {"numpy eigenvalues", "exact fractions", "mpmath digits"})
    spec = LoadSpec(trajectories=10, session_mode="per_trajectory", num_turns_mean=8.0, tokens_per_s=400, seed=6)
    env = {"RETOOL_TEST_ROOM_MB": "80", "RETOOL_TEST_FLOOR_MB": "1000"}
    with _server(
        tmp_path,
        server=[sys.executable, "-c", ON_A_SMALL_NODE],
        env=env,
        preimport="none",
        session_memory_floor_mb=1000,
    ) as url:
        summary = _load(url, spec, _settings(url, "per_trajectory"), programs)
        health = get(url + "/health")
    _assert_nothing_lost(summary)
    calls, sessions = summary["calls"], summary["sessions"]
    assert calls["unavailable"] == 0 and calls["right"] == calls["planned"]
    assert sessions["evicted_memory"] >= 1 and calls["session_lost"] >= 1, (sessions, calls)
    assert sessions["died"] == 0 and calls["killed"] == 0  # eviction, not the out-of-memory killer
    # bounded: the sessions held at most a little more than the room (what cells grew by between two checks)
    assert min(summary["server_mem_available"]) >= 1000 - 150, summary["server_mem_available"]
    assert health["status"] == "ok"


NAIVE_SERVER = '''
"""A /run_code server shaped like SandboxFusion's, with a flaw of the same kind as its 6,000-line deadlock: it waits
for the program to exit before it reads the pipes, so a program whose output outgrows the pipe (64 KiB) blocks
until its timeout. /run_code and /v1/ping only: no /health, no sessions."""
import json, subprocess, sys, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Handler(BaseHTTPRequestHandler):
    def do_GET(self):  # SandboxFusion's only health check: GET /v1/ping answers "pong"
        body = b'"pong"' if self.path == "/v1/ping" else b'{"detail": "Not Found"}'
        self.send_response(200 if self.path == "/v1/ping" else 404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        started = time.monotonic()
        proc = subprocess.Popen([sys.executable, "-c", request["code"]], stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            proc.wait(timeout=request.get("run_timeout") or 10)
            status = "Finished"
        except subprocess.TimeoutExpired:
            proc.kill()
            status = "TimeLimitExceeded"
        stdout, stderr = proc.communicate()
        run = {"status": status, "execution_time": time.monotonic() - started, "return_code": proc.returncode,
               "stdout": stdout.decode(errors="replace"), "stderr": stderr.decode(errors="replace")}
        ok = status == "Finished" and proc.returncode == 0
        body = json.dumps({"status": "Success" if ok else "Failed", "message": "", "compile_result": None,
                           "run_result": run, "executor_pod_name": None, "files": {}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
'''


def test_another_run_code_server_is_measured_and_the_programs_it_fails_are_its_failures(tmp_path, unused_tcp_port):
    """Pointed at a server that is not a retool-sandbox (SandboxFusion's shape: /run_code only), the load test does
    not stop at the program the idle server already fails: it runs the whole load, counts each of that program's
    calls as the server's failure, names it in the report, and exits 1."""
    script = tmp_path / "naive_server.py"
    script.write_text(NAIVE_SERVER)
    server = subprocess.Popen([sys.executable, str(script), str(unused_tcp_port)], stdin=subprocess.DEVNULL)
    try:
        url = f"http://127.0.0.1:{unused_tcp_port}"
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError):
                socket.create_connection(("127.0.0.1", unused_tcp_port), timeout=1).close()
                break
            time.sleep(0.1)
        out = tmp_path / "load.json"
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "retool_sandbox",
                "loadtest",
                "--url",
                url,
                "--trajectories",
                "48",
                "--tokens-per-s",
                "50000",
                "--baseline-calls",
                "0",
                "--timeout",
                "5",
                "--json",
                str(out),
            ],
            capture_output=True,
            text=True,
            timeout=600,
        )
    finally:
        server.terminate()
        server.wait(timeout=30)
    assert done.returncode == 1, done.stdout + done.stderr
    report = json.loads(out.read_text())
    summary = report["summary"]
    calls = summary["calls"]
    assert calls["ended"] == calls["planned"] > 0 and calls["lost"] == calls["hung"] == 0, calls
    failing = {program["name"] for program in summary["failing_programs"]}
    assert "prints a lot (300 KB)" in failing, failing
    assert 0 < calls["fails_when_idle"] < calls["planned"] and calls["right"] > 0, calls
    assert "the server fails 'prints a lot (300 KB)'" in done.stdout
