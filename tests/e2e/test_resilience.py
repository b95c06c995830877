"""A long run survives what days of training bring, on the CPU stack with the smoke's SFT model and data:

1. SIGKILL after step 3 of 6 (checkpoints every 2 steps, the last 2 kept), then the documented resume (the same
   launch with the same RUN_DIR): it restarts at step 3 from the step-2 checkpoint, its steps draw exactly the
   prompts the uninterrupted smoke run drew at those steps (verl's rollout dumps), it finishes, TensorBoard holds
   every step once, and the crashed launch's checkpoint is removed as the resume saves its own.
   The resume is launched with another sandbox (B, another port) and another TensorBoard folder, as after a move
   to other hosts: its workers call B (B's request counter) and never the crashed run's URL, where a fresh sandbox
   A' (started once the crashed run is gone, so calls that run left in flight cannot be counted late) counts any
   call; the resumed steps land in the new folder.
2. The sandbox stops while the resumed run rolls out step 4 and comes back about 10 s later: the run completes,
   the calls that got no answer are counted (train-reward/tool_unavailable) and their trajectories kept out of the
   loss (train-reward/trajectory_masked), and nothing hangs. The recipe's failure accounting counts each of them
   as ``sandbox_unavailable`` (TensorBoard ``failures/total/sandbox_unavailable``, logs/failures.jsonl) and, with
   its per-step limit raised for this test, lets the run go on.
3. The tool runs in session_mode per_trajectory through verl's own ToolAgentLoop (the recipe's subclass): the
   sandbox sees sessions and cells, and every session is closed when its trajectory ends.
4. Both launches run as the CANN 样例 runs its scripts: from verl/recipe/retool of a verl checkout, next to verl's own
   retool.py, reward.py, tool.py, with verl/ at its root (tests/helpers/verl_tree.py: stand-ins that record any
   import and raise). No process of the run, its Ray workers included, imports them; the tool config is given
   relative to that folder, and read from it by the workers.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import pytest
import yaml

from bench_modules import load_bench
from processes import environ, processes_with

from retool.constants import REPO_ROOT
from retool.failures.limits import read_records
from retool.resume import kept_checkpoints
from retool_sandbox.client import SandboxClient
from retool_sandbox.spawn import running_sandbox
from ports import free_port
from resume_checks import scalar_points, scalar_values
from verl_tree import imported, verl_tree

pytestmark = [pytest.mark.slow, pytest.mark.verl]

STEPS, SAVE_EVERY, KILL_AFTER = 6, 2, 3
KEEP = 2  # checkpoints: the crashed launch saves step 2, the resume 4 and 6


def prompts(dump: Path) -> Counter:
    """The user messages a step drew (the rendered input also holds the tool schema, which session mode words
    differently)."""
    return Counter(
        json.loads(line)["input"].rsplit("user\n", 1)[-1] for line in dump.read_text().splitlines() if line.strip()
    )


@pytest.fixture(scope="module")
def setting(smoke_run_dir, tmp_path_factory) -> dict:
    """The launch both halves use: the smoke's RL stage, 6 steps, saves every 2, a per_trajectory tool."""
    smoke = yaml.safe_load((smoke_run_dir / "rl.resolved.yaml").read_text())
    assets_data = Path(smoke["data"]["train_files"]).parent
    # E2E_RESILIENCE_DIR keeps the run folder for inspection
    root = (
        Path(os.environ["E2E_RESILIENCE_DIR"])
        if os.environ.get("E2E_RESILIENCE_DIR")
        else tmp_path_factory.mktemp("resilience")
    )
    root.mkdir(parents=True, exist_ok=True)
    tool = yaml.safe_load((REPO_ROOT / "configs" / "tool_annotated.yaml").read_text())
    tool["tools"][0]["config"].update(session_mode="per_trajectory", reconnect_budget_s=2, retry_backoff_s=0.5)
    launch_dir = verl_tree(root / "verl") / "recipe" / "retool"  # the launches' working directory
    (launch_dir / "retool_tool.yaml").write_text(yaml.safe_dump(tool))
    ray_dir = tempfile.mkdtemp(prefix="rt-", dir="/tmp")  # short: Ray's socket paths must fit 107 characters
    port, port_b = free_port(), free_port()
    env = {
        **os.environ,
        "DEVICE": "cpu",
        "PROFILE": "improved",
        "PYTHON": sys.executable,
        "RUN_DIR": str(root / "run"),
        "RETOOL_DATA_DIR": str(assets_data),
        "RETOOL_SFT_MODEL": str(smoke_run_dir / "sft_merged"),
        "RETOOL_SANDBOX_URL": f"http://127.0.0.1:{port}/run_code",
    }
    env.pop("DRY_RUN", None)
    overrides = [
        "+smoke=rl",
        f"trainer.total_training_steps={STEPS}",
        f"trainer.save_freq={SAVE_EVERY}",
        f"trainer.max_actor_ckpt_to_keep={KEEP}",
        "trainer.val_before_train=false",
        "trainer.test_freq=-1",
        "actor_rollout_ref.rollout.multi_turn.tool_config_path=./retool_tool.yaml",  # from launch_dir
        f"+ray_kwargs.ray_init._temp_dir={ray_dir}",
        # The outage masks every trajectory of step 4 that calls the tool (22 of 32 when measured;
        # reconnect_budget_s=2 above gives up on purpose), which the default max_failed_share (0.05)
        # would stop the run for; this test is about riding the outage out (the stop has its own test,
        # test_failure_accounting.py). The rule is off (0): how much of step 5 the 10 s outage also
        # covers depends on how fast step 4's calls fail (0%, 56% and 94% of step 5's trajectories in
        # three CI runs; 0.9 stopped the last). The sustained rule's 10-step window does not fill in
        # these 6 steps.
        "trainer.v1.sampler.sampler_kwargs.max_failed_share=0",
    ]
    return {
        "env": env,
        "overrides": overrides,
        "run_dir": root / "run",
        "port": port,
        "ray_dir": ray_dir,
        "launch_dir": launch_dir,
        "tree": root / "verl",
        "smoke": smoke_run_dir,
        "port_b": port_b,
        "tb_resumed": root / "tb-resumed",
    }


