"""RL across two Ray nodes, rehearsed on one host as docs/multinode.md tells a user to run it on two.

A head (127.0.0.1) and a second node (127.0.0.2, `ray start --address` with its own RETOOL_NODE_SANDBOX_URL), one
bookkeeping device and one sandbox each; run_qwen3_4b_dapo_npu.sh on the head with `NNODES=2 NPROC_PER_NODE=1`
(DEVICE=cpu, the smoke's tiny model and tool task, sessions per trajectory), two steps with a checkpoint after each.
The launch is killed with SIGKILL during step 2, its tool calls in flight, and the same launch is run again. Then:

- the trainer's two ranks and the two rollout replicas ran one on each node (Ray's actor table), and the checkpoint
  holds both ranks' shards;
- each node's agent-loop worker called its own node's sandbox, and every trajectory's calls went to one sandbox: the
  resumed step's calls and sessions, counted by the two servers, add up to what its trajectories report;
- the resume went on from step 1's checkpoint with the data order of an uninterrupted run (verl's sampler replayed
  here), and TensorBoard holds each step once.

`make rehearse-nodes` runs this with the multi-node SFT test and the separate_async rehearsal (docs/performance.md).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from ports import free_port
from processes import stop_group
from ray_cluster import SECOND_NODE, record, two_node_cluster
from resume_checks import data_order, scalar_points, trained

from retool.constants import REPO_ROOT
from retool_sandbox.client import SandboxClient
from retool_sandbox.spawn import running_sandbox

pytestmark = [pytest.mark.verl, pytest.mark.slow]
STEPS = 2
BATCH = 8  # the smoke's prompts per step
# Ray's actor table, read from the head: actor id -> its class, its node's address and its state (ALIVE, DEAD...).
ACTORS = textwrap.dedent(
    """
    import json, sys
    import ray
    from ray._private import state
    ray.init(address=sys.argv[1], logging_level="ERROR", log_to_driver=False)
    nodes = {node["NodeID"]: node["NodeManagerAddress"] for node in ray.nodes()}
    print(json.dumps({key: [actor["ActorClassName"], nodes.get(actor["Address"]["NodeID"], "?"), actor["State"]]
                      for key, actor in state.actors().items()}))
    """
)
# what the smoke's RL stage runs here: two steps, a checkpoint after each, no validation
SHORT = [
    "+smoke=rl",
    f"trainer.total_training_steps={STEPS}",
    "trainer.save_freq=1",
    "trainer.test_freq=-1",
    "trainer.val_before_train=false",
    "actor_rollout_ref.rollout.agent.num_workers=2",
]  # verl places agent-loop workers round-robin by node


def counters(url: str) -> dict:
    health = SandboxClient(url).health()
    return {"requests": health["counters"]["requests"], "sessions": health["sessions"]["counters"]["started"]}


def per_trajectory_tool(folder: Path) -> Path:
    """The improved profile's tool config with sessions per trajectory: a trajectory whose calls reached two
    sandboxes would open a session on each."""
    text = (REPO_ROOT / "configs" / "tool_annotated.yaml").read_text()
    if "session_mode: stateless" not in text:
        raise RuntimeError("configs/tool_annotated.yaml no longer sets session_mode: stateless; update this test")
    path = folder / "tool_per_trajectory.yaml"
    path.write_text(text.replace("session_mode: stateless", "session_mode: per_trajectory"))
    return path


def wait_for(condition, proc: subprocess.Popen, what: str, timeout: float = 900) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise AssertionError(f"the first launch {'ended' if proc.poll() is not None else 'hung'} before {what}")
        time.sleep(0.2)


def actors(cluster: dict) -> dict[str, list[str]]:
    table = subprocess.run(
        [sys.executable, "-c", ACTORS, cluster["env"]["RAY_ADDRESS"]],
        env=cluster["env"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert table.returncode == 0, table.stderr[-2000:]
    return json.loads(table.stdout)


def wait_until_dead(cluster: dict, before: dict, timeout: float = 180) -> None:
    """Until every actor started since the ``before`` reading is dead: a killed driver's agent-loop workers go on
    for a moment and may still call a sandbox, which a reading of the counters must not see as the next launch's."""
    deadline = time.monotonic() + timeout
    while alive := sorted(row[0] for key, row in actors(cluster).items() if key not in before and row[2] != "DEAD"):
        assert time.monotonic() < deadline, f"the killed launch's actors still run after {timeout:g} s: {alive}"
        time.sleep(1)


def placed(before: dict, after: dict) -> dict[str, list[str]]:
    """Class -> the nodes of its actors started between the two readings of the actor table."""
    out: dict[str, list[str]] = {}
    for key in after.keys() - before.keys():
        out.setdefault(after[key][0], []).append(after[key][1])
    return {name: sorted(nodes) for name, nodes in out.items()}


def trainer_nodes(placed_on: dict[str, list[str]]) -> list[list[str]]:
    """The nodes of verl's trainer workers (its colocated WorkerDict class, or an ActorRollout one)."""
    return [nodes for name, nodes in placed_on.items() if "ActorRollout" in name or "WorkerDict" in name]


