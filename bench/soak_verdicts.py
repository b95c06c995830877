"""The verdicts of a finished soak (bench/soak.py), from its folder alone, and their docs/performance.md section.

Memory: the slope of each process group's PSS (and of its open descriptors) over time, fitted within each lifetime of
the group (a launch for the run's groups, a sandbox lifetime between restarts for the sandbox's) with its warm-up
dropped, so that a restart is not read as growth or shrinkage. A launch warms up until it has run a whole cycle of
what it does (steps, a checkpoint, a validation) past the step it started from: a resumed launch's processes climb
back to the first launch's level over that cycle, not over a fixed number of minutes. The sandbox's open sessions
are held fixed; a run group is fitted on its lowest sample of every 5 minutes, so that the phase of a step is not read
as noise. A group passes when the whole 95% interval of its growth projected onto the reference run (18 hours on 16
dies, 130 steps) stays under 10% of its mean level, fails when even the interval's low end is over that, and is
inconclusive in between. The CPU makes ~30x the reference run's steps per hour: when the soak held vLLM for a while
(``paused`` events) the run groups are fitted on time and steps together, and each is projected on its own; without
pauses all growth is projected as growth per hour.
Samples inside a ``host_disturbed`` event of events.jsonl (``from_t``, ``to_t``, ``why``: other processes on the host
share the run's library pages, which lowers its PSS while they run) are left out of the fits.
"""

from __future__ import annotations

import importlib.util
import json
import math
import re
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from soak_probe import RUN_GROUPS

from retool.constants import REPO_ROOT
from retool.doctor.estimate import GIB, KNOWN_MODELS, RECIPE_MODEL, checkpoint_saves, estimate_checkpoints
from retool.failures.limits import read_records
from retool.report import read_event_dir

WARMUP_S = {"launch": 300.0, "sandbox": 60.0}
LOW_BIN_S = 300.0  # a run group's slope is fitted on its least PSS per 5 minutes (``lows``)
HOURS, GROWTH_LIMIT = 18.0, 0.10
# The reference run (configs/rl.yaml): 130 steps, a save every 10 keeping 3, 64 prompts x 16, 16384 tokens each.
REAL_STEPS, REAL_SAVE_EVERY, REAL_KEEP, REAL_TRAJECTORIES, REAL_RESPONSE = 130, 10, 3, 64 * 16, 16384
REAL_VAL_TRAJECTORIES = 30 * 30  # AIME 2025, mean@30
DUMPS = ("rollouts", "validation")
OTHER_DISK_LIMIT = 0.10  # what is not a checkpoint may add this share to the doctor's checkpoint estimate
SHM_SLACK_MB = 64
# PSS, and PSS without the pages of mapped files (libraries): other processes mapping the same libraries lower the
# first while they run, and those pages are bounded by the libraries' size; a leak is in the second. The verdict is
# on the second where the soak recorded it.
MEMORY = ("pss_mb", "private_mb")
MEMORY_WORDS = {"pss_mb": "PSS", "private_mb": "PSS without mapped files", "fds": "descriptors"}


