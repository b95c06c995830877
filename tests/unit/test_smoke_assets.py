"""The smoke assets: synthetic_arith raw rows in the real layouts, the tiny model, and the idempotent build."""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from retool.data.prompt import ANSWER_INSTRUCTION
from retool.smoke import build, task
from retool.smoke.pretrain import PretrainOptions

# The raw layouts of ReTool-SFT and DAPO-Math-17k, written out here independently of retool.smoke.task.
RETOOL_REMINDER = (
    "Remember to place the final answer in the last part using the format: \n"
    "<answer>\n\\boxed{{'The final answer goes here.'}}\n</answer>"
)
DAPO_PREFIX = (
    "Solve the following math problem step by step. The last line of your response should be of the form "
    "Answer: $Answer (without quotes) where $Answer is the answer to the problem.\n\n"
)
DAPO_SUFFIX = '\n\nRemember to put your answer on its own line after "Answer:".'
TOOL_ROUND = re.compile(r"<code>\n```python\n(.*?)\n```\n</code>\n<interpreter>\n(.*?)\n</interpreter>", re.S)
ANSWER_BLOCK = re.compile(r"<answer>\n\\boxed\{(-?\d+)\}\n</answer>\Z")
QUESTION = re.compile(r"What is (\d{3}) \* (\d{3})(?: ([+-]) (\d{2}))?\?\Z")


def _expected_answer(question: str) -> int:
    """Evaluate a synthetic question from its text, without the task's own expression."""
    match = QUESTION.match(question)
    assert match, f"unexpected question shape: {question!r}"
    a, b, op, c = match.groups()
    value = int(a) * int(b)
    if op == "+":
        value += int(c)
    elif op == "-":
        value -= int(c)
    return value


def _question_of(user_content: str) -> str:
    return user_content.split("*user question:*", 1)[1].removesuffix(RETOOL_REMINDER).strip()


def test_sft_rows_have_the_retool_sft_layout() -> None:
    problems = task.make_problems(40, seed=3)
    rows = task.sft_rows(problems, seed=4)
    assert len(rows) == 40
    for row, problem in zip(rows, problems):
        assert list(row) == ["messages"]
        user, assistant = row["messages"]
        assert user.keys() == assistant.keys() == {"role", "content"}
        assert (user["role"], assistant["role"]) == ("user", "assistant")
        content = user["content"]
        assert content.count("*user question:*") == 1
        assert content.endswith("\n\n" + RETOOL_REMINDER)  # doubled braces, single backslash, as in the data
        assert content.startswith("Solve the following problem step by step.")
        assert _question_of(content) == problem.question
        reply = assistant["content"]
        assert ANSWER_BLOCK.search(reply), reply
        assert int(ANSWER_BLOCK.search(reply).group(1)) == _expected_answer(problem.question) == problem.answer
        # text between tool rounds and the answer block: nothing but the tags we put there
        assert (
            reply.count("<code>")
            == reply.count("</code>")
            == reply.count("<interpreter>")
            == len(TOOL_ROUND.findall(reply))
            <= 1
        )


def test_tool_code_in_the_traces_prints_the_answer() -> None:
    rows = task.sft_rows(task.make_problems(24, seed=5), seed=6)
    rounds = [(TOOL_ROUND.search(r["messages"][1]["content"]), r) for r in rows]
    rounds = [(m, r) for m, r in rounds if m]
    assert len(rounds) == 12
    for match, row in rounds:
        code, shown = match.groups()
        run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30, check=True)
        expected = _expected_answer(_question_of(row["messages"][0]["content"]))
        assert run.stdout.strip() == shown == str(expected)


def test_about_half_of_the_sft_traces_use_the_tool() -> None:
    rows = task.sft_rows(task.make_problems(1024, seed=0), seed=1)
    with_tool = sum("<code>" in r["messages"][1]["content"] for r in rows)
    assert with_tool == 512
    quarter = task.sft_rows(task.make_problems(100, seed=0), seed=1, tool_fraction=0.25)
    assert sum("<code>" in r["messages"][1]["content"] for r in quarter) == 25
    with pytest.raises(ValueError, match="tool_fraction"):
        task.sft_rows([], seed=0, tool_fraction=1.5)


