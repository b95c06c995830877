"""Stateful sessions against real servers: state persists within a session and never crosses sessions; ends by
crash, timeout, idle time, eviction and close are isolated and reported; overload is bounded."""

from __future__ import annotations

import json
import os
import shutil
import signal
import time
import urllib.request
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from sandbox_helpers import (
    TEST_POLICY,
    call,
    descendants,
    get,
    http_status,
    post,
    run,
    uid_processes,
    unprivileged_python,
)

from retool_sandbox.client import SandboxClient
from retool_sandbox.spawn import running_sandbox

LOST = "[retool-sandbox: session "


def cell(url: str, session: str, code: str, **fields) -> dict:
    """Run ``code`` as the next cell of ``session`` through the recipe's client; the 200 response body."""
    return run(url, code, session_id=session, **fields)


def out(body: dict) -> str:
    return body["run_result"]["stdout"]


def close(url: str, session: str) -> dict:
    # A raw POST: the close endpoint is not /run_code, and this shows its body ({"closed": bool}).
    return post(url + f"/sessions/{session}/close", {})[1]


def sid() -> str:
    return uuid.uuid4().hex


def _server(**opts):
    if os.geteuid() != 0:
        pytest.skip("sessions get their own uid only with a root server")
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is not installed")
    return running_sandbox(default_timeout=20, max_timeout=20, **opts)


@pytest.fixture(scope="module")
def url():
    with _server(slots=2, max_sessions=4, session_idle_timeout=120) as base:
        assert get(base + "/health")["isolation"] == "bwrap"
        yield base


@pytest.fixture(scope="module", params=["bwrap", "rlimit", "bwrap-fresh"])
def tier_url(request):
    """One server per uid-switching tier, with room for few sessions so that boxes (uids) get reused; sessions are
    forked from the session zygote, except with ``-fresh`` (a sandbox and interpreter of their own each)."""
    tier, _, fresh = request.param.partition("-")
    python = None
    if tier == "rlimit":
        python = unprivileged_python()
        if python is None:
            pytest.skip("no interpreter reachable by an unprivileged uid")
    with _server(
        isolation=tier,
        slots=1,
        max_sessions=2,
        session_idle_timeout=120,
        python=python,
        fresh_sandbox_per_run=bool(fresh),
    ) as base:
        assert get(base + "/health")["sessions"]["forked"] is not bool(fresh)
        yield tier, base


