"""``retool-eval``: sample a model n times per problem with the training tool loop, score it, write metrics.

    retool-eval --model <HF model dir> --data <AIME file or RL parquet> [--data ...] --n 30 \\
        --sandbox-url http://127.0.0.1:8080 --output runs/eval/step130

The rollout is training's, not a copy of it: the recipe's Hydra config (default ``configs/rl.yaml``, plus
``--override`` like the launchers take) is composed with verl's defaults, and each sample runs verl's own
``ToolAgentLoop`` with the tools of the recipe's tool YAML and ``retool.reward.compute_score`` (see
``retool.eval.engine``). Sampling defaults to the config's validation settings (``rollout.val_kwargs``).

Outputs in ``--output``:
- ``samples.jsonl``: one row per sample, written as samples finish: problem_id, data_source, sample,
  ground_truth, final_answer, correct, score, num_turns (verl's user + assistant turns + 1), tool_calls,
  tool_errors, calls [{name, arguments, status, ok, output}], stop_reason, token counts and the transcript.
- ``metrics.json``: acc/mean@n (verl's ``val-core/<ds>/acc/mean@n``), acc/pass@k for k in {1, 4, n} (unbiased
  estimator; k <= n), acc/maj@n, num_turns/mean, tool_calls/per_answer, tool/success_rate, counts; the same per
  data_source under ``per_source``; stop reasons, tool statuses, settings and timing.
- ``eval_config.yaml`` (the rollout settings used) and ``tool_config.yaml`` (the tool YAML pointed at the sandbox).
- ``eval.log``: everything the run printed (vLLM, verl), appended. The console shows a compact view of it
  (retool.console: start-up lines, progress with accuracy so far and ETA, warnings, errors, the result);
  ``VERBOSE=1`` prints all of it instead.

Inputs: an RL parquet written by ``retool-prepare-rl`` (used as is), or any layout ``retool.data.rl`` reads
(AIME 2024/2025 jsonl or parquet, DAPO), converted row by row with the recipe's converter. ``--profile`` (reference by
default, or improved) picks the config overlay, hence the tool, and the prompt wording of those converted rows; it
must be the profile the model was trained with (retool.profiles).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from retool.constants import REPO_ROOT
from retool.eval.problems import EvalError, load_problems
from retool.metrics import summarize
from retool.profiles import add_profile_arguments, resolve_profile_arguments
from retool_sandbox.client import SandboxClient, SandboxUnreachable, SandboxURLError

DEFAULT_CONFIG = REPO_ROOT / "configs" / "rl.yaml"
UNDER_CONSOLE = "RETOOL_EVAL_UNDER_CONSOLE"  # set in the child that retool.console runs
ROLLOUT = "actor_rollout_ref.rollout"


# ---------------------------------------------------------------- config


def compose_config(config: Path | None, overrides: Sequence[str]) -> Any:
    """The recipe's config composed with verl's defaults (as the launchers do), with ``overrides`` applied."""
    from hydra import compose, initialize_config_dir, initialize_config_module
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    # configs/rl.yaml finds configs/tool.yaml through RETOOL_REPO_DIR, like the launchers set it.
    os.environ.setdefault("RETOOL_REPO_DIR", str(REPO_ROOT))
    try:
        if config is None:
            with initialize_config_module("verl.trainer.config", version_base=None):
                return compose(config_name="ppo_trainer", overrides=list(overrides))
        if not config.is_file():
            raise EvalError(f"--config {config} does not exist; pass the recipe's Hydra config (configs/rl.yaml)")
        with initialize_config_dir(config_dir=str(config.parent.resolve()), version_base=None):
            return compose(config_name=config.stem, overrides=list(overrides))
    except (HydraException, OmegaConfBaseException) as e:
        raise EvalError(f"cannot compose --config {config} with overrides {list(overrides)}: {e}") from e


def cli_overrides(args: argparse.Namespace) -> list[str]:
    """Hydra overrides: the profile (the recipe's configs have the group), then ``--override``, then the rollout flags,
    which win by coming last."""
    out = [f"profile/rl={args.profile}"] if args.config is not None else []
    out += args.override
    if args.max_turns is not None:
        out += [
            f"{ROLLOUT}.multi_turn.max_user_turns={args.max_turns}",
            f"{ROLLOUT}.multi_turn.max_assistant_turns={args.max_turns}",
        ]
    if args.max_prompt_length is not None:
        out += [f"data.max_prompt_length={args.max_prompt_length}", f"{ROLLOUT}.prompt_length={args.max_prompt_length}"]
    if args.max_tokens is not None:
        out += [f"data.max_response_length={args.max_tokens}", f"{ROLLOUT}.response_length={args.max_tokens}"]
    if args.max_tool_response_length is not None:
        out.append(f"{ROLLOUT}.multi_turn.max_tool_response_length={args.max_tool_response_length}")
    return out


def check_sandbox(url: str) -> str:
    """The /run_code URL of ``url``; fails before the model loads when the sandbox does not answer its ping."""
    try:
        client = SandboxClient(url)
        client.wait_ready(ping_timeout=10)  # a retool-sandbox still warming up is waited for
    except (SandboxURLError, SandboxUnreachable) as exc:
        raise EvalError(f"--sandbox-url: {exc}") from None
    return client.url


def write_tool_config(source: Path, sandbox_url: str, output: Path) -> Path:
    """Copy the tool YAML with every tool's sandbox_fusion_url pointed at ``sandbox_url``."""
    from omegaconf import OmegaConf

    if not source.is_file():
        raise EvalError(f"tool config {source} does not exist; pass --tool-config (configs/tool.yaml)")
    cfg = OmegaConf.load(source)
    tools = cfg.get("tools") or []
    pointed = 0
    for tool in tools:
        if "sandbox_fusion_url" in (tool.get("config") or {}):
            tool.config.sandbox_fusion_url = sandbox_url
            pointed += 1
    if not pointed:
        raise EvalError(f"{source}: no tool has config.sandbox_fusion_url, so --sandbox-url cannot apply")
    path = output / "tool_config.yaml"
    OmegaConf.save(cfg, path)
    return path


# ---------------------------------------------------------------- CLI


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="retool-eval", description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    p.add_argument("--model", type=Path, required=True, help="Hugging Face model folder (merged checkpoint)")
    p.add_argument(
        "--data", type=Path, action="append", required=True, help="RL parquet or AIME/DAPO file; repeat for several"
    )
    p.add_argument("--n", type=int, default=30, help="samples per problem (the reference reports mean@30)")
    p.add_argument("--sandbox-url", required=True, help="sandbox base URL (http://host:port) or its /run_code URL")
    p.add_argument("--output", type=Path, required=True, help="folder for samples.jsonl and metrics.json")
    p.add_argument(
        "--config",
        type=Path,
        default=DEFAULT_CONFIG if DEFAULT_CONFIG.is_file() else None,
        help="recipe Hydra config whose rollout settings to use (none: verl's defaults)",
    )
    p.add_argument(
        "--override",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="Hydra override applied to --config, e.g. +smoke=rl; repeatable",
    )
    p.add_argument(
        "--tool-config", type=Path, default=None, help="tool YAML (default: the config's multi_turn.tool_config_path)"
    )
    p.add_argument("--temperature", type=float, default=None, help="default: rollout.val_kwargs.temperature")
    p.add_argument("--top-p", type=float, default=None, help="default: rollout.val_kwargs.top_p")
    p.add_argument("--top-k", type=int, default=None, help="default: rollout.val_kwargs.top_k (-1: off)")
    p.add_argument(
        "--max-turns",
        type=int,
        default=None,
        help="max assistant turns and max user (tool) turns; default: the config's multi_turn limits",
    )
    p.add_argument("--max-prompt-length", type=int, default=None, help="prompt tokens; default: the config's")
    p.add_argument(
        "--max-tokens",
        type=int,
        default=None,
        help="response budget of a whole trajectory (model + tool tokens); default: the config's",
    )
    p.add_argument("--max-tool-response-length", type=int, default=None, help="characters of tool output kept")
    p.add_argument("--limit", type=int, default=None, help="use the first LIMIT problems of each --data file")
    add_profile_arguments(p)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--device",
        choices=["auto", "cpu", "cuda", "npu"],
        default="auto",
        help="expected device; vLLM runs on the platform its build targets and a mismatch is an error",
    )
    p.add_argument("--tensor-parallel-size", type=int, default=1)
    p.add_argument("--gpu-memory-utilization", type=float, default=0.85, help="fraction of device memory for vLLM")
    p.add_argument("--max-model-len", type=int, default=None, help="default: prompt + response length")
    p.add_argument("--kv-cache-gb", type=float, default=1.0, help="CPU only: VLLM_CPU_KVCACHE_SPACE unless set")
    p.add_argument("--concurrency", type=int, default=256, help="trajectories in flight at once")
    p.add_argument("--enforce-eager", action="store_true", help="no CUDA/NPU graphs (always on for CPU)")
    p.add_argument(
        "--structured-regex",
        default=None,
        help="debugging aid: constrain every assistant turn to this regex with vLLM structured outputs, "
        "e.g. to check the tool and sandbox plumbing with an untrained model; never for scores",
    )
    args = p.parse_args(argv)
    resolve_profile_arguments(args)
    for name in ("n", "concurrency", "tensor_parallel_size"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1")
    for name in ("limit", "max_turns", "max_prompt_length", "max_tokens", "max_tool_response_length"):
        value = getattr(args, name)
        if value is not None and value < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1")
    return args


def _prepare_platform(device: str, kv_cache_gb: float) -> str:
    """The platform vLLM will use; CPU gets its KV-cache size and no thread pinning (shared machines)."""
    from vllm.platforms import current_platform

    actual = current_platform.device_type or "cpu"
    if device != "auto" and device != actual:
        raise EvalError(
            f"--device {device} requested but this vLLM build runs on {actual!r}; install the vLLM "
            f"for {device} (see docs/evaluation.md) or pass --device auto"
        )
    if actual == "cpu":
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", f"{kv_cache_gb:g}")
        os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")
    return actual


def check_inputs(args: argparse.Namespace) -> tuple[list[Any], str]:
    """(the problems, the sandbox's /run_code URL); EvalError, before any model loads, when an input is wrong."""
    if not (args.model / "config.json").is_file():
        raise EvalError(
            f"--model {args.model} has no config.json: pass a Hugging Face model folder "
            "(merge FSDP checkpoints with `python -m verl.model_merger merge`)"
        )
    return load_problems(args.data, args.limit, args.prompt_style), check_sandbox(args.sandbox_url)


def evaluate(args: argparse.Namespace) -> dict[str, Any]:
    """Run the evaluation described by parsed CLI ``args``; returns metrics.json's content."""
    import asyncio

    from omegaconf import OmegaConf

    problems, sandbox_url = check_inputs(args)
    device = _prepare_platform(args.device, args.kv_cache_gb)

    args.output.mkdir(parents=True, exist_ok=True)
    overrides = cli_overrides(args)
    config = compose_config(args.config, overrides)
    rollout = config.actor_rollout_ref.rollout
    tool_source = args.tool_config or (
        Path(rollout.multi_turn.tool_config_path) if rollout.multi_turn.get("tool_config_path") else None
    )
    if tool_source is None:
        raise EvalError("no tool config: the config sets no multi_turn.tool_config_path; pass --tool-config")
    tool_config = write_tool_config(tool_source, sandbox_url, args.output)
    rollout.multi_turn.tool_config_path = str(tool_config)

    val = rollout.val_kwargs
    # The dict verl's agent-loop worker builds for validation.
    sampling = {
        "temperature": val.temperature if args.temperature is None else args.temperature,
        "top_p": val.top_p if args.top_p is None else args.top_p,
        "top_k": val.top_k if args.top_k is None else args.top_k,
        "repetition_penalty": 1.0,
        "logprobs": False,
    }
    reward_kwargs = (
        dict(OmegaConf.to_container(config.reward.custom_reward_function.get("reward_kwargs") or {}, resolve=True))
        if config.get("reward")
        else {}
    )
    dtype = str(rollout.get("dtype") or "bfloat16")
    if device == "cpu":  # the training's rule (configs/device/cpu.env): float32 unless RETOOL_CPU_DTYPE=bfloat16
        from retool.platform.cpu_dtype import host_dtype

        dtype = host_dtype()[0]
    settings_record = {
        "model": str(args.model),
        "data": [str(d) for d in args.data],
        "n": args.n,
        "limit": args.limit,
        "prompt_style": args.prompt_style,
        "problems": len(problems),
        "sandbox_url": sandbox_url,
        "device": device,
        "config": str(args.config),
        "overrides": overrides,
        "sampling": sampling,
        "seed": args.seed,
        "reward_kwargs": reward_kwargs,
        "structured_regex": args.structured_regex,
        "dtype": dtype,
        "prompt_length": int(rollout.prompt_length),
        "response_length": int(rollout.response_length),
        "multi_turn": OmegaConf.to_container(rollout.multi_turn, resolve=True),
    }
    (args.output / "eval_config.yaml").write_text(OmegaConf.to_yaml(OmegaConf.create(settings_record)))

    from retool.eval.engine import EngineSettings, run_samples

    engine = EngineSettings(
        model=str(args.model),
        tensor_parallel_size=args.tensor_parallel_size,
        gpu_memory_utilization=args.gpu_memory_utilization,
        max_model_len=args.max_model_len,
        max_num_seqs=rollout.get("max_num_seqs"),
        seed=args.seed,
        enforce_eager=args.enforce_eager or device == "cpu",
        dtype=dtype,
        structured_regex=args.structured_regex,
    )
    samples_path = args.output / "samples.jsonl"
    total = len(problems) * args.n
    done = correct = used_tool = 0
    with open(samples_path, "w") as sink:

        def on_record(record: dict[str, Any]) -> None:
            nonlocal done, correct, used_tool
            sink.write(json.dumps(record, ensure_ascii=False) + "\n")
            sink.flush()
            done, correct, used_tool = done + 1, correct + record["correct"], used_tool + bool(record["tool_calls"])
            if done == total or done % max(1, total // 100) == 0:  # retool.console reads these lines
                print(
                    f"retool-eval: {done}/{total} samples | acc {correct / done:.3f} so far | "
                    f"tool use {used_tool / done:.2f}",
                    file=sys.stderr,
                    flush=True,
                )

        result = asyncio.run(
            run_samples(
                config, str(tool_config), engine, problems, args.n, sampling, args.concurrency, on_record, reward_kwargs
            )
        )
    metrics = build_metrics(result.records)
    metrics["settings"] = settings_record
    metrics["timing"] = {
        "engine_start_s": round(result.engine_start_s, 2),
        "generate_s": round(result.generate_s, 2),
        "generated_tokens": result.generated_tokens,
        "tokens_per_s": round(result.generated_tokens / max(result.generate_s, 1e-9), 2),
    }
    (args.output / "metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")
    return metrics


def build_metrics(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """metrics.json from the JSONL rows: overall, per data_source, stop reasons and tool statuses."""
    metrics = summarize(records)
    by_source: dict[str, list[dict[str, Any]]] = {}
    for record in records:
        by_source.setdefault(record["data_source"], []).append(record)
    metrics["per_source"] = {source: summarize(rows) for source, rows in sorted(by_source.items())}
    metrics["stop_reasons"] = dict(Counter(r["stop_reason"] for r in records))
    metrics["tool/status_counts"] = dict(Counter(c["status"] for r in records for c in r["calls"]))
    metrics["counts"]["prompt_truncated"] = sum(bool(r.get("prompt_truncated")) for r in records)
    return metrics


def run_under_console(args: argparse.Namespace, argv: Sequence[str]) -> int:
    """This same command again as a child of retool.console: the console shows its compact view (start-up lines,
    progress with ETA, warnings and errors, the result); ``<output>/eval.log`` gets all that vLLM and verl print."""
    from retool.console.cli import run_command, verbose_requested
    from retool.console.startup import shown_path

    log = args.output / "eval.log"
    limit = f", the first {args.limit} of each" if args.limit else ""
    header = [
        f"model {shown_path(args.model)} | profile {args.profile} | device {args.device}",
        f"data {', '.join(shown_path(d) for d in args.data)}{limit} | {args.n} samples per problem",
        f"sandbox {args.sandbox_url} | output {shown_path(args.output)}",
        f"full log: {shown_path(log)} (VERBOSE=1 prints all of it here too)",
    ]
    return run_command(
        "eval",
        log,
        [sys.executable, "-m", "retool.eval", *argv],
        header,
        verbose=verbose_requested(),
        env={**os.environ, UNDER_CONSOLE: "1"},
    )


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    started = time.monotonic()
    try:
        if not os.environ.get(UNDER_CONSOLE):
            check_inputs(args)  # a wrong input fails here, plainly, before anything starts
            args.output.mkdir(parents=True, exist_ok=True)
            return run_under_console(args, argv)
        metrics = evaluate(args)
    except EvalError as e:
        print(f"retool-eval: error: {e}", file=sys.stderr)
        return 2
    n = metrics["counts"]["n"]
    rate = metrics["tool/success_rate"]
    if metrics["counts"]["prompt_truncated"]:
        print(
            f"retool-eval: warning: {metrics['counts']['prompt_truncated']} samples had prompts longer than the "
            "prompt length and were left-truncated (training drops them with data.filter_overlong_prompts); "
            "raise --max-prompt-length",
            file=sys.stderr,
        )
    print(
        f"retool-eval: {metrics['counts']['problems']} problems x {n} samples in {time.monotonic() - started:.0f} s: "
        f"acc/mean@{n} {metrics[f'acc/mean@{n}']:.4f}, acc/maj@{n} {metrics[f'acc/maj@{n}']:.4f}, "
        f"num_turns {metrics['num_turns/mean']:.2f}, tool calls/answer {metrics['tool_calls/per_answer']:.2f}, "
        f"tool success {'n/a' if rate is None else f'{rate:.3f}'} -> {args.output / 'metrics.json'}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
