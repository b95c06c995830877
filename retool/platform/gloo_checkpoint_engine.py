"""Weight sync over gloo: the checkpoint engine that lets separate_async run on a host without accelerators.

In ``trainer.v1.trainer_mode: separate_async`` the trainer and the rollout replicas own separate devices, and verl
0.9.1 moves every new policy from the trainer to the replicas through a checkpoint engine (verl/checkpoint_engine/):
nccl (HCCL registers under that name on Ascend), nixl, mooncake, kimi, delta. All of them move device memory;
none runs on a CPU (the nccl one needs cupy and CUDA). This engine broadcasts the weights with torch's gloo backend
over TCP instead. verl imports it through ``actor_rollout_ref.rollout.checkpoint_engine.custom_backend_module``
(configs/device/rl/cpu.yaml) in the actor workers and in every rollout worker's CheckpointEngineWorker, where it
registers as backend ``gloo`` (configs/mode/rl/separate_async.yaml picks the backend from
``RETOOL_WEIGHT_SYNC_BACKEND``, which configs/device/cpu.env sets to ``gloo``).

Why gloo and not another engine: it ships with torch (nothing to install), works across nodes, and has the same
one-to-many broadcast shape as verl's nccl engine, so the CPU run takes the NPU run's path through verl's
CheckpointEngineManager (abort in-flight requests, build the group, send and receive, finalize, resume).

One sync, as verl's manager drives it:

- ``prepare``: actor rank 0 opens a TCPStore on a free port of its node and returns its address;
- ``build_topology``: actor rank 0 sends (rank 0); the other actor ranks stay out of the group (rank -1) but still
  walk the weight generator, since gathering each full tensor is collective over the actor group; rollout workers
  receive (ranks 1..N);
- ``send_weights`` / ``receive_weights``: the weights in buckets of at most ``update_weights_bucket_megabytes``;
  each bucket's layout (verl's TensorMeta list) goes through the store, its bytes through one gloo broadcast;
- ``finalize``: the group and the store are dropped (a new pair per sync; on these hosts that costs milliseconds).

Each sync returns ``weight_sync/bytes`` and ``weight_sync/send_s``, which verl adds to the step's metrics. A host
with several network interfaces picks gloo's with ``GLOO_SOCKET_IFNAME``.
"""

from __future__ import annotations

import asyncio
import datetime
import pickle
import time
from typing import Any, AsyncGenerator, Generator

import torch
import torch.distributed as dist

from verl.checkpoint_engine.base import (
    CheckpointEngine,
    CheckpointEngineRegistry,
    TensorMeta,
    merge_weight_chunks,
    split_weight_chunks,
)
from verl.workers.rollout.utils import ensure_async_iterator

BACKEND = "gloo"
ALIGN = 64  # bytes: each tensor starts at a multiple of this in its bucket, so it can be viewed as any dtype


def _node_ip() -> str:
    import ray

    return ray.util.get_node_ip_address().strip("[]")


def _broadcast(group: dist.ProcessGroupGloo, buffer: torch.Tensor) -> None:
    options = dist.BroadcastOptions()
    options.rootRank = 0
    group.broadcast([buffer], options).wait()


