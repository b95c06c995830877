"""A custom reward manager (``reward.reward_manager.source: importlib``), tried at launch on one synthetic trajectory.

The recipe's reward shapes the score by the agent loop's turn count (retool.reward: ``no_tool_penalty`` and
``tool_round_credit`` read ``extra_info["num_turns"]``) and raises MissingNumTurns without it, so a manager that does
not forward it fails every trajectory of the run. verl's own managers are known by name (retool.failures.preflight);
a custom one can only be tried. The probe loads it and builds it as verl's reward-loop worker does
(``verl.trainer.ppo.reward``: the class from ``module.path`` and ``name``, the custom reward function with its
``reward_kwargs``, the run's tokenizer), then gives its ``run_single`` one trajectory shaped as verl's agent loop
sends it (``__num_turns__`` 6: two tool rounds) and looks at what reached the reward function.

Imports verl (about 10 s), so only for a custom manager.
"""

from __future__ import annotations

import asyncio
import inspect
from typing import Any

from retool.doctor.config import dig

PROBE_TURNS = 6  # verl's ToolAgentLoop counts 2 per tool round plus 2: two tool rounds
PROBE_TIMEOUT_S = 120.0
GROUND_TRUTH = "42"


def custom_manager_problems(config: dict[str, Any]) -> list[str]:
    """Problems of the custom reward manager ``config`` names, found by running it once; [] when it passes."""
    manager = dig(config, "reward.reward_manager", {}) or {}
    name, path = manager.get("name"), dig(manager, "module.path")
    label = f"reward.reward_manager {name!r} (source: importlib, module.path: {path})"
    fix = (
        "Fix: in its run_single, put the trajectory's non_tensor_batch['__num_turns__'] into the extra_info it "
        "passes to the reward function as extra_info['num_turns'] (as verl's naive manager does), or use "
        "reward.reward_manager.source=register and name=naive (the recipe's default in configs/rl.yaml)"
    )
    if not path:
        return [
            f"{label}: module.path is not set, so verl cannot load the manager. Fix: set "
            "reward.reward_manager.module.path to its file or pkg:// module"
        ]
    if not dig(config, "reward.custom_reward_function.path"):
        return []  # verl scores with the manager's own function: the recipe's reward and its num_turns are unused
    from omegaconf import OmegaConf

    cfg = OmegaConf.create(config)
    try:
        from verl.trainer.ppo.reward import get_custom_reward_fn, resolve_reward_manager_cls

        manager_cls = resolve_reward_manager_cls(cfg)
        reward_fn = get_custom_reward_fn(cfg)
    except Exception as exc:  # an import of the user's module: anything it raises means verl cannot load it either
        return [
            f"{label} does not load as verl loads it: {type(exc).__name__}: {exc}. Fix: the module and name "
            "must import in the launcher's Python"
        ]
    try:
        tokenizer = _tokenizer(config)
    except Exception as exc:  # transformers raises many types; each means verl's reward workers would fail too
        return [
            f"{label} cannot be tried: the run's tokenizer does not load ({type(exc).__name__}: {exc}). Fix: "
            "actor_rollout_ref.model.path (or .tokenizer_path) must name the model's folder"
        ]
    seen: list[dict[str, Any]] = []
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)  # verl's managers take the current loop when built and run their work on it
    try:
        try:
            instance = manager_cls(
                config=cfg,
                tokenizer=tokenizer,
                compute_score=_recording(reward_fn, seen),
                reward_router_address=None,
                reward_model_tokenizer=None,
            )
        except Exception as exc:  # the user's constructor
            return [
                f"{label} cannot be built as verl's reward loop builds it (config, tokenizer, compute_score, "
                f"reward_router_address, reward_model_tokenizer): {type(exc).__name__}: {exc}"
            ]
        try:
            loop.run_until_complete(asyncio.wait_for(instance.run_single(_trajectory(tokenizer)), PROBE_TIMEOUT_S))
            error = None
        except Exception as exc:  # the user's run_single, or the recipe's reward refusing what it was given
            error = exc
    finally:
        loop.run_until_complete(loop.shutdown_default_executor())
        loop.close()
        asyncio.set_event_loop(None)
    return _verdict(label, fix, seen, error)


