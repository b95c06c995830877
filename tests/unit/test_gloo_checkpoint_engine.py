"""The gloo checkpoint engine (separate_async's weight sync on CPU) moves every byte of every weight, in real processes.

Two actor ranks (rank 0 sends, rank 1 only walks its weight generator) and two rollout workers in processes of
their own, as in verl, driven through the calls and in the order verl's CheckpointEngineManager makes them
(prepare on all -> build_topology -> init_process_group on all -> send/receive -> finalize), twice, so the second
sync runs on a fresh group and store. Weights of several dtypes, one larger than a bucket (split and merged again).
The end-to-end path through the trainer and vLLM is tests/e2e/test_failure_accounting.py (its run is separate_async).
"""

from __future__ import annotations

import multiprocessing as mp

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
            received[n].dtype == expected[n].dtype and torch.equal(received[n], expected[n]) for n in expected)
    if command == "finalize":
        engine.finalize()
        return "ok"
    return None


def test_two_syncs_deliver_every_weight_to_every_rollout_worker(monkeypatch):
    """Actor rank 0 in this process, actor rank 1 too (it only walks the generator), two rollout workers apart."""
    import asyncio

    from retool.platform import gloo_checkpoint_engine as module

    monkeypatch.setattr(module, "_node_ip", lambda: "127.0.0.1")
    sender = module.GlooCheckpointEngine(bucket_size=BUCKET, is_master=True, timeout_s=60)
    bystander = module.GlooCheckpointEngine(bucket_size=BUCKET, timeout_s=60)
    ctx = mp.get_context("fork")  # the children inherit the imported verl (spawning re-imports it: ~10 s each)
    pipes = [(ctx.Queue(), ctx.Queue()) for _ in range(2)]
    procs = [ctx.Process(target=_rollout_worker, args=pipe, daemon=True) for pipe in pipes]
    for proc in procs:
        proc.start()

    def tell(messages) -> None:
        for (commands, _), message in zip(pipes, messages):
            commands.put(message)

    def answers() -> list:
        return [results.get(timeout=180) for _, results in pipes]

    try:
        for version in (1, 2):
            tell([("prepare",)] * 2)
            metadata = [sender.prepare(), bystander.prepare(), *answers()]
            assert metadata[0]["port"] > 0 and metadata[1:] == [None, None, None]
            actor_kwargs, rollout_kwargs = module.GlooCheckpointEngine.build_topology(2, 2, metadata)
            assert actor_kwargs["rank"] == [0, -1] and rollout_kwargs["rank"] == [1, 2]
            tell([("init", {k: v[i] for k, v in rollout_kwargs.items()}) for i in range(2)])
            for i, engine in enumerate((sender, bystander)):  # the group forms once all four have joined
                engine.init_process_group(**{k: v[i] for k, v in actor_kwargs.items()})
            assert answers() == ["ok", "ok"]
            tell([("receive", version)] * 2)
            sent = asyncio.run(sender.send_weights(weights(version), global_steps=version))
            assert asyncio.run(bystander.send_weights(weights(version), global_steps=version)) == {}
            assert answers() == [True, True], f"sync {version}: a rollout worker got other weights"
            total = sum(t.numel() * t.element_size() for _, t in weights(version))
            assert sent["weight_sync/bytes"] == total and sent["weight_sync/send_s"] >= 0
            tell([("finalize",)] * 2)
            sender.finalize()
            bystander.finalize()
            assert answers() == ["ok", "ok"]
    finally:
        tell([("stop",)] * 2)
        for proc in procs:
            proc.join(timeout=30)
            if proc.is_alive():
                proc.kill()


def test_the_backend_is_registered_under_the_name_the_config_uses():
    from verl.checkpoint_engine import CheckpointEngineRegistry

    import retool.platform.gloo_checkpoint_engine as module

    assert CheckpointEngineRegistry.get(module.BACKEND) is module.GlooCheckpointEngine
