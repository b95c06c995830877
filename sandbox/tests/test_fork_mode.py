"""Fork mode: a slot's sandbox is reused across runs, so nothing one run leaves may reach the next one."""

from __future__ import annotations

import json
import os
import shutil
import signal
import time
import uuid
from pathlib import Path

import pytest
from sandbox_helpers import descendants, get, parent_pid, processes_with, run, unprivileged_python

from retool_sandbox.config import DEFAULT_PREIMPORT
from retool_sandbox.spawn import running_sandbox


@pytest.fixture(scope="module", params=["bwrap", "rlimit"])
def one_slot(request) -> tuple[str, str]:
    """A one-slot server per uid-switching tier, so consecutive runs share the slot's sandbox."""
    tier = request.param
    if os.geteuid() != 0:
        pytest.skip("fork mode needs root (per-slot uids)")
    python = None
    if tier == "bwrap" and shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is not installed")
    if tier == "rlimit":
        python = unprivileged_python()
        if python is None:
            pytest.skip("no interpreter reachable by an unprivileged uid")
    with running_sandbox(isolation=tier, slots=1, default_timeout=20, max_timeout=20, python=python) as url:
        assert get(url + "/health")["mode"] == "fork"
        yield tier, url


def _litter(marker: str, tier: str) -> str:
    """A program that leaves something behind in every place a later run could look."""
    code = f"""
import ctypes, os, subprocess, sys
os.retool_leak = "{marker}"
{_RANDOM}
print("random", _draws())
try:
    import numpy, sympy
except ImportError:
    pass
else:
    numpy.retool_leak = sympy.retool_leak = sympy.core.retool_leak = "{marker}"
    numpy.random.seed(12345)
    sympy.core.random.seed(12345)
sys.modules["retool_leak_module"] = os
open("/tmp/{marker}-file", "w").write("x")
os.makedirs("/tmp/{marker}-dir/a/b")
open("/tmp/{marker}-dir/a/b/f", "w").write("x")
os.chmod("/tmp/{marker}-dir/a", 0)
open("/dev/shm/{marker}-shm", "w").write("x")
open("left-in-workdir.txt", "w").write("x")
libc = ctypes.CDLL(None, use_errno=True)
print("shm", libc.shmget(0, 4096, 0o1000 | 0o600) >= 0)  # IPC_PRIVATE, IPC_CREAT
subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)  # {marker}"], start_new_session=True,
                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
"""
    if tier == "bwrap":  # a POSIX message queue lives in the sandbox's IPC namespace, listed in /dev/mqueue
        code += f'print("mq", libc.mq_open(b"/{marker}", os.O_CREAT | os.O_RDWR, 0o600, None) >= 0)\n'
    return code


# What a run draws from the generators a fork would otherwise copy: `random` (reseeds itself after a fork),
# numpy's global one and sympy's (reseeded by the fork server's child).
_RANDOM = """
def _draws():
    import random
    out = [random.random()]
    try:
        import numpy.random, sympy.core.random
    except ImportError:
        return out
    return out + [float(numpy.random.random()), sympy.core.random.rng.random()]
"""


def _look(marker: str) -> str:
    return f"""
import json, os, sys
{_RANDOM}
try:
    import numpy, sympy
    modules = [getattr(numpy, "retool_leak", None), getattr(sympy, "retool_leak", None),
               getattr(sympy.core, "retool_leak", None)]
except ImportError:
    modules = None
me = os.getuid()
def owned(pid):  # a live process of this uid (a killed one may stay a zombie until its reaper gets to it)
    try:
        status = open(f"/proc/{{pid}}/status").read()
    except OSError:
        return False
    return int(status.split("\\nUid:")[1].split()[0]) == me and status.split("\\nState:")[1].split()[0] != "Z"
ipc = []
for kind in ("shm", "sem", "msg"):
    header, *rows = [line.split() for line in open("/proc/sysvipc/" + kind)]
    ipc += [kind for row in rows if int(row[header.index("uid")]) == me]
places = ("/tmp", "/dev/shm", "/dev/mqueue")
print(json.dumps({{
    "leak": getattr(os, "retool_leak", None),
    "module_leaks": modules,
    "leak_module": "retool_leak_module" in sys.modules,
    "random": _draws(),
    "processes": [p for p in os.listdir("/proc") if p.isdigit() and int(p) != os.getpid() and owned(p)],
    "files": [d + "/" + n for d in places if os.path.isdir(d) for n in os.listdir(d) if "{marker}" in n],
    "ipc": ipc,
    "workdir": sorted(os.listdir(".")),
}}))
"""


