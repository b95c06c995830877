"""Hostile programs against each isolating tier: the right status, and the server and host unharmed."""

from __future__ import annotations

import ipaddress
import os
import socket
import subprocess
import threading
import time
import uuid
from pathlib import Path

import pytest
from sandbox_helpers import SECRET, descendants, get, processes_with, run, uid_processes

from retool_sandbox.isolation import SANDBOX_ETC


def _slot_uids(url: str) -> range | None:
    """The uids the server's sandboxes run as: two per slot (fresh mode alternates them; fork mode uses one).
    None for a server without root, whose sandboxes run as its own user."""
    uids = get(url + "/health")["uids"]
    return None if uids is None else range(uids[0], uids[1] + 1)


def _assert_unharmed(url: str) -> None:
    """Server answers, no process of the slot uids is left beyond fresh mode's idle spares, the host can still
    fork, and a new run works."""
    assert get(url + "/v1/ping") == "pong"
    deadline = time.monotonic() + 5
    while _leftovers(url) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _leftovers(url) == []
    assert subprocess.run(["true"], timeout=10).returncode == 0
    assert run(url, "print('still fine')")["run_result"]["stdout"] == "still fine\n"


def _leftovers(url: str) -> list[tuple[int, int]]:
    """Processes of the server's sandbox uids other than fresh mode's spares (one interpreter per uid, blocked on
    read). A fork server runs as root, so in fork mode an idle server has no process of these uids at all."""
    uids = _slot_uids(url)
    if uids is None:  # same uid as the server: look below it for anything that is not a sandbox or a spare
        return [
            (pid, -1) for pid in descendants(get(url + "/health")["pid"]) if b"retool-bootstrap" not in _cmdline(pid)
        ]
    procs = uid_processes(uids)
    per_uid: dict[int, list[int]] = {}
    for pid, uid in procs:
        per_uid.setdefault(uid, []).append(pid)
    # A spare is a single process per uid whose command line runs the bootstrap.
    return [
        (pid, uid)
        for uid, pids in per_uid.items()
        for pid in pids
        if len(pids) > 1 or b"retool-bootstrap" not in _cmdline(pid)
    ]


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def test_fork_bomb(tier_url):
    tier, url = tier_url
    if tier == "bwrap-nonroot":
        pytest.skip("without root there is no per-run process limit: a real fork bomb would load the whole host")
    code = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"
    started = time.monotonic()
    body = run(url, code, run_timeout=2)
    assert body["run_result"]["status"] == "TimeLimitExceeded"
    assert body["status"] == "Failed"
    assert time.monotonic() - started < 15
    if get(url + "/health")["mode"] == "fork":
        # The fork server reaps what its sweep killed before it answers: a zombie left for the container's pid 1
        # would still count against the slot uid's process limit, and the slot's next program could not fork.
        assert uid_processes(_slot_uids(url), zombies=True) == []
    _assert_unharmed(url)


def test_infinite_loop(tier_url):
    tier, url = tier_url
    body = run(url, "while True:\n    pass", run_timeout=1.5)
    assert body["run_result"]["status"] == "TimeLimitExceeded"
    assert body["run_result"]["return_code"] is None
    assert 1.5 <= body["run_result"]["execution_time"] < 4
    _assert_unharmed(url)


def test_sleep_past_timeout_returns_partial_output(tier_url):
    tier, url = tier_url
    # No flush: what models write. The interrupt before the kill lets Python flush its buffers.
    code = "import sys, time\nprint('partial')\nsys.stderr.write('err part\\n')\ntime.sleep(30)"
    body = run(url, code, run_timeout=1)
    assert body["run_result"]["status"] == "TimeLimitExceeded"
    assert body["run_result"]["return_code"] is None
    assert body["run_result"]["stdout"] == "partial\n"
    assert body["run_result"]["stderr"].startswith("err part\n")
    assert "KeyboardInterrupt" in body["run_result"]["stderr"]  # shows where the program was stuck
    _assert_unharmed(url)


