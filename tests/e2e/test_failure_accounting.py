"""Failures inside trajectories, through verl's own trainer (real verl v1 trainer, Ray, vLLM, sandbox), from the
smoke's SFT model and data: what the run does with them, not what a component does when called alone.

Both asynchronous trainer modes, where verl throws a failed trajectory's whole group away and refills it for as long
as it takes (the sync trainer's accounting is checked by the smoke and the resilience runs):

- two runs, one per mode, with two faults (tests/helpers/faults.py): the code tool crashes on every 20th call: each
  crash is counted (``failures/total/tool_exception``), its trajectory kept out of the loss, and the run goes on
  (below ``max_failed_share``, which these runs set to 0.1: one crash is already 3% of a 32-trajectory step); from
  step 3 on the reward raises on every third trajectory it scores: the groups it hits are evicted with their healthy
  siblings, which count as discarded, and the stop rule sees them while the trainer still waits for its batch;
- two runs, one per mode, whose reward raises on every trajectory: verl would evict and refill for ever; the run
  stops in step 1 with the cause, an example traceback and what to do.

The separate_async run is also `make test`'s check of the weight sync: the trainer and the rollout on separate
pools, the weights going to the rollout through the recipe's gloo checkpoint engine
(retool/platform/gloo_checkpoint_engine.py) after each step, and two mini-batch updates per step
(``parameter_sync_step=2``), which must make one failure record per step. The rollout runs no batch ahead here
(``num_warmup_batches=0``) and the trainer recomputes the old log-probs (``bypass_mode=false``), so verl compares the
rollout's log-probs of its own tokens with the trainer's: they agree only if the weights the trainer just updated
really reached vLLM (in float32, which these runs use on every host). A sync that moved nothing, moved the wrong
bytes or landed nowhere would leave the rollout on step 1's weights and the two apart at step 2.
What the async modes do beyond this (training on data a batch old, learning, resume, speed) is
`make bench-learning` and `make bench-async`, which run for minutes per mode.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import yaml

from retool.constants import REPO_ROOT
from retool.failures.limits import read_records
from retool_sandbox.spawn import running_sandbox
from retool.smoke.summary import read_scalars

pytestmark = [pytest.mark.slow, pytest.mark.verl]

HELPERS = REPO_ROOT / "tests" / "helpers"
STEPS_BEFORE_REWARD_FAULT = 2
TRAJECTORIES_PER_STEP = 32  # the smoke: 8 prompts x n=4
SAMPLES = 4
CRASH_EVERY = 20
KWARGS = "reward.custom_reward_function.reward_kwargs"
# the mode's own settings for these runs: no batch ahead, so a step's faults stay in that step
MODE_OVERRIDES = {
    "separate_async": [
        "trainer.v1.separate_async.num_warmup_batches=0",
        "algorithm.rollout_correction.bypass_mode=false",
        "trainer.v1.separate_async.parameter_sync_step=2",
        "actor_rollout_ref.actor.ppo_mini_batch_size=4",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=16",
    ],
    "colocate_async": ["trainer.v1.colocate_async.num_warmup_batches=0"],
}


def launch(smoke_run_dir: Path, root: Path, mode: str, overrides: list[str], crashing_tool: bool) -> dict:
    """The smoke's RL stage in ``mode`` with the faulty reward (and tool), as a user launches it; its outcome."""
    smoke = yaml.safe_load((smoke_run_dir / "rl.resolved.yaml").read_text())
    root.mkdir(parents=True, exist_ok=True)
    tool = yaml.safe_load((REPO_ROOT / "configs" / "tool_annotated.yaml").read_text())
    if crashing_tool:
        tool["tools"][0]["class_name"] = "faults.CrashingTool"
    (root / "tool.yaml").write_text(yaml.safe_dump(tool))
    ray_dir = tempfile.mkdtemp(prefix="rt-", dir="/tmp")  # short: Ray's socket paths must fit 107 characters
    env = {
        **os.environ,
        "DEVICE": "cpu",
        "PROFILE": "improved",
        "PYTHON": sys.executable,
        "RUN_DIR": str(root / "run"),
        "RETOOL_DATA_DIR": str(Path(smoke["data"]["train_files"]).parent),
        "RETOOL_SFT_MODEL": str(smoke_run_dir / "sft_merged"),
        "TRAINER_MODE": mode,
        # float32 on every host: in bf16 the rollout and the trainer disagree by ~6e-2 on the same weights
        # (measured at step 1), as much as a missed weight sync would show
        "RETOOL_CPU_DTYPE": "float32",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(HELPERS), os.environ.get("PYTHONPATH")])),
    }
    env.pop("DRY_RUN", None)
    overrides = [
        "+smoke=rl",
        "trainer.val_before_train=false",
        "trainer.test_freq=-1",
        f"actor_rollout_ref.rollout.multi_turn.tool_config_path={root / 'tool.yaml'}",
        f"reward.custom_reward_function.path={HELPERS / 'faults.py'}",
        *MODE_OVERRIDES[mode],
        f"+ray_kwargs.ray_init._temp_dir={ray_dir}",
        *overrides,
    ]
    started = time.monotonic()
    with running_sandbox() as url:
        env["RETOOL_SANDBOX_URL"] = url
        proc = subprocess.run(
            [str(REPO_ROOT / "scripts" / "launch.sh"), "rl", *overrides],
            cwd=REPO_ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=1500,
        )
    run_dir = root / "run"
    scalars = read_scalars(run_dir / "tensorboard" / "rl")  # {} when a run stopped before its first step
    (root / "launch.out").write_text(proc.stdout + "\n--- stderr ---\n" + proc.stderr)
    return {
        "proc": proc,
        "output": proc.stdout + proc.stderr,
        "run_dir": run_dir,
        "mode": mode,
        "seconds": time.monotonic() - started,
        "records": read_records(run_dir / "logs" / "failures.jsonl"),
        "scalars": scalars,
        "by_step": {tag: dict(points) for tag, points in scalars.items()},
        "config": yaml.safe_load((run_dir / "rl.resolved.yaml").read_text()),
        "model_bytes": sum(p.stat().st_size for p in (smoke_run_dir / "sft_merged").glob("*.safetensors")),
    }


