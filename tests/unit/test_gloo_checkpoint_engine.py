"""The gloo checkpoint engine (separate_async's weight sync on CPU) moves every byte of every weight, in real processes,
and nothing that reaches its store can make a rollout worker run code or take other weights.

Two actor ranks (rank 0 sends, rank 1 only walks its weight generator) and two rollout workers in processes of
their own, as in verl, driven through the calls and in the order verl's CheckpointEngineManager makes them
(prepare on all -> build_topology -> init_process_group on all -> send/receive -> finalize), each sync on a fresh
group, store and key. Weights of several dtypes, one larger than a bucket (split and merged again). The hostile
clients are real: a TCPStore client of their own that writes under the keys the receivers read, and a sender that
signs one digest and broadcasts other bytes. The end-to-end path through the trainer and vLLM is
tests/e2e/test_failure_accounting.py (its run is separate_async).
"""

from __future__ import annotations

import datetime
import ipaddress
import json
import multiprocessing as mp
import os
import pickle
import socket

import pytest

pytestmark = pytest.mark.verl

BUCKET = 4096  # bytes: the 3,000-float weight below (12,000 bytes) spans three buckets


def weights(version: int):
    import torch

    generator = torch.Generator().manual_seed(version)
    yield "embed.weight", torch.randn(3000, generator=generator)
    yield "layer.bias", torch.randn(7, generator=generator).to(torch.bfloat16)
    yield "layer.scale", torch.arange(5, dtype=torch.int64) * version
    yield "norm.weight", torch.randn(2, 3, generator=generator, dtype=torch.float64)


class Exploit:
    """Unpickling this creates ``marker``: what an attacker's payload would do instead (run any code)."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return open, (self.marker, "w")


def _rollout_worker(commands, results) -> None:
    """One rollout worker's CheckpointEngineWorker side, in its own process."""
    from retool.platform.gloo_checkpoint_engine import GlooCheckpointEngine

    engine = GlooCheckpointEngine(bucket_size=BUCKET, timeout_s=60)
    while True:
        command, *args = commands.get()
        try:
            results.put(_handle(engine, command, args))
        except Exception as exc:  # reported to the test instead of leaving it waiting
            results.put(f"{command}: {exc!r}")
        if command == "stop":
            return


def _handle(engine, command: str, args: list):
    import asyncio

    import torch

    if command == "prepare":
        return engine.prepare()
    if command == "init":
        engine.init_process_group(**args[0])
        return "ok"
    if command == "receive":

        async def receive():
            return {name: tensor.clone() async for name, tensor in engine.receive_weights()}

        received, expected = asyncio.run(receive()), dict(weights(args[0]))
        return sorted(received) == sorted(expected) and all(
            received[n].dtype == expected[n].dtype and torch.equal(received[n], expected[n]) for n in expected
        )
    if command == "finalize":
        engine.finalize()
        return "ok"
    return None


def _address(hex_address: str) -> str:
    raw = bytes.fromhex(hex_address)
    if len(raw) == 4:
        return socket.inet_ntop(socket.AF_INET, raw[::-1])
    # /proc/net/tcp6 writes each 32-bit word of the address in host (little-endian) order
    return socket.inet_ntop(socket.AF_INET6, b"".join(raw[i : i + 4][::-1] for i in range(0, 16, 4)))


