"""Before verl starts: refuse an RL config whose failures would otherwise show only inside the run.

    python -m retool.failures.preflight RUN_DIR/rl.resolved.yaml     # exit 0: fine; 1: each problem and its fix

scripts/launch.sh runs it on every RL launch (and resume), after the config is resolved. It checks:
- the reward manager forwards the agent loop's ``num_turns`` to the reward (verl's ``naive`` and ``remote`` do;
  ``dapo``, ``gdpo`` and ``rate_limited`` drop it, so every trajectory would raise MissingNumTurns); a custom one
  (``source: importlib``) is built as verl builds it and tried on one synthetic trajectory
  (retool.failures.reward_probe);
- the failure accounting is in place: verl's v1 trainer, the recipe's sampler and agent-loop manager
  (retool.failures.sampler / .worker), valid limits, and none of the verl options a custom sampler leaves unwired
  (``algorithm.filter_groups``, ``trainer.v1.sampler.sync_refill_failed_groups``);
- the tool config provides the tool the model is trained to call (``code_interpreter``);
- every row of the training and validation files has a ground truth (``reward_model.ground_truth``).
What cannot be known before the run (a reward that raises on some rows) is caught by the failure accounting at its
first occurrence.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path
from typing import Any

import yaml

from retool.checklist import FAIL, Check, exit_status, render
from retool.doctor.config import dig
from retool.failures.limits import FailureSettingError, Limits
from retool.tool_yaml import OWN_TOOL_CLASS, ToolConfigError, load_tool_schema

SAMPLER = ("pkg://retool.failures.sampler", "FailureAccountingSampler")
MANAGER = "retool.failures.worker.AccountingAgentLoopManager"
# verl 0.9.1's registered reward managers, by whether they put num_turns into the reward's extra_info
PASS_NUM_TURNS = ("naive", "remote")
DROP_NUM_TURNS = ("dapo", "gdpo", "rate_limited")


def reward_manager_problems(config: dict[str, Any]) -> list[str]:
    manager = dig(config, "reward.reward_manager", {}) or {}
    source, name = manager.get("source", "register"), manager.get("name")
    fix = "set reward.reward_manager.name=naive (the recipe's default in configs/rl.yaml)"
    if source == "importlib":
        from retool.failures.reward_probe import custom_manager_problems  # imports verl: only for such configs

        return custom_manager_problems(config)
    if source != "register":
        return [
            f"reward.reward_manager.source={source!r}: verl 0.9.1 knows 'register' and 'importlib'. Fix: "
            "remove the override (the recipe's naive manager is registered)"
        ]
    if name in DROP_NUM_TURNS:
        return [
            f"reward.reward_manager.name={name}: verl's {name} reward manager does not pass the agent loop's "
            "num_turns to the reward, so the tool shaping and the turn metrics cannot be computed and every "
            f"trajectory would fail (MissingNumTurns). Fix: {fix}"
        ]
    if name not in PASS_NUM_TURNS:
        return [
            f"reward.reward_manager.name={name!r} is not one of verl 0.9.1's reward managers that pass "
            f"num_turns ({', '.join(PASS_NUM_TURNS)}). Fix: {fix}"
        ]
    return []


def accounting_problems(config: dict[str, Any]) -> list[str]:
    problems = []
    where = "configs/rl.yaml sets it; do not override it"
    if dig(config, "trainer.use_v1", True) is not True:
        problems.append(
            "trainer.use_v1=false: the legacy trainer has no failure accounting (and verl deprecates "
            "it). Fix: remove the override"
        )
    sampler = dig(config, "trainer.v1.sampler.custom_sampler", {}) or {}
    if (sampler.get("path"), sampler.get("name")) != SAMPLER:
        problems.append(
            f"trainer.v1.sampler.custom_sampler is {sampler.get('path')}:{sampler.get('name')}, not the "
            f"recipe's {SAMPLER[0]}:{SAMPLER[1]}, so failed trajectories would not be counted or stop the "
            f"run; {where}"
        )
    if dig(config, "actor_rollout_ref.rollout.agent.agent_loop_manager_class") != MANAGER:
        problems.append(
            f"actor_rollout_ref.rollout.agent.agent_loop_manager_class must be {MANAGER} (its workers "
            f"record failed trajectories); {where}"
        )
    if dig(config, "algorithm.filter_groups.enable", False):
        problems.append(
            "algorithm.filter_groups.enable=true: verl does not wire its DAPO group filter into a custom "
            "sampler, and the recipe's failure accounting is one; the reference run does not filter. "
            "Fix: remove the override"
        )
    if dig(config, "trainer.v1.sampler.sync_refill_failed_groups", False):
        problems.append(
            "trainer.v1.sampler.sync_refill_failed_groups=true is not wired into a custom sampler (the "
            "recipe's failure accounting is one): failed groups stay padded and are counted. Fix: remove "
            "the override"
        )
    try:
        Limits.from_settings(dig(config, "trainer.v1.sampler.sampler_kwargs", {}) or {})
    except FailureSettingError as exc:
        problems.append(str(exc))
    return problems


def tool_problems(config: dict[str, Any]) -> list[str]:
    path = dig(config, "actor_rollout_ref.rollout.multi_turn.tool_config_path")
    if not path:
        return [
            "actor_rollout_ref.rollout.multi_turn.tool_config_path is not set: the model could not call "
            "code_interpreter. Fix: configs/tool.yaml (the reference) or configs/tool_annotated.yaml"
        ]
    try:
        load_tool_schema(path)
        return []
    except ToolConfigError as exc:
        if _lists_a_subclass_of_the_recipe_tool(Path(path)):  # a control or test tool of the recipe
            return []
        return [
            f"{exc}. The model is trained to call code_interpreter: every call would be answered 'Unknown "
            "function'. Fix: tool_config_path=configs/tool.yaml (the reference) or configs/tool_annotated.yaml"
        ]


def _lists_a_subclass_of_the_recipe_tool(path: Path) -> bool:
    try:
        entries = (yaml.safe_load(path.read_text()) or {}).get("tools") or []
    except (OSError, yaml.YAMLError, AttributeError):
        return False
    names = [e.get("class_name", "") for e in entries if isinstance(e, dict) and e.get("tool_schema") is None]
    if not any(n and n != OWN_TOOL_CLASS for n in names):
        return False
    own_module, own_name = OWN_TOOL_CLASS.rsplit(".", 1)
    own = getattr(importlib.import_module(own_module), own_name)  # imports verl: only for such configs
    for name in names:
        module, _, attribute = name.rpartition(".")
        try:
            cls = getattr(importlib.import_module(module), attribute)
        except (ImportError, AttributeError, ValueError):
            continue
        if isinstance(cls, type) and issubclass(cls, own):
            return True
    return False


def ground_truth_problems(config: dict[str, Any]) -> list[str]:
    problems = []
    for key in ("data.train_files", "data.val_files"):
        value = dig(config, key)
        for name in [] if value is None else value if isinstance(value, list) else [value]:
            problem = _first_row_without_ground_truth(Path(name))
            if problem:
                problems.append(
                    f"{key}: {problem}. Fix: prepare the data again (retool-data prepare) or repair "
                    "reward_model.ground_truth of that row"
                )
    return problems


def _first_row_without_ground_truth(path: Path) -> str | None:
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    if not path.is_file():
        return None  # the launchers' own path checks name missing files
    schema = pq.read_schema(path)
    if "reward_model" not in schema.names:
        return f"{path} has no reward_model column"
    column = pq.read_table(path, columns=["reward_model"]).column("reward_model")
    if "ground_truth" not in [field.name for field in column.type]:
        return f"{path}: reward_model has no ground_truth field"
    text = pc.utf8_trim_whitespace(pc.cast(pc.struct_field(column, "ground_truth"), "string"))
    missing = pc.fill_null(pc.equal(text, ""), True)  # null ground truth: missing too
    rows = pc.indices_nonzero(missing)
    if len(rows) == 0:
        return None
    return f"{path} row {rows[0].as_py()} (and {len(rows) - 1} more) has no reward_model.ground_truth"


AREAS = {
    "reward manager": reward_manager_problems,
    "failure accounting": accounting_problems,
    "tool": tool_problems,
    "ground truth": ground_truth_problems,
}


def problems_of(config: dict[str, Any]) -> list[Check]:
    """A FAIL line for each area with problems, a detail line per problem; none when the config is fine (an RL launch
    then prints nothing)."""
    return [Check(FAIL, area, *problems) for area, find in AREAS.items() if (problems := find(config))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m retool.failures.preflight", description=__doc__.split("\n\n")[0])
    parser.add_argument("config", type=Path, help="a resolved RL config (RUN_DIR/rl.resolved.yaml)")
    args = parser.parse_args(argv)
    config = yaml.safe_load(args.config.read_text())
    checks = problems_of(config)
    if checks:
        print(
            render(checks) + "\nerror: the config fails the preflight before verl starts: fix what the [FAIL] "
            "lines say, then launch again",
            file=sys.stderr,
        )
    return exit_status(checks)


if __name__ == "__main__":
    sys.exit(main())
