"""The recipe's agent loop (retool.agent_loop) run as verl runs it: verl's ToolAgentLoop state machine, the real
tokenizer and chat template of the smoke model, the recipe's tool posting to real HTTP servers on 127.0.0.1. Only
the model is scripted: its two turns (a tool call, then an answer) are fixed token ids instead of vLLM's sampling.

What it holds: an answered trajectory keeps verl's response mask (model tokens 1, tool tokens 0); a trajectory whose
tool call got no answer (sandbox gone, or the tool raised) has an all-zero mask and ``trajectory_masked`` = 1; a
raising tool is counted and its traceback kept for the failure ledger; a call of code_interpreter when the run's
tool config lacks it raises the configuration error UnknownTool instead of verl's silent "Unknown function" reply.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from omegaconf import OmegaConf

from retool.constants import REPO_ROOT, TOOL_NAME
from retool.failures.causes import UnknownTool
from retool.tool_outcomes import PROBLEM_FIELD
from ports import free_port

pytestmark = pytest.mark.verl

MODEL = REPO_ROOT / "assets" / "smoke_model"
RESPONSE_LENGTH = 256


class ScriptedModel:
    """verl's server manager interface (``generate``) replying with fixed turns, in order."""

    def __init__(self, tokenizer, turns: list[str]):
        self.turns = [tokenizer.encode(text, add_special_tokens=False) + [tokenizer.eos_token_id] for text in turns]
        self.calls = 0

    async def generate(self, *, request_id: str, prompt_ids: list[int], sampling_params: dict, **_: Any):
        from verl.workers.rollout.replica import TokenOutput

        turn = self.turns[min(self.calls, len(self.turns) - 1)]
        self.calls += 1
        return TokenOutput(token_ids=turn, stop_reason="completed")


def tool_call(code: str) -> str:
    return "<tool_call>\n" + json.dumps({"name": TOOL_NAME, "arguments": {"code": code}}) + "\n</tool_call>"


def closed_port_url() -> str:
    return f"http://127.0.0.1:{free_port()}/run_code"  # nothing listens on it


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(MODEL))


def make_loop(tokenizer, tools: list, turns: list[str]):
    from verl.experimental.agent_loop.agent_loop import DictConfigWrap, ToolListWrap

    from retool.agent_loop import RecipeToolAgentLoop

    config = OmegaConf.create(
        {
            "actor_rollout_ref": {
                "rollout": {
                    "prompt_length": 512,
                    "response_length": RESPONSE_LENGTH,
                    "full_determinism": False,
                    "multi_turn": {
                        "max_user_turns": 2,
                        "max_assistant_turns": 3,
                        "max_parallel_calls": 1,
                        "max_tool_response_length": 256,
                        "tool_response_truncate_side": "middle",
                        "format": "hermes",
                    },
                }
            }
        }
    )
    data = OmegaConf.create({"apply_chat_template_kwargs": {}})
    return RecipeToolAgentLoop(
        trainer_config=DictConfigWrap(config),
        server_manager=ScriptedModel(tokenizer, turns),
        tokenizer=tokenizer,
        processor=None,
        dataset_cls=None,
        data_config=DictConfigWrap(data),
        hf_model_type="qwen3",
        tools=ToolListWrap(tools),
    )


def make_tool(url: str, cls=None):
    from retool.tool import CodeInterpreterTool

    config = {
        "type": "native",
        "sandbox_fusion_url": url,
        "default_timeout": 5,
        "max_retries": 1,
        "retry_backoff_s": 0.05,
        "reconnect_budget_s": 0.3,
        "http_timeout_margin_s": 1.0,
        "behaviour": "annotated",
    }
    return (cls or CodeInterpreterTool)(config=config, tool_schema=None)


async def run(loop) -> Any:
    prompt = [{"role": "user", "content": "What is 6 * 7? Use the tool."}]
    return await loop.run({"temperature": 1.0, "top_p": 1.0, "top_k": -1}, raw_prompt=prompt, extra_info={})


TURNS = [tool_call("print(6 * 7)"), "The tool printed 42, so the answer is \\boxed{42}."]


async def test_an_answered_trajectory_keeps_verl_s_mask(tokenizer, server):
    base, state = server
    output = await run(make_loop(tokenizer, [make_tool(base + "/run_code")], TURNS))
    mask = output.response_mask
    assert output.extra_fields["tool_ok"] == 1 and output.extra_fields["trajectory_masked"] == 0
    assert 1 in mask and 0 in mask  # model tokens trained on, the tool's reply not
    assert output.num_turns == 4  # user, assistant (call), tool reply, assistant (answer)
    assert PROBLEM_FIELD not in output.extra_fields


async def test_an_unanswered_trajectory_is_kept_out_of_the_loss(tokenizer):
    output = await run(make_loop(tokenizer, [make_tool(closed_port_url())], TURNS))
    fields = output.extra_fields
    assert fields["tool_unavailable"] == 1 and fields["trajectory_masked"] == 1
    assert output.response_mask and set(output.response_mask) == {0}
    assert "refused" in fields[PROBLEM_FIELD] or "connect" in fields[PROBLEM_FIELD].lower()


async def test_a_tool_that_raises_is_counted_with_its_traceback_and_masked(tokenizer, server):
    from retool.tool import CodeInterpreterTool

    class Broken(CodeInterpreterTool):
        async def execute(self, instance_id, parameters, **kwargs):
            raise RuntimeError("injected tool bug")

    base, _ = server
    output = await run(make_loop(tokenizer, [make_tool(base + "/run_code", Broken)], TURNS))
    fields = output.extra_fields
    assert fields["tool_exception"] == 1 and fields["tool_calls"] == 1 and fields["trajectory_masked"] == 1
    assert "injected tool bug" in fields[PROBLEM_FIELD] and "Traceback" in fields[PROBLEM_FIELD]
    assert set(output.response_mask) == {0}


async def test_a_tool_whose_create_raises_is_counted_too(tokenizer, server):
    from retool.tool import CodeInterpreterTool

    class BrokenCreate(CodeInterpreterTool):
        async def create(self, *args, **kwargs):
            raise RuntimeError("injected create bug")

    base, _ = server
    output = await run(make_loop(tokenizer, [make_tool(base + "/run_code", BrokenCreate)], TURNS))
    fields = output.extra_fields
    assert fields["tool_exception"] == 1 and fields["tool_calls"] == 1 and fields["trajectory_masked"] == 1
    assert "injected create bug" in fields[PROBLEM_FIELD]


async def test_masking_can_be_turned_off(tokenizer):
    loop = make_loop(tokenizer, [make_tool(closed_port_url())], TURNS)
    loop.mask_unanswered_tool_calls = False
    output = await run(loop)
    assert output.extra_fields["trajectory_masked"] == 0 and 1 in output.response_mask


async def test_calling_code_interpreter_without_it_configured_is_a_configuration_error(tokenizer):
    with pytest.raises(UnknownTool, match="tool_config_path"):
        await run(make_loop(tokenizer, [], TURNS))
