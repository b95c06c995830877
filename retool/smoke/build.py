"""``retool-smoke-assets``: build everything the embedded CPU smoke run reads, offline, in under half a minute.

Layout written under ``--out DIR``::

    model/                      tiny Qwen3 + Qwen's BPE trimmed to the tokens of the data below and both shipped AIME
                                sets (retool.smoke.tokenizer; hermes tool chat template), pre-trained on
                                data/pretrain.parquet (retool.smoke.pretrain: the tool-call format and copying digits)
    raw/retool_sft/{train,val}.parquet     synthetic_arith rows in the JoeYing/ReTool-SFT layout
    raw/retool_sft/pretrain.parquet        more of them, every one calling the tool (the pre-training corpus)
    raw/dapo_math/{train,val}.parquet      synthetic_arith rows in the DAPO-Math-17k layout
    data/sft_train.parquet, sft_val.parquet          via retool.data.sft.preprocess (the real converter)
    data/pretrain.parquet                            the same way
    data/rl_train.parquet, rl_val_synthetic.parquet  via retool.data.rl.prepare, data_source -> "synthetic_arith"
    data/rl_val_aime2025.parquet                     via retool.data.rl.prepare from the vendored AIME 2025 file
    manifest.json               inputs, row counts, model summary, pre-training report (steps, seconds, host, copy
                                accuracy before and after), token-length stats

Prompts and tool: every converter runs with the ``improved`` profile by default (``SMOKE_PROFILE``, retool.profiles),
so SFT rows, RL rows and the AIME validation rows all hold the question, a blank line, then "Please reason step by
step, ...": the tiny model meets in RL the prompt shape it was fine-tuned on. The ``reference`` profile gives SFT
prompts ("<question> ... Remember to place the final answer ...") and RL prompts ("Solve the following math
problem ... The answer format must be: ...") of different shapes, which a 4B model bridges but a 1.4M-parameter model
trained for minutes does not (it answers without the tool in RL). ``--profile reference`` builds that variant.

Idempotent: the data, then the model (the tokenizer is trimmed to the data); a step is skipped when its outputs
exist and the manifest records the same options, and redone otherwise. The pre-training is the one costly step
(minutes; the manifest states how many): the model pre-trained from the smoke's own options ships in
assets/smoke_model and is installed when it fits (retool.smoke.shipped_model). Use ``--force`` after editing an
input file or a converter: file contents are not tracked.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from retool.cli_options import add_options, check_minimums, from_args, option, settings
from retool.profiles import PROFILES, get_profile
from retool.datasets import dataset_path
from retool.smoke import shipped_model, task
from retool.smoke.pretrain import PretrainOptions

MODEL_FILES = shipped_model.FILES
RAW_FILES = (
    "raw/retool_sft/train.parquet",
    "raw/retool_sft/val.parquet",
    "raw/retool_sft/pretrain.parquet",
    "raw/dapo_math/train.parquet",
    "raw/dapo_math/val.parquet",
)
SFT_FILES = {
    "data/sft_train.parquet": "raw/retool_sft/train.parquet",
    "data/sft_val.parquet": "raw/retool_sft/val.parquet",
    "data/pretrain.parquet": "raw/retool_sft/pretrain.parquet",
}  # converted -> raw
DATA_FILES = (*SFT_FILES, "data/rl_train.parquet", "data/rl_val_synthetic.parquet", "data/rl_val_aime2025.parquet")
MANIFEST = "manifest.json"
# One prompt shape for SFT, RL and validation (module docstring): the improved profile's wording and tool.
SMOKE_PROFILE = "improved"


def default_aime2025() -> Path:
    """$RETOOL_AIME2025, else the AIME 2025 file shipped in the package (retool/datasets)."""
    env = os.environ.get("RETOOL_AIME2025")
    return Path(env) if env else dataset_path("aime2025")


DATA, MODEL = ("data",), ("model",)  # what an option is an input of: the manifest's data_inputs, model_inputs


@dataclasses.dataclass(frozen=True)
class BuildOptions:
    """What to build, and the command line of ``retool-smoke-assets`` (retool.cli_options). Row counts are numbers
    of distinct synthetic problems (all splits are disjoint)."""

    out: Path = option(help="output directory (created if missing)")
    sft_rows: int = option(1024, help="SFT training problems", minimum=1, feeds=DATA)
    sft_val_rows: int = option(64, help="SFT validation problems", minimum=1, feeds=DATA)
    rl_rows: int = option(512, help="RL training problems", minimum=1, feeds=DATA)
    rl_val_rows: int = option(32, help="synthetic RL validation problems", minimum=1, feeds=DATA)
    seed: int = option(0, help="seed of the model weights and the data", feeds=DATA + MODEL)
    aime2025: Path | None = option(  # None: default_aime2025()
        None, help="AIME 2025 jsonl (default: $RETOOL_AIME2025 or the shipped retool/datasets/aime2025/test.jsonl)"
    )
    aime_rows: int | None = option(None, help="keep only the first K AIME rows (default: all)", minimum=1, feeds=DATA)
    profile: str = option(
        SMOKE_PROFILE,
        choices=sorted(PROFILES),
        feeds=DATA,
        help="retool.profiles profile whose prompt wording and tool schema the data gets (default: "
        "%(default)s, one prompt shape for SFT and RL; see the module docstring)",
    )
    layers: int = option(4, help="decoder layers of the tiny model", feeds=MODEL)
    hidden: int = option(128, help="hidden size of the tiny model", feeds=MODEL)
    pretrain_rows: int = option(
        8192, help="tool-using conversations to pre-train on (default: %(default)s)", minimum=1, feeds=DATA
    )
    pretrain: PretrainOptions = PretrainOptions()  # steps=0: no pre-training (a random model); --pretrain-steps
    shipped_model: bool = option(  # install assets/smoke_model when it fits (retool.smoke.shipped_model)
        True, help="pre-train even when the model shipped in assets/smoke_model fits these options", feeds=MODEL
    )
    force: bool = option(False, help="rebuild everything even if up to date")

    def model_inputs(self) -> dict[str, Any]:
        return {**self._inputs("model"), "vocabulary": "trimmed to the data", "pretrain": self.pretrain.inputs()}

    def data_inputs(self) -> dict[str, Any]:
        return {**self._inputs("data"), "aime2025": str(self.resolved_aime())}

    def _inputs(self, part: str) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if part in settings(f).get("feeds", ())}

    def resolved_aime(self) -> Path:
        return Path(self.aime2025) if self.aime2025 is not None else default_aime2025()

    @property
    def prompt_style(self) -> str:
        return get_profile(self.profile).prompt_style

    def resolved_tool_config(self) -> Path:
        return get_profile(self.profile).tool_config_path


def build_assets(opts: BuildOptions) -> dict[str, Any]:
    """Build (or keep, when up to date) every asset under ``opts.out`` and return the manifest written there."""
    check_minimums(opts)
    _check_inputs(opts)
    out = Path(opts.out)
    out.mkdir(parents=True, exist_ok=True)
    old = _read_manifest(out / MANIFEST)
    started = time.monotonic()
    manifest: dict[str, Any] = {"format": 1, "built_by": "retool-smoke-assets", "data_source": task.DATA_SOURCE}

    data_fresh = (
        not opts.force
        and old.get("data_inputs") == opts.data_inputs()
        and all((out / f).is_file() for f in RAW_FILES + DATA_FILES)
        and "data" in old
    )
    if data_fresh:
        for key in ("raw", "converters"):
            manifest[key] = old[key]
    else:
        manifest["raw"] = _write_raw(out, opts)
        manifest["converters"] = _convert(out, opts)
    manifest["data_built"] = not data_fresh

    # The tokenizer is trimmed to the data's tokens, so new data means a new model.
    model_fresh = (
        data_fresh
        and old.get("model_inputs") == opts.model_inputs()
        and all((out / "model" / f).is_file() for f in MODEL_FILES)
    )
    if model_fresh:
        manifest["model"], manifest["data"] = old["model"], old["data"]
    else:
        manifest["model"] = _build_model(out / "model", out, opts)
        manifest["data"] = _describe_data(out)
    manifest["model_built"] = not model_fresh
    manifest["model_inputs"] = opts.model_inputs()
    manifest["data_inputs"] = opts.data_inputs()
    manifest["build_seconds"] = round(time.monotonic() - started, 2)
    _write_atomic(out / MANIFEST, json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return manifest


def _check_inputs(opts: BuildOptions) -> None:
    aime, tool_config = opts.resolved_aime(), opts.resolved_tool_config()
    if not aime.is_file():
        raise FileNotFoundError(
            f"AIME 2025 file not found at {aime}; pass --aime2025 PATH or set RETOOL_AIME2025 "
            "(a math-ai/aime25 style jsonl: problem, answer, id)"
        )
    if not tool_config.is_file():
        raise FileNotFoundError(f"the {opts.profile} profile's tool config {tool_config} is missing from the checkout")


def _build_model(model_dir: Path, out: Path, opts: BuildOptions) -> dict[str, Any]:
    """Tokenizer (trimmed to the data under ``out``), then the shipped model when it fits, else a random model and
    its pre-training; into a temporary sibling directory swapped in only when complete."""
    from retool.platform.cpu_dtype import host_report
    from retool.smoke.pretrain import pretrain
    from retool.smoke.tiny_model import build_tiny_model
    from retool.smoke.tokenizer import build_qwen_tokenizer

    tmp = model_dir.with_name(f".{model_dir.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        build_qwen_tokenizer(tmp, keep=lambda full: _vocabulary_texts(full, out))
        shipped = (
            shipped_model.install_if_fits(shipped_model.key(opts.model_inputs(), opts.data_inputs()), tmp)
            if opts.shipped_model and opts.pretrain.steps
            else None
        )
        summary = shipped or build_tiny_model(tmp, tmp, layers=opts.layers, hidden=opts.hidden, seed=opts.seed)
        if shipped is None and opts.pretrain.steps:
            import pyarrow.parquet as pq

            rows = pq.read_table(out / "data/pretrain.parquet").to_pylist()
            held_out = [r for r in pq.read_table(out / "data/sft_val.parquet").to_pylist() if _uses_tool(r["messages"])]
            clean = [{"messages": _clean_messages(r["messages"]), "tools": r["tools"]} for r in rows + held_out]
            report = pretrain(
                tmp, clean[: len(rows)], clean[len(rows) :], opts.pretrain, log=lambda line: print(line, flush=True)
            )
            summary["pretrain"] = {**report, "host": host_report()}
            summary["dtype"] = "float32"
        shutil.rmtree(model_dir, ignore_errors=True)
        tmp.rename(model_dir)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    summary["path"] = str(model_dir)
    summary["files"] = {p.name: p.stat().st_size for p in sorted(model_dir.iterdir()) if p.is_file()}
    return summary


# What the sandbox sends back besides numbers: these shapes get whole tokens, anything else still encodes by bytes.
TOOL_OUTPUT_TEXTS = (
    'Traceback (most recent call last):\n  File "<string>", line 1, in <module>\n',
    "NameError: name 'result' is not defined",
    "SyntaxError: invalid syntax",
    "ZeroDivisionError: division by zero",
    "TypeError: unsupported operand type(s)",
    "ValueError: invalid literal for int() with base 10",
    "Execution timed out",
    "Error: the sandbox is unavailable",
    "(no output)",
)


def _vocabulary_texts(full_tokenizer: Any, out: Path) -> list[str]:
    """Every text the smoke model reads or writes, as the chat template renders it: the converted SFT
    conversations and RL prompts, both shipped AIME sets (retool-eval), and common tool outputs."""
    import pyarrow.parquet as pq

    def render(messages: list[dict[str, Any]], tools: Any, generation_prompt: bool) -> str:
        return full_tokenizer.apply_chat_template(
            _clean_messages(messages), tools=tools, tokenize=False, add_generation_prompt=generation_prompt
        )

    tools = pq.read_table(out / "data/sft_train.parquet").slice(0, 1).to_pylist()[0]["tools"]
    texts = list(TOOL_OUTPUT_TEXTS)
    for rel in DATA_FILES:
        for row in pq.read_table(out / rel).to_pylist():
            if rel in SFT_FILES:
                texts.append(render(row["messages"], row["tools"], False))
            else:
                texts.append(render(row["prompt"], tools, True))
                texts.append(str(row["reward_model"]["ground_truth"]))
    for name in ("aime2025", "aime2024"):
        for line in dataset_path(name).read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            texts += [str(row.get(key, "")) for key in ("problem", "solution", "answer")]
    return texts


def _write_raw(out: Path, opts: BuildOptions) -> dict[str, Any]:
    # the pre-training split comes last, so adding it left the earlier splits as they were
    splits = task.make_splits(
        {
            "sft_train": opts.sft_rows,
            "sft_val": opts.sft_val_rows,
            "rl_train": opts.rl_rows,
            "rl_val": opts.rl_val_rows,
            "pretrain": opts.pretrain_rows,
        },
        opts.seed,
    )
    # distinct sub-seeds so trace wording and UUIDs differ between splits
    tables = {
        "raw/retool_sft/train.parquet": task.sft_rows(splits["sft_train"], opts.seed + 1),
        "raw/retool_sft/val.parquet": task.sft_rows(splits["sft_val"], opts.seed + 2),
        "raw/retool_sft/pretrain.parquet": task.sft_rows(splits["pretrain"], opts.seed + 5, tool_fraction=1.0),
        "raw/dapo_math/train.parquet": task.rl_rows(splits["rl_train"], opts.seed + 3),
        "raw/dapo_math/val.parquet": task.rl_rows(splits["rl_val"], opts.seed + 4),
    }
    for rel, rows in tables.items():
        _write_parquet(out / rel, rows)
    return {rel: len(rows) for rel, rows in tables.items()}


def _convert(out: Path, opts: BuildOptions) -> dict[str, Any]:
    """Run the real converters; every synthetic row must survive conversion."""
    from retool.data.rl import prepare
    from retool.data.sft import preprocess

    summaries: dict[str, Any] = {}
    try:
        for dst, src in SFT_FILES.items():
            summaries[dst] = _jsonable(
                preprocess(
                    out / src,
                    _tmp_path(out / dst),
                    opts.resolved_tool_config(),
                    on_error="skip",
                    prompt_style=opts.prompt_style,
                )
            )
            _require_all_rows(out / src, _tmp_path(out / dst), summaries[dst])
        for dst, src in (
            ("data/rl_train.parquet", "raw/dapo_math/train.parquet"),
            ("data/rl_val_synthetic.parquet", "raw/dapo_math/val.parquet"),
        ):
            summaries[dst] = _jsonable(
                prepare(out / src, _tmp_path(out / dst), source="dapo", prompt_style=opts.prompt_style)
            )
            _require_all_rows(out / src, _tmp_path(out / dst), summaries[dst])
            _set_data_source(_tmp_path(out / dst), task.DATA_SOURCE)
        dst = "data/rl_val_aime2025.parquet"
        summaries[dst] = _jsonable(
            prepare(
                opts.resolved_aime(),
                _tmp_path(out / dst),
                source="aime2025",
                limit=opts.aime_rows,
                prompt_style=opts.prompt_style,
            )
        )
        for dst in DATA_FILES:  # publish only after every conversion succeeded
            os.replace(_tmp_path(out / dst), out / dst)
    finally:
        for dst in DATA_FILES:
            _tmp_path(out / dst).unlink(missing_ok=True)
    return summaries


def _describe_data(out: Path) -> dict[str, Any]:
    """Row counts and token lengths, rendered with the model's own chat template and the tool schema."""
    import pyarrow.parquet as pq
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(out / "model")
    described: dict[str, Any] = {}
    sft = pq.read_table(out / "data/sft_train.parquet").to_pylist()
    if not sft or "tools" not in sft[0]:
        raise ValueError(
            f"{out / 'data/sft_train.parquet'} has no 'tools' column: the SFT converter's output "
            "must carry the code_interpreter schema"
        )
    tools = sft[0]["tools"]
    for rel in DATA_FILES:
        rows = pq.read_table(out / rel).to_pylist()
        info: dict[str, Any] = {"rows": len(rows)}
        if rel in SFT_FILES:
            info["tool_rate"] = round(sum(_uses_tool(r["messages"]) for r in rows) / len(rows), 4)
            info["conversation_tokens"] = _stats(
                [_n_tokens(tokenizer, _clean_messages(r["messages"]), r["tools"], False) for r in rows]
            )
            info["prompt_tokens"] = _stats(
                [_n_tokens(tokenizer, _clean_messages(r["messages"][:1]), r["tools"], True) for r in rows]
            )
        else:
            info["data_sources"] = sorted({r["data_source"] for r in rows})
            info["prompt_tokens"] = _stats([_n_tokens(tokenizer, r["prompt"], tools, True) for r in rows])
        described[rel] = info
    return described