def listening(pid: int) -> set[tuple[str, int]]:
    """(address, port) of every TCP socket process ``pid`` holds in LISTEN state."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:  # closed meanwhile
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for row in open(table).read().splitlines()[1:]:
            fields = row.split()
            if fields[3] == "0A" and fields[9] in inodes:  # 0A: LISTEN
                address, port = fields[1].split(":")
                found.add((_address(address), int(port, 16)))
    return found


@pytest.fixture
def cluster(monkeypatch):
    """Actor ranks 0 and 1 in this process, two rollout workers apart; Ray reports one node at a routable address."""
    from retool.platform import gloo_checkpoint_engine as module

    monkeypatch.setattr(module, "_ray_view", lambda: (1, "192.0.2.7"))
    # a GLOO_SOCKET_IFNAME set for several nodes must not widen gloo's listeners on one node
    interfaces = [name for name in sorted(os.listdir("/sys/class/net")) if name != "lo"]
    if interfaces:
        monkeypatch.setenv("GLOO_SOCKET_IFNAME", interfaces[0])
    ctx = mp.get_context("fork")  # the children inherit the imported verl (spawning re-imports it: ~10 s each)
    pipes = [(ctx.Queue(), ctx.Queue()) for _ in range(2)]
    procs = [ctx.Process(target=_rollout_worker, args=pipe, daemon=True) for pipe in pipes]
    for proc in procs:
        proc.start()
    harness = Cluster(module, pipes, procs)
    try:
        yield harness
    finally:
        harness.tell([("stop",)] * 2)
        for proc in procs:
            proc.join(timeout=30)
            if proc.is_alive():
                proc.kill()


class Cluster:
    def __init__(self, module, pipes, procs) -> None:
        self.module, self.pipes, self.procs = module, pipes, procs
        self.sender = module.GlooCheckpointEngine(bucket_size=BUCKET, is_master=True, timeout_s=60)
        self.bystander = module.GlooCheckpointEngine(bucket_size=BUCKET, timeout_s=60)

    def tell(self, messages) -> None:
        for (commands, _), message in zip(self.pipes, messages):
            commands.put(message)

    def answers(self) -> list:
        return [results.get(timeout=180) for _, results in self.pipes]

    def open_sync(self) -> dict:
        """prepare, build_topology and init_process_group on all four, as verl's manager does; the master's address."""
        self.tell([("prepare",)] * 2)
        metadata = [self.sender.prepare(), self.bystander.prepare(), *self.answers()]
        assert metadata[0]["port"] > 0 and metadata[1:] == [None, None, None]
        actor_kwargs, rollout_kwargs = self.module.GlooCheckpointEngine.build_topology(2, 2, metadata)
        assert actor_kwargs["rank"] == [0, -1] and rollout_kwargs["rank"] == [1, 2]
        self.tell([("init", {k: v[i] for k, v in rollout_kwargs.items()}) for i in range(2)])
        for i, engine in enumerate((self.sender, self.bystander)):  # the group forms once all four have joined
            engine.init_process_group(**{k: v[i] for k, v in actor_kwargs.items()})
        assert self.answers() == ["ok", "ok"]
        return metadata[0]

    def sync(self, version: int) -> dict:
        import asyncio

        self.tell([("receive", version)] * 2)
        sent = asyncio.run(self.sender.send_weights(weights(version), global_steps=version))
        assert asyncio.run(self.bystander.send_weights(weights(version), global_steps=version)) == {}
        assert self.answers() == [True, True], f"sync {version}: a rollout worker got other weights"
        return sent

    def close_sync(self) -> None:
        self.tell([("finalize",)] * 2)
        self.sender.finalize()
        self.bystander.finalize()
        assert self.answers() == ["ok", "ok"]


def test_two_syncs_deliver_every_weight_to_every_rollout_worker_and_listen_on_loopback_only(cluster):
    for version in (1, 2):
        master = cluster.open_sync()
        assert master["host"] == "127.0.0.1", "one Ray node: the store must not take the routable node address"
        owners = [os.getpid(), *(proc.pid for proc in cluster.procs)]
        sockets = {pid: listening(pid) for pid in owners}
        assert ("127.0.0.1", master["port"]) in sockets[os.getpid()], f"the store is not listening: {sockets}"
        assert all(sockets.values()), f"gloo listens in every member of the group: {sockets}"
        wide = {pid: s for pid, s in sockets.items() if any(not ipaddress.ip_address(a).is_loopback for a, _ in s)}
        assert not wide, f"listening beyond loopback (0.0.0.0 / :: / a node address): {wide}"
        sent = cluster.sync(version)
        total = sum(t.numel() * t.element_size() for _, t in weights(version))
        assert sent["weight_sync/bytes"] == total and sent["weight_sync/send_s"] >= 0
        cluster.close_sync()
    assert not listening(os.getpid()), "finalize left the store or gloo listening"


def _foreign_store(master: dict):
    import torch.distributed as dist

    return dist.TCPStore(master["host"], master["port"], is_master=False, timeout=datetime.timedelta(seconds=30))


def test_a_foreign_client_cannot_make_a_rollout_worker_run_code_or_take_other_weights(cluster, tmp_path):
    import asyncio

    import torch

    module = cluster.module
    control = tmp_path / "control"
    pickle.loads(pickle.dumps(Exploit(str(control))))
    assert control.exists(), "the payload is not live: this test would prove nothing"

    marker = tmp_path / "marker"
    forged_layout = {
        "index": 0,
        "length": 8,
        "sha256": "0" * 64,
        "is_last": True,
        "tensors": [
            {"name": "embed.weight", "dtype": "float32", "shape": [2], "chunk_offset": 0, "chunk_size": 8, "offset": 0}
        ],
    }
    forgeries = {
        "an unsigned pickle": pickle.dumps(Exploit(str(marker))),
        "a pickle behind 32 bytes": bytes(32) + pickle.dumps(Exploit(str(marker))),
        "a well-formed layout signed with another key": module.seal(b"k" * 32, forged_layout),
    }
    for label, blob in forgeries.items():
        master = cluster.open_sync()
        _foreign_store(master).set("bucket/0", blob)  # before the trainer writes: the receivers read this one
        cluster.tell([("receive", 1)] * 2)
        answers = cluster.answers()
        assert all("WeightSyncRejected" in str(a) and "not signed with this sync's key" in str(a) for a in answers), (
            f"{label}: {answers}"
        )
        assert not marker.exists(), f"{label}: a rollout worker ran the attacker's code"
        cluster.close_sync()

    # bytes that do not match the signed digest (what a process that took over the gloo rendezvous would send)
    cluster.open_sync()
    cluster.tell([("receive", 1)] * 2)
    real = torch.arange(16, dtype=torch.uint8)
    layout = dict(forged_layout, length=16, sha256=module._digest(real))
    cluster.sender.store.set("bucket/0", module.seal(cluster.sender.key, layout))
    asyncio.run(asyncio.to_thread(module._broadcast, cluster.sender.group, real + 1))
    answers = cluster.answers()
    assert all("do not match the trainer's signed digest" in str(a) for a in answers), answers
    cluster.close_sync()

    cluster.open_sync()  # and the engine still takes the trainer's weights
    cluster.sync(3)
    cluster.close_sync()


def test_the_layout_is_validated_after_its_signature():
    import torch

    from retool.platform.gloo_checkpoint_engine import WeightSyncRejected, open_layout, seal

    key = b"s" * 32
    good = {
        "index": 0,
        "length": 64,
        "sha256": "0" * 64,
        "is_last": False,
        "tensors": [
            {"name": "w", "dtype": "bfloat16", "shape": [2, 3], "chunk_offset": 0, "chunk_size": 12, "offset": 0}
        ],
    }
    layout = open_layout(key, seal(key, good), 0, BUCKET, "test")
    meta = layout["metas"][0]
    assert (meta.name, meta.dtype, meta.shape, meta.chunk_size) == ("w", torch.bfloat16, torch.Size([2, 3]), 12)

    entry = good["tensors"][0]
    bad = {
        "a dtype that is an expression": (
            dict(good, tensors=[dict(entry, dtype="__import__('os').system")]),
            "is not one of",
        ),
        "bytes past the bucket": (dict(good, tensors=[dict(entry, offset=60)]), "do not fit"),
        "more bytes than the tensor has": (dict(good, tensors=[dict(entry, chunk_size=14)]), "do not fit"),
        "an offset a bfloat16 cannot start at": (dict(good, tensors=[dict(entry, offset=1)]), "do not fit"),
        "a bucket over the bucket size": (dict(good, length=BUCKET + 1), "bucket size"),
        "another bucket's layout": (dict(good, index=1), "expected 0"),
        "a boolean for a count": (dict(good, tensors=[dict(entry, chunk_offset=True)]), "not an integer"),
        "an extra field": (dict(good, code="x"), "fields"),
    }
    for label, (layout, reason) in bad.items():
        with pytest.raises(WeightSyncRejected, match=reason):
            open_layout(key, seal(key, layout), 0, BUCKET, "test")
        print("rejected", label)
    sealed = bytearray(seal(key, good))
    sealed[-3] ^= 1  # one bit of the text flipped after signing
    with pytest.raises(WeightSyncRejected, match="not signed"):
        open_layout(key, bytes(sealed), 0, BUCKET, "test")
    assert json.loads(seal(key, good)[32:]) == good  # the wire text is plain JSON behind the 32-byte MAC


def test_the_store_listens_on_loopback_on_one_node_and_on_ray_s_node_address_on_several():
    from retool.platform.gloo_checkpoint_engine import _listen_host

    assert _listen_host(1, "10.1.2.3") == "127.0.0.1"
    assert _listen_host(3, "10.1.2.3") == "10.1.2.3"
    assert _listen_host(3, "fd00::5") == "fd00::5"
    for wildcard in ("0.0.0.0", "::"):
        with pytest.raises(RuntimeError, match="wildcard"):
            _listen_host(2, wildcard)


def test_the_backend_is_registered_under_the_name_the_config_uses():
    from verl.checkpoint_engine import CheckpointEngineRegistry

    import retool.platform.gloo_checkpoint_engine as module

    assert CheckpointEngineRegistry.get(module.BACKEND) is module.GlooCheckpointEngine
