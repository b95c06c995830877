"""The failure accounting's rules without a run: causes and configuration errors, the step record, the stop rules,
and the launch-time checks on configs. What the trainer does with them: tests/e2e/test_failure_accounting.py."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from retool.constants import REPO_ROOT
from retool.failures import causes
from retool.failures.limits import (
    FailureSettingError,
    Judge,
    Limits,
    StepFailures,
    append_record,
    configuration_stop,
    read_records,
    totals,
    totals_sentence,
)
from retool.failures.preflight import main as preflight_main
from retool.failures.preflight import problems_of
from retool.reward import MissingNumTurns, compute_score


# ---------------------------------------------------------------------------------------------- causes
def test_the_reward_s_data_and_setting_errors_are_configuration_errors():
    for call in (
        lambda: compute_score("s", "\\boxed{1}", "1", {}),  # no num_turns
        lambda: compute_score("s", "\\boxed{1}", "", {"num_turns": 2}),
        lambda: compute_score("s", "\\boxed{1}", None, {"num_turns": 2}),
        lambda: compute_score("s", "\\boxed{1}", "1", {"num_turns": 2}, answer_match="fuzzy"),
    ):
        with pytest.raises(causes.ConfigurationError) as caught:
            call()
        assert causes.configuration_error(caught.value) is caught.value
    # still the built-in types callers catch
    assert issubclass(MissingNumTurns, ValueError) and issubclass(causes.BadGroundTruth, TypeError)


def test_a_configuration_error_is_found_through_wrapping_exceptions():
    class TaskError(Exception):  # the shape of ray.exceptions.RayTaskError: the original in `cause`
        def __init__(self, cause):
            super().__init__("task failed")
            self.cause = cause

    inner = MissingNumTurns("no num_turns")
    try:
        try:
            raise inner
        except MissingNumTurns as exc:
            raise RuntimeError("while scoring") from exc
    except RuntimeError as outer:
        assert causes.configuration_error(TaskError(outer)) is inner
        assert causes.describe(TaskError(outer)) == "MissingNumTurns: no num_turns"
    assert causes.configuration_error(KeyError("ground_truth")) is not None  # verl's manager indexing a bare row
    assert causes.configuration_error(ValueError("one bad sample")) is None
    assert causes.configuration_error(KeyError("something else")) is None


def test_every_cause_has_advice():
    assert set(causes.ADVICE) == set(causes.CAUSES) == set(causes.LOST_CAUSES) | set(causes.MASKED_CAUSES)


# ---------------------------------------------------------------------------------------------- the step record
def test_a_step_counts_lost_and_masked_trajectories_against_what_it_expected():
    step = StepFailures(
        step=3,
        partition="train",
        delivered=30,
        lost={"reward_error": 2},
        masked={"sandbox_unavailable": 1},
        first={"reward_error": {"traceback": "Traceback: x"}},
    )
    assert step.expected == 32 and step.failed == 3 and step.share == pytest.approx(3 / 32)
    metrics = step.metrics("failures")
    assert metrics["failures/total/reward_error"] == 2 and metrics["failures/total/sandbox_unavailable"] == 1
    assert metrics["failures/total/tool_exception"] == 0 and metrics["failures/total/all"] == 3
    assert metrics["failures/share"] == pytest.approx(3 / 32)
    assert step.summary() == (
        "step 3 (train): 3 of 32 trajectories failed (9.4%): reward_error 2, sandbox_unavailable 1"
    )
    record = step.record()
    assert record["counts"]["reward_error"] == 2 and record["tracebacks"] == {"reward_error": "Traceback: x"}
    assert StepFailures(1, "train", 0).share == 0.0


def test_an_async_step_counts_the_siblings_thrown_away_with_a_failed_group():
    # 8 groups of 4 delivered; one group evicted: 1 sample raised in the reward, its 3 healthy siblings discarded
    step = StepFailures(step=2, partition="train", delivered=32, lost={"reward_error": 1}, discarded=3, groups_failed=1)
    assert step.failed == 4 and step.expected == 36 and step.share == pytest.approx(4 / 36)
    metrics = step.metrics("failures")
    assert metrics["failures/total/discarded"] == 3 and metrics["failures/total/groups_failed"] == 1
    assert metrics["failures/total/all"] == 4
    assert "3 healthy discarded with their group" in step.summary()
    record = step.record()
    assert record["discarded"] == 3 and record["groups_failed"] == 1 and "ledger_restarted" not in record
    assert totals([record])["train"]["failed"] == 4 and totals([record])["train"]["by_cause"]["discarded"] == 3


def test_failures_the_ledger_lost_are_still_in_the_record():
    step = StepFailures(step=5, partition="train", delivered=32, unrecorded=2, ledger_restarted=True)
    assert step.failed == 2 and step.expected == 34
    record = step.record()
    assert record["unrecorded"] == 2 and record["ledger_restarted"] is True
    assert "2 not recorded (cause unknown)" in step.summary()


# ---------------------------------------------------------------------------------------------- the rules
def test_limits_are_validated_with_the_key_named():
    assert Limits.from_settings({}) == Limits(0.05, 10, 0.02)
    assert Limits.from_settings({"max_failed_share": 0, "failure_log": "x"}).max_failed_share == 0
    for bad in (
        {"max_failed_share": 1.5},
        {"max_sustained_share": -0.1},
        {"max_failed_share": "5%"},
        {"sustained_steps": 0},
        {"sustained_steps": 2.5},
        {"sustained_steps": True},
    ):
        with pytest.raises(FailureSettingError, match="trainer.v1.sampler.sampler_kwargs." + next(iter(bad))):
            Limits.from_settings(bad)


def failing(step: int, failed: int, expected: int = 100, cause: str = "reward_error", partition: str = "train"):
    return StepFailures(
        step,
        partition,
        expected - failed,
        lost={cause: failed},
        first={
            cause: {
                "uid": "u1",
                "session": 0,
                "step": step,
                "where": "10.0.0.2 pid 7",
                "detail": "ValueError: boom",
                "traceback": "Traceback ...\nValueError: boom",
            }
        },
    )


def test_one_step_above_the_share_stops_with_cause_example_and_advice():
    judge = Judge(Limits())
    assert judge.verdict(failing(1, 5)) is None  # 5% is not more than 5%
    message = judge.verdict(failing(2, 6))
    assert message.startswith(
        "The run was stopped at step 2 (training): 6 of 100 trajectories failed (6.0%), more "
        "than max_failed_share 0.05. By cause: reward_error 6."
    )
    assert "on 10.0.0.2 pid 7): ValueError: boom\nTraceback ...\nValueError: boom" in message
    assert causes.ADVICE["reward_error"] in message
    assert "trainer.v1.sampler.sampler_kwargs.max_failed_share (0 turns the rule off)" in message
    assert Judge(Limits(0, 10, 0)).verdict(failing(1, 90)) is None  # both rules off


def test_a_validation_batch_is_held_to_the_share_but_not_to_the_window():
    judge = Judge(Limits(0.05, 2, 0.01))
    assert "(validation)" in judge.verdict(failing(0, 50, partition="val", cause="sandbox_unavailable"))
    assert judge.verdict(failing(0, 2, partition="val")) is None and not judge.recent


def test_chronic_failures_stop_once_the_window_is_full():
    judge = Judge(Limits(max_failed_share=0.05, sustained_steps=3, max_sustained_share=0.02))
    assert [judge.verdict(failing(step, 3)) for step in (1, 2)] == [None, None]  # 3% each, window not full
    message = judge.verdict(failing(3, 3))
    assert "9 of 300 trajectories of the last 3 steps failed (3.0%), more than max_sustained_share 0.02" in message
    healthy = Judge(Limits(sustained_steps=3))
    assert all(healthy.verdict(failing(step, 1)) is None for step in range(1, 10))  # 1% stays under 2%


def test_an_async_step_that_cannot_fill_stops_while_it_waits():
    judge = Judge(Limits(max_failed_share=0.05))
    waiting = failing(4, 0, expected=0)
    waiting.lost, waiting.groups_failed = {"reward_error": 4}, 0
    assert judge.waiting_verdict(waiting, prompts=64) is None  # nothing evicted yet
    waiting.groups_failed = 3  # 3 / (64 + 3) = 4.5%: the step may still end under 5%
    assert judge.waiting_verdict(waiting, prompts=64) is None
    waiting.groups_failed = 4  # 4 / 68 = 5.9%: over the limit whatever the rest brings
    message = judge.waiting_verdict(waiting, prompts=64)
    assert message.startswith(
        "The run was stopped at step 4 (training): while waiting for its batch of 64 groups, "
        "4 groups with a failed trajectory were thrown away"
    )
    assert causes.ADVICE["reward_error"] in message and "max_failed_share (0 turns the rule off)" in message
    assert not judge.recent  # a step that has not ended is not in the sustained window


def test_with_the_share_rule_off_a_step_that_throws_away_ten_batches_still_stops():
    judge = Judge(Limits(max_failed_share=0, max_sustained_share=0))
    waiting = failing(1, 0, expected=0)
    waiting.groups_failed = 10 * 8 - 1
    assert judge.waiting_verdict(waiting, prompts=8) is None
    waiting.groups_failed += 1
    message = judge.waiting_verdict(waiting, prompts=8)
    assert "80 groups with a failed trajectory (10 batches' worth) were thrown away" in message
    assert "This stop has no setting" in message


def test_the_configuration_stop_names_the_error_and_the_fix():
    event = {
        "cause": "reward_error",
        "uid": "u",
        "session": 1,
        "step": 0,
        "where": "node-a pid 3",
        "detail": "MissingNumTurns: extra_info has no 'num_turns'",
        "traceback": "Traceback\nMissingNumTurns",
    }
    message = configuration_stop(event, 0)
    assert message.startswith("The run was stopped at step 0: a configuration error")
    assert "MissingNumTurns: extra_info has no 'num_turns'" in message and "What to do: fix" in message


def test_the_failure_log_is_appended_and_read_back(tmp_path):
    path = tmp_path / "logs" / "failures.jsonl"
    append_record(path, failing(1, 2).record())
    append_record(path, {"stop": True, "step": 1, "message": "m"})
    with path.open("a") as out:
        out.write('{"torn')  # a crash mid-write
    records = read_records(path)
    assert [r.get("stop", False) for r in records] == [False, True] and records[0]["counts"]["reward_error"] == 2
    assert read_records(tmp_path / "none.jsonl") == []
    append_record(None, {"ignored": True})


# ---------------------------------------------------------------------------------------------- launch checks
def recipe_config(tmp_path: Path, **changes) -> dict:
    """The parts of a resolved RL config the launch check reads, as configs/rl.yaml sets them."""
    rows = pa.table({"reward_model": [{"style": "rule", "ground_truth": "3"}, {"style": "rule", "ground_truth": "7"}]})
    pq.write_table(rows, tmp_path / "train.parquet")
    config = {
        "trainer": {
            "use_v1": True,
            "v1": {
                "sampler": {
                    "custom_sampler": {"path": "pkg://retool.failures.sampler", "name": "FailureAccountingSampler"},
                    "sampler_kwargs": {"max_failed_share": 0.05},
                    "sync_refill_failed_groups": False,
                }
            },
        },
        "reward": {"reward_manager": {"source": "register", "name": "naive"}},
        "algorithm": {"filter_groups": {"enable": False}},
        "actor_rollout_ref": {
            "rollout": {
                "agent": {"agent_loop_manager_class": "retool.failures.worker.AccountingAgentLoopManager"},
                "multi_turn": {"tool_config_path": str(REPO_ROOT / "configs" / "tool.yaml")},
            }
        },
        "data": {"train_files": str(tmp_path / "train.parquet"), "val_files": [str(tmp_path / "train.parquet")]},
    }
    for dotted, value in changes.items():
        node = config
        *parents, last = dotted.split("__")
        for part in parents:
            node = node.setdefault(part, {})
        node[last] = value
    return config


def test_the_recipe_s_config_passes(tmp_path):
    assert problems_of(recipe_config(tmp_path)) == []


@pytest.mark.parametrize("name", ["dapo", "gdpo", "rate_limited"])
def test_a_reward_manager_that_drops_num_turns_is_refused_with_the_fix(tmp_path, name):
    (check,) = problems_of(recipe_config(tmp_path, reward__reward_manager__name=name))
    (problem,) = check.details
    assert check.name == "reward manager" and check.status == "FAIL"
    assert problem.startswith(f"reward.reward_manager.name={name}: verl's {name} reward manager does not pass")
    assert "Fix: set reward.reward_manager.name=naive" in problem


def test_missing_accounting_and_unwired_options_are_refused(tmp_path):
    config = recipe_config(tmp_path, trainer__use_v1=False, algorithm__filter_groups__enable=True)
    config["trainer"]["v1"]["sampler"]["custom_sampler"] = {"path": None, "name": None}
    config["trainer"]["v1"]["sampler"]["sync_refill_failed_groups"] = True
    config["trainer"]["v1"]["sampler"]["sampler_kwargs"] = {"sustained_steps": 0}
    config["actor_rollout_ref"]["rollout"]["agent"]["agent_loop_manager_class"] = None
    (check,) = problems_of(config)
    assert check.name == "failure accounting" and len(check.details) == 6
    found = "\n".join(check.details)
    for key in (
        "trainer.use_v1=false",
        "custom_sampler",
        "agent_loop_manager_class",
        "filter_groups",
        "sync_refill_failed_groups",
        "sampler_kwargs.sustained_steps",
    ):
        assert key in found


def test_a_tool_config_without_code_interpreter_is_refused(tmp_path):
    other = tmp_path / "tools.yaml"
    other.write_text(
        "tools:\n  - class_name: some.Tool\n    config: {}\n    tool_schema:\n"
        "      type: function\n      function: {name: search, description: x, parameters: {}}\n"
    )
    config = recipe_config(tmp_path, actor_rollout_ref__rollout__multi_turn__tool_config_path=str(other))
    (check,) = problems_of(config)
    (problem,) = check.details
    assert "code_interpreter" in problem and "Unknown function" in problem


def test_rows_without_a_ground_truth_are_named(tmp_path):
    config = recipe_config(tmp_path)
    rows = pa.table(
        {
            "reward_model": [
                {"style": "rule", "ground_truth": "3"},
                {"style": "rule", "ground_truth": " "},
                {"style": "rule", "ground_truth": None},
            ]
        }
    )
    pq.write_table(rows, tmp_path / "val.parquet")
    config["data"]["val_files"] = [str(tmp_path / "val.parquet")]
    (check,) = problems_of(config)
    (problem,) = check.details
    assert problem.startswith(
        f"data.val_files: {tmp_path / 'val.parquet'} row 1 (and 1 more) has no reward_model.ground_truth"
    )


def test_the_command_exits_1_with_each_problem(tmp_path, capsys):
    path = tmp_path / "rl.resolved.yaml"
    path.write_text(json.dumps(recipe_config(tmp_path, reward__reward_manager__name="dapo")))
    assert preflight_main([str(path)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("[FAIL] reward manager: reward.reward_manager.name=dapo: ")
    assert err.endswith(
        "error: the config fails the preflight before verl starts: fix what the [FAIL] lines say, then launch again\n"
    )
    path.write_text(json.dumps(recipe_config(tmp_path)))
    assert preflight_main([str(path)]) == 0


def test_a_run_s_failures_are_summed_for_its_summary():
    records = [
        StepFailures(0, "val", 64).record(),
        failing(1, 2).record(),
        failing(2, 0).record(),
        {"stop": True, "step": 2, "partition": "train", "reason": "share", "message": "m"},
    ]
    summed = totals(records)
    assert summed["train"] == {
        "steps": 2,
        "expected": 200,
        "failed": 2,
        "by_cause": {"reward_error": 2, "tool_exception": 0, "agent_loop_error": 0, "sandbox_unavailable": 0},
    }
    assert summed["val"]["expected"] == 64 and summed["stop"]["step"] == 2
    assert totals_sentence(summed) == (
        "Failures: training 2 of 200 trajectories failed (reward_error 2), 2 batches "
        "counted; validation 0 of 64 trajectories failed, 1 batch counted; the run "
        "was stopped at step 2 (share)"
    )
    assert totals_sentence(totals([])) == "Failures: not counted (no logs/failures.jsonl)"
