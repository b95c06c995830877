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

- ``prepare``: actor rank 0 opens a TCPStore on a free port and returns its address with a fresh 32-byte key;
- ``build_topology``: actor rank 0 sends (rank 0); the other actor ranks stay out of the group (rank -1) but still
  walk the weight generator, since gathering each full tensor is collective over the actor group; rollout workers
  receive (ranks 1..N). The address and the key reach every rank as arguments of verl's Ray calls;
- ``send_weights`` / ``receive_weights``: the weights in buckets of at most ``update_weights_bucket_megabytes``;
  each bucket's layout goes through the store, its bytes through one gloo broadcast;
- ``finalize``: the group and the store are dropped (a new pair and key per sync; on these hosts that costs
  milliseconds).

What it guards against, and what not. The store and gloo listen only on the address the trainer and the rollout
share: loopback while the Ray cluster has one node, else the node's address as Ray knows it; never a wildcard.
A bucket's layout on the wire is ``HMAC-SHA256(key, text) || text``, where ``text`` is JSON (names, dtype names
from a fixed list, shapes, offsets, the bucket's length and the SHA-256 of its bytes); a receiver checks the MAC
before it parses anything, validates every field, and checks the bytes it got by broadcast against the digest
before it hands any weight on. Nothing read from the network is unpickled, so a process that reaches the store
cannot run code in a rollout worker, nor substitute a layout or, through the rendezvous, weights (the receiver
stops the sync with WeightSyncRejected). It can still make a sync fail (overwrite a key, hold a connection): the
binding is what keeps other hosts from trying. The key travels in Ray's task arguments, so whoever can call into
the Ray cluster is trusted, as Ray itself requires.

