"""retool.node_check on one node (no Ray cluster: verl will start its own), against real sandboxes and a real Ray
started as verl starts it: the environment compared is the one a Ray worker of the run's runtime env really has (a
runtime env that drops a launch variable fails the check); it checks the URL the run's workers will call (the
resolved config's runtime env, or the node's own RETOOL_NODE_SANDBOX_URL), not the launching shell's, names where
that URL came from, and warns when a resume's new URL is overridden by the node's own; a failure names the node, the
URL, where the URL came from and the fix. The check on every node of a real two-node Ray cluster:
tests/integration/test_node_check_cluster.py."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import yaml

from processes import processes_with
from retool.checklist import FAIL, OK, Check
from retool.constants import REPO_ROOT
from retool.node_check import Expected, check_node
from retool.sandbox_gate import GRACE_VARIABLE
from retool.node_files import (
    MARKER_PREFIX,
    SAME_CLONE,
    Files,
    UnwritableFolder,
    check_files,
    package_files,
    shared_markers,
)
from retool_sandbox.client import SandboxClient
from retool_sandbox.spawn import running_sandbox
from ports import free_port

HOST = socket.gethostname()


def dead_url() -> str:
    return f"http://127.0.0.1:{free_port()}/run_code"


@pytest.fixture
def ray_dir():
    """The Ray temp folder of the run's config: short (Ray's socket paths must stay < 108 bytes), and private, so
    that no other cluster on this host is found there; whatever Ray the check started there is gone afterwards."""
    folder = tempfile.mkdtemp(prefix="rt-nc-")
    yield folder
    for pid in processes_with(folder):  # a Ray process of this test that outlived its driver
        os.kill(pid, signal.SIGKILL)
    shutil.rmtree(folder, ignore_errors=True)


def config(
    tmp_path: Path,
    ray_dir: str,
    sandbox_url: str,
    nnodes: int = 1,
    path: Path | None = None,
    runtime_env: dict | None = None,
) -> Path:
    """A resolved RL config as the launcher writes it, reduced to what the check reads; no Ray cluster to join."""
    cfg = {
        "trainer": {
            "device": "cpu",
            "nnodes": nnodes,
            "n_gpus_per_node": 1,
            "default_local_dir": str(tmp_path / "checkpoints"),
        },
        "actor_rollout_ref": {
            "rollout": {"multi_turn": {"tool_config_path": str(REPO_ROOT / "configs" / "tool.yaml")}}
        },
        "ray_kwargs": {
            "ray_init": {
                "num_cpus": 2,
                "include_dashboard": False,
                "_temp_dir": ray_dir,
                "runtime_env": {
                    "env_vars": {
                        "RETOOL_SANDBOX_URL": sandbox_url,
                        "TENSORBOARD_DIR": str(tmp_path / "tb"),
                        "VERL_PLATFORM": "cpu",
                    },
                    **(runtime_env or {}),
                },
            }
        },
    }
    path = path or tmp_path / "rl.resolved.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(cfg))
    return path


def node_check(path: Path, **env: str) -> subprocess.CompletedProcess:
    full = {
        k: v
        for k, v in os.environ.items()
        if k not in ("RAY_ADDRESS", "RETOOL_SANDBOX_URL", "RETOOL_NODE_SANDBOX_URL", "RETOOL_ACCEPT_WEAK_ISOLATION")
    }
    full[GRACE_VARIABLE] = "2"  # a dead port is waited for 2 s, not 30 (the wait itself: test_keep_sandbox_up.py)
    return subprocess.run(
        [sys.executable, "-m", "retool.node_check", "--config", str(path)],
        env={**full, **env},
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_check_calls_the_sandbox_the_workers_will_call_not_the_shell_s(tmp_path, ray_dir):
    with running_sandbox(slots=1) as url:
        path = config(tmp_path, ray_dir, url + "/run_code")
        # the shell still names the crashed run's sandbox (a resume after a move), and another platform: the
        # workers take the config's (the runtime env wins over what the raylet inherits)
        passed = node_check(path, RETOOL_SANDBOX_URL=dead_url(), VERL_PLATFORM="npu")
        requests = SandboxClient(url).health()["counters"]["requests"]
    assert passed.returncode == 0, passed.stderr
    assert f"[ OK ] node {HOST}: worker environment as launched (3 variables)\n" in passed.stderr
    assert f"sandbox {url}/run_code (from RETOOL_SANDBOX_URL of the launch)" in passed.stderr
    assert "isolation bwrap; ran print(6*7)" in passed.stderr
    assert requests == 1  # the program ran there

    # and the other way round: the config names a sandbox that is gone, the shell a live one
    with running_sandbox(slots=1) as live:
        refused = node_check(config(tmp_path, ray_dir, url + "/run_code"), RETOOL_SANDBOX_URL=live + "/run_code")
    assert refused.returncode == 1
    assert f"[FAIL] node {HOST}: " in refused.stderr and "error: the node check failed before step 1" in refused.stderr
    assert f"sandbox {url}/run_code (from RETOOL_SANDBOX_URL of the launch)" in refused.stderr  # not the shell's
    assert (
        "does not answer GET /v1/ping" in refused.stderr
        and "start `retool-sandbox serve` on that node" in refused.stderr
    )


def test_a_node_s_own_sandbox_url_wins_and_is_named(tmp_path, ray_dir):
    node_url = "http://127.0.0.1:9/run_code"  # a privileged port nothing here listens on: refused
    with running_sandbox(slots=1) as url:
        proc = node_check(config(tmp_path, ray_dir, url + "/run_code"), RETOOL_NODE_SANDBOX_URL=node_url)
    assert proc.returncode == 1
    assert f"sandbox {node_url} (from RETOOL_NODE_SANDBOX_URL of this node's environment)" in proc.stderr
    assert "(refused connections for 2 s)" in proc.stderr  # the launcher's wait, in the node's task
    assert "[WARN]" not in proc.stderr  # a first launch: the node's own sandbox is how the cluster was set up


def test_a_weak_sandbox_is_refused_unless_the_launch_accepts_it(tmp_path, ray_dir):
    # the rlimit tier runs code as an unprivileged uid, which cannot reach a venv under /root: the system python
    with running_sandbox(isolation="rlimit", slots=1, python="/usr/bin/python3") as url:
        path = config(tmp_path, ray_dir, url + "/run_code")
        refused = node_check(path)
        accepted = node_check(path, RETOOL_ACCEPT_WEAK_ISOLATION="1")
    assert refused.returncode == 1 and "isolation 'rlimit'" in refused.stderr and "bubblewrap" in refused.stderr
    assert accepted.returncode == 0 and "accepted by RETOOL_ACCEPT_WEAK_ISOLATION=1; ran print(6*7)" in accepted.stderr


def test_several_nodes_without_a_cluster_stop_before_verl_starts_a_lonely_one(tmp_path, ray_dir):
    proc = node_check(config(tmp_path, ray_dir, dead_url(), nnodes=2))
    assert proc.returncode == 1
    assert "[FAIL] ray: the config asks for 2 nodes but no Ray cluster is running" in proc.stderr
    assert "ray start --head" in proc.stderr


def test_a_worker_environment_other_than_the_launch_s_is_named(monkeypatch, tmp_path):
    monkeypatch.setenv("HCCL_CONNECT_TIMEOUT", "120")
    expected = Expected(
        tool_config=str(tmp_path / "missing.yaml"),
        device="npu",
        accept_weak=False,
        env_vars={"HCCL_CONNECT_TIMEOUT": "1500", "TASK_QUEUE_ENABLE": "1"},
    )
    result = check_node(expected, "10.0.0.7")
    assert result.name == "node 10.0.0.7" and result.status == FAIL
    env, tool = result.details  # nothing passed: the environment and the tool config both fail
    assert "HCCL_CONNECT_TIMEOUT='120' (launched with '1500')" in env and "TASK_QUEUE_ENABLE=None" in env
    assert "is not on this node" in tool and "same path on every node" in tool


DROP_HOOK = """import os