def test_rl_rows_have_the_dapo_math_layout() -> None:
    problems = task.make_problems(30, seed=7)
    rows = task.rl_rows(problems, seed=8)
    for row, problem in zip(rows, problems):
        assert list(row) == ["data_source", "prompt", "ability", "reward_model", "extra_info"]
        assert row["data_source"] == "math_dapo" and row["ability"] == "MATH"
        assert row["prompt"] == [{"content": DAPO_PREFIX + problem.question + DAPO_SUFFIX, "role": "user"}]
        assert row["reward_model"] == {
            "ground_truth": str(_expected_answer(problem.question)),
            "style": "rule-lighteval/MATH_v2",
        }
        assert list(row["extra_info"]) == ["index"]
        assert uuid.UUID(row["extra_info"]["index"]).version == 4
    assert len({r["extra_info"]["index"] for r in rows}) == 30
    assert task.rl_rows(problems, seed=8) == rows
    assert task.rl_rows(problems, seed=9) != rows


def test_splits_are_disjoint_and_deterministic() -> None:
    sizes = {"a": 300, "b": 200, "c": 100}
    splits = task.make_splits(sizes, seed=11)
    assert {k: len(v) for k, v in splits.items()} == sizes
    expressions = [p.expression for split in splits.values() for p in split]
    assert len(set(expressions)) == 600
    assert task.make_splits(sizes, seed=11) == splits
    assert task.make_splits(sizes, seed=12) != splits
    with pytest.raises(ValueError):
        task.make_problems(-1, seed=0)


def test_aime_default_is_the_shipped_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("RETOOL_AIME2025", raising=False)
    package_root = Path(build.__file__).resolve().parents[1]
    assert build.default_aime2025() == package_root / "datasets" / "aime2025" / "test.jsonl"
    assert build.default_aime2025().is_file()
    monkeypatch.setenv("RETOOL_AIME2025", str(tmp_path / "aime.jsonl"))
    assert build.default_aime2025() == tmp_path / "aime.jsonl"


def test_missing_inputs_fail_fast_with_a_clear_message(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "nowhere.jsonl"
    assert build.main(["--out", str(tmp_path / "out"), "--aime2025", str(missing)]) == 2
    err = capsys.readouterr().err
    assert str(missing) in err and "--aime2025" in err and "RETOOL_AIME2025" in err
    assert not (tmp_path / "out" / "model").exists()  # nothing built before the inputs were checked
    assert build.main(["--out", str(tmp_path / "out"), "--rl-rows", "0"]) == 2
    assert "--rl-rows" in capsys.readouterr().err


def test_smoke_converts_with_one_prompt_shape_by_default(tmp_path: Path) -> None:
    """The tiny model must meet in RL the prompt shape it was fine-tuned on; the reference profile gives two."""
    assert build.SMOKE_PROFILE == "improved"
    assert build.BuildOptions(out=tmp_path).prompt_style == "qwen_boxed"
    assert build.parse_args(["--out", str(tmp_path)]).prompt_style == "qwen_boxed"
    opts = build.parse_args(["--out", str(tmp_path), "--profile", "reference"])
    assert (opts.prompt_style, opts.resolved_tool_config().name) == ("verl_retool", "tool.yaml")
    assert opts.data_inputs()["profile"] == "reference"  # a change of profile rebuilds the data
    with pytest.raises(SystemExit):
        build.parse_args(["--out", str(tmp_path), "--profile", "mine"])


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# a few pre-training steps: enough to check the step runs and lowers the loss, not to learn copying (minutes)
SMALL = dict(
    sft_rows=32,
    sft_val_rows=8,
    rl_rows=16,
    rl_val_rows=8,
    aime_rows=5,
    seed=0,
    pretrain_rows=64,
    pretrain=PretrainOptions(steps=12, batch_size=8, lr=3e-3),
)


@pytest.fixture(scope="module")
def assets(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("smoke-assets")
    return out, build.build_assets(build.BuildOptions(out=out, **SMALL))


@pytest.mark.slow
def test_tiny_model_loads_with_transformers_and_generates(assets: tuple[Path, dict]) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out, manifest = assets
    model = AutoModelForCausalLM.from_pretrained(out / "model")
    tokenizer = AutoTokenizer.from_pretrained(out / "model")
    config = model.config
    assert type(model).__name__ == "Qwen3ForCausalLM" and model.dtype == torch.float32  # pre-trained in fp32
    # the embedding has a row for every token of the trimmed table, padded to a multiple of 128
    assert config.vocab_size % 128 == 0 and len(tokenizer) <= config.vocab_size < len(tokenizer) + 128
    assert 1000 < len(tokenizer) < 10_000
    assert (config.num_hidden_layers, config.hidden_size) == (4, 128)
    assert config.tie_word_embeddings and model.get_output_embeddings().weight is model.get_input_embeddings().weight
    im_end, endoftext, tool_call = tokenizer.convert_tokens_to_ids(["<|im_end|>", "<|endoftext|>", "<tool_call>"])
    assert (model.generation_config.eos_token_id, model.generation_config.pad_token_id) == (im_end, endoftext)
    assert (config.eos_token_id, config.pad_token_id) == (im_end, endoftext) and tool_call == endoftext + 14
    n_params = sum(p.numel() for p in model.parameters())
    assert n_params == manifest["model"]["num_parameters"] and 0.8e6 < n_params < 2e6
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "What is 347 * 829?"}],
        add_generation_prompt=True,
        return_tensors="pt",
        return_dict=True,
    )
    generated = model.generate(**prompt, max_new_tokens=6, do_sample=False)
    assert generated.shape[1] > prompt["input_ids"].shape[1]


