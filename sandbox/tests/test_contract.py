"""SandboxFusion wire contract, checked with the independent PyPI client and with verl's exact raw payload."""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
import urllib.request

import pytest
from sandbox_fusion import RunCodeRequest, run_code

from sandbox_helpers import SECRET, get, post, run

from retool_sandbox.spawn import running_sandbox

RUN_RESULT_KEYS = {"status", "execution_time", "return_code", "stdout", "stderr"}


def client_run(url: str, **kwargs):
    # The PyPI sandbox-fusion client, not ours, on purpose: it checks that a third-party client works against us.
    return run_code(RunCodeRequest(language="python", **kwargs), endpoint=url, max_attempts=1, client_timeout=30)


def test_pypi_client_success(bwrap_url):
    resp = client_run(bwrap_url, code="print(6 * 7)")
    assert resp.status.value == "Success"
    assert resp.message == ""
    assert resp.compile_result is None
    assert resp.run_result.status.value == "Finished"
    assert resp.run_result.return_code == 0
    assert resp.run_result.stdout == "42\n"
    assert 0 < resp.run_result.execution_time < 5


def test_pypi_client_failure_and_stdin(bwrap_url):
    resp = client_run(bwrap_url, code="x = input()\nprint('got', x)\n1 / 0", stdin="hello\n")
    assert resp.status.value == "Failed"
    assert resp.run_result.status.value == "Finished"
    assert resp.run_result.return_code == 1
    assert resp.run_result.stdout == "got hello\n"
    assert "ZeroDivisionError" in resp.run_result.stderr


def test_unread_stdin_does_not_block(bwrap_url):
    body = run(bwrap_url, "print('did not read stdin')", stdin="x" * 2_000_000)
    assert body["status"] == "Success" and body["run_result"]["stdout"] == "did not read stdin\n"
    body = run(bwrap_url, "import sys\nprint(len(sys.stdin.read()))", stdin="y" * 2_000_000)
    assert body["run_result"]["stdout"] == "2000000\n"


def test_pypi_client_timeout_keeps_partial_output(bwrap_url):
    code = "import time\nprint('before', flush=True)\ntime.sleep(30)\nprint('after')"
    resp = client_run(bwrap_url, code=code, run_timeout=1)
    assert resp.status.value == "Failed"
    assert resp.run_result.status.value == "TimeLimitExceeded"
    assert resp.run_result.return_code is None
    assert resp.run_result.stdout == "before\n"
    assert 1 <= resp.run_result.execution_time < 6


def test_pypi_client_files_roundtrip(bwrap_url):
    data = base64.b64encode(b"3\n4\n").decode()
    code = (
        "import helper\n"
        "nums = [int(x) for x in open('data/in.txt')]\n"
        "open('out/sum.txt', 'w').write(str(helper.total(nums)))\n"
    )
    helper = base64.b64encode(b"def total(xs):\n    return sum(xs)\n").decode()
    resp = client_run(
        bwrap_url,
        code=code,
        files={"data/in.txt": data, "helper.py": helper, "out/.keep": ""},
        fetch_files=["out/sum.txt", "missing.txt"],
    )
    assert resp.status.value == "Success", resp.run_result.stderr
    assert resp.files == {"out/sum.txt": base64.b64encode(b"7").decode()}


def test_pypi_client_rejects_other_languages(bwrap_url):
    # The PyPI sandbox-fusion client on purpose (see client_run).
    with pytest.raises(Exception, match="422"):
        run_code(
            RunCodeRequest(code="int main(){}", language="cpp"), endpoint=bwrap_url, max_attempts=1, client_timeout=30
        )


