"""Bounded concurrency: parallel requests are all answered correctly; a saturated server answers 504, never hangs."""

from __future__ import annotations

import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

from sandbox_helpers import call, get, http_status, run

from retool_sandbox.client import SandboxClient
from retool_sandbox.spawn import running_sandbox

# `retool-sandbox serve` in a process that sees a 320-core host (an Atlas A3 node's Kunpeng CPUs): host.cores is
# what the server reads for its defaults.
AS_320_CORES = (
    "import sys\nimport retool_sandbox.host as host\nhost.cores = lambda: 320\n"
    "from retool_sandbox.cli import main\nsys.exit(main(sys.argv[sys.argv.index('serve'):]))"
)


def _call(url: str, code: str, **fields) -> tuple[int | None, dict | None, str, float]:
    """(HTTP status, body of a 200, the client's problem otherwise, seconds)."""
    started = time.monotonic()
    reply = call(url, code, **fields)
    return http_status(reply), reply.body, reply.problem, time.monotonic() - started


def test_many_parallel_requests_none_lost(bwrap_url):
    jobs = []
    for i in range(40):
        kind = i % 4
        if kind == 0:
            jobs.append((f"print({i})", {}, ("Success", "Finished", f"{i}\n")))
        elif kind == 1:
            jobs.append((f"import time\ntime.sleep(0.2)\nprint({i})", {}, ("Success", "Finished", f"{i}\n")))
        elif kind == 2:
            jobs.append((f"print({i})\nraise SystemExit(3)", {}, ("Failed", "Finished", f"{i}\n")))
        else:
            code = f"import time\nprint({i}, flush=True)\ntime.sleep(10)"
            jobs.append((code, {"run_timeout": 0.5}, ("Failed", "TimeLimitExceeded", f"{i}\n")))
    before = get(bwrap_url + "/health")["counters"]["requests"]
    with ThreadPoolExecutor(max_workers=40) as pool:
        results = list(pool.map(lambda job: _call(bwrap_url, job[0], **job[1]), jobs))
    for (code, _, (status, run_status, stdout)), (http, body, problem, _) in zip(jobs, results):
        assert http == 200, problem
        assert (body["status"], body["run_result"]["status"], body["run_result"]["stdout"]) == (
            status,
            run_status,
            stdout,
        ), code
    health = get(bwrap_url + "/health")
    assert health["counters"]["requests"] - before == 40
    assert health["in_flight"] == 0 and health["queued"] == 0


def test_cpu_bound_burst_has_no_false_timeouts(bwrap_url):
    # 16 CPU-bound jobs of ~0.2-0.4 s on a 2-slot server: they queue and all finish (the timeout is generous
    # because other work may share the host; the queue-wait property itself is tested below).
    code = "s = 0\nfor i in range(3_000_000):\n    s += i\nprint(s)"
    with ThreadPoolExecutor(max_workers=16) as pool:
        results = list(pool.map(lambda _: _call(bwrap_url, code, run_timeout=20), range(16)))
    statuses = [body["run_result"]["status"] for _, body, _, _ in results]
    assert statuses == ["Finished"] * 16
    assert all(body["run_result"]["stdout"] == "4499998500000\n" for _, body, _, _ in results)


def test_overload_answers_504_not_hang(tiny_url):
    code = "import time\ntime.sleep(1.5)\nprint('done')"
    with ThreadPoolExecutor(max_workers=6) as pool:
        results = list(pool.map(lambda _: _call(tiny_url, code), range(6)))
    codes = sorted(http for http, _, _, _ in results)
    assert 200 in codes and 504 in codes and set(codes) <= {200, 504}, codes
    for http, body, problem, elapsed in results:
        if http == 504:
            assert elapsed < 1.5  # bounded by the queue timeout, not by the run
            assert '"status": "SandboxError"' in problem and "queue timeout" in problem, problem
        else:
            assert body["status"] == "Success"
    health = get(tiny_url + "/health")
    assert health["counters"]["queue_timeouts"] == codes.count(504)


def test_timeout_clock_starts_when_code_starts():
    # Two 3 s programs with a 5 s timeout on one slot: the second waits ~3 s in the queue; were that wait
    # charged to its timeout it would need ~6 s and time out.
    code = "import time\ntime.sleep(3)\nprint('ok')"
    with running_sandbox(slots=1, queue_timeout=30, default_timeout=5, max_timeout=5) as url:
        with ThreadPoolExecutor(max_workers=2) as pool:
            results = list(pool.map(lambda _: _call(url, code), range(2)))
    assert [body["run_result"]["status"] for _, body, _, _ in results] == ["Finished", "Finished"]
    assert max(elapsed for *_, elapsed in results) > 5.5


def test_none_tier_only_when_asked():
    with running_sandbox(isolation="none", slots=1) as url:
        health = get(url + "/health")
        assert health["isolation"] == "none"
        assert run(url, "print('plain')")["run_result"]["stdout"] == "plain\n"


def test_servers_on_one_host_get_disjoint_uids(bwrap_url, rlimit_url):
    # A uid sweep of one server must never reach another server's programs.
    a, b = get(bwrap_url + "/health")["uids"], get(rlimit_url + "/health")["uids"]
    assert a[1] < b[0] or b[1] < a[0], (a, b)


def test_a_320_core_host_gets_a_server_with_sessions():
    # Its defaults, but no preimport: 64 fork servers importing numpy, scipy and sympy would load this 2-core host.
    with running_sandbox(server=[sys.executable, "-c", AS_320_CORES], preimport="none") as url:
        health = get(url + "/health")
        assert (health["slots"], health["sessions"]["max"], health["sessions"]["idle_timeout"]) == (64, 1024, 3600)
        if health["uids"] is not None:  # root: 2 x 64 slots + 1024 sessions, one contiguous range
            assert health["uids"][1] - health["uids"][0] + 1 == 1152
        with ThreadPoolExecutor(max_workers=32) as pool:
            replies = list(pool.map(lambda i: call(url, f"print({i} * 2)"), range(96)))
        assert [reply.run_result.get("stdout") for reply in replies] == [f"{i * 2}\n" for i in range(96)]
        client = SandboxClient(url)
        sessions = [uuid.uuid4().hex for _ in range(4)]
        for number, session in enumerate(sessions):
            assert client.run_sync(f"kept = {number}", session_id=session).status == "ok"
        for number, session in enumerate(sessions):
            reply = client.run_sync("print(kept)", session_id=session)
            assert reply.run_result["stdout"] == f"{number}\n" and reply.body["session"]["cell"] == 2
        health = get(url + "/health")
        assert health["sessions"]["live"] == 4 and health["sandboxes"]["started"] >= 64
        assert health["in_flight"] == 0 and health["queued"] == 0