def runs_root(tmp_path_factory, name: str) -> Path:
    if os.environ.get("E2E_FAULTS_DIR"):
        return Path(os.environ["E2E_FAULTS_DIR"]) / name
    return tmp_path_factory.mktemp(name)


def faulty(smoke_run_dir, tmp_path_factory, mode: str) -> dict:
    """Tool crashes from the start, the reward raising on every third trajectory from step 3 on."""
    return launch(
        smoke_run_dir,
        runs_root(tmp_path_factory, f"faults-{mode}"),
        mode,
        [
            "trainer.total_training_steps=4",
            "trainer.v1.sampler.sampler_kwargs.max_failed_share=0.1",
            f"+{KWARGS}.raise_after={STEPS_BEFORE_REWARD_FAULT * TRAJECTORIES_PER_STEP}",
            f"+{KWARGS}.one_in=3",
            f"+{KWARGS}.per_call=true",
        ],
        crashing_tool=True,
    )


@pytest.fixture(scope="module")
def separate_run(smoke_run_dir, tmp_path_factory) -> dict:
    return faulty(smoke_run_dir, tmp_path_factory, "separate_async")


@pytest.fixture(scope="module")
def colocate_run(smoke_run_dir, tmp_path_factory) -> dict:
    return faulty(smoke_run_dir, tmp_path_factory, "colocate_async")


# make test runs the separate_async runs (its weight-sync check too); make test-faults adds the rest (async_faults)
@pytest.fixture(params=["separate_run", pytest.param("colocate_run", marks=pytest.mark.async_faults)])
def faulty_run(request) -> dict:
    return request.getfixturevalue(request.param)


@pytest.fixture(
    scope="module",
    params=[pytest.param(mode, marks=pytest.mark.async_faults) for mode in ("separate_async", "colocate_async")],
)
def failing_run(request, smoke_run_dir, tmp_path_factory) -> dict:
    """The reward raising on every trajectory: no batch can ever fill."""
    mode = request.param
    return launch(
        smoke_run_dir,
        runs_root(tmp_path_factory, f"all-fail-{mode}"),
        mode,
        ["trainer.total_training_steps=3", f"+{KWARGS}.one_in=1"],
        crashing_tool=False,
    )


