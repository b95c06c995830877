"""retool.node_check on one node (no Ray cluster: verl will start its own), against real sandboxes: it checks the URL
the run's workers will call (the resolved config's runtime env, or the node's own RETOOL_NODE_SANDBOX_URL), not the
launching shell's, and a failure names the node, the URL, where the URL came from and the fix. The check on every
node of a real two-node Ray cluster: tests/integration/test_node_check_cluster.py."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import yaml

from retool.constants import REPO_ROOT
from retool.node_check import Expected, check_node
from retool.sandbox.client import SandboxClient
from retool.sandbox.spawn import running_sandbox
from ports import free_port


def dead_url() -> str:
    return f"http://127.0.0.1:{free_port()}/run_code"


def config(tmp_path: Path, sandbox_url: str, nnodes: int = 1) -> Path:
    """A resolved RL config as the launcher writes it, reduced to what the check reads; no Ray cluster to join."""
    ray_dir = tmp_path / "ray"  # verl would look for a `ray start` cluster here: there is none
    ray_dir.mkdir(exist_ok=True)
    cfg = {"trainer": {"device": "cpu", "nnodes": nnodes, "n_gpus_per_node": 1},
           "actor_rollout_ref": {"rollout": {"multi_turn": {"tool_config_path": str(REPO_ROOT / "configs" /
                                                                                     "tool.yaml")}}},
           "ray_kwargs": {"ray_init": {"_temp_dir": str(ray_dir), "runtime_env": {"env_vars": {
               "RETOOL_SANDBOX_URL": sandbox_url, "TENSORBOARD_DIR": str(tmp_path / "tb"), "VERL_PLATFORM": "cpu"}}}}}
    path = tmp_path / "rl.resolved.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def node_check(path: Path, **env: str) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items()
            if k not in ("RAY_ADDRESS", "RETOOL_SANDBOX_URL", "RETOOL_NODE_SANDBOX_URL", "RETOOL_ACCEPT_WEAK_ISOLATION")}
    return subprocess.run([sys.executable, "-m", "retool.node_check", "--config", str(path)], env={**full, **env},
                          capture_output=True, text=True, timeout=120)


def test_the_check_calls_the_sandbox_the_workers_will_call_not_the_shell_s(tmp_path):
    with running_sandbox(slots=1) as url:
        path = config(tmp_path, url + "/run_code")
        # the shell still names the crashed run's sandbox (a resume after a move): the workers take the config's
        passed = node_check(path, RETOOL_SANDBOX_URL=dead_url())
        requests = SandboxClient(url).health()["counters"]["requests"]
    assert passed.returncode == 0, passed.stderr
    assert f"[node-check] {socket.gethostname()}: worker environment as launched (3 variables)" in passed.stderr
    assert f"sandbox {url}/run_code (from RETOOL_SANDBOX_URL of the launch)" in passed.stderr
    assert "isolation bwrap; ran print(6*7)" in passed.stderr
    assert requests == 1  # the program ran there

    # and the other way round: the config names a sandbox that is gone, the shell a live one
    with running_sandbox(slots=1) as live:
        refused = node_check(config(tmp_path, url + "/run_code"), RETOOL_SANDBOX_URL=live + "/run_code")
    assert refused.returncode == 1
    assert f"error: node {socket.gethostname()} failed its check before step 1" in refused.stderr
    assert f"sandbox {url}/run_code (from RETOOL_SANDBOX_URL of the launch)" in refused.stderr  # not the shell's
    assert "does not answer GET /v1/ping" in refused.stderr and "start `retool-sandbox serve` on that node" in \
        refused.stderr


def test_a_node_s_own_sandbox_url_wins_and_is_named(tmp_path):
    node_url = dead_url()
    with running_sandbox(slots=1) as url:
        proc = node_check(config(tmp_path, url + "/run_code"), RETOOL_NODE_SANDBOX_URL=node_url)
    assert proc.returncode == 1
    assert f"sandbox {node_url} (from RETOOL_NODE_SANDBOX_URL of this node's environment)" in proc.stderr


def test_a_weak_sandbox_is_refused_unless_the_launch_accepts_it(tmp_path):
    # the rlimit tier runs code as an unprivileged uid, which cannot reach a venv under /root: the system python
    with running_sandbox(isolation="rlimit", slots=1, python="/usr/bin/python3") as url:
        path = config(tmp_path, url + "/run_code")
        refused = node_check(path)
        accepted = node_check(path, RETOOL_ACCEPT_WEAK_ISOLATION="1")
    assert refused.returncode == 1 and "isolation 'rlimit'" in refused.stderr and "bubblewrap" in refused.stderr
    assert accepted.returncode == 0 and "accepted by RETOOL_ACCEPT_WEAK_ISOLATION=1; ran print(6*7)" in \
        accepted.stderr


def test_several_nodes_without_a_cluster_stop_before_verl_starts_a_lonely_one(tmp_path):
    proc = node_check(config(tmp_path, dead_url(), nnodes=2))
    assert proc.returncode == 1
    assert "the config asks for 2 nodes but no Ray cluster is running" in proc.stderr
    assert "ray start --head" in proc.stderr


def test_a_worker_environment_other_than_the_launch_s_is_named(monkeypatch, tmp_path):
    monkeypatch.setenv("HCCL_CONNECT_TIMEOUT", "120")
    expected = Expected(tool_config=str(tmp_path / "missing.yaml"), device="npu", accept_weak=False,
                        env_vars={"HCCL_CONNECT_TIMEOUT": "1500", "TASK_QUEUE_ENABLE": "1"})
    result = check_node(expected, "10.0.0.7")
    assert result.node == "10.0.0.7" and len(result.problems) == 2
    env, tool = result.problems
    assert "HCCL_CONNECT_TIMEOUT='120' (launched with '1500')" in env and "TASK_QUEUE_ENABLE=None" in env
    assert "is not on this node" in tool and "same path on every node" in tool
