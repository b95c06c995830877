"""SFT rows through verl's real MultiTurnSFTDataset with the Qwen tokenizer and its tool chat template: the
sequence verl trains on is the template rendering of the whole conversation, and its loss mask covers exactly the
assistant turns. Also: the tools column renders the same system prompt as verl's ToolAgentLoop does at RL time."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from retool_data_helpers import answer, code, output, qwen_tokenizer, sft_row, two_call_row, write_tool_yaml

from retool.data.sft import preprocess

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def raw_rows() -> list[dict]:
    return [
        two_call_row(),
        sft_row("What is 2+2?", "Simple: 2+2=4.\n\n" + answer("4")),
        sft_row("Cube of 3?", "<code>\nprint(3 ** 3)\n</code>\n" + output("27") + "\n\nIt is 27.\n" + answer("27")),
        sft_row("Unicode?",
                "Compute \u00e9.\n" + code("print('\u00e9' * 2)") + "\n" + output("\u00e9\u00e9") + "\n" + answer("2")),
    ]


@pytest.fixture(scope="module")
def sft_parquet(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("sft")
    message = pa.struct([("content", pa.string()), ("role", pa.string())])
    schema = pa.schema([("messages", pa.list_(message))])
    pq.write_table(pa.Table.from_pylist(raw_rows(), schema=schema), root / "raw.parquet")
    tool_yaml = write_tool_yaml(root / "tool.yaml")
    summary = preprocess(root / "raw.parquet", root / "sft.parquet", tool_yaml)
    assert summary["converted"] == 4
    return root / "sft.parquet", tool_yaml


@pytest.fixture(scope="module")
def dataset(sft_parquet):
    from verl.utils.dataset.multiturn_sft_dataset import MultiTurnSFTDataset

    config = {"max_length": 4096, "truncation": "error", "pad_mode": "no_padding",
              "messages_key": "messages", "tools_key": "tools"}
    return MultiTurnSFTDataset(str(sft_parquet[0]), qwen_tokenizer(), config)


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


def test_loss_mask_covers_exactly_the_assistant_tokens(dataset):
    tok = qwen_tokenizer()
    assert len(dataset) == 4
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
        assert trained.endswith(messages[-1]["content"] + "<|im_end|>\n")  # the final boxed answer is trained


def test_verl_reads_tool_calls_and_schema_back_as_written(dataset, sft_parquet):
    rows = pq.read_table(sft_parquet[0]).to_pylist()
    first = dataset.messages[0]
    assert [m["role"] for m in first] == ["user", "assistant", "tool", "assistant", "tool", "assistant"]
    snippet = "divs = [d for d in range(1, 37) if 36 % d == 0]\nprint(divs)"
    assert first[1]["tool_calls"][0]["function"]["arguments"] == {"code": snippet}
    assert first[0]["tool_calls"] is None  # plain turns: a null the template skips
    assert dataset.tools[0] == rows[0]["tools"]
    text = qwen_tokenizer().apply_chat_template(first, tools=dataset.tools[0], tokenize=False)
    call = json.dumps({"name": "code_interpreter", "arguments": {"code": snippet}})
    assert f"<tool_call>\n{call}\n</tool_call>" in text


def test_sft_tools_render_like_the_rl_tool_agent(dataset, sft_parquet):
    """ToolAgentLoop renders `tool.tool_schema.model_dump(exclude_unset=True, exclude_none=True)` of the tools verl
    builds from the same YAML; the SFT system prompt must be byte-identical."""
    from verl.tools.tool_registry import initialize_tools_from_config

    rl_schemas = [t.tool_schema.model_dump(exclude_unset=True, exclude_none=True)
                  for t in initialize_tools_from_config(str(sft_parquet[1]))]
    assert json.dumps(rl_schemas) == json.dumps(dataset.tools[0])
    tok, user = qwen_tokenizer(), [{"role": "user", "content": "x"}]
    assert tok.apply_chat_template(user, tools=rl_schemas, tokenize=False) == tok.apply_chat_template(
        user, tools=dataset.tools[0], tokenize=False)
