"""retool-doctor's sandbox checks on real servers: the isolation an RL run requires (weaker tiers and a
SandboxFusion without /health fail unless RETOOL_ACCEPT_WEAK_ISOLATION=1), and the sessions a per-trajectory tool
needs (/health sessions.max against the trajectories in flight per node)."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from ports import free_port
from doctor_helpers import clear_run_choices, resolved_rl_config, rl_parquet, tiny_model_dir, tool_yaml, write_yaml

from retool.checklist import FAIL, OK, SKIP, WARN
from retool.doctor.cli import main
from retool.doctor.sandbox import check_sandbox, check_sessions
from retool_sandbox.spawn import running_sandbox

ACCEPT = "RETOOL_ACCEPT_WEAK_ISOLATION"
NO_HEALTH = (
    "runs code but has no /health (SandboxFusion?): its default isolation is none (code runs as the server "
    "user); prefer retool-sandbox"
)


@pytest.fixture(autouse=True)
def _no_run_choices(monkeypatch: pytest.MonkeyPatch) -> None:
    clear_run_choices(monkeypatch)


class _FusionLike(BaseHTTPRequestHandler):
    """The two SandboxFusion endpoints the doctor calls, and no /health: code runs in a fresh interpreter."""

    def do_GET(self) -> None:
        if self.path == "/v1/ping":
            self._json("pong")
        else:
            self.send_error(404)

    def do_POST(self) -> None:
        if self.path != "/run_code":
            self.send_error(404)
            return
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        proc = subprocess.run(
            [sys.executable, "-c", body["code"]], capture_output=True, text=True, timeout=body["run_timeout"]
        )
        self._json(
            {
                "status": "Success" if proc.returncode == 0 else "Failed",
                "message": "",
                "run_result": {
                    "status": "Finished",
                    "return_code": proc.returncode,
                    "stdout": proc.stdout,
                    "stderr": proc.stderr,
                },
            }
        )

    def _json(self, value: object) -> None:
        data = json.dumps(value).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


@contextlib.contextmanager
def fusion_like_server() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _FusionLike)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def per_trajectory_config(tmp_path: Path, batch: int, n: int, nnodes: int, mode: str = "per_trajectory") -> dict:
    cfg = resolved_rl_config(tmp_path, tmp_path, tmp_path, tmp_path, nnodes=nnodes)
    cfg["data"]["train_batch_size"] = batch
    cfg["actor_rollout_ref"]["rollout"]["n"] = n
    cfg["actor_rollout_ref"]["rollout"]["multi_turn"]["tool_config_path"] = str(tool_yaml(tmp_path / "tool.yaml", mode))
    return cfg


# ---------------------------------------------------------------- isolation


def test_tier_none_fails_an_rl_config_until_the_risk_is_accepted(monkeypatch: pytest.MonkeyPatch) -> None:
    with running_sandbox(isolation="none", slots=1) as url:
        plain = check_sandbox(url)
        rl = check_sandbox(url, rl=True)
        monkeypatch.setenv(ACCEPT, "yes")  # only "1" accepts
        still = check_sandbox(url, rl=True)
        monkeypatch.setenv(ACCEPT, "1")
        accepted = check_sandbox(url, rl=True)
    assert plain.status == WARN
    assert plain.details[0].endswith("model code is not isolated; restart with --isolation auto")
    assert rl.status == FAIL and still.status == FAIL
    assert f"{url} runs code; isolation none" in rl.details[0]
    for fix in (
        "isolation none is weaker than bwrap",
        "Debian/Ubuntu: apt-get install -y bubblewrap",
        "openEuler, CentOS, RHEL: dnf install -y bubblewrap",
        "restart `retool-sandbox serve`",
        "--cap-add CAP_SYS_ADMIN",
        'docs/sandbox.md ("Containers")',
        "accept the risk explicitly: RETOOL_ACCEPT_WEAK_ISOLATION=1",
    ):
        assert fix in rl.details[0]
    assert accepted.status == WARN and accepted.details[0].endswith("accepted with RETOOL_ACCEPT_WEAK_ISOLATION=1")


def test_tier_rlimit_fails_an_rl_config() -> None:
    if os.geteuid() != 0:
        pytest.skip("the rlimit tier needs a root server")
    try:
        server = running_sandbox(isolation="rlimit", slots=1, python="/usr/bin/python3")
        url = server.__enter__()
    except RuntimeError as e:  # the tier's self-test needs an interpreter an unprivileged uid can run
        if "no usable isolation tier" not in str(e):
            raise
        pytest.skip(f"no rlimit server on this host: {str(e)[-300:]}")
    try:
        plain, rl = check_sandbox(url), check_sandbox(url, rl=True)
    finally:
        server.__exit__(None, None, None)
    assert plain.status == OK and "isolation rlimit" in plain.details[0]
    assert rl.status == FAIL and "isolation rlimit is weaker than bwrap" in rl.details[0]
    assert "apt-get install -y bubblewrap" in rl.details[0]


def test_sandboxfusion_without_health(monkeypatch: pytest.MonkeyPatch) -> None:
    with fusion_like_server() as url:
        plain = check_sandbox(url + "/run_code")
        rl = check_sandbox(url, rl=True)
        monkeypatch.setenv(ACCEPT, "1")
        accepted = check_sandbox(url, rl=True)
    assert plain.status == WARN and plain.details[0] == f"{url} {NO_HEALTH}"
    assert rl.status == FAIL and rl.details[0].startswith(f"{url} {NO_HEALTH} -> ")
    assert "dnf install -y bubblewrap" in rl.details[0] and "RETOOL_ACCEPT_WEAK_ISOLATION=1" in rl.details[0]
    assert accepted.status == WARN and NO_HEALTH in accepted.details[0] and "accepted with" in accepted.details[0]


def test_doctor_exits_1_for_an_rl_run_on_a_weak_sandbox(
    tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = resolved_rl_config(
        tmp_path,
        tiny_model_dir(tmp_path / "model"),
        rl_parquet(tmp_path / "train.parquet"),
        rl_parquet(tmp_path / "val.parquet"),
    )
    path = write_yaml(tmp_path / "rl.resolved.yaml", cfg)
    with running_sandbox(isolation="none", slots=1) as url:
        refused = main(["--config", str(path), "--sandbox-url", url])
        refused_out = capsys.readouterr().out
        monkeypatch.setenv(ACCEPT, "1")
        accepted = main(["--config", str(path), "--sandbox-url", url])
        accepted_out = capsys.readouterr().out
    assert refused == 1 and "[FAIL] sandbox:" in refused_out, refused_out
    assert accepted == 0 and "[WARN] sandbox:" in accepted_out, accepted_out


# ---------------------------------------------------------------- sessions


def test_per_trajectory_sessions_against_max_sessions(tmp_path: Path) -> None:
    with running_sandbox(slots=1, max_sessions=4) as url:
        short = check_sessions(per_trajectory_config(tmp_path, batch=2, n=4, nnodes=1), url)
        enough = check_sessions(per_trajectory_config(tmp_path, batch=2, n=4, nnodes=2), url)
        reference = check_sessions(per_trajectory_config(tmp_path, batch=64, n=16, nnodes=1), url)
        stateless = check_sessions(per_trajectory_config(tmp_path, batch=64, n=16, nnodes=1, mode="stateless"), url)
    assert short.status == FAIL
    assert f"{url} keeps at most 4 sessions" in short.details[0]
    assert (
        "8 trajectories are in flight per node (data.train_batch_size 2 x actor_rollout_ref.rollout.n 4 / "
        "trainer.nnodes 1" in short.details[0]
    )
    assert short.details[0].endswith("restart it with --max-sessions 8")
    assert enough.status == OK and "keeps up to 4 sessions; 4 trajectories in flight per node" in enough.details[0]
    assert reference.status == FAIL and "--max-sessions 1024" in reference.details[0]
    assert stateless.status == SKIP and "stateless" in stateless.details[0]


def test_sessions_disabled_or_not_kept(tmp_path: Path) -> None:
    cfg = per_trajectory_config(tmp_path, batch=2, n=4, nnodes=1)
    with running_sandbox(slots=1, max_sessions=0) as url:
        disabled = check_sessions(cfg, url)
    with fusion_like_server() as fusion:
        absent = check_sessions(cfg, fusion)
    assert disabled.status == FAIL and "has sessions disabled" in disabled.details[0]
    assert "--max-sessions 8" in disabled.details[0]
    assert absent.status == FAIL and "no /health: not a retool-sandbox" in absent.details[0]
    assert "serve retool-sandbox with --max-sessions 8" in absent.details[0]
    assert check_sessions(cfg, f"http://127.0.0.1:{free_port()}").status == SKIP