def _helper(name: str):
    spec = importlib.util.spec_from_file_location(name, REPO_ROOT / "tests" / "helpers" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.is_file() else []


def _centred(window: list[tuple[float, ...]]) -> list[tuple[float, ...]]:
    means = [sum(column) / len(window) for column in zip(*window)]
    return [tuple(value - mean for value, mean in zip(point, means)) for point in window]


def within_fit(windows: list[list[tuple[float, ...]]]) -> tuple[list[float], list[list[float]], int] | None:
    """Least squares of y on x1..xk with an intercept per window, from (y, x1, ..., xk) points: the coefficients,
    their covariance and the points used. A regressor after the first with no spread inside the windows is left out
    (held fixed: coefficient 0, variance 0); None with fewer than 4 points or no spread in x1."""
    kept = [w for w in windows if len(w) >= 2]
    rows = np.array([point for window in kept for point in _centred(window)], dtype=float)
    if len(rows) < 4:
        return None
    y, x = rows[:, 0], rows[:, 1:]
    used = [j for j in range(x.shape[1]) if np.abs(x[:, j]).max() > 1e-12]
    if 0 not in used or np.linalg.matrix_rank(x[:, used]) < len(used):
        return None
    xu = x[:, used]
    inverse = np.linalg.inv(xu.T @ xu)
    coef = inverse @ xu.T @ y
    dof = len(rows) - len(kept) - len(used)
    variance = float(((y - xu @ coef) ** 2).sum() / dof) if dof > 0 else float("inf")
    full_coef, full_cov = np.zeros(x.shape[1]), np.zeros((x.shape[1], x.shape[1]))
    full_coef[used] = coef
    full_cov[np.ix_(used, used)] = variance * inverse
    return full_coef.tolist(), full_cov.tolist(), len(rows)


def within_slope(windows: list[list[tuple[float, ...]]]) -> tuple[float, float, int] | None:
    """The slope of y on x from (x, y) or (x, y, covariate) points with an intercept per window (the covariate, such
    as the sandbox's open sessions, held fixed), its standard error and the points used."""
    fit = within_fit([[(y, x, *rest) for x, y, *rest in window] for window in windows])
    if fit is None:
        return None
    coef, cov, points = fit
    return coef[0], math.sqrt(cov[0][0]), points


def windows_of(samples: list[dict], events: list[dict], kind: str, cycle_steps: int = 0) -> list[list[dict]]:
    """Samples split into the lifetimes of a group kind (``launch`` or ``sandbox``), warm-up dropped; only samples
    taken while a launch ran. A launch's warm-up lasts ``WARMUP_S`` and until it is past its first ``cycle_steps``
    steps (the save and validation cadence), whichever ends later."""
    disturbed = [(e["from_t"], e["to_t"]) for e in events if e["event"] == "host_disturbed"]
    running = [s for s in samples if s.get("launch") and not any(a <= s["t"] <= b for a, b in disturbed)]
    if kind == "launch":
        keys = [s["launch"] for s in running]
    else:
        restarts = sorted(e["t"] for e in events if e["event"] == "sandbox_restart")
        keys = [sum(t <= s["t"] for t in restarts) for s in running]
    windows: dict[Any, list[dict]] = {}
    for key, s in zip(keys, running):
        windows.setdefault(key, []).append(s)
    cycle = cycle_steps if kind == "launch" else 0
    return [
        [s for s in w if s["t"] - w[0]["t"] >= WARMUP_S[kind] and not (cycle and s["step"] <= w[0]["step"] + cycle)]
        for w in windows.values()
    ]


def lows(window: list[dict], group: str, metric: str = "pss_mb") -> list[dict]:
    """The sample with the group's least memory (``metric``) in each ``LOW_BIN_S`` of a window (a bin of less than
    half that, at the window's end, is left out). A run's memory swings with the phase of its step (the trainer's by
    ~1 GB between rollout and update), which 30 s samples hit at random; the lows of each bin follow what the group
    keeps."""
    bins: dict[int, list[dict]] = {}
    for s in window:
        bins.setdefault(int((s["t"] - window[0]["t"]) // LOW_BIN_S), []).append(s)
    return [
        min(b, key=lambda s: s["groups"][group][metric])
        for _, b in sorted(bins.items())
        if b[-1]["t"] - b[0]["t"] >= LOW_BIN_S / 2
    ]


def growth(samples: list[dict], events: list[dict], group: str, cycle_steps: int = 0) -> dict[str, Any]:
    """A group's memory and descriptors fitted on time within each lifetime, projected onto the reference run.

    A run group is fitted on time and steps together when the soak paused its steps (``paused`` events): its
    growth per hour with the steps held fixed and per step with the time held fixed, projected onto the reference
    run's 18 hours and 130 steps. Without pauses the two cannot be told apart, and all of it is taken as growth per
    hour (18 hours at the CPU's ~30x the reference run's steps per hour: the cautious reading)."""
    kind = "launch" if group in RUN_GROUPS else "sandbox"
    lifetimes = [[s for s in w if s["groups"][group]["procs"]] for w in windows_of(samples, events, kind, cycle_steps)]
    apart = kind == "launch" and any(e["event"] == "paused" for e in events)
    out: dict[str, Any] = {"group": group, "steps_apart": apart}
    # held fixed beside time: the steps when pauses set them apart; a sandbox's open sessions (one interpreter each)
    if apart:
        held = lambda s: [s["step"]]  # noqa: E731
    elif kind == "sandbox":
        held = lambda s: [s["sandbox"]["sessions_live"] or 0]  # noqa: E731
    else:
        held = lambda s: []  # noqa: E731
    for metric in MEMORY + ("fds",):
        if samples and metric not in samples[-1]["groups"][group]:  # soaks before it was recorded
            continue
        unit = "fds" if metric == "fds" else "MB"
        # a run group's descriptors are read at its PSS lows
        windows = (
            [lows(w, group, metric if metric != "fds" else "pss_mb") for w in lifetimes]
            if kind == "launch"
            else lifetimes
        )
        values = [s["groups"][group][metric] for w in windows for s in w]
        fit = within_fit([[(s["groups"][group][metric], s["t"] / 3600, *held(s)) for s in w] for w in windows])
        if fit is None or not values or sum(values) == 0:
            out[metric] = None
            continue
        coef, cov, points = fit
        level = sum(values) / len(values)
        along = np.array([HOURS, REAL_STEPS if apart else 0.0][: len(coef)])
        projected = float(along @ np.array(coef))
        spread = 1.96 * math.sqrt(float(along @ np.array(cov) @ along))
        if apart:
            per_step, per_step_se = coef[1], math.sqrt(cov[1][1])
        else:  # told only as a reading of the same growth per step, not apart from the hours
            by_step = within_slope([[(s["step"], s["groups"][group][metric], *held(s)) for s in w] for w in windows])
            per_step, per_step_se = (by_step[0], None) if by_step else (None, None)
        out[metric] = {
            "unit": unit,
            "slope_per_h": coef[0],
            "interval": (coef[0] - 1.96 * math.sqrt(cov[0][0]), coef[0] + 1.96 * math.sqrt(cov[0][0])),
            "per_step": per_step,
            "per_step_interval": (per_step - 1.96 * per_step_se, per_step + 1.96 * per_step_se)
            if per_step_se is not None
            else None,
            "projected": projected,
            "projected_interval": (projected - spread, projected + spread),
            "level": level,
            "growth_18h": projected / level,
            "points": points,
        }
    return out


def _growth_verdict(g: dict[str, Any]) -> tuple[bool | None, str]:
    """True when the projection's whole 95% interval stays under the limit, False when even its low end is over it,
    None (inconclusive) when the interval spans the limit: too noisy to tell either way."""
    parts, states = [], []
    judged = ("private_mb" if "private_mb" in g else "pss_mb", "fds")
    for metric in (*MEMORY, "fds"):
        if metric not in g:
            continue
        m = g[metric]
        if m is None:
            parts.append(f"{MEMORY_WORDS[metric]}: too few samples")
            states.append(False)
            continue
        name, unit = MEMORY_WORDS[metric], m["unit"]
        lo, hi = m["interval"]
        if g.get("steps_apart"):
            slo, shi = m["per_step_interval"]
            plo, phi = m["projected_interval"]
            parts.append(
                f"{name} {m['slope_per_h']:+.1f} {unit}/h [{lo:+.1f}, {hi:+.1f}] with the steps held and "
                f"{m['per_step']:+.3f} {unit} per step [{slo:+.3f}, {shi:+.3f}] with the time held -> over "
                f"{HOURS:g} h and {REAL_STEPS} steps {m['projected']:+.0f} {unit} [{plo:+.0f}, {phi:+.0f}] on "
                f"{m['level']:.0f} {unit}: {m['growth_18h']:+.1%}"
            )
        else:
            per_step = (
                f" ({m['per_step']:+.3f} {unit} per step: {m['per_step'] * REAL_STEPS:+.0f} over {REAL_STEPS} steps)"
                if m.get("per_step") is not None
                else ""
            )
            parts.append(
                f"{name} {m['slope_per_h']:+.1f} {unit}/h [{lo:+.1f}, {hi:+.1f}] on {m['level']:.0f} {unit} -> "
                f"{m['growth_18h']:+.1%} in 18 h{per_step}"
            )
        if metric not in judged:
            continue
        plo, phi = m["projected_interval"]
        states.append(True if phi / m["level"] < GROWTH_LIMIT else False if plo / m["level"] >= GROWTH_LIMIT else None)
    return (False if False in states else None if None in states else True), "; ".join(parts)


def _steps_scalar(event_dir: Path, tag: str) -> dict[int, float]:
    return {step: value for step, (_, value) in read_event_dir(event_dir).get(tag, {}).items()}


def verdicts(out: Path) -> dict[str, Any]:
    samples, events = _lines(out / "samples.jsonl"), _lines(out / "events.jsonl")
    measured = json.loads((out / "measured.json").read_text())
    run_dir = out / "run"
    config = yaml.safe_load((run_dir / "rl.resolved.yaml").read_text())
    batch, n = config["data"]["train_batch_size"], config["actor_rollout_ref"]["rollout"]["n"]
    checks = _helper("resume_checks")
    results: list[dict[str, Any]] = []

    def add(name: str, passed: bool | None, seen: str) -> None:
        results.append({"name": name, "passed": passed is True, "inconclusive": passed is None, "seen": seen})

    cycle = measured.get("save_every", 10)
    groups = [growth(samples, events, group, cycle) for group in samples[0]["groups"]] if samples else []
    for g in groups:
        add(f"memory and descriptors: {g['group']}", *_growth_verdict(g))

    baseline, last = samples[0], samples[-1]
    restarts = [e for e in events if e["event"] == "sandbox_restart"]
    add(
        "each sandbox stop leaves no process of its uids",
        bool(restarts) and all(e["leftover_uid_processes"] == 0 for e in restarts),
        f"{len(restarts)} stops; processes of the stopped server's uids: "
        f"{[e['leftover_uid_processes'] for e in restarts]}; down {[e['down_s'] for e in restarts]} s",
    )
    exited = [e for e in events if e["event"] == "launch_exited"]
    add(
        "every launch runs until the soak stops it",
        not exited,
        "; ".join(f"launch {e['number']} exited {e['exit']} at step {e['step']}: {e['why']}" for e in exited)
        or f"{sum(e['event'] == 'launch' for e in events)} launches",
    )
    for kind in ("kill", "stop"):
        found = [e for e in events if e["event"] == kind]
        add(
            f"the launch's {kind} leaves no Ray process",
            bool(found) and found[0]["leftover_ray_processes"] == 0,
            f"{found[0]['leftover_ray_processes']} left 60 s after {found[0]['signal']}; sandbox sessions "
            f"still open: {found[0]['sessions_live']}"
            if found
            else f"no {kind} happened",
        )
    shm_growth = (last["shm_used_bytes"] - baseline["shm_used_bytes"]) / 2**20
    add(
        "at the end nothing is left (processes, uids, zombies, /dev/shm)",
        last["run_processes"] == 0
        and last["sandbox"]["uids_in_use"] == 0
        and last["zombies"] == 0
        and all(g["procs"] == 0 for g in last["groups"].values())
        and shm_growth <= SHM_SLACK_MB,
        f"run processes {last['run_processes']}, sandbox uids in use {last['sandbox']['uids_in_use']}, zombies "
        f"{last['zombies']}, processes per group { {k: v['procs'] for k, v in last['groups'].items() if v['procs']} }"
        f", /dev/shm {shm_growth:+.1f} MB against the start",
    )

    add(*_disk(out, run_dir, config, samples, batch * n))

    final_step = max((s["step"] for s in samples), default=0)
    event_dir = run_dir / "tensorboard" / "rl"
    points = checks.scalar_points(event_dir, "critic/rewards/mean")
    logged = max(points, default=0)
    # a validation's accuracy on the first data source: step 0 and every test_freq steps, each once
    val_tag = min((t for t in read_event_dir(event_dir) if t.startswith("val-core/")), default="val-core/")
    validations = checks.scalar_points(event_dir, val_tag)
    test_freq = int(config["trainer"]["test_freq"])
    wanted = Counter([0, *range(test_freq, logged + 1, test_freq)])
    missed = {s: points[s] for s in set(points) | set(range(1, logged + 1)) if points[s] != 1}
    missed_validations = {  # the last step's validation may be the one the final stop cut off
        s: validations[s]
        for s in set(wanted) | set(validations)
        if validations[s] != 1 and (s, validations[s]) != (logged, 0)
    }
    add(
        "TensorBoard holds every step once, and every validation",
        not missed and logged >= final_step - 1 and not missed_validations,
        f"steps 1-{logged} ({final_step} dumped); steps logged other than once: {missed or 'none'}; validations "
        f"({val_tag}) logged other than once: {missed_validations or 'none'}",
    )

    add(*_outages(run_dir, event_dir, events, batch * n))
    log = (out / "launches.log").read_text(errors="replace") if (out / "launches.log").is_file() else ""
    resumed = re.findall(r"\[resume\] rl continues after the checkpoint of step (\d+)", log)
    order = checks.data_order(Path(config["data"]["train_files"]), config["data"].get("seed"), final_step * batch)
    wrong = [
        s
        for s in range(1, final_step + 1)
        if (run_dir / "rollouts" / f"{s}.jsonl").is_file()
        and checks.trained(run_dir / "rollouts" / f"{s}.jsonl") != dict.fromkeys(order[(s - 1) * batch : s * batch], n)
    ]
    add(
        "the resumed run trains the uninterrupted run's data order",
        bool(resumed) and not wrong and final_step > int(resumed[-1]),
        f"resumed after the checkpoint of step {resumed[-1] if resumed else '?'}; steps 1-{final_step} against "
        f"verl's sampler order, steps that differ: {wrong or 'none'}",
    )
    ending = (
        "then stopped with SIGINT at the end"
        if any(e["event"] == "stop" for e in events)
        else "; ".join(
            f"and launch {e['number']} ended on its own at step {e['step']} (exit {e['exit']})" for e in exited
        )
        or "and not stopped"
    )
    return {
        "measured": measured,
        "verdicts": results,
        "growth": groups,
        "final_step": final_step,
        "ending": ending,
        "restarts": len(restarts),
        "kill": _kill_words(events),
        "samples": len(samples),
        "minutes": round((last["t"] - baseline["t"]) / 60, 1) if samples else 0,
    }


def _kill_words(events: list[dict]) -> str:
    kill = next((e for e in events if e["event"] == "kill"), None)
    if kill is None:
        return "never killed"
    where = kill.get("in_validation_of")  # soaks before the kill was aimed at a validation do not say
    return f"killed with SIGKILL {f'in the validation of step {where}' if where else 'at step ' + str(kill['step'])}"


def _disk(out: Path, run_dir: Path, config: dict, samples: list[dict], trajectories: int) -> tuple[str, bool, str]:
    keep = config["trainer"]["max_actor_ckpt_to_keep"]
    running = [s for s in samples if s.get("launch")]
    first, last = running[0], running[-1]
    steps = max(last["step"] - first["step"], 1)
    per_step = {
        kind: (last["disk"][kind] - first["disk"][kind]) / steps for kind in last["disk"] if kind != "checkpoints"
    }
    hours = (last["t"] - first["t"]) / 3600
    ray_per_h = (last["ray_tmp_bytes"] - first["ray_tmp_bytes"]) / max(hours, 1e-9)
    # The reference config writes no rollout or validation dumps (the smoke does): logs, TensorBoard and the rest grow
    # per step, Ray's logs with time (the real run: 130 steps in 18 h). Dumps, when a user turns them on, grow with
    # trajectories x length: reported beside.
    projected = sum(v for k, v in per_step.items() if k not in DUMPS) * REAL_STEPS + ray_per_h * HOURS
    length = REAL_RESPONSE / config["data"]["max_response_length"]
    dumps = (
        per_step["rollouts"] * REAL_TRAJECTORIES / trajectories * length
        + per_step["validation"] * REAL_VAL_TRAJECTORIES / _validation_trajectories(run_dir) * length
    ) * REAL_STEPS
    contents = config["actor_rollout_ref"]["actor"]["checkpoint"]["save_contents"]
    real = estimate_checkpoints(
        KNOWN_MODELS[RECIPE_MODEL],
        save_contents=contents,
        saves=checkpoint_saves(REAL_STEPS, REAL_SAVE_EVERY, last_step_always=False),
        keep=REAL_KEEP,
    )
    tiny = json.loads((Path(config["actor_rollout_ref"]["model"]["path"]) / "config.json").read_text())
    newest = max(
        (run_dir / "checkpoints" / "rl").glob("global_step_*"), key=lambda p: int(p.name.split("_")[-1]), default=None
    )
    one = sum(f.stat().st_size for f in newest.rglob("*") if f.is_file()) if newest else 0
    measured_gb = one / GIB
    # verl deletes an old checkpoint's actor/ and leaves its global_step_N/ with the dataloader's small data.pt: the
    # checkpoints kept are the bytes under checkpoints/ in units of the newest one
    kept = max((round(s["disk"]["checkpoints"] / one) for s in samples), default=0) if one else 0
    estimated_gb = estimate_checkpoints(tiny, save_contents=contents, saves=1, keep=1).total_gb
    passed = kept <= keep and projected / GIB <= OTHER_DISK_LIMIT * real.total_gb
    kinds = ", ".join(f"{kind} {size / 2**10:.0f} KiB" for kind, size in per_step.items())
    return (
        "the disk stays bounded",
        passed,
        f"checkpoints kept at most {kept} (max_actor_ckpt_to_keep {keep}); one checkpoint {measured_gb * 1024:.1f} "
        f"MiB, the doctor's estimate for this model {estimated_gb * 1024:.1f} MiB; the rest grew "
        f"{sum(per_step.values()) / 2**20:.2f} MiB per step ({kinds}) and Ray's logs "
        f"{ray_per_h / 2**20:.1f} MiB/h: over the reference run ({REAL_STEPS} steps, {HOURS:.0f} h) "
        f"{projected / GIB:.2f} GiB beside the doctor's {real.total_gb:.0f} GiB of checkpoints ({real.kept} of "
        f"{real.saves} kept); with rollout and validation dumps on, scaled to its {REAL_TRAJECTORIES} training "
        f"and {REAL_VAL_TRAJECTORIES} validation trajectories of up to {REAL_RESPONSE} tokens, "
        f"+{dumps / GIB:.1f} GiB",
    )


def _validation_trajectories(run_dir: Path) -> int:
    """Trajectories of one validation: lines of the newest validation dump."""
    newest = max((run_dir / "validation").glob("*.jsonl"), key=lambda p: p.stat().st_mtime, default=None)
    return max(sum(1 for line in newest.read_text().splitlines() if line.strip()), 1) if newest else 1


def _outages(run_dir: Path, event_dir: Path, events: list[dict], trajectories: int) -> tuple[str, bool, str]:
    keys = ("tool_retried", "tool_unavailable", "tool_session_lost")
    per_step = {key: _steps_scalar(event_dir, f"train-reward/{key}/mean") for key in keys}
    final = max((e["step"] for e in events), default=0)
    records = read_records(run_dir / "logs" / "failures.jsonl")
    stops = [r for r in records if r.get("stop")]
    stop_t = next((e["t"] for e in events if e["event"] == "stop"), float("inf"))
    seen, stalled, counted = [], [], 0
    for e in (e for e in events if e["event"] == "sandbox_restart"):
        step = e["step"] + 1  # the step being rolled out (or, between rollouts, the next)
        counts = {k: round(sum(v.get(s, 0) for s in (step, step + 1)) * trajectories) for k, v in per_step.items()}
        seen.append(f"step {step}: " + ", ".join(f"{counts[k]} {k[5:]}" for k in keys))
        counted += any(counts.values())
        if final <= e["step"] and stop_t - e["t"] > 180:  # no later step, though the run had 3 minutes to make one
            stalled.append(step)
    return (
        "each sandbox stop is ridden out and counted, the run goes on",
        bool(seen) and counted > 0 and not stalled and not stops,
        f"{'; '.join(seen)} (calls of the stop's step and the next; {counted} of {len(seen)} stops met calls in "
        f"flight; the others fell between calls); steps after each stop: "
        f"{'all went on' if not stalled else f'none after the stops at {stalled}'}; failure-accounting stops: "
        f"{len(stops)}",
    )


def plot(samples: list[dict], events: list[dict], groups: tuple[str, ...], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    start = samples[0]["t"]
    fig, ax = plt.subplots(figsize=(10, 4))
    for group in groups:
        ax.plot([(s["t"] - start) / 60 for s in samples], [s["groups"][group]["pss_mb"] for s in samples], label=group)
    for e in events:
        if e["event"] in ("host_disturbed", "paused"):
            shade = "grey" if e["event"] == "host_disturbed" else "tab:blue"
            ax.axvspan((e["from_t"] - start) / 60, (e["to_t"] - start) / 60, color=shade, alpha=0.12)
        style = {"sandbox_restart": ("grey", ":"), "kill": ("red", "-"), "stop": ("black", "-")}.get(e["event"])
        if style:
            ax.axvline((e["t"] - start) / 60, color=style[0], linestyle=style[1], linewidth=1)
    ax.set_xlabel(
        "minutes (dotted: sandbox stopped and restarted; red: kill -9 of the launch; black: the stop; "
        "blue: vLLM held; grey: left out of the fits)"
    )
    ax.set_ylabel("PSS (MB)")
    ax.set_title("memory per process group over the soak", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, ncol=3)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)


def render(result: dict[str, Any], source: str, picture: Path, groups: tuple[str, ...]) -> str:
    out = REPO_ROOT / source
    samples, events = _lines(out / "samples.jsonl"), _lines(out / "events.jsonl")
    plot(samples, events, groups, picture)
    left_out = "".join(
        f" Left out of the fits: minutes {(e['from_t'] - samples[0]['t']) / 60:.0f}-"
        f"{(e['to_t'] - samples[0]['t']) / 60:.0f} ({e['why']})."
        for e in events
        if e["event"] == "host_disturbed"
    )
    pauses = [e for e in events if e["event"] == "paused"]
    held = (
        f" vLLM was held (SIGSTOP) {len(pauses)} times, {sum(e['to_t'] - e['from_t'] for e in pauses) / 60:.0f} "
        f"minutes in all, in rollouts ({sum(e['steps_during'] for e in pauses)} steps made while held), so that the "
        f"fits tell growth per step from growth per hour and project each onto the reference run's "
        f"{HOURS:g} hours and {REAL_STEPS} steps."
        if pauses
        else " Without pauses, growth per step and per hour read the same: all of it is projected as per hour."
    )
    m = result["measured"]
    host = m.get("host") or {}
    lines = [
        "## Soak (`make bench-soak`)",
        "",
        f"Measured {m.get('started', '?')} on {host.get('cpu_model', '?')}, {host.get('cores', '?')} cores, commit "
        f"{m.get('commit') or '?'}, trainer mode {m.get('trainer_mode')}: {result['minutes']:.0f} minutes of the "
        f"smoke's RL stage ({result['final_step']} steps; sessions per trajectory; a checkpoint and a validation "
        f"every {m.get('save_every', 10)} steps, 3 kept), the sandbox stopped every "
        f"{m.get('restart_every_min', 10):g} minutes and started again by scripts/keep_sandbox_up.sh "
        f"({result['restarts']} times), the whole launch {result['kill']} about halfway and launched again, "
        f"{result['ending']}. {result['samples']} samples, one every 30 s (bench/soak_probe.py); the run's folder "
        f"is `{source}/`. Memory slopes leave out each lifetime's warm-up (a launch's first "
        f"{m.get('save_every', 10)} steps and at least {WARMUP_S['launch'] / 60:g} minutes, a sandbox's first "
        f"{WARMUP_S['sandbox'] / 60:g}) and take a run group's lowest sample "
        f"of every {LOW_BIN_S / 60:g} minutes (its memory swings with the phase of a step).{held}{left_out}",
        "",
        "| verdict | result | what was seen |",
        "|---|---|---|",
    ]
    for v in result["verdicts"]:
        result_word = "pass" if v["passed"] else "**inconclusive**" if v.get("inconclusive") else "**FAIL**"
        lines.append(f"| {v['name']} | {result_word} | {v['seen']} |")
    lines += ["", f"![memory per process group over the soak]({picture.relative_to(REPO_ROOT / 'docs')})", ""]
    return "\n".join(lines)
