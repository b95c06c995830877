"""What a resume must keep, as tests and benches check it: the prompts verl's training dataloader hands out, those a
rollout dump shows trained, and how often each step was logged to TensorBoard."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path


def question(text: str) -> str:
    """A prompt's identity: the first line of its user message (a dump's rendered input, or the parquet's)."""
    return text.rsplit("user\n", 1)[-1].strip().splitlines()[0].strip()


def trained(dump: Path) -> Counter:
    """Prompt -> trajectories trained at one step (verl's rollout dump of that step)."""
    return Counter(question(json.loads(line)["input"]) for line in dump.read_text().splitlines() if line.strip())


def data_order(parquet: Path, seed: int | None, count: int) -> list[str]:
    """The first ``count`` prompts verl's training dataloader hands out: its RandomSampler (verl's
    create_rl_sampler; an unseeded generator has torch's fixed default seed) over the parquet's rows."""
    import pandas as pd
    import torch
    from torchdata.stateful_dataloader.sampler import RandomSampler

    rows = [question(messages[-1]["content"]) for messages in pd.read_parquet(parquet)["prompt"]]
    if len(set(rows)) != len(rows):
        raise ValueError(f"{parquet}: prompts share a first line, so dumps cannot be matched to rows")
    generator = torch.Generator()
    if seed is not None:
        generator.manual_seed(seed)
    order: list[str] = []
    while len(order) < count:  # epochs: the sampler draws a new permutation each time it is exhausted
        order += [rows[i] for i in RandomSampler(range(len(rows)), generator=generator)]
    return order[:count]


def scalar_points(event_dir: Path, tag: str) -> Counter:
    """step -> how many times ``tag`` was logged at that step, over every event file (no de-duplication)."""
    from retool.resume import _event, _records

    counts: Counter = Counter()
    for path in event_dir.rglob("events.out.tfevents.*"):
        for record in _records(path.read_bytes()):
            event = _event(record)
            counts.update(event.step for value in event.summary.value if value.tag == tag)
    return counts


def scalar_values(event_dir: Path, tag: str) -> dict[int, float]:
    """step -> the value of ``tag`` logged at that step."""
    from retool.report import read_event_dir

    return {step: value for step, (_, value) in read_event_dir(event_dir).get(tag, {}).items()}