def quiet(cluster: dict, timeout: float = 120, still_s: float = 5) -> None:
    """Until both servers run nothing and have counted nothing new for ``still_s``: a dead client's request may
    still sit in a socket buffer, which a server reads (and counts) after its last call ended."""
    deadline, last, still_since = time.monotonic() + timeout, None, time.monotonic()
    while True:
        health = {url: SandboxClient(url).health() for url in cluster["sandboxes"].values()}
        now = (all_counters(cluster), [h["in_flight"] + h["queued"] for h in health.values()])
        if now != last or any(now[1]):
            last, still_since = now, time.monotonic()
        elif time.monotonic() - still_since >= still_s:
            return
        assert time.monotonic() < deadline, f"the servers still run or count calls of the killed launch: {health}"
        time.sleep(0.5)


def all_counters(cluster: dict) -> dict[str, dict]:
    return {name: counters(url) for name, url in cluster["sandboxes"].items()}


def difference(before: dict, after: dict) -> dict[str, dict]:
    return {name: {key: after[name][key] - before[name][key] for key in before[name]} for name in before}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> dict:
    """The two nodes, each with its own sandbox (the head's: the launch's RETOOL_SANDBOX_URL), and the improved
    profile's tool config with sessions per trajectory."""
    node_port = free_port()
    with (
        running_sandbox(slots=2) as head_sandbox,
        running_sandbox(slots=2, port=node_port) as node_sandbox,
        two_node_cluster(f"{node_sandbox}/run_code", cpus_per_node=8) as env,
    ):
        yield {
            "env": env,
            "sandboxes": {"head": head_sandbox, "node": node_sandbox},
            "tool": per_trajectory_tool(tmp_path_factory.mktemp("tool")),
        }


def launch_env(cluster: dict, smoke_assets: Path, run_dir: Path) -> dict:
    return {
        **cluster["env"],
        "DEVICE": "cpu",
        "PROFILE": "improved",
        "NNODES": "2",
        "NPROC_PER_NODE": "1",
        "RUN_DIR": str(run_dir),
        "DATA_DIR": str(smoke_assets / "launcher-data"),
        "MODEL_PATH": str(smoke_assets / "model"),
        "RETOOL_DATA_DIR": str(smoke_assets / "data"),
        "RETOOL_SANDBOX_URL": f"{cluster['sandboxes']['head']}/run_code",
        "PYTHON": sys.executable,
    }


