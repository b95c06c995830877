"""Shared by the data / tokenizer / template tests: raw rows in the exact ReTool-SFT and DAPO layouts, a
verl-format tool YAML, and one Qwen tokenizer built per test process, with the recipe's chat template or with the
real Qwen3-4B-Instruct-2507 one (tests/fixtures/README.md)."""

from __future__ import annotations

import atexit
import functools
import shutil
import tempfile
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
# The chat template Qwen3-4B-Instruct-2507 ships, byte for byte (source and licence: tests/fixtures/README.md).
QWEN3_2507_CHAT_TEMPLATE = REPO / "tests" / "fixtures" / "qwen3_4b_instruct_2507_chat_template.jinja"
AIME_DIR = REPO / "retool" / "datasets"  # the shipped AIME files (retool/datasets/README.md)

# The raw user turn: an instruction template (it mentions the tags and the doubled braces itself), the marker, the
# question, then the trailing format line with the doubled braces that really are in the data.
RAW_TEMPLATE = (
    "Work through the problem below step by step. You may write Python code to check your reasoning; it runs in a "
    "sandbox and its output comes back wrapped in `<interpreter>output</interpreter>`.\n"
    "Wrap every snippet as `<code>\n```python\nsnippet\n```\n</code>`.\n"
    "The last part of your response must be:\n<answer>\n\\boxed{{'The final answer goes here.'}}\n</answer>\n\n"
)
RAW_FORMAT_LINE = (
    "Remember to place the final answer in the last part using the format: \n<answer>\n"
    "\\boxed{{'The final answer goes here.'}}\n</answer>"
)


def raw_user(question: str) -> str:
    return f"{RAW_TEMPLATE}*user question:*\n{question}\n\n{RAW_FORMAT_LINE}"


def code(snippet: str) -> str:
    return f"<code>\n```python\n{snippet}\n```\n</code>"


def output(text: str) -> str:
    return f"<interpreter>\n{text}\n</interpreter>"


def answer(value: str) -> str:
    return f"<answer>\n\\boxed{{{value}}}\n</answer>"


def sft_row(question: str, assistant: str) -> dict:
    """One raw JoeYing/ReTool-SFT row."""
    return {"messages": [{"role": "user", "content": raw_user(question)}, {"role": "assistant", "content": assistant}]}


def two_call_row() -> dict:
    return sft_row(
        "Find the sum of all positive divisors of 36.",
        "I will list the divisors with code.\n\n"
        + code("divs = [d for d in range(1, 37) if 36 % d == 0]\nprint(divs)")
        + "\n"
        + output("[1, 2, 3, 4, 6, 9, 12, 18, 36]")
        + "\n\nNow add them up.\n\n"
        + code("print(sum(divs))")
        + "\n"
        + output("91")
        + "\n\nThe divisors sum to 91.\n\n"
        + answer("91"),
    )


DAPO_PREFIX = (
    "Solve the following math problem step by step. The last line of your response should be of the form "
    "Answer: $Answer (without quotes) where $Answer is the answer to the problem.\n\n"
)
DAPO_SUFFIX = '\n\nRemember to put your answer on its own line after "Answer:".'


def dapo_row(problem: str, truth: str, uuid: str) -> dict:
    """One raw BytedTsinghua-SIA/DAPO-Math-17k row."""
    return {
        "data_source": "math_dapo",
        "prompt": [{"content": DAPO_PREFIX + problem + DAPO_SUFFIX, "role": "user"}],
        "ability": "MATH",
        "reward_model": {"ground_truth": truth, "style": "rule-lighteval/MATH_v2"},
        "extra_info": {"index": uuid},
    }


TOOL_SCHEMA = {
    "type": "function",
    "function": {
        "name": "code_interpreter",
        "description": "Run Python code in a sandbox and return its stdout and stderr.",
        "parameters": {
            "type": "object",
            "properties": {"code": {"type": "string", "description": "A complete Python script."}},
            "required": ["code"],
        },
    },
}


def write_tool_yaml(
    path: Path, name: str = "code_interpreter", class_name: str = "verl.tools.base_tool.BaseTool"
) -> Path:
    """A tool YAML in verl's format (a `tools:` list of {class_name, config, tool_schema}) that verl's
    initialize_tools_from_config can load; keys are out of verl's model order on purpose (parameters before
    description) and one key verl does not know is added."""
    function = {
        "parameters": TOOL_SCHEMA["function"]["parameters"],
        "name": name,
        "description": TOOL_SCHEMA["function"]["description"],
        "x-unused": "dropped like verl's pydantic models drop it",
    }
    entry = {
        "class_name": class_name,
        "config": {"type": "native"},
        "tool_schema": {"function": function, "type": "function"},
    }
    path.write_text(yaml.safe_dump({"tools": [entry]}, sort_keys=False), encoding="utf-8")
    return path


@functools.cache
def qwen_tokenizer_dir() -> Path:
    """A tokenizer directory built once per test process (removed at exit)."""
    from retool.smoke.tokenizer import build_qwen_tokenizer

    root = Path(tempfile.mkdtemp(prefix="retool-qwen-tok-"))
    atexit.register(shutil.rmtree, root, ignore_errors=True)
    return build_qwen_tokenizer(root / "tokenizer")


@functools.cache
def qwen_tokenizer():
    """The tokenizer of qwen_tokenizer_dir(), loaded offline through AutoTokenizer."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(qwen_tokenizer_dir()))


@functools.cache
def qwen_tokenizer_real_template():
    """The same tokenizer with the real Qwen3-4B-Instruct-2507 chat template instead of the recipe's (a separate
    instance: qwen_tokenizer() stays as it is)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(qwen_tokenizer_dir()))
    tokenizer.chat_template = QWEN3_2507_CHAT_TEMPLATE.read_text(encoding="utf-8")
    return tokenizer
