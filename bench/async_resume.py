"""Resume in the asynchronous trainer modes, checked against the bugs reported upstream (make bench-async).

For colocate_async and separate_async: the smoke's RL stage (its SFT'd tiny model, tool, sandbox, reward), 6 steps,
a checkpoint every 2, no validation. The whole launch is killed with SIGKILL after step 3 (step 3 is lost; the
checkpoint of step 2 holds the model, the dataloader and verl's TransferQueue with the prompts in flight), then
resumed the documented way: the same launch with the same RUN_DIR. Checked on what the run left in its folder:

- a step counted twice on resume (verl #7933, fixed by #7935 in the fully-async trainer): the resume's first step
  is labelled 3 (its rollout dump and ``training/global_step``) and TensorBoard holds each step 1-6 exactly once;
- a silent restart from step 0 (#7952, with ``async_save``): the resume loads global_step_2, rewrites no dump of
  steps 1-2 and ends at step 6;
- in-flight samples lost (#4199): every prompt the dataloader had handed out by the checkpoint (its
  ``_num_yielded``, in the data order rebuilt from the training parquet and verl's sampler) and that steps 1-2 did
  not train is trained after the resume, and no prompt is trained twice in the run's record;
- checkpoints piling up across the resume (patches/0008, in the checkpoint manager all trainer modes share): with
  ``max_actor_ckpt_to_keep`` 2, the run ends with the checkpoints of steps 4 and 6, the crashed launch's removed.

    python bench/async_resume.py [--smoke-run runs/smoke-x] [--modes colocate_async,separate_async]
    python bench/async_resume.py --from-runs runs/async-resume-<time>     # check and render finished runs again

Writes the section ``async-resume`` of docs/performance.md; exits 1 when a check fails.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
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
from typing import Any

from retool.constants import REPO_ROOT
from retool.markdown_sections import replace_section
from retool.resume import kept_checkpoints
from retool_sandbox.spawn import running_sandbox
from retool.smoke import learning_run
from retool.trainer_modes import ASYNC_MODES

SECTION = "async-resume"
STEPS, SAVE_EVERY, KILL_AFTER, KEEP = 6, 2, 3, 2
CHECKPOINT = (KILL_AFTER // SAVE_EVERY) * SAVE_EVERY


def _helper(name: str):
    spec = importlib.util.spec_from_file_location(name, REPO_ROOT / "tests" / "helpers" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def handed_out(checkpoint: Path) -> int:
    """Prompts the training dataloader had handed out when verl saved ``checkpoint`` (global_step_N)."""
    import torch

    return int(torch.load(checkpoint / "data.pt", weights_only=False)["_num_yielded"])


def verl_log(run_dir: Path) -> str:
    """Both launches' whole output (the console shows a digest, without verl's resume lines)."""
    return (run_dir / "logs" / "rl.log").read_text(errors="replace")


def check(run_dir: Path, resumed_at: float, log: str) -> dict[str, Any]:
    """The checks of the docstring on a finished kill-and-resume run; each is (passed, what was seen)."""
    import yaml

    config = yaml.safe_load((run_dir / "rl.resolved.yaml").read_text())
    dumps = {step: run_dir / "rollouts" / f"{step}.jsonl" for step in range(1, STEPS + 1)}
    missing = [step for step, path in dumps.items() if not path.is_file()]
    checkpoints = Path(config["trainer"]["default_local_dir"])
    data = _helper("resume_checks")
    per_step = {step: data.trained(path) for step, path in dumps.items() if path.is_file()}
    before = set().union(*(set(per_step.get(s, {})) for s in range(1, CHECKPOINT + 1)))
    after = set().union(*(set(per_step.get(s, {})) for s in range(CHECKPOINT + 1, STEPS + 1)))
    count = handed_out(checkpoints / f"global_step_{CHECKPOINT}")
    order = data.data_order(Path(config["data"]["train_files"]), config["data"].get("seed"), count)
    in_flight = set(order) - before
    restored = re.findall(r"Restored (\d+) training prompt groups", log)
    kept = kept_checkpoints(checkpoints)
    expected_kept = list(range(STEPS - (KEEP - 1) * SAVE_EVERY, STEPS + 1, SAVE_EVERY))
    prompts_per_step = config["data"]["train_batch_size"]
    event_dir = run_dir / "tensorboard" / "rl"
    points = data.scalar_points(event_dir, "critic/rewards/mean")
    labels = dict(data.scalar_values(event_dir, "training/global_step"))
    checks = {
        "every step's dump exists": (not missing, f"missing: {missing}" if missing else "steps 1-6"),
        "resumed from the checkpoint of step 2": (
            f"global_step_{CHECKPOINT}" in log and "Resuming from" in log,
            f"'Resuming from ... global_step_{CHECKPOINT}' {'in' if 'Resuming from' in log else 'not in'} the log",
        ),
        "no restart from step 0: dumps 1-2 untouched, 3-6 rewritten": (
            all(dumps[s].stat().st_mtime < resumed_at for s in range(1, CHECKPOINT + 1))
            and all(dumps[s].stat().st_mtime > resumed_at for s in range(CHECKPOINT + 1, STEPS + 1))
            and not missing,
            "dump times against the resume's start",
        ),
        "no step counted twice: each step once in TensorBoard, labelled by its number": (
            points == Counter(range(1, STEPS + 1)) and all(labels.get(s) == s for s in range(1, STEPS + 1)),
            f"critic/rewards/mean points per step {dict(sorted(points.items()))}; training/global_step "
            f"{ {s: labels.get(s) for s in range(1, STEPS + 1)} }",
        ),
        "no prompt trained twice": (
            not before & after and all(len(c) == prompts_per_step for c in per_step.values()),
            f"{len(before & after)} prompts in both halves; prompts per step "
            f"{ {s: len(c) for s, c in per_step.items()} }",
        ),
        "in-flight prompts trained after the resume": (
            bool(in_flight) and in_flight <= after,
            f"{count} prompts handed out by step {CHECKPOINT}, {len(before)} trained by then, {len(in_flight)} in "
            f"flight, of which {len(in_flight & after)} trained after the resume; verl restored "
            f"{restored[-1] if restored else 'no'} prompt groups",
        ),
        f"checkpoints kept: the last {KEEP}, the crashed launch's counted (patches/0008)": (
            kept == expected_kept,
            f"checkpoints of steps {kept} (max_actor_ckpt_to_keep {KEEP})",
        ),
    }
    return {
        "checks": {name: {"passed": bool(ok), "seen": seen} for name, (ok, seen) in checks.items()},
        "in_flight": len(in_flight),
        "restored_groups": int(restored[-1]) if restored else None,
    }


def kill_and_resume(smoke: Path, assets: Path, mode: str, run_dir: Path, timeout_s: float = 1800) -> dict[str, Any]:
    """Launch, SIGKILL after step 3, resume; returns the check results and timings."""
    processes = _helper("processes")
    ray_dir = tempfile.mkdtemp(prefix="rt-", dir="/tmp")  # short: Ray's socket paths must fit 107 characters
    args = [
        "+smoke=rl",
        f"trainer.total_training_steps={STEPS}",
        f"trainer.save_freq={SAVE_EVERY}",
        f"trainer.max_actor_ckpt_to_keep={KEEP}",
        "trainer.val_before_train=false",
        "trainer.test_freq=-1",
        f"trainer.experiment_name=resume-{mode}",
        f"+ray_kwargs.ray_init._temp_dir={ray_dir}",
    ]
    run_dir.mkdir(parents=True, exist_ok=True)
    log = run_dir / "launches.log"
    started = time.monotonic()

    def start(env: dict[str, str]) -> subprocess.Popen:
        with open(log, "a") as out:
            return subprocess.Popen(
                [str(REPO_ROOT / "scripts" / "launch.sh"), "rl", *args],
                cwd=REPO_ROOT,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def wait(condition, proc: subprocess.Popen, what: str) -> None:
        deadline = time.monotonic() + timeout_s
        while not condition():
            if proc.poll() is not None or time.monotonic() > deadline:
                if proc.poll() is None:
                    os.killpg(proc.pid, signal.SIGKILL)
                raise RuntimeError(f"{mode}: no {what} (exit {proc.returncode}); see {log}")
            time.sleep(0.5)

    with running_sandbox() as sandbox:
        env = learning_run.launch_env(smoke / "sft_merged", assets, run_dir, f"{sandbox}/run_code", mode)
        first = start(env)
        wait(lambda: (run_dir / "rollouts" / f"{KILL_AFTER}.jsonl").is_file(), first, f"step {KILL_AFTER}")
        os.killpg(first.pid, signal.SIGKILL)  # the launcher, verl, Ray and vLLM: the whole process group
        first.wait(timeout=60)
        deadline = time.monotonic() + 60
        while processes.processes_with(ray_dir) and time.monotonic() < deadline:
            time.sleep(1)
        for pid in processes.processes_with(ray_dir):  # only what this launch started (its own Ray temp dir)
            os.kill(pid, signal.SIGKILL)
        resumed_at = time.time()
        second = start(env)
        wait(lambda: second.poll() is not None, second, "end of the resumed run")
    if second.returncode != 0:
        raise RuntimeError(f"{mode}: the resumed run exited {second.returncode}; see {log}")
    result = check(run_dir, resumed_at, verl_log(run_dir))
    result.update(mode=mode, wall_s=round(time.monotonic() - started, 1), resumed_at=resumed_at)
    (run_dir / "resume.json").write_text(json.dumps(result, indent=2) + "\n")
    return result


def render(results: dict[str, dict[str, Any]], source: str, measured: dict[str, Any]) -> str:
    host = measured.get("host") or {}
    lines = [
        "## Resume in the async trainer modes (`make bench-async`)",
        "",
        f"Measured {measured.get('started', '?')} on {host.get('cpu_model', '?')}, {host.get('cores', '?')} "
        f"cores, compute dtype {host.get('dtype', '?')}, commit {measured.get('commit') or '?'}; {source}. Each "
        f"mode: the smoke's RL stage, {STEPS} steps, a checkpoint every {SAVE_EVERY} keeping {KEEP}; SIGKILL of the "
        f"whole launch after step {KILL_AFTER}, then the same launch with the same RUN_DIR. The checks "
        "(bench/async_resume.py) stand for verl's reported bugs: a step counted twice (#7933), a silent restart from "
        "step 0 (#7952), in-flight samples lost (#4199); and for checkpoints piling up across the resume "
        "(patches/0008).",
        "",
        "| mode | check | result | what was seen |",
        "|---|---|---|---|",
    ]
    for mode, result in results.items():
        for name, c in result["checks"].items():
            lines.append(f"| {mode} | {name} | {'pass' if c['passed'] else '**FAIL**'} | {c['seen']} |")
    lines += [
        "",
        "Wall time, both launches: " + ", ".join(f"{m} {r['wall_s']:.0f} s" for m, r in results.items()) + ".",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke-run", type=Path, default=None, help="a smoke run folder with sft_merged/")
    parser.add_argument("--modes", default=",".join(ASYNC_MODES), help="comma-separated (default %(default)s)")
    parser.add_argument("--out", type=Path, default=None, help="run folders (default runs/async-resume-<time>)")
    parser.add_argument("--from-runs", type=Path, default=None, help="check and render finished runs again")
    parser.add_argument("--output", type=Path, default=REPO_ROOT / "docs" / "performance.md")
    args = parser.parse_args(argv)
    modes = [m for m in args.modes.split(",") if m]
    if unknown := set(modes) - set(ASYNC_MODES):
        parser.error(f"--modes: {sorted(unknown)} are not async trainer modes ({', '.join(ASYNC_MODES)})")
    if args.from_runs is not None:
        out = args.from_runs
        measured = json.loads((out / "measured.json").read_text())
        results = {}
        for mode in modes:
            saved = json.loads((out / mode / "resume.json").read_text())
            results[mode] = {**saved, **check(out / mode, saved["resumed_at"], verl_log(out / mode))}
    else:
        from learning_signal import find_smoke_run  # bench/ is on sys.path when this runs as a script

        smoke = find_smoke_run(args.smoke_run)
        import yaml

        assets = Path(yaml.safe_load((smoke / "rl.resolved.yaml").read_text())["data"]["train_files"]).parents[1]
        out = (args.out or REPO_ROOT / "runs" / f"async-resume-{datetime.datetime.now():%Y%m%d-%H%M%S}").resolve()
        out.mkdir(parents=True, exist_ok=True)
        measured = {**learning_run.measured_now(), "smoke_run": os.path.relpath(smoke, REPO_ROOT)}
        (out / "measured.json").write_text(json.dumps(measured, indent=2) + "\n")
        results = {}
        for mode in modes:
            print(f"[bench] {mode}: kill after step {KILL_AFTER}, resume; into {out / mode}", flush=True)
            results[mode] = kill_and_resume(smoke, assets, mode, out / mode)
            for name, c in results[mode]["checks"].items():
                print(f"[bench] {mode}: {name}: {'pass' if c['passed'] else 'FAIL'} ({c['seen']})", flush=True)
    source = f"SFT model of `{measured.get('smoke_run', '?')}`, runs in `{os.path.relpath(out.resolve(), REPO_ROOT)}/`"
    replace_section(args.output, SECTION, render(results, source, measured))
    print(f"[bench] wrote the {SECTION} section of {args.output}")
    return 0 if all(c["passed"] for r in results.values() for c in r["checks"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