def train_records(run: dict) -> dict[int, dict]:
    return {r["step"]: r for r in run["records"] if not r.get("stop") and r["partition"] == "train"}


def test_tool_crashes_are_counted_and_the_run_goes_on(faulty_run):
    records, scalars = train_records(faulty_run), faulty_run["scalars"]
    steps = range(1, STEPS_BEFORE_REWARD_FAULT + 1)
    assert set(steps) <= set(records), faulty_run["output"][-3000:]
    assert all(step in dict(scalars["critic/rewards/mean"]) for step in steps)  # trained on, not stopped
    # every call went through one tool process (one agent-loop worker): a crash per 20 calls, each in its own
    # trajectory (at most 2 calls per trajectory here), each such trajectory masked and counted as tool_exception
    calls = dict(scalars["train-reward/tool_calls/mean"])
    masked = dict(scalars["train-reward/trajectory_masked/mean"])
    counted = dict(scalars["failures/total/tool_exception"])
    total_calls = round(sum(calls[s] for s in steps) * TRAJECTORIES_PER_STEP)
    assert total_calls >= CRASH_EVERY, calls
    assert (
        sum(counted[s] for s in steps)
        == sum(records[s]["counts"]["tool_exception"] for s in steps)
        == total_calls // CRASH_EVERY
    )
    for step in steps:
        assert round(masked[step] * TRAJECTORIES_PER_STEP) == counted[step] == records[step]["counts"]["tool_exception"]
        assert dict(scalars["failures/share"])[step] == pytest.approx(counted[step] / TRAJECTORIES_PER_STEP)
    first = next(records[s]["tracebacks"]["tool_exception"] for s in steps if records[s]["counts"]["tool_exception"])
    assert "RuntimeError: injected tool crash on call" in first and "Traceback" in first
    assert "failures: first tool_exception of step" in (faulty_run["run_dir"] / "logs" / "rl.log").read_text()


def test_a_reward_that_raises_on_a_third_stops_the_run_while_it_waits_with_the_groups_counted(faulty_run):
    proc, output = faulty_run["proc"], faulty_run["output"]
    stop_step = STEPS_BEFORE_REWARD_FAULT + 1
    assert proc.returncode != 0, output[-3000:]
    (stop,) = [r for r in faulty_run["records"] if r.get("stop")]
    assert stop["step"] == stop_step and stop["reason"] == "share" and stop["partition"] == "train"
    record = train_records(faulty_run)[stop_step]
    # verl evicted the groups the fault hit; their healthy siblings count as discarded, and each evicted group's
    # samples are all counted: lost (the reward raised) or discarded (thrown away with it), or masked by a tool crash
    # (lost may also hold samples of groups still running when the run stopped)
    groups, lost, discarded = record["groups_failed"], record["counts"]["reward_error"], record["discarded"]
    assert groups >= 1 and lost >= 1 and discarded >= 1, record
    assert lost + discarded >= SAMPLES * groups - record["counts"]["tool_exception"], record
    assert record["share"] > 0.1
    message = stop["message"]
    assert message.startswith(f"The run was stopped at step {stop_step} (training): while waiting for its batch")
    assert "healthy trajectories discarded with their failed group" in message
    assert (
        "ValueError: injected reward failure on row" in message
        and "What to do: the reward function raised" in message
        and "trainer.v1.sampler.sampler_kwargs.max_failed_share" in message
    )
    # the user sees it where they look: the launch's own output and the stage log
    assert f"retool: the run was stopped at step {stop_step}" in output
    assert f"retool: the run was stopped at step {stop_step}" in (faulty_run["run_dir"] / "logs" / "rl.log").read_text()
    # it stopped before training on the step: no training point at that step
    assert stop_step not in dict(faulty_run["scalars"]["critic/rewards/mean"])


def test_one_judged_record_per_training_step(faulty_run):
    steps = [r["step"] for r in faulty_run["records"] if not r.get("stop") and r["partition"] == "train"]
    assert steps == [1, 2, 3], faulty_run["records"]  # separate_async: 2 batches per step, one record
    for record in train_records(faulty_run).values():
        if record["step"] <= STEPS_BEFORE_REWARD_FAULT:
            assert record["expected"] == TRAJECTORIES_PER_STEP, record  # both halves of the step in one record
    # the recipe's group count and verl's own eviction count are on TensorBoard side by side
    assert set(faulty_run["by_step"]["failures/total/groups_failed"]) >= {1, 2}


