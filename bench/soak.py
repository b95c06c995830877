"""A soak (make bench-soak): the smoke's RL stage for SOAK_MINUTES (120) with faults on a schedule, sampled every
30 s, and verdicts on what grows, leaks or fills the disk.

The run: the smoke's RL stage (its SFT'd tiny model, data, reward; the tool with per-trajectory sessions, the sandbox
feature most likely to leak) for as many steps as fit, validated and checkpointed every 10 steps keeping 3, as the
reference run is (configs/rl.yaml). The sandbox runs under scripts/keep_sandbox_up.sh, the way docs/troubleshooting.md
tells a user to keep it up, and is stopped every ``--restart-every`` minutes (10); the supervisor starts it again.
About halfway the whole launch is killed with SIGKILL during a validation (the one that follows a checkpoint: the
worst moment for the curves and the resume) and launched again the same way (the documented resume). At the end the
launch is stopped as a user would stop it (SIGINT to its process group), then the sandbox.

Steps and hours apart: the CPU makes ~30x the reference run's steps per hour, so growth that follows steps and growth
that follows time read the same unless the step rate changes. After each launch's first ``PAUSE_AFTER_MIN`` minutes
the soak holds vLLM (SIGSTOP to its engine and workers, which are not Ray's: Ray's own keepalive would end a stopped
actor's calls after a few minutes) for ``--pause`` minutes of every twice that, starting in a rollout (sandbox
sessions open; vLLM's model-step timeout raised past it): a step whose generation takes that much longer, as the
reference run's do. Everything else lives on; the verdicts fit time and steps together (bench/soak_verdicts.py). No
sandbox stop falls in a pause.

Each sample (bench/soak_probe.py) goes to ``<out>/samples.jsonl``, each fault to ``<out>/events.jsonl``; the verdicts
(``verdicts``) go to ``<out>/soak.json`` and the docs/performance.md section ``soak``, with a picture of memory over
time per process group (docs/img/soak_memory.png).

    python bench/soak.py [--minutes 120] [--smoke-run runs/smoke-x] [--trainer-mode sync] [--out runs/soak-<time>]
    python bench/soak.py --from-run runs/soak-<time>      # verdicts and the section again

Exits 1 when a verdict fails.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml
from soak_probe import GROUPS, descendants, processes, sample
from soak_verdicts import _helper, render, verdicts

from retool.constants import REPO_ROOT
from retool.markdown_sections import replace_section
from retool.profiles import get_profile
from retool.resume import kept_checkpoints, latest_checkpoint
from retool.smoke import learning_run
from retool_sandbox.client import SandboxClient

SECTION = "soak"
SAMPLE_EVERY_S = 30.0
# The kill comes this long after a checkpoint appears: inside the validation that follows it (~60 s in the soak).
IN_VALIDATION_S = 20.0
SAVE_EVERY, KEEP = 10, 3  # configs/rl.yaml: the reference run's cadence
PAUSE_AFTER_MIN, PAUSE_CLEAR_MIN = 12.0, 5.0  # a launch's first pause; no pause ends closer to the kill or the end
PICTURE = REPO_ROOT / "docs" / "img" / "soak_memory.png"


def _default_interrupt() -> None:
    """A soak started in the background (``nohup make bench-soak &``) ignores SIGINT, and so would the launch it
    starts: its final SIGINT would then stop nothing. The launch takes it as from a terminal."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGQUIT, signal.SIG_DFL)


