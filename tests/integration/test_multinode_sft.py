"""Multi-node SFT, rehearsed on one host: the SFT launcher started once per node, as docs/multinode.md tells a user.

Two launches of run_qwen3_4b_sft_npu.sh on the CPU (the smoke's tiny model and data), `NNODES=2`, `NODE_RANK=0`
and `1`, one `MASTER_ADDR` and `MASTER_PORT`, one `RUN_DIR`, started a second apart as on two hosts: torchrun's
rendezvous joins them into one FSDP job of two ranks. Then:

- the checkpoint holds both ranks' shards, and verl's model merger turns them into the weights of the Hugging Face
  copy the trainer saved (in the merger's bf16), with the shapes of the model it started from;
- each node keeps its own log (node 0's `logs/sft.log`, node 1's `logs/sft.node1.log`): on shared storage one file
  would interleave them; node 0's console shows the steps, node 1's says where they are;
- `logs/launches.jsonl` has both nodes' lines, and the shakedown counts node 0's as the launch (node 1 found the
  config node 0 had just written, so its line says "resume").
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from ports import free_port
from processes import stop_group
from retool.constants import REPO_ROOT

pytestmark = [pytest.mark.verl, pytest.mark.slow]
STEPS = 2


@pytest.fixture(scope="module")
def two_nodes(smoke_assets, tmp_path_factory) -> dict:
    run_dir = tmp_path_factory.mktemp("sft-2n") / "run"
    env = {key: value for key, value in os.environ.items() if key not in ("DRY_RUN", "SHAKEDOWN")}
    env.update(
        DEVICE="cpu",
        PROFILE="improved",
        NNODES="2",
        NPROC_PER_NODE="1",
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(free_port()),
        RUN_DIR=str(run_dir),
        DATA_DIR=str(smoke_assets / "launcher-data"),
        MODEL_PATH=str(smoke_assets / "model"),
        RETOOL_DATA_DIR=str(smoke_assets / "data"),
        RETOOL_SMOKE_MODEL=str(smoke_assets / "model"),
        PYTHON=sys.executable,
        GLOO_SOCKET_IFNAME="lo",
    )  # the interface the ranks talk over, as docs/multinode.md tells each node
    # the smoke's batch of 8 is 4 per rank here
    overrides = ["+smoke=sft", "data.micro_batch_size_per_gpu=4", f"trainer.total_training_steps={STEPS}"]
    consoles = [run_dir.parent / f"node{rank}.console" for rank in (0, 1)]  # files: a full pipe would stall a node
    nodes = []
    try:
        for rank, console in enumerate(consoles):
            with open(console, "w") as out:
                nodes.append(
                    subprocess.Popen(
                        [str(REPO_ROOT / "run_qwen3_4b_sft_npu.sh"), *overrides],
                        cwd=REPO_ROOT,
                        env={**env, "NODE_RANK": str(rank)},
                        stdout=out,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,
                    )
                )
            time.sleep(1)  # two hosts never start at the same instant: node 1 finds node 0's resolved config
        for node in nodes:
            node.wait(timeout=900)
    finally:
        for node in nodes:
            if node.poll() is None:  # a hung rendezvous: stop only what this test started
                stop_group(node, timeout=10)
    return {
        "run_dir": run_dir,
        "codes": [node.returncode for node in nodes],
        "consoles": [console.read_text() for console in consoles],
        "model": smoke_assets / "model",
    }


def test_both_nodes_train_one_job_and_each_keeps_its_own_log(two_nodes):
    node0, node1 = two_nodes["consoles"]
    assert two_nodes["codes"] == [0, 0], node0[-3000:] + "\n--- node 1 ---\n" + node1[-3000:]
    run_dir = two_nodes["run_dir"]
    assert "| 2 nodes x 1 process |" in node0 and f"[sft] step {STEPS}/{STEPS} | loss " in node0
    assert "node 1: the step lines appear on node 0's console" in node1 and "[sft] step " not in node1
    assert f"full log: {run_dir / 'logs' / 'sft.node1.log'}" in node1
    node0_log, node1_log = (run_dir / "logs" / "sft.log").read_text(), (run_dir / "logs" / "sft.node1.log").read_text()
    assert "train/loss:" not in node1_log and "train/loss:" in node0_log  # verl's metric lines: global rank 0 only
    assert sorted((run_dir / "logs" / "metrics").glob("sft-*.jsonl")) == [run_dir / "logs" / "metrics" / "sft-1.jsonl"]


def test_the_checkpoint_has_both_ranks_shards_and_merges_to_the_saved_model(two_nodes, tmp_path):
    import torch
    from safetensors.torch import load_file

    assert two_nodes["codes"] == [0, 0]
    checkpoint = two_nodes["run_dir"] / "checkpoints" / "sft" / f"global_step_{STEPS}"
    shards = sorted(path.name for path in checkpoint.glob("model_world_size_*_rank_*.pt"))
    assert shards == ["model_world_size_2_rank_0.pt", "model_world_size_2_rank_1.pt"]
    merged = tmp_path / "merged"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "verl.model_merger",
            "merge",
            "--backend",
            "fsdp",
            "--local_dir",
            str(checkpoint),
            "--target_dir",
            str(merged),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    ours = load_file(str(merged / "model.safetensors"))
    saved = load_file(str(checkpoint / "huggingface" / "model.safetensors"))
    start = load_file(str(two_nodes["model"] / "model.safetensors"))
    assert {k: v.shape for k, v in ours.items()} == {k: v.shape for k, v in start.items()}
    # verl's merger always writes bf16; the trainer's copy keeps the float32 it trained in
    assert ours.keys() == saved.keys() and all(torch.equal(ours[k], saved[k].to(ours[k].dtype)) for k in ours)
    assert any(not torch.equal(ours[k].float(), start[k].float()) for k in ours)  # the two steps trained it
    # the copy the RL stage starts from loads as a model, shaped as the one-node SFT's (the model it started from)
    from transformers import AutoModelForCausalLM

    loaded = AutoModelForCausalLM.from_pretrained(checkpoint / "huggingface")
    one_node = AutoModelForCausalLM.from_pretrained(two_nodes["model"])
    assert {k: v.shape for k, v in loaded.state_dict().items()} == {
        k: v.shape for k, v in one_node.state_dict().items()
    }


def test_the_shakedown_counts_node_0_s_line_as_the_launch(two_nodes):
    from retool.shakedown.runfolder import read_run

    records = [json.loads(line) for line in (two_nodes["run_dir"] / "logs" / "launches.jsonl").read_text().splitlines()]
    assert sorted((r["event"], r["node_rank"]) for r in records) == [
        ("end", "0"),
        ("end", "1"),
        ("start", "0"),
        ("start", "1"),
    ]
    assert next(r for r in records if r["node_rank"] == "1")["resume"] is True  # node 0's config was there
    stage = read_run(two_nodes["run_dir"]).stages["sft"]
    assert [r["node_rank"] for r in stage.starts] == ["0"] and [r["resume"] for r in stage.starts] == [False]