def _uses_tool(messages: list[dict[str, Any]]) -> bool:
    return any(m.get("tool_calls") for m in messages)


def _clean_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    # parquet gives every struct all fields; drop the null ones so the template sees what verl's trainer sees
    return [{k: v for k, v in m.items() if v is not None} for m in messages]


def _n_tokens(tokenizer: Any, messages: list[dict[str, Any]], tools: Any, generation_prompt: bool) -> int:
    ids = tokenizer.apply_chat_template(messages, tools=tools, tokenize=True, add_generation_prompt=generation_prompt)
    if isinstance(ids, dict) or hasattr(ids, "input_ids"):  # transformers 5 may return a BatchEncoding
        ids = ids["input_ids"]
    return len(ids)


def _stats(values: list[int]) -> dict[str, float]:
    ordered = sorted(values)
    return {
        "min": ordered[0],
        "mean": round(statistics.fmean(ordered), 1),
        "p95": ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))],
        "max": ordered[-1],
    }


def _require_all_rows(src: Path, dst: Path, summary: Any) -> None:
    import pyarrow.parquet as pq

    n_in, n_out = pq.read_metadata(src).num_rows, pq.read_metadata(dst).num_rows
    if n_in != n_out:
        raise RuntimeError(
            f"converting {src} kept {n_out} of {n_in} synthetic rows (converter summary: {summary}); "
            "the synthetic task and the converter disagree on the layout"
        )