def test_verl_raw_payload(bwrap_url):
    # Byte-for-byte what verl's sandbox helper sends (json.dumps of this dict, these headers): a raw POST that
    # imitates verl's client on purpose, not the recipe's.
    payload = json.dumps(
        {
            "compile_timeout": 30,
            "run_timeout": 30,
            "code": "import numpy as np\nimport threading\nt = threading.Thread(target=print, args=('thread ok',))\n"
            "t.start(); t.join()\nprint(int(np.arange(10).sum()))",
            "stdin": None,
            "memory_limit_MB": 1024,
            "language": "python",
            "files": {},
            "fetch_files": [],
        }
    )
    req = urllib.request.Request(
        bwrap_url + "/run_code",
        data=payload.encode(),
        headers={"Content-Type": "application/json", "Accept": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=70) as resp:
        assert resp.status == 200
        body = json.loads(resp.read())
    assert set(body) == {"status", "message", "compile_result", "run_result", "executor_pod_name", "files"}
    assert set(body["run_result"]) == RUN_RESULT_KEYS
    assert body["status"] == "Success", body
    assert body["run_result"]["stdout"] == "thread ok\n45\n"


def test_invalid_requests_are_422(bwrap_url):
    cases = [
        ({"language": "python"}, "code"),
        ({"code": "print(1)"}, "language"),
        ({"code": "print(1)", "language": "klingon"}, "language"),
        ({"code": "print(1)", "language": "python", "run_timeout": "soon"}, "run_timeout"),
        ({"code": "print(1)", "language": "python", "files": {"../x": ""}}, "files"),
        ({"code": "print(1)", "language": "python", "files": {"/etc/cron.d/x": ""}}, "files"),
        ({"code": "print(1)", "language": "python", "files": {"main.py": ""}}, "files"),
        ({"code": "print(1)", "language": "python", "files": {"a.txt": "%%%"}}, "files.a.txt"),
        ({"code": "print(1)", "language": "python", "fetch_files": ["../../etc/passwd"]}, "fetch_files"),
    ]
    for payload, loc in cases:
        # Raw bodies on purpose: they imitate a broken client, which the recipe's client never is.
        status, body = post(bwrap_url + "/run_code", payload)
        assert status == 422, (payload, status, body)
        assert body["detail"][0]["loc"] == ["body", loc], body
    status, body = post(bwrap_url + "/run_code", b"{not json")  # a broken client on purpose, as above
    assert status == 422


def test_timeout_is_clamped_to_server_maximum(tiny_url):
    body = run(tiny_url, "import time\ntime.sleep(60)", run_timeout=1000)
    assert body["run_result"]["status"] == "TimeLimitExceeded", body
    assert 3 <= body["run_result"]["execution_time"] < 8  # the fixture's --max-timeout is 3


def test_work_dirs_are_emptied(tiny_url, tiny_work_root):
    (root,) = tiny_work_root.iterdir()  # the server's retool-sandbox-* dir: one sandbox dir for its one slot
    (sandbox,) = root.glob("sandbox-*")  # (beside the session zygote's, started before the server said ready)
    before = sorted(root.iterdir())
    code = "import os\nos.makedirs('deep/er')\nopen('deep/er/f.txt', 'w').write('x')\nos.chmod('deep', 0)"
    body = run(tiny_url, code, files={"in.txt": ""})
    assert body["status"] == "Success", body
    assert sorted(root.iterdir()) == before  # fork mode: the slot's sandbox stays ...
    assert list((sandbox / "work").iterdir()) == []  # ... and its work dir is empty again


def test_fresh_mode_removes_each_runs_sandbox(tmp_path):
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is not installed")
    with running_sandbox(isolation="bwrap", slots=1, work_root=tmp_path, fresh_sandbox_per_run=True) as url:
        (root,) = tmp_path.iterdir()
        before = set(root.iterdir())  # the slot's pre-started spare
        body = run(url, "import os\nos.makedirs('a/b')\nos.chmod('a', 0)")
        assert body["status"] == "Success", body
        after = set(root.iterdir())
    assert len(before) == len(after) == 1 and before != after  # the used sandbox is gone, a new spare is there


def test_ping_and_health(bwrap_url):
    assert get(bwrap_url + "/v1/ping") == "pong"
    health = get(bwrap_url + "/health")
    assert health["isolation"] == "bwrap"
    assert health["slots"] == 2
    assert {"in_flight", "queued", "counters", "limits"} <= set(health)
    assert health["counters"]["requests"] >= 0


def test_clean_environment_and_real_interpreter(bwrap_url):
    body = run(bwrap_url, "import os, sys\nprint(sorted(os.environ))\nprint(sys.executable)")
    assert body["status"] == "Success"
    assert SECRET not in body["run_result"]["stdout"]
    assert "RETOOL_SECRET" not in body["run_result"]["stdout"]
    assert body["run_result"]["stdout"].splitlines()[1] == get(bwrap_url + "/health")["python"]


def test_non_utf8_output_is_replaced(bwrap_url):
    body = run(bwrap_url, "import sys\nsys.stdout.buffer.write(b'ok \\xff\\xfe end\\n')")
    assert body["status"] == "Success"
    assert body["run_result"]["stdout"] == "ok \ufffd\ufffd end\n"


def test_cli_help():
    out = subprocess.run(
        [sys.executable, "-m", "retool_sandbox", "serve", "--help"], capture_output=True, text=True, timeout=30
    )
    assert out.returncode == 0
    for flag in (
        "--slots",
        "--isolation",
        "--default-timeout",
        "--max-timeout",
        "--max-output-bytes",
        "--queue-timeout",
        "--python",
    ):
        assert flag in out.stdout


# The capabilities Docker gives a container's root by default (no --privileged, no --cap-add).
DOCKER_DEFAULT_CAPS = (
    "chown",
    "dac_override",
    "fsetid",
    "fowner",
    "mknod",
    "net_raw",
    "setgid",
    "setuid",
    "setfcap",
    "setpcap",
    "net_bind_service",
    "sys_chroot",
    "kill",
    "audit_write",
)


def _probe_with_capabilities(*caps: str) -> dict:
    bounding = "--bounding-set=-all" + "".join(f",+{cap}" for cap in caps)
    done = subprocess.run(
        ["setpriv", bounding, sys.executable, "-m", "retool_sandbox", "probe"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)["tiers"]


def test_probe_tells_why_bwrap_cannot_start_and_what_a_container_needs():
    # A root server with the capabilities of a container started without --privileged (its seccomp and AppArmor
    # profiles are not imitated here): bubblewrap needs SYS_ADMIN for its namespaces and NET_ADMIN for the loopback
    # of its network namespace, and the probe names the flags.
    if os.geteuid() != 0 or shutil.which("bwrap") is None or shutil.which("setpriv") is None:
        pytest.skip("needs root, bubblewrap and setpriv")
    tiers = _probe_with_capabilities(*DOCKER_DEFAULT_CAPS)
    assert "Creating new namespace failed" in tiers["bwrap"] and "--privileged" in tiers["bwrap"], tiers
    assert "--cap-add CAP_SYS_ADMIN --cap-add CAP_NET_ADMIN" in tiers["bwrap"] and '"Containers"' in tiers["bwrap"]
    assert tiers["none"] == "ok"
    tiers = _probe_with_capabilities(*DOCKER_DEFAULT_CAPS, "sys_admin")
    assert "loopback" in tiers["bwrap"] and "--cap-add CAP_NET_ADMIN" in tiers["bwrap"], tiers
    assert _probe_with_capabilities(*DOCKER_DEFAULT_CAPS, "sys_admin", "net_admin")["bwrap"] == "ok"


def test_with_more_slots_than_cores_health_says_warming_until_a_session_can_be_served(tmp_path, unused_tcp_port):
    """Eight slots on this 2-core host take seconds to preimport numpy, scipy and sympy. Meanwhile /health says
    "warming" and the ready line is not printed yet; ``wait_ready`` returns once it says "ready", and then the first
    per_trajectory session works at its first try (before, it failed with "did not start: no output")."""
    import time

    from retool_sandbox.client import ClientPolicy, SandboxClient

    if os.geteuid() != 0 or shutil.which("bwrap") is None:
        pytest.skip("sessions under bwrap need a root server")
    url = f"http://127.0.0.1:{unused_tcp_port}"
    log = tmp_path / "serve.log"
    with log.open("wb") as out:
        server = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "retool_sandbox",
                "serve",
                "--host",
                "127.0.0.1",
                "--port",
                str(unused_tcp_port),
                "--slots",
                "8",
                "--isolation",
                "bwrap",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    try:
        client = SandboxClient(url, ClientPolicy(run_timeout=30, max_retries=0, reconnect_budget_s=0))
        states = []
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and "ready" not in states:
            health = client.health()
            if health is not None:
                states.append(health["state"])
                if health["state"] == "warming":
                    assert "retool-sandbox ready at" not in log.read_text(), "the ready line came before ready"
            time.sleep(0.05)
        assert states[0] == "warming" and states[-1] == "ready", states
        assert client.wait_ready(timeout=5)["state"] == "ready"
        assert "retool-sandbox ready at" in log.read_text()
        reply = client.run_sync("x = 6\nprint(x * 7)", session_id="first-session")
        assert reply.status == "ok" and reply.body["run_result"]["stdout"] == "42\n", reply
    finally:
        server.terminate()
        server.wait(timeout=30)
