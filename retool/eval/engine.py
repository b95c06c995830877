"""The heavy half of retool-eval: vLLM in process, verl's own ToolAgentLoop, the recipe's tool and reward.

Nothing of the training rollout is re-implemented here. Each sample runs the recipe's agent loop
(``retool.agent_loop.RecipeToolAgentLoop``, verl 0.9.1's ``ToolAgentLoop`` that training runs for
``agent_name: tool_agent``), built from the same composed Hydra config, so the chat
template rendering, the hermes parser, tool-response truncation, turn limits, the whole-trajectory
``response_length`` budget and ``num_turns`` are training's. The tools are loaded by verl's loader from the tool
YAML, and the score is ``retool.reward.compute_score`` on the response decoded as verl's reward manager decodes
it. Only the LLM server differs: verl talks to Ray-hosted vLLM replicas, here ``LocalVLLMClient`` wraps one
in-process ``AsyncLLM`` that continuously batches all concurrent trajectories (every sample, every turn).
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from omegaconf import DictConfig
from verl.experimental.agent_loop.agent_loop import DictConfigWrap, ToolListWrap
from verl.tools.tool_registry import initialize_tools_from_config
from verl.utils import hf_tokenizer
from verl.utils.dataset.rl_dataset import RLHFDataset
from verl.workers.rollout.replica import TokenOutput

from retool.agent_loop import RecipeToolAgentLoop
from retool.eval.problems import Problem
from retool.reward import compute_score


class LocalVLLMClient:
    """The ``server_manager`` a verl agent loop talks to, served by one in-process vLLM ``AsyncLLM``.

    Per-call ``max_tokens`` follows verl's vLLM server: unless the sampling params set it, a turn may produce
    min(response_length, prompt_length + response_length - len(prompt)) tokens, clamped to what fits in
    ``max_model_len``.
    """

    def __init__(
        self,
        engine: Any,
        *,
        prompt_length: int,
        response_length: int,
        max_model_len: int,
        structured_regex: str | None = None,
    ):
        self.engine = engine
        self.structured_regex = structured_regex
        self.prompt_length = prompt_length
        self.response_length = response_length
        self.max_model_len = max_model_len
        self._ids = itertools.count()
        self.generated_tokens = 0

    async def generate(
        self, *, request_id: str, prompt_ids: list[int], sampling_params: dict[str, Any], **multimodal: Any
    ) -> TokenOutput:
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt
        from vllm.sampling_params import StructuredOutputsParams

        if any(v for v in multimodal.values()):
            raise ValueError("retool-eval serves text-only models; the agent loop passed multimodal inputs")
        params = dict(sampling_params)
        room = self.max_model_len - len(prompt_ids)
        if room < 1:
            raise ValueError(f"prompt of {len(prompt_ids)} tokens leaves no room in max_model_len={self.max_model_len}")
        max_tokens = params.pop("max_tokens", None) or min(
            self.response_length, self.prompt_length + self.response_length - len(prompt_ids)
        )
        max_tokens = max(1, min(max_tokens, room))
        params["logprobs"] = 0 if params.pop("logprobs", False) else None
        if self.structured_regex:
            params["structured_outputs"] = StructuredOutputsParams(regex=self.structured_regex)
        final = None
        # The agent loop reuses its request id for every turn of a trajectory; vLLM wants unique ids.
        async for output in self.engine.generate(
            TokensPrompt(prompt_token_ids=list(prompt_ids)),
            SamplingParams(max_tokens=max_tokens, **params),
            request_id=f"{request_id}-{next(self._ids)}",
        ):
            final = output
        if final is None or not final.outputs:
            return TokenOutput(token_ids=[], stop_reason="aborted")
        token_ids = list(final.outputs[0].token_ids)
        self.generated_tokens += len(token_ids)
        return TokenOutput(token_ids=token_ids, stop_reason="completed")


class RecordingToolAgentLoop(RecipeToolAgentLoop):
    """The training rollout's agent loop (sessions closed at a trajectory's end), plus a record of each tool call and
    of the turn counters.

    One instance runs one trajectory (as in verl, which instantiates a loop per sample), so plain instance
    attributes hold the record.
    """

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.calls: list[dict[str, Any]] = []
        self.assistant_turns = 0
        self.user_turns = 0
        self.prompt_truncated = False

    def _cap_text_prompt_length(self, prompt_ids: list[int]) -> list[int]:
        # verl left-truncates an over-long prompt with only a log line; training filters such rows out when
        # data.filter_overlong_prompts is set, so the record says it happened.
        self.prompt_truncated = len(prompt_ids) > self.rollout_config.prompt_length
        return super()._cap_text_prompt_length(prompt_ids)

    async def _handle_generating_state(
        self, agent_data: Any, sampling_params: dict[str, Any], ignore_termination: bool = False
    ) -> Any:
        state = await super()._handle_generating_state(agent_data, sampling_params, ignore_termination)
        self.assistant_turns, self.user_turns = agent_data.assistant_turns, agent_data.user_turns
        return state

    async def _handle_processing_tools_state(self, agent_data: Any) -> Any:
        state = await super()._handle_processing_tools_state(agent_data)
        self.assistant_turns, self.user_turns = agent_data.assistant_turns, agent_data.user_turns
        return state

    async def _call_tool(self, tool_call: Any, tools_kwargs: dict[str, Any], agent_data: Any) -> Any:
        started = time.monotonic()
        response, reward, metrics = await super()._call_tool(tool_call, tools_kwargs, agent_data)
        # The recipe's tool always reports a status; an empty dict means verl rejected the call before running
        # it (unknown tool name, arguments that are not JSON) or the tool raised.
        status = (metrics or {}).get("status") or "not_run"
        self.calls.append(
            {
                "name": tool_call.name,
                "arguments": tool_call.arguments,
                "status": status,
                "ok": status == "ok",
                "output": response.text or "",
                "latency_s": round(time.monotonic() - started, 4),
            }
        )
        return response, reward, metrics


@dataclass
class EngineSettings:
    """How to run vLLM; everything about the rollout itself comes from the composed config."""

    model: str
    tensor_parallel_size: int = 1
    gpu_memory_utilization: float = 0.85
    max_model_len: int | None = None
    max_num_seqs: int | None = None
    enforce_eager: bool = False
    seed: int = 0
    dtype: str = "bfloat16"
    structured_regex: str | None = None  # constrain every assistant turn (pipeline checks of untrained models)


@dataclass
class RunResult:
    records: list[dict[str, Any]] = field(default_factory=list)
    generated_tokens: int = 0
    engine_start_s: float = 0.0
    generate_s: float = 0.0


def start_engine(settings: EngineSettings, max_model_len: int) -> Any:
    """An in-process vLLM AsyncLLM on whatever platform this vLLM build targets."""
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.v1.engine.async_llm import AsyncLLM

    kwargs: dict[str, Any] = dict(
        model=settings.model,
        tokenizer=settings.model,
        dtype=settings.dtype,
        tensor_parallel_size=settings.tensor_parallel_size,
        gpu_memory_utilization=settings.gpu_memory_utilization,
        max_model_len=max_model_len,
        enforce_eager=settings.enforce_eager,
        seed=settings.seed,
        enable_prefix_caching=True,
    )
    if settings.max_num_seqs:
        kwargs["max_num_seqs"] = settings.max_num_seqs
    return AsyncLLM.from_engine_args(AsyncEngineArgs(**kwargs))


def sample_record(
    loop: RecordingToolAgentLoop,
    output: Any,
    problem: Problem,
    sample: int,
    tokenizer: Any,
    score: dict[str, Any],
    response_length: int,
) -> dict[str, Any]:
    """The JSONL row of one sample. ``transcript`` splits the response by verl's mask (1 model, 0 tool)."""
    ids, mask = list(output.response_ids), list(output.response_mask)
    transcript = []
    for is_model, group in itertools.groupby(zip(ids, mask), key=lambda pair: pair[1] == 1):
        text = tokenizer.decode([token for token, _ in group], skip_special_tokens=True)
        transcript.append({"role": "assistant" if is_model else "tool", "text": text})
    model_text = "".join(t["text"] for t in transcript if t["role"] == "assistant")
    mt = loop.rollout_config.multi_turn
    if len(mask) >= response_length:
        stop = "response_length"
    elif (mt.max_assistant_turns and loop.assistant_turns >= mt.max_assistant_turns) or (
        mt.max_user_turns and loop.user_turns >= mt.max_user_turns
    ):
        stop = "max_turns"
    else:
        stop = "answered"  # the last assistant turn made no (parsable) tool call
    pred = score.get("pred") or None  # the reward writes "" for "no answer"
    return {
        "problem_id": problem.problem_id,
        "data_source": problem.data_source,
        "sample": sample,
        "ground_truth": problem.ground_truth,
        "final_answer": pred,
        "pred": pred,
        "correct": bool(score.get("acc", 0.0)),
        "score": float(score["score"]),
        "num_turns": int(output.num_turns),
        "assistant_turns": loop.assistant_turns,
        "user_turns": loop.user_turns,
        "tool_calls": len(loop.calls),
        "tool_errors": sum(not c["ok"] for c in loop.calls),
        "tool_call_tags": model_text.count("<tool_call>"),
        "calls": loop.calls,
        "stop_reason": stop,
        "prompt_tokens": len(output.prompt_ids),
        "prompt_truncated": loop.prompt_truncated,
        "response_tokens": len(ids),
        "model_tokens": sum(mask),
        "transcript": transcript,
    }