def _set_data_source(path: Path, data_source: str) -> None:
    """Rename the curve: the RL converter names rows by source ("math_dapo"), the smoke run wants its own."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pq.read_table(path)
    if "data_source" not in table.column_names:
        raise ValueError(f"{path} has no data_source column; the RL converter's output changed")
    index = table.column_names.index("data_source")
    table = table.set_column(index, "data_source", pa.array([data_source] * table.num_rows, pa.string()))
    pq.write_table(table, path)


def _write_parquet(path: Path, rows: list[dict[str, Any]]) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), _tmp_path(path))
    os.replace(_tmp_path(path), path)


def _tmp_path(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    return path.with_name(f".{path.stem}.tmp{path.suffix}")


def _write_atomic(path: Path, text: str) -> None:
    (tmp := path.with_name(f".{path.name}.tmp")).write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def _read_manifest(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError:
        return {}  # a damaged manifest only means "rebuild everything"


def _jsonable(summary: Any) -> Any:
    if dataclasses.is_dataclass(summary) and not isinstance(summary, type):
        summary = dataclasses.asdict(summary)
    return json.loads(json.dumps(summary, default=str))


def parse_args(argv: list[str] | None = None) -> BuildOptions:
    return _parse(argv)[0]


def _parse(argv: list[str] | None) -> tuple[BuildOptions, bool]:
    """The build's options, and whether to ship the model it pre-trains (--ship-model)."""
    p = argparse.ArgumentParser(
        prog="retool-smoke-assets",
        description="Build the tiny model, tokenizer and synthetic_arith data for the CPU smoke run (offline).",
    )
    add_options(p, BuildOptions)
    p.add_argument(
        "--pretrain-steps",
        type=int,
        default=PretrainOptions.steps,
        help="pre-training steps (default: %(default)s; 0 keeps the random model)",
    )
    p.add_argument(
        "--ship-model",
        action="store_true",
        help="copy the model this build pre-trained into assets/smoke_model (retool.smoke.shipped_model)",
    )
    a = p.parse_args(argv)
    if a.pretrain_steps < 0:
        p.error(f"--pretrain-steps must be >= 0, got {a.pretrain_steps}")
    return from_args(BuildOptions, a, pretrain=PretrainOptions(steps=a.pretrain_steps)), a.ship_model


