"""Pre-train the smoke's tiny model once, on the tool-call format and on copying digits (a cached smoke asset).

Why: RL with a correctness-only reward can raise accuracy only for a policy that is sometimes right. The synthetic
task's numbers are too big for a 1.4M-parameter model to multiply, so being right means copying the operands into
the code and the tool's result into ``\\boxed{}``. Trained from random weights by the smoke's short SFT alone, the
model learns the shape of a tool call but copies nothing; with this pre-training it copies, and the SFT that follows
(verl, configs/smoke/sft.yaml) only has to teach the ReTool-SFT traces, half of which answer without the tool.

What: plain PyTorch next-token training (verl is not needed for it) on chat-rendered conversations of the synthetic
task in which every trace calls the tool (``data/pretrain.parquet``, written by the real SFT converter), with the
loss on the assistant turns only. Every conversation opens with the same system turn (the tool schema, ~200 of its
~315 tokens); it is run once per step and its keys and values are repeated over the batch, so a step costs each
conversation's own ~120 tokens.

Report (retool.smoke.build keeps it in the manifest): steps, wall time, host, last losses, and the copy accuracy on
held-out conversations: the share of digit runs in the assistant turns (operands in the code, the result in the
answer) that the model's most likely next token reproduces exactly, every digit, given the conversation so far.
"""

from __future__ import annotations

import dataclasses
import math
import random
import re
import statistics
import time
from pathlib import Path
from typing import Any

_ASSISTANT_REPLY = re.compile(r"<\|im_start\|>assistant\n(.*?<\|im_end\|>)", re.DOTALL)


