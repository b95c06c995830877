"""Did RL change the policy? Before/after comparisons with confidence intervals, from verl's per-sample dumps.

verl writes one JSONL file per validation (``trainer.validation_data_dir``, ``<step>.jsonl``) with every sampled
trajectory: ``input`` (the prompt), ``output``, ``score`` and the reward's fields (``acc``, ``used_tool``, ...), and one
per training step (``trainer.rollout_data_dir``) with ``input``, ``output`` and ``score``. This module reads them and
answers, per metric: how much did it change between the first and the last validation, with a 95% interval?

The comparison is paired by prompt: the same held-out prompts are validated before and after, each sampled ``n``
times, so the unit is the prompt's mean (samples of one prompt are not independent). The interval is Student's t on
the per-prompt differences, its quantile from scipy.stats with the exact degrees of freedom (prompts - 1);
"rose" / "fell" means the whole interval lies above / below zero, anything else is "no clear change". Training
curves (tool use, score and, where the reward recorded it, accuracy per step) come from the rollout dumps.

Which way did the gradient push tool use? ``tool_credit`` recomputes verl's GRPO advantage of every training sample
from the dumped scores ((score - group mean) / (group std + 1e-6), a group being the n samples of one prompt, keyed
``<uid>_<session>_<output>``). An all-equal group has advantage 0 for every sample, so only groups with reward variance
("informative") carry a gradient; within one, advantages sum to 0, and the group favours the tool exactly when its
tool-using samples scored above the others. Per step: informative groups and which kind of sample won them, the
``push`` (sum of advantage x used_tool over the step's samples, divided by their number: > 0 favours the tool, 0
with no informative group), right answers with and without the tool, and whether a right tool-using answer is the
tool's last reply verbatim (copied) or differs from it (the model changed what the tool printed), and how many
tool-using answers were exactly one below an integer ground truth (``one_below``: what a tool replying one too many
would have turned into right answers, whether the slip was in the code or in copying the reply).

verl's dumps do not say which validation file a sample came from, so a run validated on several sets is narrowed
to one by that set's prompts (``--val-file``: the RL parquet; a sample belongs to it when its rendered prompt
contains one of the file's user messages).

    python -m retool.learning --validation runs/x/validation [--rollouts runs/x/rollouts] [--val-file v.parquet]
"""

from __future__ import annotations

import argparse
import json
import math
import re
import statistics
import sys
from collections import defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

METRICS = ("used_tool", "score", "acc")
TOOL_RESPONSE = "<tool_response>"  # in a decoded trajectory once per executed tool round
TOOL_REPLY = re.compile(r"<tool_response>(.*?)</tool_response>", re.S)
GRPO_EPSILON = 1e-6  # verl's core_algos.compute_grpo_outcome_advantage
CONFIDENCE = 0.95


class LearningDataError(ValueError):
    """A dump folder or file that cannot answer the question (missing, empty, or without the needed fields)."""


@dataclass(frozen=True)
class Change:
    """Change of one metric between two validations, paired by prompt."""

    metric: str
    before: float
    after: float
    delta: float
    low: float
    high: float
    prompts: int
    samples_before: int
    samples_after: int

    @property
    def verdict(self) -> str:
        if self.low > 0:
            return "rose"
        if self.high < 0:
            return "fell"
        return "no clear change"

    def sentence(self) -> str:
        return (
            f"{self.metric} {self.before:.3f} -> {self.after:.3f} ({self.delta:+.3f}, 95% CI "
            f"[{self.low:+.3f}, {self.high:+.3f}], {self.prompts} prompts): {self.verdict}"
        )


def t_quantile(df: int) -> float:
    """The two-sided 95% quantile of Student's t with ``df`` degrees of freedom (scipy.stats.t)."""
    from scipy.stats import t

    if df < 1:
        raise ValueError("a t interval needs at least 2 prompts")
    return float(t.ppf(0.5 + CONFIDENCE / 2, df))


def read_dump(path: Path) -> list[dict[str, Any]]:
    """The records of one verl JSONL dump; LearningDataError names the file and line of a bad record."""
    records = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError as exc:
            raise LearningDataError(f"{path}:{number}: not JSON ({exc.msg})") from None
    return records


def dumps_by_step(folder: Path) -> dict[int, list[dict[str, Any]]]:
    """``{step: records}`` of a verl dump folder (files named ``<step>.jsonl``)."""
    if not folder.is_dir():
        raise LearningDataError(f"{folder} does not exist: set trainer.validation_data_dir / rollout_data_dir")
    steps = {int(p.stem): read_dump(p) for p in folder.glob("*.jsonl") if p.stem.isdigit()}
    if not steps:
        raise LearningDataError(f"{folder} holds no <step>.jsonl dumps")
    return dict(sorted(steps.items()))


