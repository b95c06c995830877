"""SFT rows through verl's real MultiTurnSFTDataset with the Qwen tokenizer, under two chat templates: the one
written for the recipe (retool/smoke/tokenizer.py, what the smoke run uses) and the real Qwen3-4B-Instruct-2507 one
(tests/fixtures, what the real run uses). For both:
- the sequence verl trains on is the template rendering of the whole conversation, and its loss mask covers exactly
  the assistant turns (tool results and the user turn are never trained);
- the tools column renders the same system prompt as verl's ToolAgentLoop does at RL time;
- an RL trajectory built by verl's own Continuous Token builder (the only tokenisation path of ToolAgentLoop in
  verl 0.9.1) from the same conversation is the SFT token sequence, token for token, and the tokens RL counts as
  generated are the tokens SFT trains."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from retool_data_helpers import (
    QWEN3_2507_CHAT_TEMPLATE,
    answer,
    code,
    dapo_row,
    output,
    qwen_tokenizer,
    qwen_tokenizer_real_template,
    sft_row,
    two_call_row,
    write_tool_yaml,
)

from retool.data import rl
from retool.data.sft import convert_row, preprocess

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

TOKENIZERS = {"recipe-template": qwen_tokenizer, "qwen3-2507-template": qwen_tokenizer_real_template}


def raw_rows() -> list[dict]:
    return [
        two_call_row(),
        sft_row("What is 2+2?", "Simple: 2+2=4.\n\n" + answer("4")),
        sft_row("Cube of 3?", "<code>\nprint(3 ** 3)\n</code>\n" + output("27") + "\n\nIt is 27.\n" + answer("27")),
        sft_row(
            "Unicode?",
            "Compute \u00e9.\n" + code("print('\u00e9' * 2)") + "\n" + output("\u00e9\u00e9") + "\n" + answer("2"),
        ),
        # a call whose text before it is empty: the template then puts no newline before <tool_call>
        sft_row("Square of 12?", code("print(12 ** 2)") + "\n" + output("144") + "\n" + answer("144")),
    ]


@pytest.fixture(scope="module")
def sft_parquet(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("sft")
    message = pa.struct([("content", pa.string()), ("role", pa.string())])
    schema = pa.schema([("messages", pa.list_(message))])
    pq.write_table(pa.Table.from_pylist(raw_rows(), schema=schema), root / "raw.parquet")
    tool_yaml = write_tool_yaml(root / "tool.yaml")
    summary = preprocess(root / "raw.parquet", root / "sft.parquet", tool_yaml)  # the reference prompt style
    assert summary["converted"] == len(raw_rows())
    return root / "sft.parquet", tool_yaml


@pytest.fixture(scope="module", params=sorted(TOKENIZERS))
def tokenizer(request):
    return TOKENIZERS[request.param]()


@pytest.fixture(scope="module")
def dataset(sft_parquet, tokenizer):
    from verl.utils.dataset.multiturn_sft_dataset import MultiTurnSFTDataset

    # ignore_input_ids_mismatch stays False: verl asserts per-turn tokens == whole-conversation tokens per item
    config = {
        "max_length": 4096,
        "truncation": "error",
        "pad_mode": "no_padding",
        "messages_key": "messages",
        "tools_key": "tools",
    }
    return MultiTurnSFTDataset(str(sft_parquet[0]), tokenizer, config)


@pytest.fixture(scope="module")
def rl_schemas(sft_parquet) -> list[dict]:
    """The tool schemas ToolAgentLoop renders: model_dump of the tools verl builds from the same YAML."""
    from verl.tools.tool_registry import initialize_tools_from_config

    return [
        t.tool_schema.model_dump(exclude_unset=True, exclude_none=True)
        for t in initialize_tools_from_config(str(sft_parquet[1]))
    ]


def assistant_char_spans(text: str) -> list[tuple[int, int]]:
    """Character spans of the assistant turns in a rendering, found from the ChatML markers alone: after
    `<|im_start|>assistant\\n` up to and including `<|im_end|>\\n` (verl trains the turn separator too)."""
    header, end = "<|im_start|>assistant\n", "<|im_end|>\n"
    spans, start = [], text.find(header)
    while start != -1:
        body = start + len(header)
        stop = text.index(end, body) + len(end)
        spans.append((body, stop))
        start = text.find(header, stop)
    return spans


def test_the_fixture_is_the_real_template():
    text = QWEN3_2507_CHAT_TEMPLATE.read_bytes()
    assert len(text) == 2630 and not text.endswith(b"\n")
    assert hashlib.sha256(text).hexdigest() == "64f85b198065d0fba2a81f37e10ed68161ce2c19a754c7100e67e0ca2ee9c326"
    tok = qwen_tokenizer_real_template()
    assert tok.chat_template == text.decode() and qwen_tokenizer().chat_template != tok.chat_template
    # no default system prompt, no <think> in the generation prompt
    assert (
        tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True)
        == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    )


def test_both_templates_render_the_sft_rows_alike(sft_parquet):
    """The recipe's template is a rewrite of the real one; on every SFT row and on the RL prompt they agree."""
    rows = pq.read_table(sft_parquet[0]).to_pylist()
    recipe, real = qwen_tokenizer(), qwen_tokenizer_real_template()
    for row in rows:
        messages = [{k: v for k, v in m.items() if v is not None} for m in row["messages"]]
        for kwargs in ({"add_generation_prompt": False}, {"add_generation_prompt": True}):
            assert recipe.apply_chat_template(
                messages, tools=row["tools"], tokenize=False, **kwargs
            ) == real.apply_chat_template(messages, tools=row["tools"], tokenize=False, **kwargs)
        prompt = {"tools": row["tools"], "tokenize": False, "add_generation_prompt": True}
        assert recipe.apply_chat_template(messages[:1], **prompt) == real.apply_chat_template(messages[:1], **prompt)