@dataclasses.dataclass(frozen=True)
class PretrainOptions:
    # long enough that the smoke's 12 GRPO steps raise held-out accuracy clearly: shorter pre-training copies the
    # digits under teacher forcing yet leaves sampled answers too rarely right for GRPO to learn from
    # (docs/performance.md, "CPU smoke run")
    steps: int = 1200
    batch_size: int = 32
    lr: float = 3e-3
    warmup_ratio: float = 0.05
    min_lr_ratio: float = 0.1
    seed: int = 0

    def inputs(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class Encoded:
    """One tokenised conversation: token ids and, per token, whether it belongs to an assistant reply."""

    ids: list[int]
    in_reply: list[bool]


def encode(tokenizer: Any, messages: list[dict[str, Any]], tools: Any) -> Encoded:
    """Render ``messages`` with the chat template and mark the tokens of the assistant replies (their
    ``<|im_end|>`` included, so the model learns where a turn stops)."""
    text = tokenizer.apply_chat_template(messages, tools=tools, tokenize=False)
    spans = [match.span(1) for match in _ASSISTANT_REPLY.finditer(text)]
    if not spans:
        raise ValueError(f"a pre-training conversation has no assistant reply: {text[-200:]!r}")
    encoding = tokenizer(text, return_offsets_mapping=True, add_special_tokens=False)
    in_reply = [any(start <= first < end for start, end in spans) for first, _ in encoding["offset_mapping"]]
    return Encoded(list(encoding["input_ids"]), in_reply)


def shared_prefix_length(conversations: list[Encoded]) -> int:
    """Tokens every conversation starts with, stopping before the first reply token (those carry a loss)."""
    first = conversations[0].ids
    length = (
        first.index(next(t for t, r in zip(first, conversations[0].in_reply) if r))
        if any(conversations[0].in_reply)
        else len(first)
    )
    for conv in conversations[1:]:
        length = next((i for i in range(length) if conv.ids[i] != first[i]), length)
    if length < 1:
        raise ValueError("the pre-training conversations share no prefix: they must all open with the tool schema")
    return length


def _suffix_batch(batch: list[Encoded], prefix: int, pad_id: int) -> tuple[Any, Any]:
    """Input ids after the shared prefix (right-padded) and next-token labels (-100 outside assistant replies)."""
    import torch

    width = max(len(c.ids) for c in batch) - prefix
    ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
    labels = torch.full((len(batch), width), -100, dtype=torch.long)
    for row, conv in enumerate(batch):
        own = conv.ids[prefix:]
        ids[row, : len(own)] = torch.tensor(own)
        targets = [conv.ids[i + 1] if conv.in_reply[i + 1] else -100 for i in range(prefix, len(conv.ids) - 1)]
        labels[row, : len(targets)] = torch.tensor(targets, dtype=torch.long)
    return ids, labels


def _hidden_states(model: Any, prefix_ids: Any, ids: Any) -> Any:
    """Last hidden states of ``ids`` (batch, width) that all follow ``prefix_ids`` (1, prefix): the prefix runs once,
    its keys and values repeated over the batch (gradients flow through both)."""
    import torch
    from transformers import DynamicCache

    cache = DynamicCache()
    model.model(input_ids=prefix_ids, past_key_values=cache, use_cache=True)
    cache.batch_repeat_interleave(ids.shape[0])
    start = prefix_ids.shape[1]
    positions = torch.arange(start, start + ids.shape[1]).unsqueeze(0).expand(ids.shape[0], -1)
    out = model.model(input_ids=ids, past_key_values=cache, position_ids=positions, use_cache=True)
    return out.last_hidden_state


def _loss(model: Any, prefix_ids: Any, batch: list[Encoded], prefix: int, pad_id: int) -> Any:
    import torch.nn.functional as F

    ids, labels = _suffix_batch(batch, prefix, pad_id)
    hidden = _hidden_states(model, prefix_ids, ids)
    chosen = labels != -100  # the output layer runs only where there is a loss
    return F.cross_entropy(model.lm_head(hidden[chosen]), labels[chosen])


def copy_accuracy(
    model: Any, tokenizer: Any, conversations: list[Encoded], prefix: int, batch_size: int = 32
) -> dict[str, float]:
    """Teacher-forced exact copies: of the digit runs inside assistant replies, the share whose every digit is the
    model's most likely next token. Also the per-token accuracy over the whole replies."""
    import torch

    digit_ids = {i for token, i in tokenizer.get_vocab().items() if token.isdigit()}
    prefix_ids = torch.tensor([conversations[0].ids[:prefix]])
    runs = exact = tokens = right = 0
    was_training = model.training
    model.eval()
    with torch.no_grad():
        for start in range(0, len(conversations), batch_size):
            batch = conversations[start : start + batch_size]
            ids, labels = _suffix_batch(batch, prefix, tokenizer.pad_token_id)
            predicted = model.lm_head(_hidden_states(model, prefix_ids, ids)).argmax(-1)
            for row in range(len(batch)):
                run_ok = None
                for target, guess in zip(labels[row].tolist(), predicted[row].tolist()):
                    if target == -100:
                        continue
                    tokens += 1
                    right += target == guess
                    if target in digit_ids:
                        run_ok = (run_ok is None or run_ok) and target == guess
                    elif run_ok is not None:
                        runs, exact, run_ok = runs + 1, exact + run_ok, None
                if run_ok is not None:
                    runs, exact = runs + 1, exact + run_ok
    model.train(was_training)
    if not runs:
        raise ValueError("the held-out conversations have no digits in their assistant replies")
    return {
        "digit_runs": runs,
        "digit_runs_exact": round(exact / runs, 4),
        "reply_token_accuracy": round(right / tokens, 4),
    }


def pretrain(
    model_dir: Path,
    train: list[dict[str, Any]],
    held_out: list[dict[str, Any]],
    opts: PretrainOptions,
    log: Any = print,
) -> dict[str, Any]:
    """Train the model in ``model_dir`` in place (saved in float32) on ``train`` rows (``messages``, ``tools``);
    return the report (module docstring). ``held_out`` rows only measure the copy accuracy."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if opts.steps < 1 or opts.batch_size < 1:
        raise ValueError(f"pre-training needs steps >= 1 and batch_size >= 1, got {opts.steps}, {opts.batch_size}")
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    data = [encode(tokenizer, row["messages"], row["tools"]) for row in train]
    checks = [encode(tokenizer, row["messages"], row["tools"]) for row in held_out]
    prefix = shared_prefix_length(data + checks)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(opts.seed)
        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, attn_implementation="sdpa")
        model.train()
        optimizer = torch.optim.AdamW(model.parameters(), lr=opts.lr, betas=(0.9, 0.98), weight_decay=0.0)
        warmup = max(1, round(opts.warmup_ratio * opts.steps))

        def lr_factor(step: int) -> float:  # linear warmup, then cosine down to min_lr_ratio
            if step < warmup:
                return (step + 1) / warmup
            progress = (step - warmup) / max(1, opts.steps - warmup)
            return opts.min_lr_ratio + (1 - opts.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress))

        schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_factor)
        prefix_ids = torch.tensor([data[0].ids[:prefix]])
        rng = random.Random(opts.seed)
        started, losses = time.monotonic(), []
        before = copy_accuracy(model, tokenizer, checks, prefix)
        for step in range(1, opts.steps + 1):
            loss = _loss(
                model, prefix_ids, rng.sample(data, min(opts.batch_size, len(data))), prefix, tokenizer.pad_token_id
            )
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            schedule.step()
            optimizer.zero_grad(set_to_none=True)
            losses.append(loss.item())
            if step % 100 == 0 or step == opts.steps:
                log(
                    f"pretrain step {step}/{opts.steps}: loss {statistics.fmean(losses[-100:]):.4f} "
                    f"({time.monotonic() - started:.0f} s)"
                )
        seconds = time.monotonic() - started
        after = copy_accuracy(model, tokenizer, checks, prefix)
    model.save_pretrained(model_dir)
    return {
        "options": opts.inputs(),
        "conversations": len(data),
        "held_out": len(checks),
        "shared_prefix_tokens": prefix,
        "mean_tokens": round(sum(len(c.ids) for c in data) / len(data), 1),
        "train_seconds": round(seconds, 1),
        "first_loss": round(losses[0], 4),
        "last_loss": round(statistics.fmean(losses[-50:]), 4),
        "copy_before": before,
        "copy_after": after,
    }