@pytest.mark.slow
def test_build_writes_converted_data_and_a_manifest(assets: tuple[Path, dict]) -> None:
    import pyarrow.parquet as pq

    out, manifest = assets
    assert json.loads((out / "manifest.json").read_text()) == manifest
    data = manifest["data"]
    assert {rel: info["rows"] for rel, info in data.items()} == {
        "data/sft_train.parquet": 32,
        "data/sft_val.parquet": 8,
        "data/pretrain.parquet": 64,
        "data/rl_train.parquet": 16,
        "data/rl_val_synthetic.parquet": 8,
        "data/rl_val_aime2025.parquet": 5,
    }
    assert data["data/sft_train.parquet"]["tool_rate"] == 0.5
    assert data["data/pretrain.parquet"]["tool_rate"] == 1.0
    assert data["data/rl_train.parquet"]["data_sources"] == ["synthetic_arith"]
    assert data["data/rl_val_aime2025.parquet"]["data_sources"] == ["aime_2025"]
    # short sequences for the tiny model, and SFT prompts shaped like the RL prompts it will see
    assert data["data/sft_train.parquet"]["conversation_tokens"]["max"] <= 384
    sft_prompt = data["data/sft_train.parquet"]["prompt_tokens"]
    rl_prompt = data["data/rl_train.parquet"]["prompt_tokens"]
    assert abs(sft_prompt["mean"] - rl_prompt["mean"]) <= 10, (sft_prompt, rl_prompt)
    rl = pq.read_table(out / "data/rl_train.parquet").to_pylist()
    assert all(
        r["reward_model"]["ground_truth"]
        == str(_expected_answer(re.search(r"What is [^?]*\?", r["prompt"][-1]["content"]).group(0)))
        for r in rl
    )
    # One prompt shape everywhere: question, blank line, the qwen_boxed instruction (SFT, RL, synthetic and AIME val).
    assert manifest["data_inputs"]["profile"] == "improved"
    suffix = f"\n\n{ANSWER_INSTRUCTION}"
    for rel, question_of in (
        ("data/sft_train.parquet", lambda r: r["messages"][0]["content"]),
        ("data/rl_train.parquet", lambda r: r["prompt"][0]["content"]),
        ("data/rl_val_synthetic.parquet", lambda r: r["prompt"][0]["content"]),
    ):
        for r in pq.read_table(out / rel).to_pylist():
            prompt = question_of(r)
            assert prompt.endswith(suffix) and QUESTION.match(prompt.removesuffix(suffix)), (rel, prompt)
    aime = pq.read_table(out / "data/rl_val_aime2025.parquet").to_pylist()
    assert all(r["prompt"][0]["content"] == r["extra_info"]["question"] + suffix for r in aime)


