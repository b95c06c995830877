"""retool-eval's problems: AIME / DAPO files or prepared RL parquets -> one ``Problem`` per row, validated."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from retool.data.prompt import DEFAULT_PROMPT_STYLE, check_prompt_style


class EvalError(ValueError):
    """Bad input to retool-eval (data, config, sandbox); the message says what to fix."""


@dataclass
class Problem:
    """One evaluation problem: an RL row (the layout retool.data.rl writes) and where it came from."""

    problem_id: str
    data_source: str
    prompt: list[dict[str, Any]]
    ground_truth: str
    extra_info: dict[str, Any]
    source: str
    row: int


def _problem_from_rl_row(row: dict[str, Any], where: str) -> dict[str, Any]:
    """Validate an RL row (retool.data.rl layout) and keep what evaluation needs."""
    prompt = row.get("prompt")
    if hasattr(prompt, "tolist"):
        prompt = prompt.tolist()
    if (
        not isinstance(prompt, list)
        or not prompt
        or not all(isinstance(m, dict) and isinstance(m.get("content"), str) and m.get("role") for m in prompt)
    ):
        raise EvalError(
            f"{where}: 'prompt' must be a non-empty list of {{role, content}} messages, got {prompt!r:.200}"
        )
    reward_model = row.get("reward_model")
    ground_truth = reward_model.get("ground_truth") if isinstance(reward_model, dict) else None
    if ground_truth is None or not str(ground_truth).strip():
        raise EvalError(f"{where}: reward_model.ground_truth is missing or empty")
    data_source = row.get("data_source")
    if not isinstance(data_source, str) or not data_source:
        raise EvalError(f"{where}: 'data_source' is missing (it names the metric, e.g. aime_2025)")
    extra_info = row.get("extra_info") or {}
    if not isinstance(extra_info, dict):
        raise EvalError(f"{where}: 'extra_info' must be a mapping, got {type(extra_info).__name__}")
    return {
        "data_source": data_source,
        "prompt": [{"role": m["role"], "content": m["content"]} for m in prompt],
        "ground_truth": str(ground_truth),
        "extra_info": _plain(extra_info),
    }


def _plain(value: Any) -> Any:
    """Arrow/numpy containers -> JSON-compatible Python (parquet structs come back with numpy arrays inside)."""
    if hasattr(value, "tolist") and not isinstance(value, (str, bytes)):
        value = value.tolist()
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items() if v is not None}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def load_problems(
    paths: Sequence[Path], limit: int | None = None, prompt_style: str = DEFAULT_PROMPT_STYLE
) -> list[Problem]:
    """Problems from each file in order (the first ``limit`` of each); problem ids must be unique. Raw (not yet
    converted) files get their prompts in ``prompt_style`` ("verl_retool" or "qwen_boxed"); RL parquets are used as
    is."""
    from retool.data import rl
    from retool.data.io import open_rows

    check_prompt_style(prompt_style)
    problems: list[Problem] = []
    seen: dict[str, str] = {}
    for path in paths:
        try:
            rows = open_rows(path)
            is_rl = {"data_source", "prompt", "reward_model"} <= set(rows.columns) and not _is_raw_dapo(rows)
            kind = None if is_rl else rl.detect_source(rows, str(path))
        except (rl.DataSourceError, OSError) as e:
            raise EvalError(f"--data {path}: {e}") from e
        count = 0
        for number, raw in enumerate(rows):
            if limit is not None and count >= limit:
                break
            where = f"{path} row {number}"
            if kind is not None:
                try:
                    raw = rl.convert_row(raw, kind, prompt_style=prompt_style)
                except rl.ConversionError as e:
                    raise EvalError(f"{where}: cannot convert ({e}); fix the row or pass a prepared RL parquet") from e
            fields = _problem_from_rl_row(raw, where)
            if kind is None:
                _check_wording(fields["prompt"], prompt_style, where)
            index = fields["extra_info"].get("index", number)
            problem_id = f"{fields['data_source']}/{index}"
            if problem_id in seen:
                raise EvalError(
                    f"{where}: problem id {problem_id} repeats {seen[problem_id]}; deduplicate the data "
                    "(retool-prepare-rl --dedupe) so every problem gets exactly n samples"
                )
            seen[problem_id] = where
            problems.append(Problem(problem_id=problem_id, source=str(path), row=number, **fields))
            count += 1
        if count == 0:
            raise EvalError(f"--data {path}: no rows")
    return problems


def _is_raw_dapo(rows: Any) -> bool:
    """Raw DAPO-Math-17k has the RL columns too, but no ``agent_name`` and its prompt starts with DAPO's 'Answer:'
    instruction. (A prepared file in the reference prompt style starts the same way; its ``agent_name`` tells.)"""
    from retool.data.rl import DAPO_PREFIX

    if "agent_name" in rows.columns:
        return False
    first = next(iter(rows), None)
    prompt = _plain(first.get("prompt")) if first else None
    return bool(prompt) and isinstance(prompt[0], dict) and str(prompt[0].get("content", "")).startswith(DAPO_PREFIX)


def _check_wording(prompt: list[dict[str, Any]], prompt_style: str, where: str) -> None:
    """A prepared row whose prompt has the other profile's wording would measure the model on prompts it was not
    trained with; a wording neither profile writes (hand-made rows) passes."""
    from retool.profiles import prompt_style_of

    user = next((m["content"] for m in prompt if m["role"] == "user"), "")
    style = prompt_style_of(user)
    if style is not None and style != prompt_style:
        raise EvalError(
            f"{where}: the prompt has the {style} wording but this evaluation uses {prompt_style}: pass "
            "the --profile the model was trained with, or prepare the data with that profile"
        )