def start(setting: dict, log: Path, **env: str) -> subprocess.Popen:
    handle = open(log, "a")
    return subprocess.Popen(
        [str(REPO_ROOT / "scripts" / "launch.sh"), "rl", *setting["overrides"]],
        cwd=setting["launch_dir"],
        env={**setting["env"], **env},
        stdout=handle,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def event_dirs(setting: dict) -> tuple[Path, Path]:
    """Where the crashed launch logged (steps up to the checkpoint remain) and where the resume said to log."""
    return setting["run_dir"] / "tensorboard" / "rl", setting["tb_resumed"]


def run_scalars(setting: dict, tag: str) -> dict[int, float]:
    return {step: value for event_dir in event_dirs(setting) for step, value in scalar_values(event_dir, tag).items()}


def requests(url: str) -> int:
    """/run_code requests the sandbox at ``url`` has received since it started (its own count)."""
    return SandboxClient(url).health()["counters"]["requests"]


def wait_for(condition, proc: subprocess.Popen, timeout: float, what: str, log: Path) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if proc.poll() is not None:
            pytest.fail(f"the run exited ({proc.returncode}) before {what}; log tail:\n{log.read_text()[-4000:]}")
        if time.monotonic() > deadline:
            os.killpg(proc.pid, signal.SIGKILL)
            pytest.fail(f"no {what} within {timeout:.0f} s; log tail:\n{log.read_text()[-4000:]}")
        time.sleep(0.5)


def settings_read(launch: int) -> dict[str, set]:
    """What the launch's Ray GCS and vLLM processes started with, of the settings the soak found they need."""
    probe = load_bench("soak_probe")
    table = probe.processes()
    found: dict[str, set] = {"gcs": set(), "rollout": set(), "jemalloc": set()}
    for pid in probe.descendants(table, {launch}) - {launch}:  # launch.sh itself started before its exports
        cmd, group = table[pid]["cmd"], probe.classify(table[pid]["cmd"])
        if "gcs_server" in cmd:
            found["gcs"].add(environ(pid).get("RAY_task_events_max_num_task_in_gcs"))
        elif group == "rollout":  # not Ray's agents: their titles overwrite what /proc shows as environ
            found["rollout"].add(environ(pid).get("MALLOC_MMAP_THRESHOLD_"))
        if group in ("trainer", "rollout"):  # the FSDP and vLLM workers above all: each maps the preloaded jemalloc
            try:
                found["jemalloc"].add("/libjemalloc.so" in Path(f"/proc/{pid}/maps").read_text())
            except OSError:
                pass
    return found


@pytest.fixture(scope="module")
def runs(setting) -> dict:
    run_dir, port, port_b = setting["run_dir"], setting["port"], setting["port_b"]
    log = run_dir.parent / "launch.log"
    dumps = run_dir / "rollouts"
    outage: dict = {}
    started = time.monotonic()
    with running_sandbox(port=port) as url_a:  # the first launch's
        first = start(setting, log)
        wait_for(lambda: (dumps / f"{KILL_AFTER}.jsonl").is_file(), first, 900, f"step {KILL_AFTER}", log)
        settings = settings_read(first.pid)
        os.killpg(first.pid, signal.SIGKILL)  # the launcher, verl, Ray and vLLM: the whole process group
        first.wait(timeout=60)
        deadline = time.monotonic() + 60
        while processes_with(setting["ray_dir"]) and time.monotonic() < deadline:
            time.sleep(1)
        leftovers = processes_with(setting["ray_dir"])
        for pid in leftovers:  # only what this test started (its own Ray temp dir)
            os.kill(pid, signal.SIGKILL)
        killed_at = max(int(p.stem) for p in dumps.glob("*.jsonl"))
        a_first_launch = requests(url_a)
    # A fresh server on the crashed run's URL, up until the end: any request it counts came from the resume. (The
    # crashed run's calls still in A's socket buffers when it died were counted late by A: 43 -> 48 once in CI.)
    with running_sandbox(port=port) as url_a:
        resumed_from = time.time()
        with running_sandbox(port=port_b) as url:
            second = start(
                setting, log, RETOOL_SANDBOX_URL=f"{url}/run_code", TENSORBOARD_DIR=str(setting["tb_resumed"])
            )
            step3 = dumps / "3.jsonl"
            wait_for(
                lambda: step3.is_file() and step3.stat().st_mtime > resumed_from,
                second,
                900,
                "the resumed run's step 3",
                log,
            )
            health_before = SandboxClient(url).health()
        # the resume's sandbox is down while step 4 rolls out, then comes back on the same port
        outage["down"] = time.monotonic()
        time.sleep(10)
        with running_sandbox(port=port_b) as url:
            outage["up"] = time.monotonic()
            try:
                second.wait(timeout=1500)
            except subprocess.TimeoutExpired:
                os.killpg(second.pid, signal.SIGKILL)
                pytest.fail(f"the resumed run hung; log tail:\n{log.read_text()[-4000:]}")
            health_after = SandboxClient(url).health()
        a_during_resume = requests(url_a)
    result = {
        "log": log.read_text(),
        "code": second.returncode,
        "killed_at": killed_at,
        "leftovers": leftovers,
        "health_before": health_before,
        "health_after": health_after,
        "outage": outage,
        "settings": settings,
        "sandbox_a_requests": {"first_launch": a_first_launch, "during_resume": a_during_resume},
    }
    if second.returncode == 0:  # what bench/resilience.py renders into docs/performance.md
        write_facts(setting, result, started)
    return result


def write_facts(setting: dict, result: dict, started: float) -> None:
    from retool.platform.cpu_dtype import host_report

    trajectories = sum(prompts(setting["run_dir"] / "rollouts" / "1.jsonl").values())
    keys = ("tool_calls", "tool_retried", "tool_unavailable", "trajectory_masked", "tool_session_lost")
    # the step means times the trajectories of a step: counts per step
    per_step = {
        key: {
            step: round(mean * trajectories, 2)
            for step, mean in run_scalars(setting, f"train-reward/{key}/mean").items()
        }
        for key in keys
    }
    facts = {
        "date": time.strftime("%Y-%m-%d"),
        "host": host_report(),
        "steps": STEPS,
        "save_every": SAVE_EVERY,
        "killed_after_step": result["killed_at"],
        "resumed_from_checkpoint": 2,
        "outage_s": round(result["outage"]["up"] - result["outage"]["down"], 1),
        "trajectories_per_step": trajectories,
        "per_step": per_step,
        "sessions_after_restart": result["health_after"]["sessions"]["counters"],
        "sessions_before_outage": result["health_before"]["sessions"]["counters"],
        "first_sandbox_requests": result["sandbox_a_requests"],
        "wall_s": round(time.monotonic() - started, 1),
    }
    (setting["run_dir"].parent / "resilience.json").write_text(json.dumps(facts, indent=2) + "\n")


def test_the_resumed_run_continues_from_the_last_checkpoint_and_finishes(setting, runs):
    assert runs["code"] == 0, runs["log"][-4000:]
    assert runs["killed_at"] == KILL_AFTER
    assert "[resume] rl continues after the checkpoint of step 2" in runs["log"]
    # verl's own word that it loaded step 2 (the console leaves it to the launcher's line above; the log keeps it)
    verl_log = (setting["run_dir"] / "logs" / "rl.log").read_text(errors="replace")
    assert re.search(r"Resuming from \S*/global_step_2\b", verl_log), "verl did not say it resumed from step 2"
    checkpoints = setting["run_dir"] / "checkpoints" / "rl"
    assert (checkpoints / "latest_checkpointed_iteration.txt").read_text().strip() == str(STEPS)
    assert runs["leftovers"] == [], "Ray processes outlived the killed run's process group"


def test_the_resumed_run_keeps_only_as_many_checkpoints_as_asked(setting, runs):
    """The crashed launch's checkpoint counts against max_actor_ckpt_to_keep (patch 0008): saving step 6 removes
    step 2's, as an uninterrupted run would; verl alone kept all three."""
    config = yaml.safe_load((setting["run_dir"] / "rl.resolved.yaml").read_text())
    assert kept_checkpoints(Path(config["trainer"]["default_local_dir"])) == [4, 6]


def test_every_step_draws_the_uninterrupted_run_s_prompts(setting, runs):
    for step in range(1, STEPS + 1):
        ours = prompts(setting["run_dir"] / "rollouts" / f"{step}.jsonl")
        uninterrupted = prompts(setting["smoke"] / "rollouts" / f"{step}.jsonl")
        assert ours == uninterrupted, f"step {step} drew other prompts than the uninterrupted smoke run"


def test_the_resumed_run_calls_the_sandbox_it_was_launched_with(runs):
    a = runs["sandbox_a_requests"]
    assert a["first_launch"] > 0  # the first launch called A
    assert a["during_resume"] == 0, "the resumed run's workers called the crashed run's sandbox URL, not the new one"
    assert runs["health_before"]["counters"]["requests"] > 0 and runs["health_after"]["counters"]["requests"] > 0
    assert "[resume] the workers take this launch's RETOOL_SANDBOX_URL" in runs["log"]


def test_tensorboard_holds_each_step_once_the_resumed_ones_where_the_resume_said(setting, runs):
    crashed, resumed = event_dirs(setting)
    for tag in ("critic/rewards/mean", "train-reward/acc/mean"):
        assert scalar_points(crashed, tag) == Counter(range(1, 3)), tag  # up to the step-2 checkpoint
        assert scalar_points(resumed, tag) == Counter(range(3, STEPS + 1)), tag


def test_calls_without_an_answer_are_counted_and_kept_out_of_the_loss(setting, runs):
    unavailable = run_scalars(setting, "train-reward/tool_unavailable/mean")
    masked = run_scalars(setting, "train-reward/trajectory_masked/mean")
    calls = run_scalars(setting, "train-reward/tool_calls/mean")
    assert unavailable.get(4, 0) > 0 and masked.get(4, 0) > 0, (unavailable, masked, calls)
    # a healthy step masks nothing: before the outage and after the sandbox came back
    assert all(masked[step] == 0 for step in masked if step not in (4, 5)), masked
    assert sum(calls.get(step, 0) for step in (5, 6)) > 0
    assert runs["outage"]["up"] - runs["outage"]["down"] >= 10


def test_the_failure_accounting_counts_the_outage_s_masked_trajectories_and_the_run_goes_on(setting, runs):
    trajectories = sum(prompts(setting["run_dir"] / "rollouts" / "1.jsonl").values())
    masked = {
        step: round(mean * trajectories)
        for step, mean in run_scalars(setting, "train-reward/trajectory_masked/mean").items()
    }
    counted = run_scalars(setting, "failures/total/sandbox_unavailable")
    assert counted.get(4, 0) == masked[4] > 0, (counted, masked)
    assert counted == masked  # every step, the healthy ones at 0
    records = read_records(setting["run_dir"] / "logs" / "failures.jsonl")
    assert not any(record.get("stop") for record in records), records[-1]
    # the last record of each step: the crashed launch's step 3 was counted again by the resume
    last = {record["step"]: record for record in records if record["partition"] == "train"}
    assert sorted(last) == list(range(1, STEPS + 1)), sorted(last)
    assert {step: record["counts"]["sandbox_unavailable"] for step, record in last.items()} == masked
    assert last[4]["masked"] == masked[4] and last[4]["expected"] == trajectories
    assert "sandbox_unavailable" in last[4]["tracebacks"]  # the first one's reason, for the log reader


def test_per_trajectory_sessions_ran_through_the_agent_loop_and_were_closed(runs):
    for health in (runs["health_before"], runs["health_after"]):
        sessions = health["sessions"]
        counters = sessions["counters"]
        assert counters["started"] > 0 and counters["cells"] >= counters["started"], sessions
        assert not any(counters[key] for key in counters if key.startswith("evicted")), sessions
    after = runs["health_after"]["sessions"]
    counters = after["counters"]
    # every session ended: closed by its trajectory's end, or (its interpreter crashed) by the server
    assert after["live"] == 0 and counters["closed"] + counters["died"] == counters["started"], after


def test_ray_and_vllm_run_with_the_settings_that_keep_them_from_growing(runs):
    # the soak (docs/performance.md): Ray's GCS grew with task events; under glibc's malloc the FSDP and the vLLM
    # workers kept what they freed (scripts/install_system_packages.sh installs jemalloc, configs/device/cpu.env
    # preloads it)
    assert runs["settings"] == {"gcs": {"5000"}, "rollout": {"1048576"}, "jemalloc": {True}}


def test_nothing_was_imported_from_the_folder_the_run_was_launched_in(setting, runs):
    """verl's retool.py there would hide the recipe's package from every Ray worker (Ray puts the driver's folder
    first on their sys.path): a worker that imported it would have recorded it, and the run would have failed."""
    assert runs["code"] == 0, runs["log"][-4000:]
    assert imported(setting["tree"]) == []
    saved = yaml.safe_load((setting["run_dir"] / "rl.resolved.yaml").read_text())
    assert saved["actor_rollout_ref"]["rollout"]["multi_turn"]["tool_config_path"] == "./retool_tool.yaml"