@pytest.mark.slow
def test_build_is_idempotent_and_rebuilds_only_what_changed(assets: tuple[Path, dict]) -> None:
    out, first = assets
    weights = out / "model" / "model.safetensors"
    stamps = {p: p.stat().st_mtime_ns for p in out.rglob("*.parquet")}
    stamps[weights] = weights.stat().st_mtime_ns
    digest = _sha256(weights)

    opts = build.BuildOptions(out=out, **SMALL)
    again = build.build_assets(opts)
    assert (again["model_built"], again["data_built"]) == (False, False)
    assert {p: p.stat().st_mtime_ns for p in stamps} == stamps
    assert again["data"] == first["data"]

    more = build.build_assets(build.BuildOptions(**{**opts.__dict__, "rl_rows": 24}))
    assert (more["model_built"], more["data_built"]) == (True, True)  # the tokenizer is trimmed to the data
    assert more["data"]["data/rl_train.parquet"]["rows"] == 24

    longer = build.build_assets(
        build.BuildOptions(
            **{**opts.__dict__, "rl_rows": 24, "pretrain": PretrainOptions(steps=13, batch_size=8, lr=3e-3)}
        )
    )
    assert (longer["model_built"], longer["data_built"]) == (True, False)  # other pre-training: only the model

    forced = build.build_assets(build.BuildOptions(**{**opts.__dict__, "force": True}))
    assert (forced["model_built"], forced["data_built"]) == (True, True)
    assert _sha256(weights) == digest  # same seed, same weights, same pre-training
    assert forced["data"] == first["data"]


@pytest.mark.slow
def test_pretraining_is_reported_and_lowered_the_loss(assets: tuple[Path, dict]) -> None:
    _, manifest = assets
    report = manifest["model"]["pretrain"]
    assert report["options"] == SMALL["pretrain"].inputs() and report["conversations"] == 64
    # last_loss is the mean over all 12 steps here (of the last 50): from ~8.4 at step 1 it falls well below 8.4 *
    # 0.85 only when the updates train (measured here: a mean of 6.1)
    assert report["last_loss"] < 0.85 * report["first_loss"], report
    assert report["train_seconds"] > 0 and report["host"]["dtype"] in ("bfloat16", "float32")
    # the held-out tool traces of sft_val (half of 8): 2 or 3 operand runs in the code, the result twice
    copy = report["copy_after"]
    assert 4 * 4 <= copy["digit_runs"] <= 4 * 5 and 0 <= copy["digit_runs_exact"] <= 1


@pytest.mark.slow
def test_reply_mask_and_shared_prefix(assets: tuple[Path, dict]) -> None:
    import pyarrow.parquet as pq
    from transformers import AutoTokenizer

    from retool.smoke.pretrain import encode, shared_prefix_length

    out, _ = assets
    tokenizer = AutoTokenizer.from_pretrained(out / "model")
    rows = pq.read_table(out / "data/pretrain.parquet").to_pylist()[:4]
    encoded = [encode(tokenizer, build._clean_messages(r["messages"]), r["tools"]) for r in rows]
    for conv, row in zip(encoded, rows):
        reply = tokenizer.decode([t for t, keep in zip(conv.ids, conv.in_reply) if keep])
        final = row["messages"][-1]["content"]
        assert reply.endswith(final + "<|im_end|>") and '"arguments": {"code": "' in reply
        assert "<tool_response>" not in reply and "What is" not in reply and "<|im_start|>" not in reply
    prefix = shared_prefix_length(encoded)
    assert tokenizer.decode(encoded[0].ids[:prefix]).endswith("<|im_start|>user\nWhat is ")
    assert not any(conv.in_reply[:prefix].count(True) for conv in encoded)


@pytest.mark.slow
def test_a_shared_prefix_gives_the_hidden_states_of_whole_sequences(assets: tuple[Path, dict]) -> None:
    """The pre-training runs the common system turn once per batch: that must not change what the model computes."""
    import pyarrow.parquet as pq
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from retool.smoke.pretrain import _hidden_states, _suffix_batch, encode, shared_prefix_length

    out, _ = assets
    tokenizer = AutoTokenizer.from_pretrained(out / "model")
    model = AutoModelForCausalLM.from_pretrained(out / "model", dtype=torch.float32, attn_implementation="sdpa")
    rows = pq.read_table(out / "data/pretrain.parquet").to_pylist()[:3]
    encoded = [encode(tokenizer, build._clean_messages(r["messages"]), r["tools"]) for r in rows]
    prefix = shared_prefix_length(encoded)
    ids, _ = _suffix_batch(encoded, prefix, tokenizer.pad_token_id)
    with torch.no_grad():
        shared = _hidden_states(model, torch.tensor([encoded[0].ids[:prefix]]), ids)
        for row, conv in enumerate(encoded):
            whole = model.model(input_ids=torch.tensor([conv.ids])).last_hidden_state[0, prefix:]
            torch.testing.assert_close(shared[row, : len(conv.ids) - prefix], whole, rtol=1e-4, atol=1e-4)