async def run_samples(
    config: DictConfig,
    tool_config_path: str,
    settings: EngineSettings,
    problems: list[Problem],
    n: int,
    sampling: dict[str, Any],
    concurrency: int,
    on_record: Callable[[dict[str, Any]], None],
    reward_kwargs: dict[str, Any],
) -> RunResult:
    """Run ``n`` trajectories per problem concurrently and call ``on_record`` with each finished row."""
    rollout = config.actor_rollout_ref.rollout
    prompt_length, response_length = int(rollout.prompt_length), int(rollout.response_length)
    max_model_len = settings.max_model_len or int(rollout.get("max_model_len") or 0) or prompt_length + response_length

    tokenizer = hf_tokenizer(
        settings.model, trust_remote_code=bool(config.actor_rollout_ref.model.get("trust_remote_code", False))
    )
    custom_template = config.actor_rollout_ref.model.get("custom_chat_template")
    if custom_template:
        tokenizer.chat_template = custom_template
    from transformers import AutoConfig

    hf_model_type = getattr(AutoConfig.from_pretrained(settings.model), "model_type", None)
    tools = initialize_tools_from_config(tool_config_path)

    result = RunResult()
    started = time.monotonic()
    engine = start_engine(settings, max_model_len)
    result.engine_start_s = time.monotonic() - started
    client = LocalVLLMClient(
        engine,
        prompt_length=prompt_length,
        response_length=response_length,
        max_model_len=max_model_len,
        structured_regex=settings.structured_regex,
    )
    limiter = asyncio.Semaphore(concurrency)
    loop_kwargs = dict(
        trainer_config=DictConfigWrap(config),
        server_manager=client,
        tokenizer=tokenizer,
        processor=None,
        dataset_cls=RLHFDataset,
        data_config=DictConfigWrap(config.data),
        hf_model_type=hf_model_type,
        tools=ToolListWrap(tools),
    )
    event_loop = asyncio.get_running_loop()

    async def one(problem_index: int, problem: Problem, sample: int) -> None:
        async with limiter:
            agent = RecordingToolAgentLoop(**loop_kwargs)
            params = dict(sampling)
            # A seed per (problem, sample): reruns reproduce, samples of one problem differ.
            params["seed"] = settings.seed * 1_000_003 + problem_index * 1_009 + sample
            tools_kwargs = problem.extra_info.get("tools_kwargs") or {}
            output = await agent.run(
                params, raw_prompt=list(problem.prompt), tools_kwargs=tools_kwargs, extra_info=problem.extra_info
            )
            # Scored as verl's reward manager does: whole response, special tokens skipped, num_turns and the
            # loop's extra fields added to the row's extra_info.
            solution = tokenizer.decode(output.response_ids, skip_special_tokens=True)
            extra_info = dict(problem.extra_info)
            extra_info.update(
                {
                    "turn_scores": output.extra_fields.get("turn_scores", []),
                    "tool_rewards": output.extra_fields.get("tool_rewards", []),
                    "num_turns": output.num_turns,
                }
            )
            score = await event_loop.run_in_executor(
                None,
                lambda: compute_score(
                    data_source=problem.data_source,
                    solution_str=solution,
                    ground_truth=problem.ground_truth,
                    extra_info=extra_info,
                    **reward_kwargs,
                ),
            )
            record = sample_record(agent, output, problem, sample, tokenizer, score, response_length)
            result.records.append(record)
            on_record(record)

    try:
        gen_started = time.monotonic()
        await asyncio.gather(*(one(i, p, s) for i, p in enumerate(problems) for s in range(n)))
        result.generate_s = time.monotonic() - gen_started
    finally:
        engine.shutdown()
    result.generated_tokens = client.generated_tokens
    return result
