"""Ray: a multi-node config needs a reachable cluster with enough live nodes."""

from __future__ import annotations

from typing import Any

from retool.checklist import FAIL, OK, SKIP, Check
from retool.doctor.config import config_kind, dig
from retool.doctor.stages import RAY


def check_ray(address: str | None, cfg: dict[str, Any] | None) -> Check:
    nnodes = int(dig(cfg, "trainer.nnodes", 1) or 1) if cfg else 1
    if cfg is not None and config_kind(cfg) == "sft":
        return Check(SKIP, "ray", "SFT runs under torchrun, not Ray (several nodes: NNODES, NODE_RANK, MASTER_ADDR)")
    if not address:
        if nnodes > 1:
            return Check(
                FAIL,
                "ray",
                f"config asks for {nnodes} nodes but no Ray cluster is given: start one "
                "(ray start --head; ray start --address=HEAD:6379 on the others; "
                "docs/multinode.md) and pass --ray-address or set RAY_ADDRESS",
                step=RAY,
            )
        return Check(OK, "ray", "single node: the trainer starts its own Ray")
    try:
        import ray

        ray.init(address=address, logging_level="ERROR", log_to_driver=False)
        try:
            nodes = [n for n in ray.nodes() if n.get("Alive")]
            resources = ray.cluster_resources()
        finally:
            ray.shutdown()
    except Exception as e:  # ConnectionError, RuntimeError, ...: all mean "not reachable"
        return Check(
            FAIL,
            "ray",
            f"cannot connect to {address} ({type(e).__name__}: {e}) -> is `ray start --head` "
            "running there and the port open?",
        )
    accel = {k: v for k, v in resources.items() if k in ("GPU", "NPU")}
    msg = f"{address}: {len(nodes)} node(s) alive, resources {accel or 'no GPU/NPU'}"
    if len(nodes) < nnodes:
        return Check(FAIL, "ray", msg + f"; config asks for {nnodes} nodes -> join the missing nodes")
    return Check(OK, "ray", msg)
