"""What a launcher sets reaches the Ray workers that use it, even on a cluster started with `ray start`.

A real Ray head is started here with a *different* environment (as a raylet started earlier, by hand or by a
scheduler, would have). A driver then connects the way verl's main_ppo does, with the runtime env from the launcher's
resolved config, and a worker on that cluster builds the code tool with verl's own loader (as the agent-loop workers
do) and reads TENSORBOARD_DIR (as verl's tracking does). The control shows the same worker without the runtime env
sees the raylet's values, so the test can tell the two apart.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest
import yaml

from processes import stop_group
from ports import free_port

REPO = Path(__file__).resolve().parents[2]
SANDBOX = "http://127.0.0.1:18080/run_code"
TENSORBOARD = "/shared/runs/rl-x/tensorboard/rl"

WORKER_PROBE = textwrap.dedent(
    """
    import json, os, sys
    import ray

    runtime_env = json.loads(sys.argv[2])
    ray.init(address=sys.argv[1], runtime_env=runtime_env or None, log_to_driver=False)

    @ray.remote(num_cpus=0)
    def probe(tool_config_path):
        import contextlib, io
        from verl.tools.tool_registry import initialize_tools_from_config
        with contextlib.redirect_stdout(io.StringIO()):
            (tool,) = initialize_tools_from_config(tool_config_path)
        return {"sandbox_url": tool.settings.sandbox_fusion_url, "tensorboard": os.environ.get("TENSORBOARD_DIR")}

    print(json.dumps(ray.get(probe.remote(sys.argv[3]), timeout=120)))
    """
)


def _own_home(temp_dir: str) -> dict[str, str]:
    # A Ray run earlier in the session (the smoke) leaves ~/.ray/auth_token, which a new head then requires while
    # this driver does not send it: give head and driver a home of their own.
    return {"HOME": temp_dir}


@pytest.fixture(scope="module")
def ray_head():
    """A one-node Ray cluster whose raylet has other values for the variables under test; stopped afterwards."""
    temp_dir = tempfile.mkdtemp(prefix="rt-ray-")  # short: Ray's unix socket paths must stay < 108 bytes
    port = free_port()
    env = {
        **os.environ,
        **_own_home(temp_dir),
        "RETOOL_SANDBOX_URL": "http://raylet-env:1/run_code",
        "TENSORBOARD_DIR": "/raylet/tb",
    }
    ray = str(Path(sys.executable).with_name("ray"))
    head = subprocess.Popen(
        [
            ray,
            "start",
            "--head",
            "--block",
            f"--port={port}",
            "--node-ip-address=127.0.0.1",
            "--num-cpus=1",
            "--num-gpus=0",
            "--include-dashboard=false",
            "--disable-usage-stats",
            f"--temp-dir={temp_dir}",
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    address = f"127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", port)) == 0:
                    break
            if head.poll() is not None:
                pytest.fail(f"ray start exited: {head.stdout.read()[-2000:]}")
            time.sleep(0.5)
        else:
            pytest.fail("the Ray head did not open its port within 90 s")
        yield address, temp_dir
    finally:
        stop_group(head, timeout=5)  # only the processes this fixture started; a test cluster needs no grace


def _launcher_config() -> dict:
    env = {
        **os.environ,
        "DRY_RUN": "1",
        "PYTHON": sys.executable,
        "RETOOL_SANDBOX_URL": SANDBOX,
        "TENSORBOARD_DIR": TENSORBOARD,
        "MODEL_PATH": "/ckpt/sft",
        "DATA_DIR": "/data/rt",
    }
    proc = subprocess.run(
        [str(REPO / "run_qwen3_4b_dapo_npu.sh")], cwd=REPO, env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return yaml.safe_load(proc.stdout)


def _probe(head: tuple[str, str], runtime_env: dict, tool_config_path: str) -> dict:
    address, temp_dir = head
    env = {k: v for k, v in os.environ.items() if k not in ("RETOOL_SANDBOX_URL", "TENSORBOARD_DIR")}
    env.update(_own_home(temp_dir))
    proc = subprocess.run(
        [sys.executable, "-c", WORKER_PROBE, address, json.dumps(runtime_env), tool_config_path],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_a_worker_on_a_ray_start_cluster_sees_the_launcher_values(ray_head):
    cfg = _launcher_config()
    runtime_env = cfg["ray_kwargs"]["ray_init"]["runtime_env"]
    tool_config_path = cfg["actor_rollout_ref"]["rollout"]["multi_turn"]["tool_config_path"]
    assert tool_config_path == str(REPO / "configs" / "tool.yaml")  # resolved by the launcher, not in a worker

    seen = _probe(ray_head, {"env_vars": runtime_env["env_vars"]}, tool_config_path)
    assert seen == {"sandbox_url": SANDBOX, "tensorboard": TENSORBOARD}

    control = _probe(ray_head, {}, tool_config_path)
    assert control == {"sandbox_url": "http://raylet-env:1/run_code", "tensorboard": "/raylet/tb"}