@pytest.fixture(scope="module")
def two_node_run(cluster, smoke_assets, tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("rl-2n")
    run_dir = root / "run"
    launcher = [
        str(REPO_ROOT / "run_qwen3_4b_dapo_npu.sh"),
        *SHORT,
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=16",  # the smoke's 32 trajectories, per rank
        f"actor_rollout_ref.rollout.multi_turn.tool_config_path={cluster['tool']}",
    ]
    env = launch_env(cluster, smoke_assets, run_dir)
    latest = run_dir / "checkpoints" / "rl" / "latest_checkpointed_iteration.txt"
    table_before, started = actors(cluster), time.monotonic()
    with open(root / "first.console", "w") as out:
        first = subprocess.Popen(
            launcher, cwd=REPO_ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        wait_for(lambda: latest.is_file() and latest.read_text().strip() == "1", first, "step 1's checkpoint")
        at_checkpoint = sum(c["requests"] for c in all_counters(cluster).values())
        wait_for(
            lambda: sum(c["requests"] for c in all_counters(cluster).values()) >= at_checkpoint + 4,
            first,
            "step 2's tool calls",
        )
        os.killpg(first.pid, signal.SIGKILL)  # the launch, its console and verl's driver: as a crash would
        first.wait()
    finally:
        if first.poll() is None:
            stop_group(first, timeout=10)
    killed_after = time.monotonic() - started
    wait_until_dead(cluster, table_before)  # no more calls from the killed launch...
    quiet(cluster)  # ...and those in flight end on the servers, which count them then
    at_kill, resumed = all_counters(cluster), time.monotonic()
    second = subprocess.run(launcher, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=900)
    resumed_in = time.monotonic() - resumed
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    run = {
        "run_dir": run_dir,
        "second": second.stdout + second.stderr,
        "placed": placed(table_before, actors(cluster)),
        "calls": difference(at_kill, all_counters(cluster)),
    }
    record(
        "rl sync, killed in step 2 and resumed",
        {
            "killed after (s)": round(killed_after),
            "resumed run (s)": round(resumed_in),
            "placed": run["placed"],
            "resumed launch's calls per sandbox": run["calls"],
        },
    )
    return run


def test_trainer_ranks_and_rollout_replicas_ran_on_both_nodes(two_node_run):
    placed_on = two_node_run["placed"]
    nodes = set().union(*placed_on.values())
    assert len(nodes) == 2 and SECOND_NODE in nodes, placed_on
    both = sorted(2 * list(nodes))  # two launches, each with one of these per node
    assert placed_on["vLLMHttpServer"] == both and placed_on["AccountingAgentLoopWorker"] == both, placed_on
    trainer = trainer_nodes(placed_on)
    assert trainer and all(nodes == both for nodes in trainer), placed_on
    actor = two_node_run["run_dir"] / "checkpoints" / "rl" / f"global_step_{STEPS}" / "actor"
    assert sorted(path.name for path in actor.glob("model_world_size_*_rank_*.pt")) == [
        "model_world_size_2_rank_0.pt",
        "model_world_size_2_rank_1.pt",
    ]


def test_each_node_called_its_own_sandbox_and_each_trajectory_one_sandbox(two_node_run):
    trajectories = [
        json.loads(line) for line in (two_node_run["run_dir"] / "rollouts" / f"{STEPS}.jsonl").read_text().splitlines()
    ]
    calls = two_node_run["calls"]  # what the resumed launch asked of each server
    outcomes = {
        key: sum(t.get(key, 0) for t in trajectories) for key in ("tool_calls", "tool_retried", "tool_unavailable")
    }
    seen = (calls, outcomes, sum(t["tool_calls"] > 0 for t in trajectories))
    assert all(calls[name]["requests"] > 1 and calls[name]["sessions"] > 0 for name in calls), seen
    # each node's check ran one program; the rest are step 2's calls, one session per trajectory that called
    assert sum(c["requests"] for c in calls.values()) == 2 + outcomes["tool_calls"], seen
    assert sum(c["sessions"] for c in calls.values()) == seen[2], seen


def test_the_resume_went_on_on_both_nodes_in_the_same_data_order(two_node_run, smoke_assets):
    run_dir = two_node_run["run_dir"]
    assert "[resume] rl continues after the checkpoint of step 1" in two_node_run["second"]
    assert (
        f"Resuming from {run_dir / 'checkpoints' / 'rl' / 'global_step_1'}" in (run_dir / "logs" / "rl.log").read_text()
    )
    # step 1 trained by the killed launch, step 2 by the resumed one: each the batch of an uninterrupted run
    order = data_order(smoke_assets / "data" / "rl_train.parquet", None, STEPS * BATCH)  # rl.yaml: data.seed unset
    for step in range(1, STEPS + 1):
        assert trained(run_dir / "rollouts" / f"{step}.jsonl") == dict.fromkeys(
            order[(step - 1) * BATCH : step * BATCH], 4
        ), step  # 4 samples of each prompt
    assert scalar_points(run_dir / "tensorboard" / "rl", "critic/score/mean") == dict.fromkeys(range(1, STEPS + 1), 1)


@pytest.fixture(scope="module")
def separate_run(cluster, smoke_assets, tmp_path_factory) -> dict:
    run_dir = tmp_path_factory.mktemp("rl-2n-separate") / "run"
    # One device per node here: the trainer takes one node and the rollout the other. (The launcher's split gives
    # ROLLOUT_DEVICES of each node's NPROC_PER_NODE to the rollout, so it is told 2 and 1, then one node each.)
    launcher = [
        str(REPO_ROOT / "run_qwen3_4b_dapo_npu.sh"),
        *SHORT,
        "trainer.nnodes=1",
        f"actor_rollout_ref.rollout.multi_turn.tool_config_path={cluster['tool']}",
    ]
    env = {
        **launch_env(cluster, smoke_assets, run_dir),
        "TRAINER_MODE": "separate_async",
        "NPROC_PER_NODE": "2",
        "ROLLOUT_DEVICES": "1",
    }
    table_before, counters_before, started = actors(cluster), all_counters(cluster), time.monotonic()
    done = subprocess.run(launcher, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    metrics = [json.loads(line) for line in (run_dir / "logs" / "metrics" / "rl-1.jsonl").read_text().splitlines()]
    run = {
        "run_dir": run_dir,
        "placed": placed(table_before, actors(cluster)),
        "calls": difference(counters_before, all_counters(cluster)),
        "synced": {
            m["step"]: m["data"]["weight_sync/bytes"] for m in metrics if "weight_sync/bytes" in m.get("data", {})
        },
    }
    record(
        "rl separate_async",
        {
            "run (s)": round(time.monotonic() - started),
            "placed": run["placed"],
            "calls per sandbox": run["calls"],
            "weight sync bytes per step": run["synced"],
        },
    )
    return run


@pytest.mark.rehearsal
def test_separate_async_trains_on_one_node_and_rolls_out_on_the_other(separate_run):
    placed_on = separate_run["placed"]
    rollout, trainer = placed_on["vLLMHttpServer"], trainer_nodes(placed_on)
    assert len(rollout) == 1 and trainer and all(len(nodes) == 1 and nodes != rollout for nodes in trainer), placed_on
    assert sorted(separate_run["synced"]) == list(range(1, STEPS + 1)), separate_run["synced"]
    assert all(size > 0 for size in separate_run["synced"].values())  # the weights went to the other node
    assert all(c["requests"] > 1 for c in separate_run["calls"].values()), separate_run["calls"]