def test_loss_mask_covers_exactly_the_assistant_tokens(dataset, tokenizer):
    tok = tokenizer
    assert len(dataset) == len(raw_rows())
    for item in range(len(dataset)):
        example = dataset[item]  # verl itself checks per-turn tokens == whole-conversation tokens here
        messages, tools = dataset.messages[item], dataset.tools[item]
        text = tok.apply_chat_template(messages, tools=tools, tokenize=False)
        encoded = tok(text, add_special_tokens=False, return_offsets_mapping=True)
        assert example["input_ids"].tolist() == encoded["input_ids"]
        spans = assistant_char_spans(text)
        assert len(spans) == sum(m["role"] == "assistant" for m in messages)
        expected = [int(any(a <= s and e <= b for a, b in spans)) for s, e in encoded["offset_mapping"]]
        assert example["loss_mask"].tolist() == expected
        trained = tok.decode([t for t, m in zip(encoded["input_ids"], expected) if m])
        assert trained == "".join(text[a:b] for a, b in spans)
        calls = sum(len(m["tool_calls"] or []) for m in messages)
        assert trained.count("<tool_call>") == calls and "<tool_response>" not in trained
        untrained = tok.decode([t for t, m in zip(encoded["input_ids"], expected) if not m])
        assert untrained.count("<tool_response>") == calls
        assert messages[0]["content"] in untrained and messages[0]["content"] not in trained  # the user turn
        assert "# Tools" in untrained and "# Tools" not in trained  # the system prompt with the tool schema
        assert trained.endswith(messages[-1]["content"] + "<|im_end|>\n")  # the final boxed answer is trained


def test_verl_reads_tool_calls_and_schema_back_as_written(dataset, sft_parquet, tokenizer):
    rows = pq.read_table(sft_parquet[0]).to_pylist()
    first = dataset.messages[0]
    assert [m["role"] for m in first] == ["user", "assistant", "tool", "assistant", "tool", "assistant"]
    snippet = "divs = [d for d in range(1, 37) if 36 % d == 0]\nprint(divs)"
    assert first[1]["tool_calls"][0]["function"]["arguments"] == {"code": snippet}
    assert first[0]["tool_calls"] is None  # plain turns: a null the template skips
    assert dataset.tools[0] == rows[0]["tools"]
    text = tokenizer.apply_chat_template(first, tools=dataset.tools[0], tokenize=False)
    call = json.dumps({"name": "code_interpreter", "arguments": {"code": snippet}})
    assert f"I will list the divisors with code.\n<tool_call>\n{call}\n</tool_call><|im_end|>" in text


def test_sft_tools_render_like_the_rl_tool_agent(dataset, rl_schemas, tokenizer):
    """ToolAgentLoop renders `tool.tool_schema.model_dump(exclude_unset=True, exclude_none=True)` of the tools verl
    builds from the same YAML; the SFT system prompt must be byte-identical."""
    assert json.dumps(rl_schemas) == json.dumps(dataset.tools[0])
    user = [{"role": "user", "content": "x"}]
    assert tokenizer.apply_chat_template(user, tools=rl_schemas, tokenize=False) == tokenizer.apply_chat_template(
        user, tools=dataset.tools[0], tokenize=False
    )


