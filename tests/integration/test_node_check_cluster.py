"""Every node of a real two-node Ray cluster is checked before step 1 (retool/node_check.py, run by scripts/launch.sh).

On this host: a head (`ray start --head`, 127.0.0.1) and a second node (`ray start --address`, 127.0.0.2, its own
raylet and resources), each with its own sandbox: the head's at the launch's RETOOL_SANDBOX_URL, the second node's
named by RETOOL_NODE_SANDBOX_URL in the environment its `ray start` ran with. Both raylets run without the device
variables of configs/device/cpu.env, as a `ray start` by hand or by a scheduler leaves them.

1. The second node's sandbox is down: the real launcher (DEVICE=cpu, NNODES=2, RAY_ADDRESS) stops before verl with
   that node's address, its URL, where the URL came from and the fix, while the head passes.
2. With that sandbox up, every node passes: each ran a program on its own sandbox (each server's request counter)
   and each node's worker saw the launcher's device variables, through the job's runtime env.
3. The run is resumed with the head's sandbox moved (a new RETOOL_SANDBOX_URL): the head's line says the resume
   put the new URL in place of the saved one; the second node's own RETOOL_NODE_SANDBOX_URL still wins there, and
   a warning names both URLs and what to change, for that node only.
4. A third node whose file system is not the head's (its raylet under bwrap: an edited copy of the recipe at the
   clone's path, an empty folder over RUN_DIR and the model) stops the launch, its lines naming each difference.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import yaml
from ports import free_port
from processes import stop_group
from ray_cluster import DEVICE_VARIABLES, SECOND_NODE, nodes_up, two_node_cluster

from retool.constants import REPO_ROOT
from retool.sandbox_gate import GRACE_VARIABLE
from retool_sandbox.client import SandboxClient
from retool_sandbox.spawn import running_sandbox

pytestmark = pytest.mark.verl


def requests(url: str) -> int:
    return SandboxClient(url).health()["counters"]["requests"]


@pytest.fixture(scope="module")
def cluster():
    """(environment to reach the cluster with, the second node's sandbox port)."""
    node_sandbox_port = free_port()
    with two_node_cluster(f"http://127.0.0.1:{node_sandbox_port}/run_code") as env:
        yield env, node_sandbox_port


def launch_two_nodes(env: dict, rl_inputs: dict, run_dir: Path, sandbox: str) -> subprocess.CompletedProcess:
    """The RL launcher on the head of the two-node cluster, with ``sandbox`` as the launch's RETOOL_SANDBOX_URL."""
    return subprocess.run(
        [str(REPO_ROOT / "run_qwen3_4b_dapo_npu.sh")],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={
            **env,
            **rl_inputs,
            "NNODES": "2",
            "NPROC_PER_NODE": "1",
            "RUN_DIR": str(run_dir),
            "RETOOL_SANDBOX_URL": sandbox + "/run_code",
            GRACE_VARIABLE: "2",
        },
    )  # a node's dead port is waited for 2 s, not 30 (the wait: test_keep_sandbox_up)


def test_a_node_without_its_sandbox_stops_the_launch_and_every_node_passes_once_it_has_one(
    cluster, rl_inputs, tmp_path
):
    env, node_sandbox_port = cluster
    node_url = f"http://127.0.0.1:{node_sandbox_port}/run_code"
    run_dir = tmp_path / "run"
    with running_sandbox(slots=1) as head_sandbox:
        launch = launch_two_nodes(env, rl_inputs, run_dir, head_sandbox)
        assert launch.returncode == 1, launch.stderr[-3000:]
        assert f"[FAIL] node {SECOND_NODE}: " in launch.stderr
        assert "error: the node check failed before step 1" in launch.stderr
        assert f"sandbox {node_url} (from RETOOL_NODE_SANDBOX_URL of this node's environment)" in launch.stderr
        assert "does not answer GET /v1/ping" in launch.stderr
        assert "(refused connections for 2 s)" in launch.stderr  # the launcher's wait, on the second node
        assert "start `retool-sandbox serve` on that node" in launch.stderr
        head = (
            f"worker environment as launched ({{}} variables)\n       sandbox {head_sandbox}/run_code (from "
            f"RETOOL_SANDBOX_URL of the launch): sandbox {head_sandbox}: isolation bwrap; ran print(6*7)"
        )
        assert re.search(r"\[ OK \] node [\d.]+: " + re.escape(head).replace(r"\{\}", r"\d+"), launch.stderr)
        assert not (run_dir / "logs" / "rl.log").exists()  # verl never started

        env_vars = yaml.safe_load((run_dir / "rl.resolved.yaml").read_text())["ray_kwargs"]["ray_init"]["runtime_env"][
            "env_vars"
        ]
        assert set(DEVICE_VARIABLES) <= set(env_vars)  # what the raylets lack, the launch hands over
        with running_sandbox(slots=1, port=node_sandbox_port) as node_sandbox:
            check = subprocess.run(
                [sys.executable, "-m", "retool.node_check", "--config", str(run_dir / "rl.resolved.yaml")],
                env={**env, **rl_inputs},
                capture_output=True,
                text=True,
                timeout=300,
            )
            node_requests = requests(node_sandbox)
        head_requests = requests(head_sandbox)
    assert check.returncode == 0, check.stderr[-3000:]
    # each node's lines, joined: "[ OK ] node ADDRESS: first" and its further lines, indented under the name
    passed = {
        node: "; ".join([first, *(line.strip() for line in more.splitlines())])
        for node, first, more in re.findall(
            r"^\[ OK \] node ([\d.]+): (.*)\n((?: {7}.*\n?)*)", check.stderr, re.MULTILINE
        )
    }
    assert len(passed) == 2 and SECOND_NODE in passed, check.stderr  # the head is on this host's own address
    for node, url, source in (
        (next(n for n in passed if n != SECOND_NODE), head_sandbox + "/run_code", "RETOOL_SANDBOX_URL of the launch"),
        (SECOND_NODE, node_url, "RETOOL_NODE_SANDBOX_URL of this node's environment"),
    ):
        assert passed[node].startswith(
            f"worker environment as launched ({len(env_vars)} variables); sandbox {url} (from {source}): "
        ), passed[node]
        assert passed[node].endswith(
            "isolation bwrap; ran print(6*7); verl, torch and vLLM as on the launching "
            "host; the recipe and verl as on the launching host (same paths, same files); "
            "the run folder shared; the model found"
        ), passed[node]
    assert node_requests == 1 and head_requests == 2  # each node ran its program on its own sandbox

    # the second node's sandbox is down again, so this launch too stops before verl, after the check printed
    with running_sandbox(slots=1) as moved:
        resumed = launch_two_nodes(env, rl_inputs, run_dir, moved)
    assert resumed.returncode == 1, resumed.stderr[-3000:]
    assert (
        f"[resume] the workers take this launch's RETOOL_SANDBOX_URL: '{head_sandbox}/run_code' -> '{moved}/run_code'"
    ) in resumed.stderr
    assert (
        f"sandbox {moved}/run_code (from RETOOL_SANDBOX_URL of the launch, which the resume put in place of the "
        f"saved config's {head_sandbox}/run_code): sandbox {moved}: isolation bwrap"
    ) in resumed.stderr
    warnings = [line.strip() for line in resumed.stderr.splitlines() if "this resume moved the sandbox" in line]
    assert len(warnings) == 1, resumed.stderr[-3000:]  # the head calls the new sandbox: no warning there
    assert f"[FAIL] node {SECOND_NODE}: " in resumed.stderr  # its sandbox is down: the warning is one of its lines
    assert warnings[0].startswith(
        f"this resume moved the sandbox to {moved}/run_code (RETOOL_SANDBOX_URL="
        f"{moved}/run_code; the run before it had RETOOL_SANDBOX_URL={head_sandbox}/run_code), but this node's own "
        f"RETOOL_NODE_SANDBOX_URL={node_url} overrides it: its workers call {node_url}"
    ), warnings[0]


THIRD_NODE = "127.0.0.3"


def test_a_node_that_sees_other_files_stops_the_launch_naming_each(cluster, rl_inputs, tmp_path_factory):
    """A third node joins whose view of the file system is not the head's (its raylet under bwrap): an edited copy of
    the recipe at the clone's path, and an empty folder over the tests' temporary files, where RUN_DIR and the model
    are. The launch stops before verl; that node's lines name the edit, both unshared folders and the model, the
    others' say they see the head's files."""
    env, node_sandbox_port = cluster
    edited = Path(tempfile.mkdtemp(prefix="rt-edited-"))
    shutil.copytree(REPO_ROOT / "retool", edited / "retool", ignore=shutil.ignore_patterns("__pycache__"))
    with open(edited / "retool" / "__init__.py", "a") as init:
        init.write("# a local edit on one node\n")
    hidden = tmp_path_factory.getbasetemp()
    ray = str(Path(sys.executable).with_name("ray"))
    third = subprocess.Popen(
        [
            "bwrap",
            "--dev-bind",
            "/",
            "/",
            "--bind",
            str(edited / "retool"),
            str(REPO_ROOT / "retool"),
            "--tmpfs",
            str(hidden),
            "--",
            ray,
            "start",
            f"--address={env['RAY_ADDRESS']}",
            f"--node-ip-address={THIRD_NODE}",
            "--block",
            "--num-cpus=1",
            "--num-gpus=1",
            "--disable-usage-stats",
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    run_dir = tmp_path_factory.mktemp("files") / "run"
    try:
        nodes_up(env, int(env["RAY_ADDRESS"].rsplit(":", 1)[1]), 3)
        with running_sandbox(slots=1) as head_sandbox, running_sandbox(slots=1, port=node_sandbox_port):
            launch = launch_two_nodes(env, rl_inputs, run_dir, head_sandbox)
    finally:
        stop_group(third, timeout=5)
        shutil.rmtree(edited, ignore_errors=True)
    assert launch.returncode == 1, launch.stderr[-3000:]
    assert "error: the node check failed before step 1" in launch.stderr
    assert not (run_dir / "logs" / "rl.log").exists()  # verl never started
    lines = {
        node: [first, *(line.strip() for line in more.splitlines())]
        for node, first, more in re.findall(
            r"^\[(?: OK |FAIL)\] node ([\d.]+): (.*)\n((?: {7}.*\n?)*)", launch.stderr, re.MULTILINE
        )
    }
    assert len(lines) == 3 and {SECOND_NODE, THIRD_NODE} <= set(lines), launch.stderr
    for node in set(lines) - {THIRD_NODE}:
        assert (
            "the recipe and verl as on the launching host (same paths, same files); the run folder shared; the "
            "model found" in lines[node]
        ), lines[node]
    assert f"[FAIL] node {THIRD_NODE}: " in launch.stderr
    seen = "\n".join(lines[THIRD_NODE])
    assert (
        f"retool at {REPO_ROOT / 'retool'} holds other files than on the launching host (another commit or local "
        "edits)" in seen
    )
    for folder in (run_dir, run_dir / "checkpoints" / "rl"):
        assert f"{folder} is not the launching host's folder here: the file .node-check-" in seen, seen
    assert f"the model {rl_inputs['MODEL_PATH']} is not here" in seen
    assert "verl, torch and vLLM as on the launching host" in seen  # what it does share is not blamed
    assert not list(run_dir.rglob(".node-check-*"))  # the launching host took its markers back