def test_timeout_ignoring_sigint_is_still_killed(tier_url):
    tier, url = tier_url
    code = (
        "import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nprint('stubborn', flush=True)\n"
        "while True:\n    time.sleep(0.01)"
    )
    body = run(url, code, run_timeout=1)
    assert body["run_result"]["status"] == "TimeLimitExceeded"
    assert body["run_result"]["stdout"] == "stubborn\n"
    assert 1 <= body["run_result"]["execution_time"] < 4
    _assert_unharmed(url)


def test_memory_hog(tier_url):
    tier, url = tier_url
    code = "chunks = []\nwhile True:\n    chunks.append(bytearray(50 * 1024 * 1024))"
    body = run(url, code, memory_limit_mb=512)
    assert body["status"] == "Failed"
    assert body["run_result"]["status"] == "Finished"
    assert "MemoryError" in body["run_result"]["stderr"]
    _assert_unharmed(url)


def test_numpy_under_1024_mb(tier_url):
    tier, url = tier_url
    code = (
        "import threading\n"
        "try:\n    import numpy as np\nexcept ImportError:\n    print('no numpy')\nelse:\n"
        "    a = np.random.default_rng(0).random((300, 300))\n"
        "    print(float(np.linalg.det(a @ a.T + 300 * np.eye(300))) > 0)\n"
        "ts = [threading.Thread(target=lambda: None) for _ in range(16)]\n"
        "[t.start() for t in ts]; [t.join() for t in ts]\nprint('threads ok')"
    )
    body = run(url, code, memory_limit_mb=1024)
    assert body["status"] == "Success", body["run_result"]["stderr"]
    if tier in ("bwrap", "bwrap-fresh"):  # the server's own venv, which has numpy
        assert body["run_result"]["stdout"] == "True\nthreads ok\n"
    else:
        assert body["run_result"]["stdout"].endswith("threads ok\n")


def test_50_mb_of_output_is_not_a_timeout(tier_url):
    tier, url = tier_url
    code = "import sys\nfor _ in range(50):\n    sys.stdout.write('x' * (1024 * 1024))\nprint('done', file=sys.stderr)"
    body = run(url, code)  # SandboxFusion turns this into a false TimeLimitExceeded; it must finish
    assert body["status"] == "Success"
    assert body["run_result"]["status"] == "Finished"
    out = body["run_result"]["stdout"]
    cap = get(url + "/health")["limits"]["max_output_bytes"]
    assert out.startswith("x" * cap)
    assert f"{50 * 1024 * 1024 - cap} more bytes dropped" in out
    assert body["run_result"]["stderr"] == "done\n"
    _assert_unharmed(url)


def test_network_to_host_loopback_is_blocked(bwrap_url):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(5)
    server.settimeout(0.2)
    port = server.getsockname()[1]
    accepted = []
    finished = threading.Event()

    def accept_loop():
        while not finished.is_set():
            try:
                accepted.append(server.accept()[0])
            except OSError:
                pass

    thread = threading.Thread(target=accept_loop)
    thread.start()
    code = (
        "import socket\n"
        f"try:\n    socket.create_connection(('127.0.0.1', {port}), timeout=2)\n    print('connected')\n"
        "except OSError as e:\n    print('blocked', type(e).__name__)\n"
        "try:\n    socket.getaddrinfo('pypi.org', 443)\n    print('dns works')\nexcept OSError:\n    print('no dns')"
    )
    try:
        body = run(bwrap_url, code)
    finally:
        finished.set()
        thread.join()
    server.close()
    assert body["run_result"]["stdout"].startswith("blocked"), body
    assert "no dns" in body["run_result"]["stdout"]
    assert accepted == []


@pytest.fixture(params=["bwrap", "bwrap-fresh", "bwrap-nonroot"])
def bwrap_tier_url(request) -> str:
    return request.getfixturevalue(f"{request.param.replace('-', '_')}_url")


LOCALHOST_SERVER = """\
import http.server, os, threading, urllib.request
server = http.server.HTTPServer(('localhost', 0), http.server.SimpleHTTPRequestHandler)
threading.Thread(target=server.serve_forever, daemon=True).start()
for host in ('localhost', '127.0.0.1'):
    with urllib.request.urlopen(f'http://{host}:{server.server_port}/', timeout=10) as reply:
        print(host, reply.status)
for name in ('passwd', 'group', 'resolv.conf', 'nsswitch.conf', 'hostname', 'shadow'):
    print(name, os.path.exists('/etc/' + name))
print(open('/etc/hosts').read(), end='')
"""


