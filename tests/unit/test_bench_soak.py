"""bench/soak.py's probe and verdicts: the slope that tells growth from restarts, and a sample of real processes."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from bench_modules import load_bench


verdicts = load_bench("soak_verdicts")
probe = load_bench("soak_probe")


def test_the_slope_is_fitted_within_each_lifetime_so_a_restart_is_not_growth():
    # 10 MB/h inside each of two lifetimes; the second starts 500 MB lower (a restart), which a plain fit would read
    # as shrinking memory
    first = [(h / 10, 1000 + 10 * h / 10) for h in range(10)]
    second = [(2 + h / 10, 500 + 10 * h / 10) for h in range(10)]
    slope, se, points = verdicts.within_slope([first, second])
    assert slope == pytest.approx(10.0) and se == pytest.approx(0.0, abs=1e-9) and points == 20
    assert verdicts.within_slope([first[:1], second[:2]]) is None  # too few points to tell


def test_the_open_sessions_are_held_fixed_so_a_busy_moment_is_not_growth():
    # 6 MB per open session and no growth: sessions peak late in each lifetime, which alone reads as growth
    sessions = [0, 10, 40, 5, 60, 80, 2, 90]
    window = [(h / 10, 300 + 6 * n, n) for h, n in enumerate(sessions)]
    slope, se, points = verdicts.within_slope([window, [(1 + x, y, n) for x, y, n in window]])
    assert slope == pytest.approx(0.0, abs=1e-9) and points == 16
    naive, _, _ = verdicts.within_slope([[(x, y) for x, y, _ in window]])
    assert naive > 100  # MB/h, without the sessions held fixed


def _samples(mb_per_h: float, hours: float = 2.0) -> list[dict]:
    samples = []
    for i in range(int(hours * 120) + 1):  # one per 30 s
        t = i * 30.0
        groups = {name: {"pss_mb": 0.0, "fds": 0, "procs": 0} for name in probe.GROUPS}
        groups["trainer"] = {"pss_mb": 2000 + mb_per_h * t / 3600, "fds": 80, "procs": 3}
        samples.append({"t": t, "step": i, "launch": 1 if t < hours * 1800 else 2, "groups": groups})
    return samples


def test_growth_passes_a_flat_group_and_fails_one_that_would_add_a_tenth_in_18_hours():
    flat_ok, flat_seen = verdicts._growth_verdict(verdicts.growth(_samples(1.0), [], "trainer"))
    assert flat_ok, flat_seen  # 1 MB/h on 2000 MB: 0.9% in 18 h
    leak = verdicts.growth(_samples(20.0), [], "trainer")
    leak_ok, leak_seen = verdicts._growth_verdict(leak)
    assert not leak_ok and "+20.0 MB/h" in leak_seen, leak_seen  # 18% in 18 h
    assert leak["pss_mb"]["growth_18h"] == pytest.approx(20 * 18 / leak["pss_mb"]["level"])
    assert leak["pss_mb"]["per_step"] == pytest.approx(20 / 120)  # a step every 30 s
    assert "per step: +22 over 130 steps" in leak_seen, leak_seen
    assert verdicts._growth_verdict(verdicts.growth(_samples(20.0), [], "rollout"))[0] is False  # no samples: no pass
    noisy = _samples(20.0, hours=1.0)
    for i, sample in enumerate(noisy):  # +-600 MB around the line, bin to bin: the interval spans the limit
        sample["groups"]["trainer"]["pss_mb"] += 600 * (-1) ** (i // 10)
    state, seen = verdicts._growth_verdict(verdicts.growth(noisy, [], "trainer"))
    assert state is None, seen  # inconclusive: neither a pass nor a proven leak


def test_a_run_group_is_fitted_on_its_lows_so_the_phase_of_a_step_is_not_noise():
    for mb_per_h, passes in ((1.0, True), (20.0, False)):
        samples = _samples(mb_per_h)
        for i, sample in enumerate(samples):  # a step every 30 s, 1 GB more in every other sample (its update)
            sample["groups"]["trainer"]["pss_mb"] += 1000 * (i % 2)
        trainer = verdicts.growth(samples, [], "trainer")
        assert trainer["pss_mb"]["slope_per_h"] == pytest.approx(mb_per_h, abs=0.5)
        assert verdicts._growth_verdict(trainer)[0] is passes


def test_a_resumed_launch_climbing_back_over_its_first_cycle_is_warm_up_not_growth():
    # a flat 2000 MB, but the resumed launch starts at 1400 MB and climbs back over 8 minutes: its first 10 steps
    # (a step a minute) resume, validate and checkpoint once; a fixed 5-minute warm-up reads the climb as growth
    samples = _samples(0.0)
    for s in samples:
        s["step"] = int(s["t"] // 60)
        if s["launch"] == 2:
            since = s["t"] - 3600
            s["groups"]["trainer"]["pss_mb"] -= 600 * max(0.0, 1 - since / 480)
    assert verdicts._growth_verdict(verdicts.growth(samples, [], "trainer"))[0] is not True
    cycle = verdicts.growth(samples, [], "trainer", cycle_steps=10)
    assert verdicts._growth_verdict(cycle)[0] is True and abs(cycle["pss_mb"]["slope_per_h"]) < 1
    assert verdicts._growth_verdict(verdicts.growth(_samples(20.0), [], "trainer", cycle_steps=10))[0] is False


def test_samples_taken_while_the_host_was_disturbed_are_left_out_of_the_fit():
    # other processes sharing the run's libraries lower its PSS while they run: a dip late in a launch hides a leak
    samples = _samples(20.0)
    for s in samples:
        if 2400 <= s["t"] <= 3500:
            s["groups"]["trainer"]["pss_mb"] -= 100
    hidden = verdicts.growth(samples, [], "trainer")["pss_mb"]["slope_per_h"]
    event = {"event": "host_disturbed", "from_t": 2390.0, "to_t": 3510.0, "why": "other Ray clusters ran"}
    shown = verdicts.growth(samples, [event], "trainer")["pss_mb"]["slope_per_h"]
    assert hidden < 0 and shown == pytest.approx(20.0, abs=0.5), (hidden, shown)


def test_a_sample_finds_the_launch_s_processes_their_memory_and_the_run_folder(tmp_path):
    run_dir = tmp_path / "run"
    (run_dir / "checkpoints" / "rl" / "global_step_10").mkdir(parents=True)
    (run_dir / "checkpoints" / "rl" / "global_step_10" / "model.pt").write_bytes(b"x" * 4096)
    (run_dir / "rollouts").mkdir()
    (run_dir / "rollouts" / "1.jsonl").write_text("{}\n" * 100)
    (run_dir / "rl.resolved.yaml").write_text("a: 1\n")
    # a launch with a child holding 64 MB, as scripts/launch.sh has verl under it
    launch = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import subprocess, sys, time; "
            "subprocess.Popen([sys.executable, '-c', "
            "'import time; held = b\"x\" * (64 << 20); time.sleep(60)']); "
            "time.sleep(60)",
        ]
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            found = probe.sample(launch.pid, "", run_dir, None, None, None)
            if any(pss >= 64 for _, _, pss, _ in found["processes"].values()):  # the child has written all 64 MB
                break
            if time.monotonic() > deadline:  # the child did not start
                break
            time.sleep(0.1)
    finally:
        subprocess.run(["pkill", "-P", str(launch.pid)], check=False)
        launch.kill()
        launch.wait()
    trainer = found["groups"]["trainer"]
    assert trainer["procs"] == 2 and trainer["pss_mb"] > 1 and trainer["fds"] >= 6, found
    assert found["run_processes"] == 2
    # only the child is large enough to be recorded on its own
    [(group, command, pss, private)] = found["processes"].values()
    assert group == "trainer" and "held" in command and 64 <= private <= pss < 100, found
    assert found["disk"]["checkpoints"] == 4096 and found["disk"]["rollouts"] == 300 and found["disk"]["other"] == 5
    assert found["sandbox"]["up"] is False and found["shm_used_bytes"] >= 0


def test_processes_of_the_run_are_put_in_their_groups_by_ray_s_names():
    assert probe.classify("ray::agentloopworker.run") == "agent_loop"
    assert probe.classify("ray::vllmhttpserver.launch_server") == "rollout"
    assert probe.classify("/venv/lib/python3.11/site-packages/ray/core/src/ray/raylet/raylet --x") == "ray"
    assert probe.classify("ray::taskrunner.run") == "trainer"
    assert probe.classify("ray::workerdict") == "trainer"
    assert probe.classify("vllm::enginecore") == "rollout"
    for ray_own in (
        "ray::dashboardagent",
        "ray::runtimeenvagent",
        "ray::idle",
        "/venv/bin/python /venv/lib/python3.11/site-packages/ray/_private/workers/default_worker.py -x",
    ):
        assert probe.classify(ray_own) == "ray", ray_own


def _paused(mb_per_h: float, mb_per_step: float) -> tuple[list[dict], list[dict]]:
    """Two one-hour launches, a step every 30 s except in a 10-minute pause of every 20 after each launch's first
    15 minutes; memory grows with time and with steps as told."""
    samples, events, step = _samples(0.0), [], 0
    for s in samples:
        since = s["t"] % 3600
        paused = since >= 900 and (since - 900) % 1200 >= 600
        step += 0 if paused else 1
        s["step"] = step
        s["groups"]["trainer"]["pss_mb"] += mb_per_h * s["t"] / 3600 + mb_per_step * step
    for launch in (0, 3600):
        events += [
            {"event": "paused", "from_t": launch + start, "to_t": launch + start + 600} for start in (1500, 2700)
        ]
    return samples, events


def test_pauses_tell_growth_per_step_from_growth_per_hour_and_project_each_onto_the_reference_run():
    # 0.2 MB per step and nothing per hour: at the CPU's steps per hour it reads as tens of MB/h, over 10% in 18 h;
    # the reference run makes 130 steps in its 18 hours: +26 MB (1.3%)
    samples, events = _paused(0.0, 0.2)
    assert verdicts._growth_verdict(verdicts.growth(samples, [], "trainer"))[0] is False
    apart = verdicts.growth(samples, events, "trainer")
    assert apart["steps_apart"] and apart["pss_mb"]["per_step"] == pytest.approx(0.2, abs=1e-6)
    assert apart["pss_mb"]["slope_per_h"] == pytest.approx(0.0, abs=1e-3)
    assert apart["pss_mb"]["projected"] == pytest.approx(0.2 * 130, abs=0.1)
    state, seen = verdicts._growth_verdict(apart)
    assert state is True and "with the time held" in seen, seen
    # 20 MB an hour, steps or no steps: the pauses do not excuse it
    leak = verdicts.growth(*_paused(20.0, 0.0), "trainer")
    assert leak["pss_mb"]["slope_per_h"] == pytest.approx(20.0, abs=1e-3)
    assert verdicts._growth_verdict(leak)[0] is False
    # the pauses come from the soak's events: without them steps and hours are one reading
    assert not verdicts.growth(samples, [], "trainer")["steps_apart"]


def test_the_verdict_is_on_memory_without_mapped_files_where_the_soak_recorded_it():
    # PSS climbs 40 MB/h as more of the libraries' pages come in (bounded by their size) while the heap holds: a pass;
    # a heap growing 20 MB/h under a PSS that other processes' mappings hold down: a failure
    for pss_per_h, private_per_h, passes in ((40.0, 0.0, True), (0.0, 20.0, False)):
        samples = _samples(pss_per_h)
        for s in samples:
            s["groups"]["trainer"]["private_mb"] = 1500 + private_per_h * s["t"] / 3600
        state, seen = verdicts._growth_verdict(verdicts.growth(samples, [], "trainer"))
        assert state is passes and "PSS without mapped files" in seen, seen
    assert "private_mb" not in verdicts.growth(_samples(0.0), [], "trainer")  # soaks before it was recorded
