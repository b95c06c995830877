"""A Ray cluster of two nodes on this host, started as docs/multinode.md tells a user: `ray start --head` on
127.0.0.1 and `ray start --address` on 127.0.0.2 (all of 127.0.0.0/8 is this host's loopback: a second node address
without a network), each with one bookkeeping GPU. The second node's raylet runs with ``RETOOL_NODE_SANDBOX_URL`` set,
as on a node whose sandbox is its own. Neither raylet gets the device variables of configs/device/cpu.env, as a
`ray start` by hand or by a scheduler leaves them: the launcher hands them over through the job's runtime env."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

from ports import free_port
from processes import processes_with, stop_group

SECOND_NODE = "127.0.0.2"
DEVICE_VARIABLES = (
    "VERL_PLATFORM",
    "VERL_USE_EXTERNAL_MODULES",
    "VLLM_CPU_KVCACHE_SPACE",
    "VLLM_CPU_OMP_THREADS_BIND",
    "TORCHDYNAMO_DISABLE",
    "TOKENIZERS_PARALLELISM",
    "RETOOL_CPU_DTYPE",
    "OMP_NUM_THREADS",
)
NODES_UP = textwrap.dedent(
    """
    import sys, time
    import ray
    ray.init(address=sys.argv[1], logging_level="ERROR", log_to_driver=False)
    deadline = time.monotonic() + 90
    while sum(node["Alive"] for node in ray.nodes()) < int(sys.argv[2]):
        if time.monotonic() > deadline:
            sys.exit(f"{sys.argv[2]} nodes did not join within 90 s")
        time.sleep(0.5)
    """
)


def listening(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def nodes_up(env: dict, port: int, count: int) -> None:
    joined = subprocess.run(
        [sys.executable, "-c", NODES_UP, f"127.0.0.1:{port}", str(count)],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    if joined.returncode != 0:
        raise RuntimeError(joined.stderr[-2000:])


@contextlib.contextmanager
def two_node_cluster(node_sandbox_url: str, cpus_per_node: int = 1) -> Iterator[dict]:
    """Yields the environment that reaches the cluster (RAY_ADDRESS set); both raylets stopped afterwards, and any
    process of theirs that left the group."""
    temp_dir = tempfile.mkdtemp(prefix="rt-2n-")  # short: Ray's unix socket paths must stay < 108 bytes
    port = free_port()
    # A home of their own: a Ray run earlier in the session leaves ~/.ray/auth_token, which a new head would require.
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in DEVICE_VARIABLES + ("RAY_ADDRESS", "RETOOL_SANDBOX_URL", "RETOOL_NODE_SANDBOX_URL")
    }
    env["HOME"] = temp_dir
    env["GLOO_SOCKET_IFNAME"] = "lo"  # the interface the ranks talk over, set where each raylet starts (multinode.md)
    ray = str(Path(sys.executable).with_name("ray"))
    common = ["--block", f"--num-cpus={cpus_per_node}", "--num-gpus=1", "--disable-usage-stats"]
    nodes = [
        subprocess.Popen(
            [
                ray,
                "start",
                "--head",
                f"--port={port}",
                "--node-ip-address=127.0.0.1",
                "--include-dashboard=false",
                f"--temp-dir={temp_dir}",
                *common,
            ],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
    ]
    try:
        deadline = time.monotonic() + 90
        while not listening(port):
            if nodes[0].poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the Ray head did not start")
            time.sleep(0.5)
        nodes.append(
            subprocess.Popen(
                [ray, "start", f"--address=127.0.0.1:{port}", f"--node-ip-address={SECOND_NODE}", *common],
                env={**env, "RETOOL_NODE_SANDBOX_URL": node_sandbox_url},
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
        )
        nodes_up(env, port, 2)
        yield {**env, "RAY_ADDRESS": f"127.0.0.1:{port}"}
    finally:
        for node in reversed(nodes):
            stop_group(node, timeout=5)  # only the processes this cluster started; a test cluster needs no grace
        for pid in processes_with(temp_dir):  # a Ray process that left the group
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        shutil.rmtree(temp_dir, ignore_errors=True)  # its sessions' logs and sockets


def record(part: str, facts: dict) -> None:
    """What a rehearsal saw (placements, times, counters), one JSON line appended to $RETOOL_REHEARSAL_RECORD when
    it is set: bench/rehearse_nodes.py writes them into docs/performance.md."""
    path = os.environ.get("RETOOL_REHEARSAL_RECORD")
    if path:
        with open(path, "a") as out:
            out.write(json.dumps({"part": part, **facts}) + "\n")