def test_localhost_is_the_sandboxs_own_loopback(bwrap_tier_url):
    # A program may serve and query http://localhost:<port> inside its sandbox, as on SandboxFusion; the name comes
    # from the sandbox's own hosts file, never the host's, and no other host /etc file is there.
    body = run(bwrap_tier_url, LOCALHOST_SERVER)
    assert body["status"] == "Success", body
    lines = body["run_result"]["stdout"].splitlines()
    assert lines[:2] == ["localhost 200", "127.0.0.1 200"], lines
    assert lines[2:8] == [
        f"{name} False" for name in ("passwd", "group", "resolv.conf", "nsswitch.conf", "hostname", "shadow")
    ], lines
    hosts = "\n".join(lines[8:]) + "\n"
    assert hosts == (SANDBOX_ETC / "hosts").read_text()
    entries = [line.split() for line in lines[8:] if line.strip() and not line.startswith("#")]
    assert entries and all(ipaddress.ip_address(entry[0]).is_loopback for entry in entries)
    host_names = {
        name
        for line in Path("/etc/hosts").read_text().splitlines()
        if not line.startswith("#")
        for name in line.split()[1:]
    } - {name for entry in entries for name in entry[1:]}
    assert not host_names & set(hosts.split())  # the host's own names (its hostname, its peers) are not there


def test_reading_host_secrets(tier_url):
    tier, url = tier_url
    code = (
        "import os\n"
        "for path in ['/etc/shadow', '/root/.bashrc', '/proc/1/environ']:\n"
        "    try:\n        print(path, len(open(path, 'rb').read()))\n"
        "    except OSError as e:\n        print(path, 'denied', type(e).__name__)\n"
        "for pid in filter(str.isdigit, os.listdir('/proc')):\n"
        "    try:\n        environ = open(f'/proc/{pid}/environ', 'rb').read()\n"
        "    except OSError:\n        continue\n"
        f"    if b'{SECRET}' in environ:\n        print('leak', pid)\n"
    )
    body = run(url, code)
    lines = body["run_result"]["stdout"].splitlines()
    assert len(lines) == 3, body  # no process the program can read holds the server's secret
    assert "denied" in lines[0] and "denied" in lines[1], lines
    if tier != "bwrap-nonroot":  # there pid 1 is bwrap's own init, same user, started with the clean environment
        assert "denied" in lines[2], lines


def test_writing_outside_the_work_dir(tier_url, tmp_path):
    tier, url = tier_url
    os.chmod(tmp_path, 0o755)  # visible to every uid, writable only by root
    marker = uuid.uuid4().hex
    targets = [f"/etc/{marker}", f"/usr/{marker}", str(tmp_path / marker), f"/{marker}"]
    private_tmp = f"/tmp/{marker}"
    if tier.startswith("bwrap"):
        targets.append(private_tmp)  # bwrap's /tmp is private: the write works there, the host /tmp stays untouched
    code = (
        f"for path in {targets!r}:\n"
        "    try:\n        open(path, 'w').write('x')\n        print(path, 'written')\n"
        "    except OSError as e:\n        print(path, 'denied', type(e).__name__)\n"
        "open('inside.txt', 'w').write('ok')\nprint('inside ok')\n"
    )
    body = run(url, code)
    assert body["run_result"]["stdout"].endswith("inside ok\n"), body
    for target in targets:
        assert not Path(target).exists(), target
        if target == private_tmp:
            assert f"{target} written" in body["run_result"]["stdout"]  # it wrote its own private /tmp
        else:
            assert f"{target} denied" in body["run_result"]["stdout"]