Each sync returns ``weight_sync/bytes`` and ``weight_sync/send_s``, which verl adds to the step's metrics. On
several nodes a host with several network interfaces picks gloo's with ``GLOO_SOCKET_IFNAME``.
"""

from __future__ import annotations

import asyncio
import datetime
import hashlib
import hmac
import ipaddress
import json
import os
import secrets
import socket
import time
from typing import Any
from collections.abc import AsyncGenerator, Generator

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
LOOPBACK = "127.0.0.1"
MAC_BYTES = 32  # HMAC-SHA256
# The dtypes a layout may name; anything else is rejected by name, never looked up on the torch module.
DTYPES = {
    str(dtype).removeprefix("torch."): dtype
    for dtype in (
        torch.float64,
        torch.float32,
        torch.float16,
        torch.bfloat16,
        torch.int64,
        torch.int32,
        torch.int16,
        torch.int8,
        torch.uint8,
        torch.bool,
        torch.float8_e4m3fn,
        torch.float8_e5m2,
    )
}


class WeightSyncRejected(RuntimeError):
    """A bucket layout or its bytes failed authentication or validation; the sync is stopped, nothing is loaded."""


def _ray_view() -> tuple[int, str]:
    """(alive nodes of the Ray cluster, this node's address as Ray uses it)."""
    import ray

    alive = sum(1 for node in ray.nodes() if node.get("Alive"))
    return alive, ray.util.get_node_ip_address().strip("[]")


def _listen_host(alive_nodes: int, node_ip: str) -> str:
    """Loopback while everything runs on one node, else the node's own address; never a wildcard."""
    if alive_nodes <= 1:
        return LOOPBACK
    if ipaddress.ip_address(node_ip).is_unspecified:
        raise RuntimeError(
            f"gloo weight sync: Ray reports this node's address as {node_ip!r}, a wildcard; start "
            "Ray with --node-ip-address set to the address the other nodes reach this one on"
        )
    return node_ip


def _listening_socket(host: str) -> socket.socket:
    family = socket.AF_INET6 if ipaddress.ip_address(host).version == 6 else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.bind((host, 0))  # port 0: the OS picks a free one; bound here, so no other process can take it
        sock.listen()
    except OSError:
        sock.close()
        raise
    return sock


def _gloo_devices(host: str) -> list:
    """gloo's listeners: on ``host``, or on several nodes the interfaces GLOO_SOCKET_IFNAME names (comma-separated)."""
    interfaces = os.environ.get("GLOO_SOCKET_IFNAME", "")
    if host != LOOPBACK and interfaces:
        return [dist.ProcessGroupGloo.create_device(interface=name) for name in interfaces.split(",")]
    return [dist.ProcessGroupGloo.create_device(hostname=host)]


def _broadcast(group: dist.ProcessGroupGloo, buffer: torch.Tensor) -> None:
    options = dist.BroadcastOptions()
    options.rootRank = 0
    group.broadcast([buffer], options).wait()


def _digest(payload: torch.Tensor) -> str:
    return hashlib.sha256(memoryview(payload.numpy())).hexdigest()


def seal(key: bytes, layout: dict[str, Any]) -> bytes:
    text = json.dumps(layout, sort_keys=True, separators=(",", ":")).encode()
    return hmac.new(key, text, hashlib.sha256).digest() + text


def _count(value: Any, field: str, where: str, minimum: int = 0) -> int:
    if type(value) is not int or value < minimum:  # type(): a JSON true is no count
        raise WeightSyncRejected(f"{where}: {field} is {value!r}, not an integer >= {minimum}")
    return value


def open_layout(key: bytes, blob: bytes, index: int, bucket_size: int, where: str) -> dict[str, Any]:
    """The checked layout of bucket ``index``: ``{"metas": [TensorMeta], "length", "sha256", "is_last"}``."""
    mac, text = blob[:MAC_BYTES], blob[MAC_BYTES:]
    if not hmac.compare_digest(mac, hmac.new(key, text, hashlib.sha256).digest()):
        raise WeightSyncRejected(
            f"{where}: the layout is not signed with this sync's key, so it was not written by the trainer; "
            "some other process reached the weight-sync store. Nothing was loaded. Find what connects to that "
            "port (ss -tnp) and keep untrusted processes off the trainer's nodes"
        )
    try:
        layout = json.loads(text)
    except ValueError as exc:
        raise WeightSyncRejected(
            f"{where}: the signed layout is not JSON ({exc}); trainer and rollout run "
            "different versions of retool/platform/gloo_checkpoint_engine.py?"
        ) from exc
    if not isinstance(layout, dict) or set(layout) != {"index", "length", "sha256", "is_last", "tensors"}:
        shape = sorted(layout) if isinstance(layout, dict) else type(layout).__name__
        raise WeightSyncRejected(
            f"{where}: the layout's fields are {shape}; trainer and rollout run different versions of the engine?"
        )
    if (
        _count(layout["index"], "index", where) != index
        or not isinstance(layout["is_last"], bool)
        or not isinstance(layout["sha256"], str)
    ):
        raise WeightSyncRejected(
            f"{where}: index {layout['index']!r} (expected {index}), is_last "
            f"{layout['is_last']!r} or sha256 {layout['sha256']!r} is malformed"
        )
    length = _count(layout["length"], "length", where)
    if length > bucket_size:
        raise WeightSyncRejected(
            f"{where}: a {length}-byte bucket is over this worker's bucket size {bucket_size}; "
            "trainer and rollout must use the same update_weights_bucket_megabytes"
        )
    if not isinstance(layout["tensors"], list):
        raise WeightSyncRejected(f"{where}: tensors is {type(layout['tensors']).__name__}, not a list")
    metas = [_tensor_meta(entry, length, f"{where} tensor {i}") for i, entry in enumerate(layout["tensors"])]
    return {"metas": metas, "length": length, "sha256": layout["sha256"], "is_last": layout["is_last"]}


def _tensor_meta(entry: Any, length: int, where: str) -> TensorMeta:
    fields = {"name", "dtype", "shape", "chunk_offset", "chunk_size", "offset"}
    if not isinstance(entry, dict) or set(entry) != fields:
        raise WeightSyncRejected(f"{where}: expected an object with fields {sorted(fields)}, got {entry!r:.200}")
    if not isinstance(entry["name"], str) or not entry["name"]:
        raise WeightSyncRejected(f"{where}: name {entry['name']!r} is not a non-empty string")
    dtype = DTYPES.get(entry["dtype"]) if isinstance(entry["dtype"], str) else None
    if dtype is None:
        raise WeightSyncRejected(f"{where} ({entry['name']}): dtype {entry['dtype']!r} is not one of {sorted(DTYPES)}")
    if not isinstance(entry["shape"], list):
        raise WeightSyncRejected(f"{where} ({entry['name']}): shape {entry['shape']!r} is not a list")
    shape = torch.Size(_count(n, "a dimension", where) for n in entry["shape"])
    chunk_offset, chunk_size, offset = (
        _count(entry[k], k, where, minimum=int(k == "chunk_size")) for k in ("chunk_offset", "chunk_size", "offset")
    )
    if (
        chunk_offset + chunk_size > shape.numel() * dtype.itemsize
        or offset + chunk_size > length
        or offset % dtype.itemsize
    ):
        raise WeightSyncRejected(
            f"{where} ({entry['name']}): bytes {chunk_offset}+{chunk_size} of a {dtype} "
            f"{list(shape)} at bucket offset {offset} do not fit the tensor or the "
            f"{length}-byte bucket"
        )
    return TensorMeta(
        name=entry["name"], shape=shape, dtype=dtype, chunk_offset=chunk_offset, chunk_size=chunk_size, offset=offset
    )


def _entry(meta: TensorMeta) -> dict[str, Any]:
    dtype = str(meta.dtype).removeprefix("torch.")
    if dtype not in DTYPES:
        raise TypeError(
            f"gloo weight sync: weight {meta.name} has dtype {meta.dtype}, which the wire format does "
            f"not carry (one of {sorted(DTYPES)}); add it to DTYPES in this module"
        )
    return {
        "name": meta.name,
        "dtype": dtype,
        "shape": list(meta.shape),
        "chunk_offset": meta.chunk_offset,
        "chunk_size": meta.chunk_size,
        "offset": meta.offset,
    }


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
        self.key = b""
        self.where = ""

    def prepare(self) -> dict[str, Any] | None:
        if not self.is_master:
            return None
        host = _listen_host(*_ray_view())
        # torch's TCPStore server listens on every interface whatever host it is given; a socket bound here and
        # handed over (the store owns and closes it) is what keeps it on one address
        sock = _listening_socket(host)
        port = sock.getsockname()[1]
        self.store = dist.TCPStore(
            host, port, is_master=True, timeout=self.timeout, wait_for_workers=False, master_listen_fd=sock.detach()
        )
        self.key = secrets.token_bytes(32)
        return {"host": host, "port": port, "key": self.key.hex()}

    @classmethod
    def build_topology(cls, actor_wg_world_size: int, rollout_world_size: int, metadata: list):
        master = metadata[0]
        if not master:
            raise RuntimeError("gloo weight sync: actor rank 0 returned no store address (is_master was not set)")
        world_size = rollout_world_size + 1
        actor = {
            "rank": [0] + [-1] * (actor_wg_world_size - 1),
            "world_size": [world_size] * actor_wg_world_size,
            "master": [master] * actor_wg_world_size,
        }
        rollout = {
            "rank": list(range(1, world_size)),
            "world_size": [world_size] * rollout_world_size,
            "master": [master] * rollout_world_size,
        }
        return actor, rollout

    def init_process_group(self, rank: int, world_size: int, master: dict[str, Any]) -> None:
        self.rank = rank
        if rank < 0:
            return
        host = master["host"]
        self.key = bytes.fromhex(master["key"])
        self.where = f"gloo weight sync (store {host}:{master['port']}, rank {rank})"
        if self.store is None:
            self.store = dist.TCPStore(host, master["port"], is_master=False, timeout=self.timeout)
        own = host if ipaddress.ip_address(host).is_loopback else _ray_view()[1]
        options = dist.ProcessGroupGloo._Options()
        options._timeout = self.timeout
        options._devices = _gloo_devices(own)
        self.group = dist.ProcessGroupGloo(dist.PrefixStore("weights", self.store), rank, world_size, options)

    def finalize(self) -> None:
        self.group = None
        self.store = None
        self.rank = -1
        self.key = b""

    async def send_weights(
        self, weights: Generator[tuple[str, torch.Tensor], None, None], global_steps: int | None = None
    ) -> dict[str, float]:
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
            layout = {
                "index": index,
                "length": payload.numel(),
                "sha256": _digest(payload),
                "is_last": is_last,
                "tensors": [_entry(meta) for meta in metas],
            }
            sent += sum(meta.chunk_size for meta in metas)
            self.store.set(f"bucket/{index}", seal(self.key, layout))
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
            where = f"{self.where} bucket {index}"
            blob = await asyncio.to_thread(self.store.get, f"bucket/{index}")
            layout = open_layout(self.key, blob, index, self.bucket_size, where)
            # a fresh buffer per bucket: the tensors yielded below are views into it and stay valid after
            payload = torch.empty(layout["length"], dtype=torch.uint8)
            await asyncio.to_thread(_broadcast, self.group, payload)
            if not hmac.compare_digest(_digest(payload), layout["sha256"]):
                raise WeightSyncRejected(
                    f"{where}: the broadcast bytes do not match the trainer's signed digest; "
                    "they were altered on the way or another process joined the gloo "
                    "group. Nothing from this bucket was loaded"
                )
            for meta in layout["metas"]:
                yield meta, payload[meta.offset : meta.offset + meta.chunk_size]
            if layout["is_last"]:
                return
            index += 1