def drop():  # a worker set-up hook that loses one of the launch's variables, as a site hook or plugin might
    os.environ.pop("TENSORBOARD_DIR", None)
"""


def test_the_environment_compared_is_the_one_a_ray_worker_received(tmp_path, ray_dir):
    """The launch sets TENSORBOARD_DIR; the run's runtime env carries a worker set-up hook that drops it. verl's
    workers would log nowhere it expects: the check, run in a worker of a Ray started as verl starts it, says so."""
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    (hooks / "drop_hook.py").write_text(DROP_HOOK)
    with running_sandbox(slots=1) as url:
        path = config(tmp_path, ray_dir, url + "/run_code", runtime_env={"worker_process_setup_hook": "drop_hook.drop"})
        proc = node_check(path, PYTHONPATH=os.pathsep.join([str(hooks), os.environ.get("PYTHONPATH", "")]))
    assert proc.returncode == 1, proc.stderr
    assert f"[FAIL] node {HOST}: the worker environment differs from the launch's" in proc.stderr
    assert (
        f"the worker environment differs from the launch's: TENSORBOARD_DIR=None (launched with '{tmp_path / 'tb'}')"
    ) in proc.stderr
    assert "worker_process_setup_hook" in proc.stderr  # the fix names where such a change comes from
    assert "RETOOL_SANDBOX_URL=" not in proc.stderr  # the variables the worker did get are not named


def resume(run_dir: Path, new_config: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "retool.resume",
            "prepare",
            "--stage",
            "rl",
            "--run-dir",
            str(run_dir),
            "--new-config",
            str(new_config),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_resume_whose_new_sandbox_url_a_node_s_own_url_overrides_says_so(tmp_path, ray_dir):
    """The crashed run called a sandbox that is gone; the resume is launched with RETOOL_SANDBOX_URL of a new one.
    Without a node URL the workers call the new one, and the line says the resume put it there. With
    RETOOL_NODE_SANDBOX_URL in the node's environment (a live sandbox, so nothing fails), the workers call that one
    instead: a warning names both URLs and what to change."""
    run_dir, old = tmp_path / "run", dead_url()
    config(tmp_path, ray_dir, old, path=run_dir / "rl.resolved.yaml")
    with running_sandbox(slots=1) as new, running_sandbox(slots=1) as node_own:
        new_config = config(tmp_path, ray_dir, new + "/run_code", path=tmp_path / "new.yaml")
        resumed = resume(run_dir, new_config)
        assert resumed.returncode == 0, resumed.stderr
        assert f"the workers take this launch's RETOOL_SANDBOX_URL: '{old}' -> '{new}/run_code'" in resumed.stderr
        plain = node_check(run_dir / "rl.resolved.yaml")
        overridden = node_check(run_dir / "rl.resolved.yaml", RETOOL_NODE_SANDBOX_URL=node_own + "/run_code")

    assert plain.returncode == 0, plain.stderr
    assert (
        f"sandbox {new}/run_code (from RETOOL_SANDBOX_URL of the launch, which the resume put in place of the "
        f"saved config's {old})"
    ) in plain.stderr
    assert "[WARN]" not in plain.stderr

    assert overridden.returncode == 0, overridden.stderr  # the node's own sandbox works: only the warning tells
    assert f"sandbox {node_own}/run_code (from RETOOL_NODE_SANDBOX_URL of this node's environment)" in overridden.stderr
    assert f"[WARN] node {HOST}: " in overridden.stderr
    (warning,) = [line.strip() for line in overridden.stderr.splitlines() if "this resume moved" in line]
    assert warning.startswith(
        f"this resume moved the sandbox to {new}/run_code "
        f"(RETOOL_SANDBOX_URL={new}/run_code; the run before it had RETOOL_SANDBOX_URL={old}), "
        f"but this node's own RETOOL_NODE_SANDBOX_URL={node_own}/run_code overrides it"
    )
    assert "unset RETOOL_NODE_SANDBOX_URL" in warning and "`ray start`" in warning


def test_a_node_that_sees_other_files_than_the_launching_host_is_told_which(tmp_path):
    """The same clone, run folder and model pass; each of another commit, another clone path, another verl, a run
    folder that is not shared and a missing model is a failure naming it (the real second node that lacks them:
    tests/integration/test_node_check_cluster.py)."""
    model = tmp_path / "model"
    model.mkdir()
    here = package_files()
    with shared_markers([tmp_path / "run", tmp_path / "run" / "checkpoints"]) as shared:
        same = Check(OK, "node a")
        check_files(Files(here, shared, str(model)), same)
        (retool_dir, _), (verl_dir, verl_digest) = here["retool"], here["verl"]
        other = {
            **here,
            "retool": (retool_dir, "0" * 64),
            "verl": ("/opt/other/verl", verl_digest),
            "retool_sandbox": None,
        }  # the launching host lacks it: nothing to compare
        unshared = {**shared, str(tmp_path / "elsewhere"): next(iter(shared.values()))}
        different = Check(OK, "node b")
        check_files(Files(other, unshared, str(tmp_path / "no-model")), different)
    assert same.status == OK and same.details == [
        "the recipe and verl as on the launching host (same paths, same files); the run folder shared; the model found"
    ]
    assert different.status == FAIL and len(different.details) == 4, different.details
    commit, path, folder, missing = different.details
    assert commit.startswith(f"retool at {retool_dir} holds other files than on the launching host (another commit")
    assert path.startswith(f"verl is imported from {verl_dir} here, from /opt/other/verl on the launching host")
    assert folder.startswith(f"{tmp_path / 'elsewhere'} is not the launching host's folder here")
    assert "RUN_DIR" in folder
    assert missing.startswith(f"the model {tmp_path / 'no-model'} is not here")
    assert list((tmp_path / "run").rglob(f"{MARKER_PREFIX}*")) == []  # the markers are gone after the check


def test_a_node_whose_verl_differs_in_its_files_is_told_it_is_another_release_or_patch_set():
    verl_dir, _ = package_files()["verl"]
    patched = Check(OK, "node c")  # the launching host's verl at the same path, one patch applied or left out
    check_files(Files({"verl": (verl_dir, "f" * 64)}, {}, None), patched)
    assert patched.status == FAIL and patched.details == [
        f"verl at {verl_dir} holds other files than on the launching host (another verl release or patch set). "
        f"{SAME_CLONE}"
    ]


def test_a_run_folder_the_launching_host_cannot_write_names_it(tmp_path):
    (tmp_path / "file").write_text("")
    with pytest.raises(UnwritableFolder, match=r"cannot write into .*file/run \(.*\)\. Fix: a RUN_DIR"):
        with shared_markers([tmp_path / "file" / "run"]):
            pass


def test_a_wait_that_is_not_a_number_stops_the_check_naming_the_variable(tmp_path, ray_dir):
    proc = node_check(config(tmp_path, ray_dir, dead_url()), **{GRACE_VARIABLE: "soon"})
    assert proc.returncode == 1
    assert f"[FAIL] ray: {GRACE_VARIABLE}='soon' is not a number of seconds" in proc.stderr