def _verdict(label: str, fix: str, seen: list[dict[str, Any]], error: BaseException | None) -> list[str]:
    what = f"on a synthetic trajectory of two tool rounds (__num_turns__={PROBE_TURNS})"
    if not seen:
        if error is not None:
            return [
                f"{label} raised {type(error).__name__}: {error} {what}, before calling the reward function: "
                "every trajectory of the run would fail the same way. Fix: the manager's run_single"
            ]
        return [
            f"{label} did not call the reward function (reward.custom_reward_function) {what}, so the recipe's "
            "reward and its tool shaping by num_turns would not score the run. Fix: call self.compute_score in "
            "its run_single"
        ]
    extra = seen[-1]
    if "num_turns" not in extra or extra["num_turns"] is None:
        return [
            f"{label} passed the reward function an extra_info without num_turns (keys {sorted(extra)}) {what}: "
            "the recipe's reward shapes the score by turns (tool_shaping), so every trajectory would fail with "
            f"MissingNumTurns. {fix}"
        ]
    if extra["num_turns"] != PROBE_TURNS:
        return [
            f"{label} passed num_turns={extra['num_turns']!r} {what}: the reward would shape by the wrong "
            f"turn count. {fix}"
        ]
    if error is not None:
        return [
            f"{label} forwarded num_turns but raised {type(error).__name__}: {error} {what}: every trajectory "
            "of the run would fail the same way. Fix: the manager's run_single"
        ]
    return []


def _recording(reward_fn: Any, seen: list[dict[str, Any]]) -> Any:
    """The reward function verl would pass, noting the extra_info of each call (a copy: managers reuse it)."""

    def note(args: tuple, kwargs: dict) -> None:
        extra = kwargs.get("extra_info", args[3] if len(args) > 3 else None)
        seen.append(dict(extra) if isinstance(extra, dict) else {})

    if inspect.iscoroutinefunction(reward_fn):

        async def recorded_async(*args: Any, **kwargs: Any) -> Any:
            note(args, kwargs)
            return await reward_fn(*args, **kwargs)

        return recorded_async

    def recorded(*args: Any, **kwargs: Any) -> Any:
        note(args, kwargs)
        return reward_fn(*args, **kwargs)

    return recorded


def _tokenizer(config: dict[str, Any]) -> Any:
    from verl.utils import hf_tokenizer
    from verl.utils.fs import copy_to_local

    path = dig(config, "actor_rollout_ref.model.tokenizer_path") or dig(config, "actor_rollout_ref.model.path")
    return hf_tokenizer(copy_to_local(path), trust_remote_code=True)


def _trajectory(tokenizer: Any) -> Any:
    """One finished trajectory with the fields verl's agent loop sends its reward workers (AgentLoopWorker)."""
    import numpy as np
    import torch
    from tensordict import TensorDict
    from verl import DataProto

    question = [{"role": "user", "content": "What is 6 * 7? Use the code interpreter."}]
    prompt = torch.tensor(tokenizer.encode("What is 6 * 7?"), dtype=torch.int64)
    response = torch.tensor(
        tokenizer.encode(f"The code printed 42. The answer is \\boxed{{{GROUND_TRUTH}}}."), dtype=torch.int64
    )
    input_ids = torch.cat([prompt, response])
    batch = TensorDict(
        {
            "prompts": prompt[None],
            "responses": response[None],
            "input_ids": input_ids[None],
            "attention_mask": torch.ones_like(input_ids)[None],
            "position_ids": torch.arange(len(input_ids))[None],
        },
        batch_size=1,
    )

    def column(value: Any) -> Any:
        out = np.empty(1, dtype=object)
        out[0] = value
        return out

    return DataProto(
        batch=batch,
        non_tensor_batch={
            "data_source": column("retool/launch-probe"),
            "agent_name": column("tool_agent"),
            "reward_model": column({"style": "rule", "ground_truth": GROUND_TRUTH}),
            "extra_info": column({"index": 0, "split": "train"}),
            "raw_prompt": column(question),
            "index": column(0),
            "tools_kwargs": column({}),
            "__num_turns__": np.array([PROBE_TURNS]),
            "tool_extra_fields": column({}),
            "prompt_len": np.array([len(prompt)]),
            "response_len": np.array([len(response)]),
        },
    )