def test_nothing_reaches_the_next_run(one_slot):
    tier, url = one_slot
    before = get(url + "/health")["sandboxes"]
    marker = uuid.uuid4().hex[:12]
    body = run(url, _litter(marker, tier))
    assert body["status"] == "Success", body
    assert set(body["run_result"]["stdout"].split()) >= {"shm", "True"}
    assert "False" not in body["run_result"]["stdout"], body["run_result"]["stdout"]
    first_draws = json.loads(body["run_result"]["stdout"].split("random ", 1)[1].splitlines()[0])
    assert processes_with(marker) == []  # the detached sleeper is gone before the next request is even sent
    body = run(url, _look(marker))
    assert body["status"] == "Success", body
    seen = json.loads(body["run_result"]["stdout"])
    draws = seen.pop("random")
    modules = seen.pop("module_leaks")
    assert seen == {"leak": None, "leak_module": False, "processes": [], "files": [], "ipc": [], "workdir": ["main.py"]}
    assert modules in (None, [None, None, None])  # None: this tier's interpreter has no numpy/sympy
    # Every run draws fresh random numbers, as a fresh interpreter would (not the fork server's copied state).
    assert len(draws) == len(first_draws) and all(a != b for a, b in zip(draws, first_draws)), (draws, first_draws)
    assert not list(Path("/tmp").glob(f"{marker}*"))  # for rlimit that is the host's own /tmp
    # Swept, not replaced: the same sandbox served both runs.
    assert get(url + "/health")["sandboxes"] == before


def _fork_server_processes(server_pid: int) -> list[int]:
    """Fork servers and their sweep helpers descending from ``server_pid`` (never touch anybody else's)."""
    mine = set(descendants(server_pid))
    found = []
    for pid in processes_with("_retool_serve"):
        try:
            if os.readlink(f"/proc/{pid}/exe").endswith("/bwrap"):  # bwrap's own processes carry the argv too
                continue
        except OSError:
            continue
        if pid in mine:
            found.append(pid)
    return found


def _fork_servers_of(server_pid: int) -> list[int]:
    """The fork servers (a sweep helper is a child of its fork server, with the same command line)."""
    found = _fork_server_processes(server_pid)
    return [pid for pid in found if parent_pid(pid) not in found]


def _sweep_helpers_of(server_pid: int) -> list[int]:
    found = _fork_server_processes(server_pid)
    return [pid for pid in found if parent_pid(pid) in found]


@pytest.mark.parametrize("victim", ["fork server", "sweep helper"])
def test_a_lost_fork_server_is_replaced(one_slot, victim):
    tier, url = one_slot
    health = get(url + "/health")
    (fork_server,) = (_fork_servers_of if victim == "fork server" else _sweep_helpers_of)(health["pid"])
    os.kill(fork_server, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while os.path.exists(f"/proc/{fork_server}") and time.monotonic() < deadline:
        time.sleep(0.02)
    body = run(url, "print('after')")
    assert body["run_result"]["stdout"] == "after\n", body
    after = get(url + "/health")
    assert after["sandboxes"]["retired"] == health["sandboxes"]["retired"] + 1
    assert after["sandboxes"]["started"] == health["sandboxes"]["started"] + 1
    assert run(url, "print('again')")["run_result"]["stdout"] == "again\n"  # the replacement is ready now
    assert len(_fork_servers_of(health["pid"])) == 1 and len(_sweep_helpers_of(health["pid"])) == 1


_FIRST_CALLS = """\
import sys
before = set(sys.modules)
import numpy as np
from scipy import integrate, optimize
from sympy import symbols, solve, summation, limit, integrate as sym_integrate, oo, sin
x, k, n = symbols("x k n", positive=True)
np.random.default_rng(1).normal(size=3)
optimize.minimize(lambda v: (v[0] - 1) ** 2, [0.0])
integrate.quad(lambda t: t * t, 0, 1)
solve(x**2 - 2, x)
limit(summation(1 / (k * (k + 1)), (k, 1, n)), n, oo)
sym_integrate(x * sin(x), x)
print(sorted(set(sys.modules) - before))
"""


def test_preimported_modules_are_reported_and_used(one_slot):
    tier, url = one_slot
    preimported = get(url + "/health")["preimport"]
    if tier == "bwrap":  # the server's own venv has them all
        assert preimported == list(DEFAULT_PREIMPORT)
    # A program finds them imported already (no file of theirs is opened again), and fresh random state.
    body = run(url, f"import sys\nprint(all(m in sys.modules for m in {preimported!r}))")
    assert body["run_result"]["stdout"] == "True\n"
    if tier == "bwrap":
        # What math code calls first imports nothing more: the submodules it would load are in the default list.
        body = run(url, _FIRST_CALLS)
        assert body["run_result"]["stdout"] == "[]\n", body


def test_preimport_can_be_turned_off_and_a_broken_one_stops_the_server():
    if os.geteuid() != 0 or shutil.which("bwrap") is None:
        pytest.skip("fork mode needs root and bubblewrap")
    with running_sandbox(slots=1, preimport="none") as url:
        assert get(url + "/health")["preimport"] == []
        assert run(url, "import sys\nprint('numpy' in sys.modules)")["run_result"]["stdout"] == "False\n"
    with pytest.raises(RuntimeError, match="could not preimport retool_no_such_module: ModuleNotFoundError"):
        with running_sandbox(slots=1, isolation="bwrap", preimport="retool_no_such_module"):
            pass