@pytest.mark.async_faults
def test_the_colocate_async_run_trained_end_to_end(colocate_run):
    config = colocate_run["config"]
    assert config["trainer"]["v1"]["trainer_mode"] == "colocate_async"
    assert config["actor_rollout_ref"]["hybrid_engine"] is True
    trained = dict(colocate_run["scalars"]["critic/rewards/mean"])
    assert sorted(trained) == list(range(1, STEPS_BEFORE_REWARD_FAULT + 1))
    assert all(colocate_run["by_step"]["timing_s/update_actor"][step] > 0 for step in trained)
    assert (colocate_run["run_dir"] / "rollouts" / f"{STEPS_BEFORE_REWARD_FAULT}.jsonl").is_file()


def test_a_reward_that_raises_on_every_trajectory_stops_the_run_in_its_first_step(failing_run):
    proc, output = failing_run["proc"], failing_run["output"]
    assert proc.returncode != 0, output[-3000:]
    (stop,) = [r for r in failing_run["records"] if r.get("stop")]
    assert stop["step"] == 1 and stop["reason"] == "share", stop
    # the 0.05 limit: a step of 8 groups is past it with its first evicted group (4 of 36 trajectories)
    record = train_records(failing_run)[1]
    assert record["groups_failed"] >= 1 and record["counts"]["reward_error"] >= SAMPLES, record
    assert "ValueError: injected reward failure on row" in stop["message"]
    assert "What to do: the reward function raised" in stop["message"]
    assert "retool: the run was stopped at step 1" in output
    assert "critic/rewards/mean" not in failing_run["scalars"]  # nothing was trained
    print(f"{failing_run['mode']}: stopped {failing_run['seconds']:.0f} s after the launch")


# -- the same run as make test's asynchronous one -------------------------------------------------------------------


def test_the_run_was_separate_async_on_two_pools_with_gloo(separate_run):
    config = separate_run["config"]
    assert config["trainer"]["v1"]["trainer_mode"] == "separate_async"
    assert config["actor_rollout_ref"]["hybrid_engine"] is False
    assert config["actor_rollout_ref"]["rollout"]["checkpoint_engine"]["backend"] == "gloo"
    assert config["actor_rollout_ref"]["rollout"]["nnodes"] == 1


def test_every_trained_step_sent_the_whole_model_over_gloo(separate_run):
    sent = separate_run["by_step"]["weight_sync/bytes"]
    assert sorted(sent) == list(range(1, STEPS_BEFORE_REWARD_FAULT + 1))
    # the actor's parameters in the dtype it trains in: at least the checkpoint's size (bf16 or fp32 on disk)
    assert all(value >= 0.9 * separate_run["model_bytes"] for value in sent.values()), (
        sent,
        separate_run["model_bytes"],
    )
    assert all(separate_run["by_step"]["timing_s/update_weights"][step] > 0 for step in sent)


def test_after_an_update_the_rollout_samples_from_the_trainer_s_weights(separate_run):
    diff = separate_run["by_step"]["training/rollout_probs_diff_max"]
    # step 2 was generated after the first update; a sync that missed would leave a gap of ~1e-1
    assert diff[2] < 1e-3, diff
    staleness = separate_run["by_step"]["training/off_policy/trajectory_staleness/max"]
    assert all(value == 0 for value in staleness.values()), staleness  # on the latest weights, as configured


def test_the_rollouts_called_the_real_tool_and_were_scored(separate_run):
    dump = separate_run["run_dir"] / "rollouts" / f"{STEPS_BEFORE_REWARD_FAULT}.jsonl"
    dumps = [json.loads(line) for line in dump.read_text().splitlines()]
    assert len(dumps) == TRAJECTORIES_PER_STEP
    # calls the sandbox ran (the reward's per-trajectory counts), and the correctness reward's two values
    assert sum(d["tool_ok"] for d in dumps) > 0, [d.get("tool_calls") for d in dumps]
    assert {d["score"] for d in dumps} <= {-1.0, 1.0}