def _wait_boxes_free(base: str, free: int, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while get(base + "/health")["sessions"]["free_boxes"] < free and time.monotonic() < deadline:
        time.sleep(0.05)
    assert get(base + "/health")["sessions"]["free_boxes"] >= free


def test_state_persists_within_a_session(url):
    s = sid()
    first = cell(
        url,
        s,
        "import math\nx = 41\ndef f(n):\n    return n / 0 if n < 0 else n + 1\n"
        "open('notes.txt', 'w').write('kept')\nimport os\nos.makedirs('sub')\nos.chdir('sub')",
    )
    assert first["status"] == "Success", first
    body = cell(
        url,
        s,
        "print(f(x), round(math.pi, 2), open('../notes.txt').read(), os.path.basename(os.getcwd()))\n"
        "print(open('../data.txt').read())",
        files={"data.txt": "c2VudA=="},
        fetch_files=["notes.txt"],
    )
    assert body["status"] == "Success", body
    assert out(body) == "42 3.14 kept sub\nsent\n"
    assert body["files"] == {"notes.txt": "a2VwdA=="}
    # A function from an earlier cell fails with its own source line in the traceback.
    body = cell(url, s, "f(-1)")
    assert body["run_result"]["return_code"] == 1
    stderr = body["run_result"]["stderr"]
    assert 'File "<cell 3>", line 1' in stderr and 'File "<cell 1>", line 4, in f' in stderr, stderr
    assert "return n / 0 if n < 0 else n + 1" in stderr and "ZeroDivisionError" in stderr
    # sys.exit ends the cell, not the session.
    body = cell(url, s, "import sys\nprint('bye')\nsys.exit(3)")
    assert (body["status"], body["run_result"]["return_code"], out(body)) == ("Failed", 3, "bye\n")
    assert out(cell(url, s, "print(x)")) == "41\n"
    # A stateless request is untouched by any session.
    assert out(run(url, "print('x' in dir())")) == "False\n"
    assert close(url, s) == {"closed": True}


def test_sessions_never_share_state(tier_url):
    tier, base = tier_url
    a, b = sid(), sid()
    marker = uuid.uuid4().hex[:12]
    litter = (
        f"import os, subprocess, sys\nsecret = '{marker}'\nos.retool_leak = '{marker}'\n"
        f"os.environ['RETOOL_LEAK'] = '{marker}'\nopen('/tmp/{marker}', 'w').write('{marker}')\n"
        f"open('/dev/shm/{marker}', 'w').write('{marker}')\nopen('left.txt', 'w').write('{marker}')\n"
        "print(os.getuid())"
    )
    look = (
        "import json, os\n"
        "def readable(path):\n"
        "    try:\n        return open(path).read()\n    except OSError:\n        return None\n"
        f"print(json.dumps({{'secret': globals().get('secret'), 'module': getattr(os, 'retool_leak', None),"
        f" 'env': os.environ.get('RETOOL_LEAK'), 'tmp': readable('/tmp/{marker}'),"
        f" 'shm': readable('/dev/shm/{marker}'), 'workdir': sorted(os.listdir('.')), 'uid': os.getuid()}}))"
    )
    first = cell(base, a, litter)
    assert first["status"] == "Success", first
    uid_a = int(out(first))
    seen = json.loads(out(cell(base, b, look)))
    assert seen["uid"] != uid_a
    assert {k: seen[k] for k in ("secret", "module", "env", "tmp", "shm", "workdir")} == {
        "secret": None,
        "module": None,
        "env": None,
        "tmp": None,
        "shm": None,
        "workdir": [],
    }
    # Close b first, so that a's box is the next one handed out (free boxes are a stack).
    assert close(base, b) == {"closed": True}
    _wait_boxes_free(base, 1)
    assert close(base, a) == {"closed": True}
    _wait_boxes_free(base, 2)
    assert uid_processes(range(uid_a, uid_a + 1)) == []
    assert not Path(f"/tmp/{marker}").exists() and not Path(f"/dev/shm/{marker}").exists()  # rlimit: the host's
    # The next session gets A's box, hence A's uid, and still finds nothing of A.
    seen = json.loads(out(cell(base, sid(), look)))
    assert seen["uid"] == uid_a
    assert {k: seen[k] for k in ("secret", "module", "env", "tmp", "shm", "workdir")} == {
        "secret": None,
        "module": None,
        "env": None,
        "tmp": None,
        "shm": None,
        "workdir": [],
    }


def _session_uid(base: str, session: str) -> int:
    return int(out(cell(base, session, "import os\nprint(os.getuid())")))


@pytest.mark.parametrize("how", ["os._exit", "external SIGKILL"])
def test_a_crashed_session_loses_only_its_own_state(url, how):
    a, b = sid(), sid()
    for session in (a, b):
        assert cell(url, session, f"value = {session!r}")["status"] == "Success"
    if how == "os._exit":
        body = cell(url, a, "import os\nos._exit(3)")
        assert body["run_result"]["return_code"] == 3
        assert "the session ended during this call (exit code 3); its state is lost" in body["message"]
        reason = "exit code 3"
    else:
        uid = _session_uid(url, a)
        died = get(url + "/health")["sessions"]["counters"]["died"]
        victims = uid_processes(range(uid, uid + 1))
        assert victims
        for pid, _ in victims:
            os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 5
        while get(url + "/health")["sessions"]["counters"]["died"] == died and time.monotonic() < deadline:
            time.sleep(0.05)
        reason = "killed by signal 9"
    body = cell(url, a, "print(value)")
    stderr = body["run_result"]["stderr"]
    assert stderr.startswith(LOST + f"{a!r} lost its state: its interpreter ended"), stderr
    assert reason in stderr and "NameError" in stderr and reason in body["message"]
    assert out(cell(url, a, "print('new session works')")) == "new session works\n"
    assert out(cell(url, b, "print(value)")) == f"{b}\n"
    close(url, a), close(url, b)


def test_timeout_interrupts_the_cell_and_keeps_the_session(url):
    s = sid()
    cell(url, s, "kept = 7")
    body = cell(url, s, "print('start', flush=True)\nwhile True:\n    pass", run_timeout=1)
    assert body["run_result"]["status"] == "TimeLimitExceeded" and out(body) == "start\n"
    assert "KeyboardInterrupt" in body["run_result"]["stderr"] and "state is kept" in body["message"]
    assert out(cell(url, s, "print(kept)")) == "7\n"
    # A cell that ignores the interrupt is killed with its session, which says so on the next call.
    body = cell(
        url, s, "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True:\n    pass", run_timeout=1
    )
    assert body["run_result"]["status"] == "TimeLimitExceeded" and "state is lost" in body["message"]
    body = cell(url, s, "print(kept)")
    assert "did not stop at its timeout" in body["run_result"]["stderr"] and "NameError" in body["run_result"]["stderr"]
    close(url, s)


def _states(uid: int) -> dict[int, str]:
    states = {}
    for pid, _ in uid_processes(range(uid, uid + 1)):
        try:
            states[pid] = Path(f"/proc/{pid}/status").read_text().split("\nState:")[1].split()[0]
        except (OSError, IndexError):
            pass
    return states


def _cpu_ticks(pid: int) -> int:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime


def test_an_idle_session_is_stopped_and_its_children_are_gone(url):
    s = sid()
    code = (
        "import os, subprocess, sys, threading\nuid = os.getuid()\n"
        "def spin():\n    while True:\n        pass\n"
        "threading.Thread(target=spin, daemon=True).start()\n"
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'], start_new_session=True)\n"
        "print(uid)"
    )
    uid = int(out(cell(url, s, code)))
    deadline = time.monotonic() + 5
    while set(_states(uid).values()) != {"T"} and time.monotonic() < deadline:
        time.sleep(0.05)
    states = _states(uid)
    assert len(states) == 1 and set(states.values()) == {"T"}, states  # the interpreter only, stopped
    (pid,) = states
    before = _cpu_ticks(pid)
    time.sleep(0.5)
    assert _cpu_ticks(pid) == before  # the spinning thread gets no CPU while the session is idle
    body = cell(url, s, "print(threading.active_count(), uid)")
    assert out(body) == f"2 {uid}\n"  # the thread is state too, and runs again during the cell
    close(url, s)


def test_close_frees_the_session_and_is_idempotent(url):
    s = sid()
    uid = _session_uid(url, s)
    cell(url, s, "x = 1")
    live = get(url + "/health")["sessions"]["live"]
    status, body = post(url + f"/sessions/{s}/close", {})
    assert (status, body) == (200, {"closed": True})
    assert get(url + "/health")["sessions"]["live"] == live - 1
    deadline = time.monotonic() + 5
    while uid_processes(range(uid, uid + 1)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert uid_processes(range(uid, uid + 1)) == []
    req = urllib.request.Request(url + f"/sessions/{s}", method="DELETE")
    with urllib.request.urlopen(req, timeout=10) as resp:
        assert json.loads(resp.read()) == {"closed": False}
    # Closed by its client: the next call with that id is simply a new session, without a lost-state notice.
    body = cell(url, s, "print(x)")
    assert "NameError" in body["run_result"]["stderr"] and LOST not in body["run_result"]["stderr"]
    close(url, s)


def test_session_id_must_be_a_plain_token(url):
    for bad in ("", "a/b", "x" * 201, 5, "spa ce"):
        reply = call(url, "1", session_id=bad)
        assert http_status(reply) == 422 and '"loc": ["body", "session_id"]' in reply.problem, (bad, reply.problem)
    assert out(run(url, "print(1)", session_id=None)) == "1\n"  # null = stateless


@pytest.fixture(scope="module")
def small_url():
    """One slot, two sessions, a short idle timeout and queue timeout: easy to evict and to overload."""
    with _server(slots=1, max_sessions=2, session_idle_timeout=2, queue_timeout=1) as base:
        yield base


def test_a_full_server_keeps_its_open_sessions():
    # An open session may belong to a trajectory whose model is still writing its next turn: a new session waits for
    # a free one (here: no longer than the 1 s queue timeout, then 504), it never evicts one.
    with _server(slots=1, max_sessions=2, session_idle_timeout=120, queue_timeout=1) as base:
        a, b, c = sid(), sid(), sid()
        cell(base, a, "v = 'a'")
        cell(base, b, "v = 'b'")
        reply = call(base, "v = 'c'", session_id=c)
        assert http_status(reply) == 504 and "--max-sessions" in reply.problem, reply.problem
        assert out(cell(base, a, "print(v)")) == "a\n" and out(cell(base, b, "print(v)")) == "b\n"
        assert close(base, a) == {"closed": True}
        body = cell(base, c, "v = 'c'\nprint(v)")  # a's box is free again
        assert out(body) == "c\n" and LOST not in body["run_result"]["stderr"]
        assert out(cell(base, b, "print(v)")) == "b\n"
        counters = get(base + "/health")["sessions"]["counters"]
        assert (counters["evicted_idle"], counters["evicted_memory"], counters["lost_notices"]) == (0, 0, 0)


def test_low_host_memory_evicts_idle_sessions_and_says_so():
    # A floor above any host's MemAvailable: memory counts as low all the time, so every idle session goes.
    with _server(slots=1, max_sessions=4, session_memory_floor_mb=10**9) as base:
        s = sid()
        client = SandboxClient(base, TEST_POLICY)
        # A running cell is never evicted, however low memory is (the reaper looks every second).
        body = client.run_sync("import time\nv = 1\ntime.sleep(2.5)\nprint('finished')", session_id=s).body
        assert out(body) == "finished\n" and body["session"] == {"id": s, "cell": 1, "lost": None}, body
        deadline = time.monotonic() + 10
        while get(base + "/health")["sessions"]["live"] and time.monotonic() < deadline:
            time.sleep(0.1)
        health = get(base + "/health")["sessions"]
        assert health["live"] == 0 and health["counters"]["evicted_memory"] == 1, health
        reply = client.run_sync("print(v)", session_id=s)
        lost = reply.body["session"]["lost"]
        assert "host memory ran low" in lost and "--session-memory-floor-mb" in lost and "least recently used" in lost
        assert reply.body["session"]["cell"] == 1 and reply.session_lost == lost
        assert reply.body["run_result"]["stderr"].startswith(LOST) and "NameError" in reply.body["run_result"]["stderr"]


def test_every_session_reply_counts_its_cell_and_says_when_the_state_was_lost(url):
    client = SandboxClient(url, TEST_POLICY)
    s = sid()
    for number in (1, 2, 3):
        reply = client.run_sync(f"n = {number}", session_id=s)
        assert reply.body["session"] == {"id": s, "cell": number, "lost": None} and reply.session_lost == ""
    reply = client.run_sync("import os\nos._exit(3)", session_id=s)
    assert reply.body["session"] == {"id": s, "cell": 4, "lost": None}  # the cell that ended the session
    reply = client.run_sync("print(n)", session_id=s)
    report = reply.body["session"]
    assert report["cell"] == 1 and "lost its state" in report["lost"] and "exit code 3" in report["lost"], report
    assert reply.session_lost == report["lost"]
    assert out(client.run_sync("n = 1\nprint(n)", session_id=s).body) == "1\n"
    assert "session" not in client.run_sync("print(1)").body  # stateless replies stay SandboxFusion's shape
    close(url, s)


def test_a_restarted_server_is_noticed_by_the_client():
    s = sid()
    with _server(slots=1, max_sessions=4) as first:
        client = SandboxClient(first, TEST_POLICY)
        assert client.run_sync("x = 6", session_id=s).session_lost == ""
        assert out(client.run_sync("print(x * 7)", session_id=s).body) == "42\n"
        port = urlsplit(first).port
    with _server(slots=1, max_sessions=4, port=port) as second:  # the same address, a new server
        assert second == first
        reply = client.run_sync("print(x * 7)", session_id=s)
        # The new server never saw the session: its reply says cell 1 and no reason; the client knows it ran two.
        assert reply.body["session"] == {"id": s, "cell": 1, "lost": None}
        assert "NameError" in reply.body["run_result"]["stderr"]
        assert "no longer had this session" in reply.session_lost and "2 earlier call(s)" in reply.session_lost


def test_cells_a_stopping_server_cuts_off_are_retried_on_the_next_one():
    """A graceful stop (SIGTERM: what a supervisor's restart sends) answers the cells it ends with 503, which clients
    retry on the server that comes up next, instead of an error the model would read as its code's (the soak: a
    restart during a step failed two trajectories as sandbox_unavailable, past max_failed_share: the run stopped)."""
    raw, riding = sid(), sid()
    policy = replace(TEST_POLICY, reconnect_budget_s=60, retry_backoff_s=0.2)  # as the tool rides out a restart
    long_cell = "import time\ntime.sleep(15)\nprint(x)"
    with _server(slots=2, max_sessions=4) as first, ThreadPoolExecutor(max_workers=2) as pool:
        patient = SandboxClient(first, policy)
        for s in (raw, riding):
            assert patient.run_sync("x = 6", session_id=s).status == "ok"
        cut = pool.submit(call, first, long_cell, session_id=raw)  # no retries: the reply the stop gave
        ridden = pool.submit(patient.run_sync, long_cell, session_id=riding)
        deadline = time.monotonic() + 30
        while get(first + "/health")["in_flight"] < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        pid = get(first + "/health")["pid"]
        os.kill(pid, signal.SIGTERM)
        reply = cut.result(timeout=60)
        assert http_status(reply) == 503 and "server stopped during this cell" in reply.problem, reply
        while _state(pid) not in ("gone", "Z") and time.monotonic() < deadline + 30:
            time.sleep(0.1)
        with _server(slots=2, max_sessions=4, port=urlsplit(first).port) as second:
            reply = ridden.result(timeout=120)
            # It ran on the new server in a fresh interpreter: x is gone, and the client says so.
            assert reply.retries > 0 and "NameError" in reply.body["run_result"]["stderr"], reply
            assert "no longer had this session" in reply.session_lost, reply.session_lost
            assert get(second + "/health")["sessions"]["counters"]["started"] == 1


def test_an_idle_session_is_evicted_and_says_so(small_url):
    s = sid()
    cell(small_url, s, "v = 1")
    deadline = time.monotonic() + 15  # idle timeout 2 s, checked every 0.5 s
    while get(small_url + "/health")["sessions"]["counters"]["evicted_idle"] == 0 and time.monotonic() < deadline:
        time.sleep(0.2)
    body = cell(small_url, s, "print(v)")
    assert "idle for more than 2 s" in body["run_result"]["stderr"] and "NameError" in body["run_result"]["stderr"]


def test_ten_times_more_sessions_than_slots_is_bounded(small_url):
    code = "import time\ntime.sleep(0.3)\nprint('done')"
    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=10) as pool:
        replies = list(pool.map(lambda s: call(small_url, code, session_id=s), [sid()[:8] for _ in range(10)]))
    assert time.monotonic() - started < 15
    codes = [http_status(reply) for reply in replies]
    assert set(codes) <= {200, 504} and 200 in codes, codes
    for reply in replies:
        if reply.body is not None:
            assert reply.body["status"] == "Success" and out(reply.body) == "done\n", reply.body
        else:
            assert '"status": "SandboxError"' in reply.problem and "retry" in reply.problem, reply.problem
    health = get(small_url + "/health")
    assert health["in_flight"] == 0 and health["sessions"]["live"] <= 2 and health["sessions"]["busy"] == 0


def test_sessions_can_be_disabled():
    with _server(slots=1, max_sessions=0) as base:
        reply = call(base, "1", session_id="abc")
        assert http_status(reply) == 422 and "disabled" in reply.problem, reply.problem
        assert get(base + "/health")["sessions"] is None


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def _exe(pid: int) -> str:
    try:
        return os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return ""


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/status").read_text().split("\nState:")[1].split()[0]
    except (OSError, IndexError):
        return "gone"


def test_sessions_without_root(bwrap_nonroot_url):
    """bwrap in a user namespace (what most cluster users get): state persists, nothing crosses sessions, idle
    sessions are stopped (found below the server, as they share its uid)."""
    a, b = sid(), sid()
    assert cell(bwrap_nonroot_url, a, "import os\nx = 5\nopen('/tmp/mine', 'w').write('a')")["status"] == "Success"
    assert out(cell(bwrap_nonroot_url, a, "print(x, open('/tmp/mine').read())")) == "5 a\n"
    server_pid = get(bwrap_nonroot_url + "/health")["pid"]
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        sessions = [
            pid
            for pid in descendants(server_pid)
            if b"_retool_session" in _cmdline(pid) and not _exe(pid).endswith("/bwrap")
        ]
        if sessions and {_state(pid) for pid in sessions} == {"T"}:
            break
        time.sleep(0.05)
    assert len(sessions) == 1 and _state(sessions[0]) == "T"  # the idle session is stopped
    body = cell(bwrap_nonroot_url, b, "import os\nprint(os.path.exists('/tmp/mine'))\nprint(x)")
    assert out(body) == "False\n" and "NameError" in body["run_result"]["stderr"]
    body = cell(bwrap_nonroot_url, a, "import os\nos._exit(4)")
    assert body["run_result"]["return_code"] == 4 and "state is lost" in body["message"]
    assert "exit code 4" in cell(bwrap_nonroot_url, a, "print(1)")["run_result"]["stderr"]
    assert close(bwrap_nonroot_url, a) == {"closed": True} and close(bwrap_nonroot_url, b) == {"closed": True}


def test_a_session_that_forges_reports_only_ends_itself(url):
    a, b = sid(), sid()
    cell(url, b, "kept = 'b'")
    forge = (
        "import os, socket, stat\n"
        "for fd in map(int, os.listdir('/proc/self/fd')):\n"
        "    try:\n        mode = os.fstat(fd).st_mode\n    except OSError:\n        continue\n"
        "    if stat.S_ISSOCK(mode):\n"
        "        socket.socket(fileno=os.dup(fd)).send(b'R forged')\n"
        "print('sent')"
    )
    body = cell(url, a, forge)
    assert "out of turn" in body["message"] and "state is lost" in body["message"], body
    body = cell(url, a, "print(1)")
    assert "out of turn" in body["run_result"]["stderr"] and out(body) == "1\n"
    assert out(cell(url, b, "print(kept)")) == "b\n"
    assert out(run(url, "print('stateless')")) == "stateless\n"
    close(url, a), close(url, b)


_INSIDE = (
    "import json, os, random, socket, sys\n"
    "import numpy\n"
    "status = dict(line.split(':\\t', 1) for line in open('/proc/self/status').read().splitlines() if ':\\t' in line)\n"
    "listener = socket.socket()\n"
    "listener.bind(('127.0.0.1', 0))\n"
    "listener.listen()\n"
    "mine = socket.create_connection(listener.getsockname(), timeout=2)\n"
    "terminal = os.openpty()\n"
    "print(json.dumps({'preimported': 'sympy' in sys.modules, 'uid': os.getuid(), 'pid': os.getpid(),\n"
    "    'procs': sorted(int(p) for p in os.listdir('/proc') if p.isdigit()),\n"
    "    'caps': [status[k].strip() for k in ('CapInh', 'CapPrm', 'CapEff', 'CapBnd', 'CapAmb')],\n"
    "    'no_new_privs': status['NoNewPrivs'].strip(), 'runs': os.listdir('/.retool-runs'),\n"
    "    'port': listener.getsockname()[1], 'draws': [random.random(), float(numpy.random.rand())],\n"
    "    'workdir': os.getcwd(), 'home': os.environ['HOME'], 'tmpdir': os.environ['TMPDIR'],\n"
    "    'ptys': sorted(os.listdir('/dev/pts'))}))\n"
)


def test_forked_sessions_are_preimported_and_isolated_from_each_other(url):
    """Sessions forked from the zygote start with its imports and still get a sandbox each: their own pid,
    network and mount namespaces (no other session's work dir, processes or listening sockets in reach), no
    capability, no new privileges, their own uid, and random generators of their own."""
    assert get(url + "/health")["sessions"]["forked"] is True
    a, b = sid(), sid()
    seen = {s: json.loads(out(cell(url, s, _INSIDE))) for s in (a, b)}
    for s in (a, b):
        assert seen[s]["preimported"] and seen[s]["pid"] == 1 and seen[s]["procs"] == [1], seen[s]
        assert seen[s]["caps"] == ["0000000000000000"] * 5 and seen[s]["no_new_privs"] == "1"
        assert seen[s]["runs"] == [] and seen[s]["workdir"] == seen[s]["home"] == "/workspace"
        assert seen[s]["tmpdir"] == "/tmp" and seen[s]["ptys"] == ["0", "ptmx"]  # its own pty, none of the other's
    assert seen[a]["uid"] != seen[b]["uid"] and seen[a]["draws"][0] != seen[b]["draws"][0]
    assert seen[a]["draws"][1] != seen[b]["draws"][1]
    # a's listener (still open: it is a's state) cannot be reached from b's network namespace.
    body = cell(
        url,
        b,
        f"import socket\ntry:\n    socket.create_connection(('127.0.0.1', {seen[a]['port']}), 2)\n"
        "    print('reached')\nexcept OSError as exc:\n    print(type(exc).__name__)",
    )
    assert out(body) == "ConnectionRefusedError\n"
    assert close(url, a) == {"closed": True} and close(url, b) == {"closed": True}


def _zygote(server_pid: int) -> int:
    """The session zygote below the server: the root process that runs the zygote's code (its sessions, forks of it,
    run as their own uids)."""
    found = [
        pid
        for pid in descendants(server_pid)
        if b"_retool_zygote" in _cmdline(pid)
        and not _exe(pid).endswith("/bwrap")
        and os.stat(f"/proc/{pid}").st_uid == 0
    ]
    assert len(found) == 1, found
    return found[0]


def test_each_forked_session_gets_a_pid_namespace_and_the_zygote_keeps_its_own(url):
    """The zygote unshares a pid namespace for each session's interpreter (its own child, pid 1 there) and goes back
    to its own after the fork: otherwise the next session's start would fail, or land in the last one's namespace."""
    sessions = [sid() for _ in range(3)]
    interpreters = []
    for s in sessions:
        uid = _session_uid(url, s)
        mine = uid_processes(range(uid, uid + 1))
        assert len(mine) == 1, mine  # the interpreter alone: no program of it still runs
        interpreters.append(mine[0][0])
    zygote = _zygote(get(url + "/health")["pid"])  # started with the first session the server forked
    own = os.readlink(f"/proc/{zygote}/ns/pid")
    assert os.readlink(f"/proc/{zygote}/ns/pid_for_children") == own
    for pid in interpreters:
        status = dict(line.split(":\t", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines())
        assert int(status["PPid"]) == zygote and status["NSpid"].split()[-1] == "1", status
    namespaces = {os.readlink(f"/proc/{pid}/ns/pid") for pid in interpreters}
    assert len(namespaces) == 3 and own not in namespaces
    for s in sessions:
        assert close(url, s) == {"closed": True}


def test_a_lost_zygote_ends_its_sessions_and_the_next_session_gets_a_new_one():
    with _server(slots=1, max_sessions=3, session_idle_timeout=120) as base:
        a, b = sid(), sid()
        for s in (a, b):
            assert cell(base, s, f"value = {s!r}")["status"] == "Success"
        uids = {_session_uid(base, s) for s in (a, b)}
        server_pid = get(base + "/health")["pid"]
        zygote = _zygote(server_pid)
        os.kill(zygote, signal.SIGKILL)
        deadline = time.monotonic() + 5
        while get(base + "/health")["sessions"]["counters"]["died"] < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert get(base + "/health")["sessions"]["live"] == 0
        _wait_boxes_free(base, 3)
        assert uid_processes(range(min(uids), max(uids) + 1)) == []  # the sessions went with their zygote
        for s in (a, b):
            body = cell(base, s, "import sys\nprint('sympy' in sys.modules)\nprint(value)")
            stderr = body["run_result"]["stderr"]
            assert stderr.startswith(LOST + f"{s!r} lost its state") and "session zygote went away" in stderr, stderr
            assert "NameError" in stderr and out(body) == "True\n"  # a new session, from a new zygote
        assert _zygote(server_pid) != zygote


def test_sessions_start_afresh_where_the_zygote_cannot_start_them(tmp_path, monkeypatch):
    """A host that refuses what a forked session needs (here: the session's bind of its work dir fails, as a mount
    would under a restrictive security profile) loses one session start, then every session starts afresh."""
    import asyncio
    import sys

    from retool_sandbox.executor import Executor
    from retool_sandbox.isolation import Interpreter, Limits, make_isolation
    from retool_sandbox.uids import reserve_uids

    if os.geteuid() != 0 or shutil.which("bwrap") is None:
        pytest.skip("forked sessions need a root server with bubblewrap")

    async def scenario() -> None:
        first, lock = reserve_uids(8)
        iso = make_isolation("bwrap", Interpreter.probe(sys.executable), first)
        monkeypatch.setattr(iso, "zygote_runs", lambda runs: "/no-such-runs")
        executor = Executor(iso, Limits(None, 20, 64, 16), str(tmp_path))
        try:
            assert executor.forks_sessions
            refused = executor.start_session(4, None)
            with pytest.raises(RuntimeError, match="could not be started: .*mount"):
                await refused.wait_ready()
            await refused.close()
            fresh = executor.start_session(5, None)
            await fresh.wait_ready()
            assert fresh.zygote is None and not executor.forks_sessions
            assert "mount" in executor.session_fork_failure
            await fresh.close()
        finally:
            await executor.close()
            os.close(lock)

    asyncio.run(scenario())


def test_a_forked_session_is_stopped_and_killed_through_its_pidfd_not_by_uid(tmp_path, monkeypatch):
    """Around each cell a forked session is resumed and stopped, and at its close killed, through the pidfd of its
    interpreter that the zygote sent (pid 1 of the session's pid namespace, which dies with it): a signal by uid
    runs kill(-1) as that uid, which checks every process on the host (0.3 ms with 600 live sessions). A cell's
    timeout interrupt, which must reach what the cell started, still goes by uid."""
    import asyncio
    import sys

    from retool_sandbox import uid_signals
    from retool_sandbox.executor import Executor, RunSpec
    from retool_sandbox.isolation import Interpreter, Limits, make_isolation
    from retool_sandbox.uids import reserve_uids

    if os.geteuid() != 0 or shutil.which("bwrap") is None:
        pytest.skip("forked sessions need a root server with bubblewrap")
    by_uid = []
    request = uid_signals._pool.request
    monkeypatch.setattr(
        uid_signals._pool,
        "request",
        lambda uid, signum, passes: (by_uid.append(signal.Signals(signum).name), request(uid, signum, passes))[1],
    )

    async def scenario() -> None:
        first, lock = reserve_uids(8)
        executor = Executor(
            make_isolation("bwrap", Interpreter.probe(sys.executable), first), Limits(None, 20, 64, 16), str(tmp_path)
        )
        try:
            session = executor.start_session(4, None)
            await session.wait_ready()
            assert session.zygote is not None and session.interpreter_pidfd is not None
            outcomes = []
            for code in ("import threading\nx = 6", "print(x * 7)"):
                outcomes.append(await executor.run_cell(session, RunSpec(code, 10)))
                await session.freeze()
                states = {pid: _state(pid) for pid, _ in uid_processes(range(session.uid, session.uid + 1))}
                assert list(states.values()) == ["T"], states  # the interpreter alone, stopped
            assert [o.stdout for o in outcomes] == ["", "42\n"]
            assert by_uid == []
            spinning = (
                "import subprocess, sys\nsubprocess.Popen([sys.executable, '-c', 'while True: pass'])\n"
                "while True:\n    pass"
            )
            outcome = await executor.run_cell(session, RunSpec(spinning, 1))
            assert outcome.status == "TimeLimitExceeded" and by_uid == ["SIGINT"]
            uid = range(session.uid, session.uid + 1)
            busy = asyncio.ensure_future(
                executor.run_cell(
                    session,
                    RunSpec(
                        "import subprocess, sys, time\nsubprocess.Popen([sys.executable, '-c', 'while True: pass'])\n"
                        "time.sleep(30)",
                        60,
                    ),
                )
            )
            deadline = time.monotonic() + 10
            while len(uid_processes(uid)) < 2 and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            assert len(uid_processes(uid)) == 2  # closed mid-cell: the interpreter and what the cell started
            await session.close()
            assert by_uid == ["SIGINT"] and uid_processes(uid) == []
            assert (await busy).return_code == -9
            late = os.pidfd_open(os.getpid())
            session.on_zygote("P", "1", late)  # a start reported after the close: its pidfd is closed, not kept
            assert session.interpreter_pidfd is None
            with pytest.raises(OSError):
                os.fstat(late)
        finally:
            await executor.close()
            os.close(lock)

    asyncio.run(scenario())


def test_a_forked_session_still_sees_an_interpreter_that_lives_under_tmp():
    """A session gets a fresh /tmp; an interpreter under /tmp (a clone or venv there) must stay visible in it."""
    import tempfile
    import venv

    if os.geteuid() != 0 or shutil.which("bwrap") is None:
        pytest.skip("forked sessions need a root server with bubblewrap")
    with tempfile.TemporaryDirectory(dir="/tmp") as where:  # /tmp itself, whatever TMPDIR (and tmp_path) says
        assert where.startswith("/tmp/")
        tmp_path = Path(where)
        venv.create(tmp_path / "py", with_pip=False)
        python = str(tmp_path / "py" / "bin" / "python")
        with _server(slots=1, max_sessions=2, python=python) as base:
            assert get(base + "/health")["sessions"]["forked"] is True
            body = cell(
                base,
                sid(),
                "import fractions, os, subprocess, sys\nprint(sys.prefix, os.listdir('/tmp'))\n"
                "print(subprocess.run([sys.executable, '-c', 'print(7)'], capture_output=True,"
                " text=True).stdout, end='')\nopen('/tmp/mine', 'w').write('x')",
            )
            assert body["status"] == "Success", body
            prefix, _, rest = out(body).partition(" ")
            assert prefix == str(tmp_path / "py") and out(body).endswith("\n7\n") and "'mine'" not in rest