class Soak:
    def __init__(
        self, out: Path, smoke: Path, trainer_mode: str, save_every: int = SAVE_EVERY, pause_min: float = 0.0
    ) -> None:
        self.out, self.run_dir = out, out / "run"
        resolved = smoke / "rl.resolved.yaml"  # the assets the smoke's RL stage read; else where the smoke builds them
        self.assets = (
            Path(yaml.safe_load(resolved.read_text())["data"]["train_files"]).parents[1]
            if resolved.is_file()
            else REPO_ROOT / ".cache" / "smoke-assets"
        )
        self.ray_dir = tempfile.mkdtemp(prefix="rt-", dir="/tmp")  # short: Ray's socket paths must fit 107 characters
        self.port = _helper("ports").free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        tool = yaml.safe_load(get_profile(learning_run.assets_profile(self.assets)).tool_config_path.read_text())
        tool["tools"][0]["config"]["session_mode"] = "per_trajectory"
        out.mkdir(parents=True, exist_ok=True)
        (out / "tool.yaml").write_text(yaml.safe_dump(tool))
        self.args = [
            "+smoke=rl",
            "trainer.experiment_name=soak",
            "trainer.total_epochs=1000",
            "trainer.total_training_steps=1000000",
            f"trainer.save_freq={save_every}",
            f"trainer.test_freq={save_every}",
            f"trainer.max_actor_ckpt_to_keep={KEEP}",
            f"actor_rollout_ref.rollout.multi_turn.tool_config_path={out / 'tool.yaml'}",
            f"+ray_kwargs.ray_init._temp_dir={self.ray_dir}",
        ]
        self.env = learning_run.launch_env(
            smoke / "sft_merged", self.assets, self.run_dir, f"{self.url}/run_code", trainer_mode
        )
        # vLLM's engine gives its workers 300 s to answer a step; a pause held both and would outlast that
        self.env["VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS"] = str(int(pause_min * 60 + 300))
        self.launch: subprocess.Popen | None = None
        self.supervisor: subprocess.Popen | None = None
        self.launch_number = 0
        self.paused: tuple[float, list[int], int] | None = None  # since, the held pids, the step then
        self.save_every, self.pause_min = save_every, pause_min
        self.started = time.time()

    # ------------------------------------------------------------------ records
    def event(self, kind: str, **facts: Any) -> None:
        record = {"t": round(time.time(), 1), "event": kind, "step": self.step(), **facts}
        with open(self.out / "events.jsonl", "a") as fh:
            fh.write(json.dumps(record) + "\n")
        print(f"[soak] {(time.time() - self.started) / 60:6.1f} min  {kind} {facts}", flush=True)

    def step(self) -> int:
        dumps = [int(p.stem) for p in (self.run_dir / "rollouts").glob("*.jsonl") if p.stem.isdigit()]
        return max(dumps, default=0)

    def health(self) -> dict | None:
        return SandboxClient(self.url).health(timeout=5)

    def record_sample(self) -> None:
        health = self.health()
        uids = range(health["uids"][0], health["uids"][1] + 1) if health and health.get("uids") else None
        found = sample(
            self.launch.pid if self.launch and self.launch.poll() is None else None,
            self.ray_dir,
            self.run_dir,
            health["pid"] if health else None,
            uids,
            health,
        )
        running = self.launch is not None and self.launch.poll() is None
        kept = len(kept_checkpoints(self.run_dir / "checkpoints" / "rl"))
        found.update(step=self.step(), launch=self.launch_number if running else None, checkpoints_kept=kept)
        with open(self.out / "samples.jsonl", "a") as fh:
            fh.write(json.dumps(found) + "\n")

    # ------------------------------------------------------------------ the sandbox
    def start_sandbox(self) -> None:
        log = open(self.out / "sandbox.log", "a")
        env = {**os.environ, "RETOOL_SANDBOX_BIN": str(Path(sys.executable).parent / "retool-sandbox")}
        self.supervisor = subprocess.Popen(
            [str(REPO_ROOT / "scripts" / "keep_sandbox_up.sh"), "--host", "127.0.0.1", "--port", str(self.port)],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.wait_sandbox_up()

    def wait_sandbox_up(self, timeout_s: float = 120) -> dict:
        deadline = time.monotonic() + timeout_s
        while (health := self.health()) is None:
            if time.monotonic() > deadline or self.supervisor.poll() is not None:
                raise RuntimeError(f"the sandbox did not come up within {timeout_s:.0f} s; see {self.out}/sandbox.log")
            time.sleep(0.2)
        return health

    def restart_sandbox(self) -> None:
        """Stop the server the way a user would (SIGTERM to its pid); the supervisor starts it again."""
        health = self.health()
        if health is None:
            self.event("sandbox_restart_skipped", why="the sandbox was not up")
            return
        pid, uids = health["pid"], range(health["uids"][0], health["uids"][1] + 1) if health.get("uids") else None
        sessions_open = (health.get("sessions") or {}).get("live")
        down = time.time()
        os.kill(pid, signal.SIGTERM)
        while os.path.exists(f"/proc/{pid}") and time.time() - down < 60:
            time.sleep(0.05)
        table = processes()  # before the supervisor's pause ends: what the stopped server left
        left = [p for p, info in table.items() if uids is not None and info["uid"] in uids]
        health = self.wait_sandbox_up()
        self.event(
            "sandbox_restart",
            old_pid=pid,
            new_pid=health["pid"],
            down_s=round(time.time() - down, 1),
            sessions_open_at_stop=sessions_open,
            leftover_uid_processes=len(left),
        )

    # ------------------------------------------------------------------ the launch
    def start_launch(self) -> None:
        self.launch_number += 1
        log = open(self.out / "launches.log", "a")
        self.launch = subprocess.Popen(
            [str(REPO_ROOT / "scripts" / "launch.sh"), "rl", *self.args],
            cwd=REPO_ROOT,
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_default_interrupt,
        )
        self.event("launch", number=self.launch_number, pid=self.launch.pid)

    def vllm_processes(self) -> list[int]:
        """The launch's vLLM engine and workers: processes of their own, outside Ray's RPC."""
        table = processes()
        return sorted(pid for pid in descendants(table, {self.launch.pid}) if table[pid]["cmd"].startswith("vllm::"))

    def pause(self) -> None:
        pids = self.vllm_processes()
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)
        self.paused = (time.time(), pids, self.step())
        self.event("pause", pids=pids)

    def unpause(self) -> None:
        if self.paused is None:
            return
        since, pids, step = self.paused
        for pid in pids:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
        self.paused = None
        self.event(
            "paused", from_t=round(since, 1), to_t=round(time.time(), 1), pids=pids, steps_during=self.step() - step
        )

    def ray_processes(self) -> list[int]:
        return _helper("processes").processes_with(self.ray_dir)

    def stop_launch(self, sig: signal.Signals, kind: str, grace_s: float, **facts: Any) -> None:
        """Signal the launch's whole process group, wait for it and for its Ray processes; record what was left."""
        self.unpause()
        os.killpg(self.launch.pid, sig)
        try:
            self.launch.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            os.killpg(self.launch.pid, signal.SIGKILL)
            self.launch.wait()
        deadline = time.monotonic() + 60
        while self.ray_processes() and time.monotonic() < deadline:
            time.sleep(1)
        left = self.ray_processes()
        for pid in left:  # only this soak's (its own Ray temp dir)
            os.kill(pid, signal.SIGKILL)
        health = self.health()
        self.event(
            kind,
            signal=sig.name,
            exit=self.launch.returncode,
            leftover_ray_processes=len(left),
            sessions_live=(health.get("sessions") or {}).get("live") if health else None,
            **facts,
        )

    # ------------------------------------------------------------------ the schedule
    def run(self, minutes: float, restart_every_min: float) -> None:
        self.record_sample()  # the host before anything started: the baseline of /dev/shm, /tmp and processes
        end = self.started + minutes * 60
        kill_at = self.started + minutes * 30
        armed_after: int | None = None  # the checkpoint at kill_at: the kill waits for the next one and its validation
        checkpoint_seen: float | None = None
        next_restart = self.started + restart_every_min * 60
        next_sample = time.time()
        next_pause = self.started + PAUSE_AFTER_MIN * 60
        killed = False
        try:
            self.start_sandbox()
            self.start_launch()
            while time.time() < end:
                now = time.time()
                if self.launch.poll() is not None:  # ended on its own: a verdict says why, the soak ends as usual
                    self.event(
                        "launch_exited", number=self.launch_number, exit=self.launch.returncode, why=self.last_error()
                    )
                    break
                if now >= next_sample:
                    self.record_sample()
                    next_sample = now + SAMPLE_EVERY_S
                if self.paused is not None and now >= self.paused[0] + self.pause_min * 60:
                    self.unpause()
                    next_pause = now + self.pause_min * 60
                    next_restart = max(next_restart, now + 60)  # a stop is ridden out by calls, not by a pause
                elif (
                    self.paused is None
                    and self.pause_min > 0
                    and now >= next_pause
                    and now + (self.pause_min + PAUSE_CLEAR_MIN) * 60 <= (end if killed else kill_at)
                    and ((self.health() or {}).get("sessions") or {}).get("live")
                ):
                    self.pause()
                if now >= next_restart and self.paused is None:
                    self.restart_sandbox()
                    next_restart = now + restart_every_min * 60
                if not killed and now >= kill_at:
                    checkpoint = latest_checkpoint(self.run_dir / "checkpoints" / "rl", strict=False) or 0
                    if armed_after is None:
                        armed_after = checkpoint
                    elif checkpoint > armed_after and checkpoint_seen is None:
                        checkpoint_seen = now
                if checkpoint_seen is not None and not killed and now >= checkpoint_seen + IN_VALIDATION_S:
                    self.stop_launch(signal.SIGKILL, "kill", 60, in_validation_of=checkpoint)
                    killed = True
                    self.record_sample()
                    self.start_launch()
                    next_pause = time.time() + PAUSE_AFTER_MIN * 60
                time.sleep(1)
        finally:
            self.finish()

    def last_error(self) -> str:
        """The launcher's own words on why it stopped: its [FAIL] and error lines."""
        lines = (self.out / "launches.log").read_text(errors="replace").splitlines()[-60:]
        return " | ".join(line.strip()[:300] for line in lines if line.startswith(("[FAIL]", "error:")))[-1200:]

    def finish(self) -> None:
        """Stop the launch as a user would (SIGINT), then the sandbox the documented way, sampling what is left. The
        sandbox is stopped even when the launch's stop or a sample fails: nothing of the soak outlives it."""
        try:
            self.unpause()
            if self.launch is not None and self.launch.poll() is None:
                self.stop_launch(signal.SIGINT, "stop", 180)
            self.record_sample()
            time.sleep(SAMPLE_EVERY_S)  # what the sandbox keeps once the run is gone
            self.record_sample()
        finally:
            if self.supervisor is not None and self.supervisor.poll() is None:
                self.supervisor.send_signal(signal.SIGTERM)  # as the docs say: kill <its pid>; it stops the server
                self.supervisor.wait(timeout=60)
                time.sleep(1)
        self.record_sample()
        self.event("end", supervisor_exit=self.supervisor.returncode if self.supervisor else None)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=float(os.environ.get("SOAK_MINUTES", 120)))
    parser.add_argument("--restart-every", type=float, default=10.0, help="minutes between sandbox stops")
    parser.add_argument(
        "--pause",
        type=float,
        default=10.0,
        help=f"minutes vLLM is held in every twice that, after each launch's first {PAUSE_AFTER_MIN:g} (0: none)",
    )
    parser.add_argument(
        "--save-every",
        type=int,
        default=SAVE_EVERY,
        help="steps between checkpoints and validations (default %(default)s, the reference run's)",
    )
    parser.add_argument("--smoke-run", type=Path, default=None, help="a smoke run folder with sft_merged/")
    parser.add_argument("--trainer-mode", default=os.environ.get("TRAINER_MODE", "sync"))
    parser.add_argument("--out", type=Path, default=None, help="the soak's folder (default runs/soak-<time>)")
    parser.add_argument("--from-run", type=Path, default=None, help="verdicts and the section of a finished soak")
    parser.add_argument("--output", type=Path, default=REPO_ROOT / "docs" / "performance.md")
    args = parser.parse_args(argv)
    if args.from_run is not None:
        out = args.from_run.resolve()
    else:
        from learning_signal import find_smoke_run  # bench/ is on sys.path when this runs as a script

        smoke = find_smoke_run(args.smoke_run)
        out = (args.out or REPO_ROOT / "runs" / f"soak-{datetime.datetime.now():%Y%m%d-%H%M%S}").resolve()
        out.mkdir(parents=True, exist_ok=True)
        measured = {
            **learning_run.measured_now(),
            "minutes": args.minutes,
            "restart_every_min": args.restart_every,
            "pause_min": args.pause,
            "save_every": args.save_every,
            "trainer_mode": args.trainer_mode,
            "smoke_run": os.path.relpath(smoke, REPO_ROOT),
        }
        (out / "measured.json").write_text(json.dumps(measured, indent=2) + "\n")
        Soak(out, smoke, args.trainer_mode, args.save_every, args.pause).run(args.minutes, args.restart_every)
    result = verdicts(out)
    (out / "soak.json").write_text(json.dumps(result, indent=2) + "\n")
    for verdict in result["verdicts"]:
        word = "pass" if verdict["passed"] else "inconclusive" if verdict.get("inconclusive") else "FAIL"
        print(f"[soak] {word}: {verdict['name']}: {verdict['seen']}", flush=True)
    replace_section(args.output, SECTION, render(result, os.path.relpath(out, REPO_ROOT), PICTURE, GROUPS))
    print(f"[soak] wrote the {SECTION} section of {args.output} and {PICTURE}")
    return 0 if all(v["passed"] for v in result["verdicts"]) else 1


if __name__ == "__main__":
    sys.exit(main())