@CheckpointEngineRegistry.register(BACKEND)
class GlooCheckpointEngine(CheckpointEngine):
    """Broadcast the trainer's weights from actor rank 0 to every rollout worker over gloo (TCP).

    Args:
        bucket_size: most bytes per broadcast (verl passes update_weights_bucket_megabytes).
        is_master: True in actor rank 0, which sends and hosts the rendezvous store.
        timeout_s: how long a rank waits for the others in one sync before it raises.
    """

    def __init__(self, bucket_size: int, is_master: bool = False, timeout_s: float = 600.0) -> None:
        self.bucket_size = bucket_size
        self.is_master = is_master
        self.timeout = datetime.timedelta(seconds=timeout_s)
        self.store: dist.TCPStore | None = None
        self.group: dist.ProcessGroupGloo | None = None
        self.rank = -1

    def prepare(self) -> dict[str, Any] | None:
        if not self.is_master:
            return None
        # port 0: the OS picks a free port, bound by the store itself (no window for another process to take it)
        self.store = dist.TCPStore("0.0.0.0", 0, is_master=True, timeout=self.timeout, wait_for_workers=False)
        return {"host": _node_ip(), "port": self.store.port}

    @classmethod
    def build_topology(cls, actor_wg_world_size: int, rollout_world_size: int, metadata: list):
        master = metadata[0]
        if not master:
            raise RuntimeError("gloo weight sync: actor rank 0 returned no store address (is_master was not set)")
        world_size = rollout_world_size + 1
        actor = {"rank": [0] + [-1] * (actor_wg_world_size - 1), "world_size": [world_size] * actor_wg_world_size,
                 "master": [master] * actor_wg_world_size}
        rollout = {"rank": list(range(1, world_size)), "world_size": [world_size] * rollout_world_size,
                   "master": [master] * rollout_world_size}
        return actor, rollout

    def init_process_group(self, rank: int, world_size: int, master: dict[str, Any]) -> None:
        self.rank = rank
        if rank < 0:
            return
        if self.store is None:
            self.store = dist.TCPStore(master["host"], master["port"], is_master=False, timeout=self.timeout)
        self.group = dist.ProcessGroupGloo(dist.PrefixStore("weights", self.store), rank, world_size, self.timeout)

    def finalize(self) -> None:
        self.group = None
        self.store = None
        self.rank = -1

    async def send_weights(self, weights: Generator[tuple[str, torch.Tensor], None, None],
                           global_steps: int | None = None) -> dict[str, float]:
        if self.rank < 0:  # not in the group: still take part in gathering each tensor
            async for _ in ensure_async_iterator(weights):
                pass
            return {}
        started, sent, index = time.monotonic(), 0, 0
        metas: list[TensorMeta] = []
        chunks: list[torch.Tensor] = []
        filled = 0

        async def flush(is_last: bool) -> None:
            nonlocal index, sent, metas, chunks, filled
            payload = torch.cat(chunks) if chunks else torch.empty(0, dtype=torch.uint8)
            layout = {"metas": metas, "length": payload.numel(), "is_last": is_last}
            sent += sum(meta.chunk_size for meta in metas)
            self.store.set(f"bucket/{index}", pickle.dumps(layout))
            await asyncio.to_thread(_broadcast, self.group, payload)
            index += 1
            metas, chunks, filled = [], [], 0

        with torch.no_grad():
            async for meta, chunk in split_weight_chunks(weights, self.bucket_size):
                padding = -filled % ALIGN
                if chunks and filled + padding + meta.chunk_size > self.bucket_size:
                    await flush(is_last=False)
                    padding = 0
                if padding:
                    chunks.append(torch.zeros(padding, dtype=torch.uint8))
                meta.offset = filled + padding
                metas.append(meta)
                chunks.append(chunk.detach().to("cpu").contiguous())
                filled = meta.offset + meta.chunk_size
            await flush(is_last=True)
        return {"weight_sync/bytes": float(sent), "weight_sync/send_s": time.monotonic() - started}

    async def receive_weights(self, global_steps: int | None = None) -> AsyncGenerator[tuple[str, torch.Tensor], None]:
        async for name, weight in merge_weight_chunks(self._receive_chunks(), self.bucket_size):
            yield name, weight

    async def _receive_chunks(self) -> AsyncGenerator[tuple[TensorMeta, torch.Tensor], None]:
        index = 0
        while True:
            layout = pickle.loads(await asyncio.to_thread(self.store.get, f"bucket/{index}"))
            # a fresh buffer per bucket: the tensors yielded below are views into it and stay valid after
            payload = torch.empty(layout["length"], dtype=torch.uint8)
            await asyncio.to_thread(_broadcast, self.group, payload)
            for meta in layout["metas"]:
                yield meta, payload[meta.offset: meta.offset + meta.chunk_size]
            if layout["is_last"]:
                return
            index += 1