def metric_value(record: dict[str, Any], metric: str) -> float:
    """One sample's value of ``metric``; tool use is also read from the text when the reward did not record it."""
    value = record.get(metric)
    if value is None and metric == "used_tool" and "output" in record:
        value = float(TOOL_RESPONSE in record["output"])
    if value is None or (isinstance(value, float) and math.isnan(value)):
        raise LearningDataError(f"a record has no {metric!r} (keys: {sorted(record)})")
    return float(value)


def _prompt_means(records: list[dict[str, Any]], metric: str) -> dict[str, float]:
    groups: dict[str, list[float]] = defaultdict(list)
    for record in records:
        groups[record["input"]].append(metric_value(record, metric))
    return {prompt: statistics.fmean(values) for prompt, values in groups.items()}


def user_messages(val_file: Path) -> list[str]:
    """The user message of every row of an RL parquet (verl's ``prompt`` column)."""
    import pyarrow.parquet as pq

    if not val_file.is_file():
        raise LearningDataError(f"validation file {val_file} does not exist")
    rows = pq.read_table(val_file, columns=["prompt"]).column("prompt").to_pylist()
    return [m["content"] for messages in rows for m in messages if m.get("role") == "user"]


def select(records: list[dict[str, Any]], prompts: list[str] | None) -> list[dict[str, Any]]:
    """The records whose rendered prompt holds one of ``prompts``; all when None."""
    if prompts is None:
        return records
    chosen = [r for r in records if any(p in r["input"] for p in prompts)]
    if not chosen:
        raise LearningDataError(
            f"none of {len(records)} records was prompted with one of the {len(prompts)} "
            "given user messages: wrong --val-file?"
        )
    return chosen


def paired_change(before: list[dict[str, Any]], after: list[dict[str, Any]], metric: str) -> Change:
    """Mean of ``metric`` before and after, and the t interval of the per-prompt differences."""
    first, last = _prompt_means(before, metric), _prompt_means(after, metric)
    prompts = sorted(set(first) & set(last))
    if len(prompts) < 2:
        raise LearningDataError(f"only {len(prompts)} prompt(s) validated both times: need the same held-out set")
    diffs = [last[p] - first[p] for p in prompts]
    mean = statistics.fmean(diffs)
    half = t_quantile(len(diffs) - 1) * statistics.stdev(diffs) / math.sqrt(len(diffs))
    return Change(
        metric=metric,
        before=statistics.fmean(first[p] for p in prompts),
        after=statistics.fmean(last[p] for p in prompts),
        delta=mean,
        low=mean - half,
        high=mean + half,
        prompts=len(prompts),
        samples_before=len(before),
        samples_after=len(after),
    )


def validation_changes(
    folder: Path, prompts: list[str] | None = None, metrics: tuple[str, ...] = METRICS
) -> dict[str, Change]:
    """First vs last validation of a run, one Change per metric present in the dump."""
    steps = dumps_by_step(folder)
    if len(steps) < 2:
        raise LearningDataError(f"{folder} holds {len(steps)} validation(s); need one before and one after training")
    (_, before), (_, after) = list(steps.items())[0], list(steps.items())[-1]
    before, after = select(before, prompts), select(after, prompts)
    changes = {}
    for metric in metrics:
        if metric == "used_tool" or all(metric in r for r in before + after):
            changes[metric] = paired_change(before, after, metric)
    return changes


def training_curve(folder: Path) -> dict[str, list[tuple[int, float]]]:
    """Per training step: the fraction of trajectories with an executed tool round, the mean score, and the mean
    accuracy when every record of the dump carries the reward's ``acc``."""
    curve: dict[str, list[tuple[int, float]]] = {"used_tool": [], "score": [], "acc": []}
    for step, records in dumps_by_step(folder).items():
        curve["used_tool"].append((step, statistics.fmean(metric_value(r, "used_tool") for r in records)))
        curve["score"].append((step, statistics.fmean(float(r["score"]) for r in records)))
        if all("acc" in r for r in records):
            curve["acc"].append((step, statistics.fmean(metric_value(r, "acc") for r in records)))
    if not curve["acc"]:
        del curve["acc"]
    return curve


def group_key(record: dict[str, Any]) -> str:
    """The GRPO group of a dumped training sample: the prompt uid of verl's ``<uid>_<session>_<output>`` key."""
    key = record.get("uid")
    if not isinstance(key, str) or key.count("_") < 2:
        raise LearningDataError(
            f"a training record has no '<uid>_<session>_<output>' uid (got {key!r}): not a dump "
            "of verl 0.9.1's v1 trainer"
        )
    return key.rsplit("_", 2)[0]


def grpo_advantages(scores: list[float]) -> list[float]:
    """verl's GRPO outcome advantage of one group's scores (sample std; a group of one keeps its score)."""
    if len(scores) == 1:
        return list(scores)
    mean, std = statistics.fmean(scores), statistics.stdev(scores)
    return [(s - mean) / (std + GRPO_EPSILON) for s in scores]