def main(argv: list[str] | None = None) -> int:
    opts, ship = _parse(argv)
    try:
        manifest = build_assets(opts)
        if ship:
            key = shipped_model.key(opts.model_inputs(), opts.data_inputs())
            args = " ".join(argv if argv is not None else sys.argv[1:])
            print(f"shipped the model -> {shipped_model.save(Path(opts.out) / 'model', key, manifest['model'], args)}")
    except (FileNotFoundError, ValueError, RuntimeError) as exc:
        print(f"retool-smoke-assets: error: {exc}", file=sys.stderr)
        return 2
    model = manifest["model"]
    state = "up to date" if not manifest["model_built"] else "shipped" if model.get("shipped") else "built"
    print(f"model: {model['architecture']} {model['num_parameters']:,} parameters ({state}) -> {model['path']}")
    if model.get("pretrain"):
        report = model["pretrain"]
        print(
            f"pre-training: {report['options']['steps']} steps in {report['train_seconds']} s, digit runs copied "
            f"exactly {report['copy_before']['digit_runs_exact']} -> {report['copy_after']['digit_runs_exact']}"
        )
    for rel, info in manifest["data"].items():
        tokens = info["prompt_tokens"]
        extra = f", conversation max {info['conversation_tokens']['max']}" if "conversation_tokens" in info else ""
        print(f"{rel}: {info['rows']} rows, prompt tokens mean {tokens['mean']} max {tokens['max']}{extra}")
    print(
        f"{'built' if manifest['data_built'] else 'up to date'} in {manifest['build_seconds']} s -> "
        f"{Path(opts.out) / MANIFEST}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