def test_killing_the_parent_and_the_server(tier_url):
    tier, url = tier_url
    server_pid = get(url + "/health")["pid"]
    code = (
        "import os, signal\n"
        f"for pid in (os.getppid(), 1, {server_pid}, -1):\n"
        "    try:\n        os.kill(pid, signal.SIGKILL)\n        print(pid, 'sent')\n"
        "    except OSError as e:\n        print(pid, type(e).__name__)\n"
        "print('alive')"
    )
    body = run(url, code)
    assert os.path.exists(f"/proc/{server_pid}")
    stdout = body["run_result"]["stdout"]
    assert f"{server_pid} sent" not in stdout
    if tier in ("bwrap", "rlimit"):  # fork mode: the parent is the slot's fork server, running as root
        assert "PermissionError" in stdout.splitlines()[0], stdout
    _assert_unharmed(url)


def test_detached_grandchild_holding_the_pipes(tier_url):
    tier, url = tier_url
    marker = uuid.uuid4().hex
    code = (
        "import subprocess, sys\n"
        f"subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)  # {marker}'],"
        " start_new_session=True)\n"
        "print('parent done')"
    )
    started = time.monotonic()
    body = run(url, code)  # the grandchild sleeps 60 s; the run must end with its parent, not at the timeout
    assert body["status"] == "Success", body
    assert body["run_result"]["stdout"] == "parent done\n"
    assert time.monotonic() - started < 10
    assert processes_with(marker) == []
    _assert_unharmed(url)


def test_detached_grandchild_dies_on_timeout(tier_url):
    tier, url = tier_url
    marker = uuid.uuid4().hex
    code = (
        "import os, subprocess, sys, time\n"
        f"subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)  # {marker}'],"
        " start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
        "print('waiting', flush=True)\ntime.sleep(60)"
    )
    body = run(url, code, run_timeout=1)
    assert body["run_result"]["status"] == "TimeLimitExceeded", body
    assert body["run_result"]["stdout"] == "waiting\n", body
    deadline = time.monotonic() + 3
    while processes_with(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert processes_with(marker) == []
    _assert_unharmed(url)


def test_runs_as_unprivileged_slot_uid(tier_url):
    tier, url = tier_url
    code = "import os\nprint(os.getuid(), os.geteuid(), os.getgid(), os.getgroups())"
    uid, euid, gid, groups = run(url, code)["run_result"]["stdout"].split(" ", 3)
    uids = _slot_uids(url)
    if uids is None:  # no root: the server's own (unprivileged) user
        server_uid = os.stat(f"/proc/{get(url + '/health')['pid']}").st_uid
        assert int(uid) == server_uid != 0
    else:
        assert int(uid) in uids
    assert uid == euid == gid
    assert groups.strip() == "[]"


def test_limits_are_set_and_cannot_be_raised(tier_url):
    _, url = tier_url
    code = (
        "import os, resource\n"
        "print('VSZ', int(open('/proc/self/statm').read().split()[0]) * os.sysconf('SC_PAGE_SIZE'))\n"
        "for name in ('AS', 'NPROC', 'FSIZE', 'NOFILE', 'CORE'):\n"
        "    print(name, *resource.getrlimit(getattr(resource, 'RLIMIT_' + name)))\n"
        "try:\n    resource.setrlimit(resource.RLIMIT_AS, (-1, -1))\n    print('raised')\n"
        "except (ValueError, OSError):\n    print('cannot raise')\n"
    )
    limits = get(url + "/health")["limits"]
    lines = run(url, code, memory_limit_mb=700)["run_result"]["stdout"].splitlines()
    mb = 1024 * 1024
    dedicated_uids = _slot_uids(url) is not None
    if not dedicated_uids:  # no dedicated uid, so no process limit (it would count the server's processes)
        lines = [line for line in lines if not line.startswith("NPROC ")]
    # The address-space limit is memory_limit_MB on top of what the interpreter (with its preimported packages)
    # mapped when the program started: more than 700 MB, by at most what is mapped now.
    vsz = int(lines.pop(0).split()[1])
    _, soft, hard = lines.pop(0).split()
    assert soft == hard and 700 * mb < int(soft) <= 700 * mb + vsz, (soft, vsz)
    assert lines == [
        *([f"NPROC {limits['max_processes']} {limits['max_processes']}"] if dedicated_uids else []),
        f"FSIZE {limits['max_file_size_mb'] * mb} {limits['max_file_size_mb'] * mb}",
        "NOFILE 1024 1024",
        "CORE 0 0",
        "cannot raise",
    ]