def _copied_reply(record: dict[str, Any]) -> bool:
    """Whether the answer is the trajectory's last tool reply verbatim."""
    replies = TOOL_REPLY.findall(record.get("output", ""))
    return bool(replies) and str(record.get("pred", "")).strip() == replies[-1].strip()


def _one_below(record: dict[str, Any]) -> bool:
    """Whether the answer is the integer ground truth minus one."""
    try:
        return int(str(record.get("pred", "")).strip()) == int(str(record.get("gts", "")).strip()) - 1
    except ValueError:
        return False


def _mean(values: list[float]) -> float | None:
    return round(statistics.fmean(values), 4) if values else None


def step_credit(records: list[dict[str, Any]]) -> dict[str, Any]:
    """The credit-assignment numbers of one training step's samples (see the module docstring)."""
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for record in records:
        groups[group_key(record)].append(record)
    won = {"tool": 0, "no_tool": 0, "both": 0}
    push, informative = 0.0, 0
    for group in groups.values():
        scores = [float(r["score"]) for r in group]
        if len(set(scores)) < 2:
            continue
        informative += 1
        kinds = {metric_value(r, "used_tool") for r, s in zip(group, scores) if s == max(scores)}
        won["both" if len(kinds) > 1 else "tool" if kinds == {1.0} else "no_tool"] += 1
        push += sum(a * metric_value(r, "used_tool") for a, r in zip(grpo_advantages(scores), group))
    tool = [r for r in records if metric_value(r, "used_tool")]
    plain = [r for r in records if not metric_value(r, "used_tool")]
    right_tool = [r for r in tool if metric_value(r, "acc")]
    return {
        "samples": len(records),
        "tool_samples": len(tool),
        "tool_share": _mean([metric_value(r, "used_tool") for r in records]),
        "acc_tool": _mean([metric_value(r, "acc") for r in tool]),
        "acc_no_tool": _mean([metric_value(r, "acc") for r in plain]),
        "no_answer": _mean([1.0 - float(r.get("has_answer", 1.0)) for r in records]),
        "masked": _mean([float(r.get("trajectory_masked", 0.0)) for r in records]),
        "groups": len(groups),
        "informative_groups": informative,
        "won": won,
        "push": round(push / len(records), 4),
        "right_tool": len(right_tool),
        "right_tool_copied": sum(map(_copied_reply, right_tool)),
        "right_no_tool": sum(int(metric_value(r, "acc")) for r in plain),
        "one_below": sum(map(_one_below, tool)),
    }


def tool_credit(folder: Path) -> dict[str, Any]:
    """``{"steps": {step: step_credit}, "total": ...}`` of a run's training dumps (``trainer.rollout_data_dir``);
    the total sums the counts and the push over the steps."""
    steps = {step: step_credit(records) for step, records in dumps_by_step(folder).items()}
    total: dict[str, Any] = {
        key: sum(s[key] for s in steps.values())
        for key in (
            "samples",
            "tool_samples",
            "groups",
            "informative_groups",
            "right_tool",
            "right_tool_copied",
            "right_no_tool",
            "one_below",
        )
    }
    total["won"] = {kind: sum(s["won"][kind] for s in steps.values()) for kind in ("tool", "no_tool", "both")}
    total["push"] = round(sum(s["push"] for s in steps.values()), 4)
    total["steps_without_gradient"] = sum(s["informative_groups"] == 0 for s in steps.values())
    return {"steps": steps, "total": total}


def report(validation: Path, rollouts: Path | None = None, val_file: Path | None = None) -> dict[str, Any]:
    """The JSON-able learning report of one run."""
    changes = validation_changes(validation, user_messages(val_file) if val_file else None)
    out: dict[str, Any] = {
        "val_file": str(val_file) if val_file else None,
        "changes": {k: {**asdict(c), "verdict": c.verdict} for k, c in changes.items()},
        "sentences": [c.sentence() for c in changes.values()],
    }
    if rollouts is not None:
        out["training_curve"] = training_curve(rollouts)
        try:
            out["tool_credit"] = tool_credit(rollouts)
        except LearningDataError as exc:  # the before/after verdict stands without it
            out["tool_credit"] = {"error": str(exc)}
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m retool.learning", description=__doc__.split("\n")[0])
    parser.add_argument("--validation", type=Path, required=True, help="trainer.validation_data_dir of the run")
    parser.add_argument("--rollouts", type=Path, default=None, help="trainer.rollout_data_dir of the run")
    parser.add_argument("--val-file", type=Path, default=None, help="compare only this validation set (RL parquet)")
    parser.add_argument("--json", type=Path, default=None, help="also write the report here")
    args = parser.parse_args(argv)
    try:
        result = report(args.validation, args.rollouts, args.val_file)
    except LearningDataError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print("\n".join(result["sentences"]))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