def rl_trajectory(tokenizer, messages: list[dict], tools: list[dict]) -> tuple[list[int], list[int]]:
    """The token ids and the generated-token mask verl's ToolAgentLoop ends with when the model answers with the
    assistant turns of `messages` and the tool returns their tool turns: prompt from build_initial_tokens, each
    assistant turn appended as the model generates it (its text, then <|im_end|>, where vLLM stops), each tool
    result merged with merge_context_tokens, all through verl's Continuous Token builder for Qwen3."""
    from verl.utils.tokenizer.continuous_token_wiring import create_continuous_token_builder

    builder = create_continuous_token_builder(tokenizer, hf_model_type="qwen3")
    history = list(messages[:1])
    ids = builder.build_initial_tokens(history, tools=tools)
    generated = [0] * len(ids)
    header = "<|im_start|>assistant\n"
    index = 1
    while index < len(messages):
        assistant = messages[index]
        rendered = tokenizer.apply_chat_template([assistant], tokenize=False)
        assert rendered.startswith(header) and rendered.endswith("<|im_end|>\n")
        sampled = tokenizer.encode(rendered[len(header) : -1], add_special_tokens=False)  # what the model emits
        ids = builder.merge_assistant_tokens(ids, sampled).token_ids
        generated += [1] * len(sampled)
        history.append(assistant)
        index += 1
        results = []
        while index < len(messages) and messages[index]["role"] == "tool":
            results.append(messages[index])
            index += 1
        if results:
            merged = builder.merge_context_tokens(history, history + results, ids, tools=tools)
            generated += [0] * (len(merged.token_ids) - len(ids))
            ids = merged.token_ids
            history += results
    return ids, generated


def test_rl_trajectory_is_the_sft_sequence(dataset, rl_schemas, tokenizer):
    newline = tokenizer.encode("\n", add_special_tokens=False)
    im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    for item in range(len(dataset)):
        example = dataset[item]
        sft_ids, sft_mask = example["input_ids"].tolist(), example["loss_mask"].tolist()
        rl_ids, rl_generated = rl_trajectory(tokenizer, dataset.messages[item], rl_schemas)
        # RL stops at the final <|im_end|>; the SFT rendering closes the turn with a newline after it.
        assert sft_ids[-1:] == newline and rl_ids == sft_ids[:-1], item
        # Every token RL counts as generated is trained by SFT. SFT also trains the newline after each
        # <|im_end|>, which RL never samples (verl inserts it as context before a tool result).
        differences = [j for j, (s, r) in enumerate(zip(sft_mask, rl_generated)) if s != r]
        assert all(
            sft_mask[j] == 1 and rl_generated[j] == 0 and rl_ids[j] in newline and rl_ids[j - 1] == im_end
            for j in differences
        ), item
        assert len(differences) == sum(m["role"] == "assistant" for m in dataset.messages[item]) - 1


def test_rl_prompt_is_the_sft_prefix(rl_schemas, tokenizer, tmp_path):
    """The prompt RL renders for a problem is the start of the SFT sequence of that problem: byte-equal with the
    recipe style (both converters give the same user turn), and equal in everything but the user text with the
    reference style (whose SFT and RL user turns differ by design, as in the reference run)."""
    from verl.utils.tokenizer.continuous_token_wiring import create_continuous_token_builder

    builder = create_continuous_token_builder(tokenizer, hf_model_type="qwen3")
    question = "How many primes are less than $30$?"
    sft_raw = sft_row(question, code("print(10)") + "\n" + output("10") + "\n" + answer("10"))
    dapo_raw = dapo_row(question, "10", "9a1f0c1e-0000-4000-8000-000000000002")
    for style in ("qwen_boxed", "verl_retool"):
        sft_messages = convert_row(sft_raw, prompt_style=style)
        rl_prompt = rl.convert_row(dapo_raw, "dapo", prompt_style=style)["prompt"]
        sft_text = tokenizer.apply_chat_template(sft_messages, tools=rl_schemas, tokenize=False)
        sft_ids = tokenizer(sft_text, add_special_tokens=False)["input_ids"]
        if style == "qwen_boxed":
            assert rl_prompt[0]["content"] == sft_messages[0]["content"]
            rl_ids = builder.build_initial_tokens(rl_prompt, tools=rl_schemas)
            assert sft_ids[: len(rl_ids)] == rl_ids
        else:
            assert rl_prompt[0]["content"] != sft_messages[0]["content"]
            rl_text = tokenizer.apply_chat_template(
                rl_prompt, tools=rl_schemas, tokenize=False, add_generation_prompt=True
            )
            rl_user, sft_user = rl_prompt[0]["content"], sft_messages[0]["content"]
            assert sft_text.startswith(rl_text.replace(rl_user, sft_user))
