"""retool.console on real output: a CPU smoke run's verl output (tests/fixtures/console/, trimmed, bytes unchanged)
and small commands run through ``python -m retool.console``. The view must show each step with the numbers verl
logged, keep dumps and chatter off the console, pass warnings and errors, and never lose a byte of the log or the
command's exit status."""

from __future__ import annotations

import io
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from retool.console import view
from retool.console.lines import Level, fingerprint, level_of, parse_step
from retool.console.notices import Notices
from retool.console.output import Plain, Terminal
from retool.console.sources import Sources
from retool.console.startup import header
from retool.console.stream import Console

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures" / "console"
CONSOLE = [sys.executable, "-m", "retool.console"]


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def compact(
    data: bytes,
    stage: str,
    *,
    total: int | None = None,
    validates_first: bool = False,
    seconds_per_line: float = 0.0,
    chunk: int = 997,
) -> list[str]:
    """The console lines for ``data``, a line every ``seconds_per_line`` on a fake clock, each line fed in pieces of
    ``chunk`` bytes (so lines and UTF-8 characters arrive split, as from a pipe)."""
    out, clock = io.StringIO(), Clock()
    console = Console(stage, Plain(out), "logs/x.log", total=total, validates_first=validates_first, clock=clock)
    for line in data.splitlines(keepends=True):
        clock.now += seconds_per_line
        for start in range(0, len(line), chunk):
            console.feed(line[start : start + chunk])
    console.finish(0)
    return out.getvalue().splitlines()


def raw_value(raw: str, step: int, key: str) -> float:
    """``key`` at ``step`` in verl's raw console-logger output, read with a regex of its own."""
    line = re.search(rf"(?<![\w/])step:{step} - .*{re.escape(key)}:([^ ]+)(?: - |$)", raw, re.M)
    assert line, f"{key} missing at step {step} in the fixture"
    value = line.group(1)
    inner = re.fullmatch(r"np\.\w+\((.*)\)", value)
    return float(inner.group(1) if inner else value)


def test_sft_output_becomes_a_line_per_step_with_loss_lr_pace_and_eta():
    data = (FIXTURES / "sft.log").read_bytes()
    raw = data.decode()
    lines = compact(data, "sft", seconds_per_line=0.5)
    trained = sorted({int(s) for s in re.findall(r"(?<![\w/])step:(\d+) - perf/", raw)})
    assert len(trained) >= 5
    for step in trained:
        mine = [line for line in lines if line.startswith(f"[sft] step {step}/128 |")]
        assert len(mine) == 1, (step, lines)
        loss, lr = raw_value(raw, step, "train/loss"), raw_value(raw, step, "train/lr")
        assert f"| loss {view.num(loss)} |" in mine[0] and (f"| lr {lr:.2e} |" in mine[0] or lr == 0)
        assert re.search(r"\| \d+\.\d s/step \| ETA \d", mine[0]), mine[0]
    for step in re.findall(r"(?<![\w/])step:(\d+) - val/loss", raw):
        assert any(line.startswith(f"[sft] validation at step {step}: val loss") for line in lines)
    assert any(line.startswith("[sft] checkpoint: ") and "global_step_128" in line for line in lines)
    assert lines[-1].startswith(f"[sft] done: {len(trained)} steps in ") and "9 known harmless" in lines[-1]
    # the config dump, memory figures and harmless start-up warnings stay in the log
    assert not any("{'model'" in line or "perf/max_memory" in line or "torchtitan" in line for line in lines)
    assert len(lines) <= len(trained) + 8, lines


def test_rl_output_becomes_step_and_validation_lines_with_the_numbers_verl_logged():
    data = (FIXTURES / "rl.log").read_bytes()
    raw = re.sub(r"\x1b\[[0-9;]*m", "", data.decode())
    lines = compact(data, "rl", total=12, validates_first=True, seconds_per_line=0.2)
    text = "\n".join(lines)
    assert "\x1b" not in text and "pid=" not in text and "'actor_rollout_ref'" not in text
    assert "[rl] workers ready after" in text and "validating before training" in text
    before = next(line for line in lines if line.startswith("[rl] validation before training: "))
    for source in ("synthetic_arith", "aime_2025"):
        assert f"{source} {raw_value(raw, 0, f'val-core/{source}/acc/mean@4'):.3f}" in before
    steps = sorted({int(s) for s in re.findall(r"(?<![\w/])step:(\d+) - .*critic/rewards/mean", raw)})
    assert steps[:2] == [1, 2] and len(steps) >= 3
    for step in steps:
        mine = next(line for line in lines if line.startswith(f"[rl] step {step}/12 |"))
        expected = [
            f"reward {view.num(raw_value(raw, step, 'critic/rewards/mean'))}",
            f"acc {view.num(raw_value(raw, step, 'train-reward/acc/mean'))}",
            f"tool {view.num(raw_value(raw, step, 'train-reward/used_tool/mean'))}",
            f"turns {view.num(raw_value(raw, step, 'num_turns/mean'))}",
            f"resp {raw_value(raw, step, 'response_length/mean'):.0f} tok",
            f"{raw_value(raw, step, 'timing_s/step'):.1f} s/step "
            f"(gen {raw_value(raw, step, 'timing_s/gen'):.1f}, "
            f"update {raw_value(raw, step, 'timing_s/update_actor'):.1f})",
            "ETA ",
        ]
        if raw_value(raw, step, "failures/total/all") == 0:  # the failure accounting's metrics are in this run
            expected.append("| failures 0 |")
        assert all(part in mine for part in expected), (mine, expected)
    last = steps[-1]
    if re.search(rf"step:{last} - .*val-core/", raw):
        assert any(
            line.startswith(f"[rl] validation at step {last}: acc mean@4: aime_2025 ") and "synthetic_arith " in line
            for line in lines
        )
    # a model's malformed tool call is an error verl logs: shown once, its repeats counted
    assert sum("Failed to decode tool call" in line for line in lines) == 1
    assert not any("transfer_queue" in line or "target_num_threads" in line for line in lines)
    assert lines[-1].startswith(f"[rl] done: {len(steps)} steps in ") and "known harmless" in lines[-1]


def test_a_validation_logged_on_its_own_line_after_its_step_is_not_another_step():
    # patches/0009 logs a step's metrics before its validation, and the validation with its timing_s/testing after
    data = (
        b"step:2 - training/global_step:2 - critic/rewards/mean:0.5 - timing_s/step:2.0\n"
        b"step:2 - val-core/aime_2025/acc/mean@4:0.25 - timing_s/testing:40.0\n"
    )
    lines = compact(data, "rl", total=2)
    assert sum(line.startswith("[rl] step 2/2 | ") for line in lines) == 1, lines
    assert sum(line.startswith("[rl] validation at step 2: acc mean@4: aime_2025 0.250") for line in lines) == 1
    assert not view.is_training_step({"val-core/x/acc/mean@1": 1.0, "timing_s/testing": 4.0})
    assert view.is_training_step({"timing_s/step": 2.0, "val-core/x/acc/mean@1": 1.0})


def run_console(*args: str, env: dict | None = None, stdin: bytes | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*CONSOLE, *args],
        input=stdin,
        capture_output=True,
        timeout=120,
        env={**os.environ, "VERBOSE": "0", **(env or {})},
        cwd=REPO,
    )


def test_a_validation_line_lists_its_data_sources_in_the_same_order_whichever_finished_first():
    # verl keys the validation metrics in the order trajectories finished; CI met both orders in one week
    first = {
        "val-core/synthetic_arith/acc/mean@4": 0.418,
        "val-core/aime_2025/acc/mean@4": 0.0,
        "val-aux/num_turns/mean": 2.9,
    }
    second = dict(reversed(list(first.items())))
    assert (
        view.validation(0, first)
        == view.validation(0, second)
        == "validation before training: acc mean@4: aime_2025 0.000, synthetic_arith 0.418 | turns 2.9"
    )


def test_steps_start_up_and_checkpoints_come_from_the_files_the_stage_writes(tmp_path):
    """With verl's metric stream and checkpoint folder named, the console shows what they hold: verl's own lines for
    the same facts (a step line, the ready line, the save line) change nothing, and a line still being written
    waits for its newline."""
    metrics, checkpoints = tmp_path / "logs" / "metrics" / "rl-2.jsonl", tmp_path / "checkpoints" / "rl"
    (checkpoints / "global_step_4").mkdir(parents=True)
    (checkpoints / "latest_checkpointed_iteration.txt").write_text("4")  # the step this resumed launch continues after
    out, clock = io.StringIO(), Clock()
    console = Console(
        "rl",
        Plain(out),
        "logs/rl.log",
        total=6,
        validates_first=True,
        clock=clock,
        sources=Sources(metrics=metrics, checkpoints=checkpoints),
    )

    def advance(*chunks: bytes) -> list[str]:
        before = len(out.getvalue().splitlines())
        for chunk in chunks:
            console.feed(chunk)
        clock.now += 1.0
        console.tick()
        return out.getvalue().splitlines()[before:]

    def record(step: int, data: dict, end: str = "\n") -> None:
        with metrics.open("a") as handle:
            handle.write(json.dumps({"step": step, "data": data}) + end)

    assert advance(b"all initialize finished, ready to fit\n") == []  # the file marks it, not the line
    metrics.parent.mkdir(parents=True)
    metrics.touch()
    assert advance()[0].startswith("[rl] workers ready after ") and "validating before training" in out.getvalue()
    record(4, {"val-core/synthetic_arith/acc/mean@4": 0.5, "val-aux/num_turns/mean": 3.0})
    assert advance() == ["[rl] validation at step 4: acc mean@4: synthetic_arith 0.500 | turns 3"]
    step = {"critic/rewards/mean": 0.25, "train-reward/acc/mean": 0.5, "timing_s/step": 10.0}
    with metrics.open("a") as handle:
        handle.write(json.dumps({"step": 5, "data": step})[:20])  # verl is still writing it
    assert advance(b"step:5 - critic/rewards/mean:9.99 - timing_s/step:10.0\n") == []
    with metrics.open("a") as handle:
        handle.write(json.dumps({"step": 5, "data": step})[20:] + "\n")
    shown = advance()
    assert len(shown) == 1 and shown[0].startswith("[rl] step 5/6 | reward 0.25 |"), shown
    (checkpoints / "global_step_6").mkdir()
    (checkpoints / "latest_checkpointed_iteration.txt").write_text("6")
    record(6, step)
    shown = advance(b"Saving checkpoint to /elsewhere/global_step_6\n")
    assert shown[0].startswith("[rl] step 6/6 | ") and shown[1] == f"[rl] checkpoint: {checkpoints}/global_step_6"
    assert advance() == []  # said once
    record(7, {"val-core/synthetic_arith/acc/mean@4": 0.75})  # written just before the stage ended
    console.finish(0)
    lines = out.getvalue().splitlines()
    assert "[rl] validation at step 7: acc mean@4: synthetic_arith 0.750" in lines
    assert lines[-1].startswith("[rl] done: 2 steps in ") and not any("9.99" in line for line in lines)


def test_without_a_validation_first_the_metric_stream_s_file_marks_the_start_of_training(tmp_path):
    # SFT: its progress bar may reach the console before or after the poll that finds the file; one line either way
    for bar_first in (False, True):
        metrics = tmp_path / f"sft-{bar_first}.jsonl"
        out, clock = io.StringIO(), Clock()
        console = Console("sft", Plain(out), "logs/sft.log", total=4, clock=clock, sources=Sources(metrics=metrics))
        clock.now += 20
        if bar_first:
            console.feed(b"Epoch 1/1:   0%|          | 0/4 [00:00<?, ?it/s]\n")
        metrics.write_text(json.dumps({"step": 1, "data": {"train/loss": 0.5, "train/lr": 1e-3}}) + "\n")
        clock.now += 1
        console.tick()
        console.feed("Epoch 1/1:  25%|██▌       | 1/4 [00:01<00:03, 1.00it/s]\n".encode())
        console.finish(0)
        lines = out.getvalue().splitlines()
        assert sum(line.startswith("[sft] training starts after ") for line in lines) == 1, lines
        assert any(line.startswith("[sft] step 1/4 | loss 0.5 |") for line in lines), lines


def test_the_metric_stream_is_read_only_when_verl_writes_it():
    from retool.console.cli import sources

    config = {"trainer": {"logger": ["console", "tensorboard", "file"], "default_local_dir": "/r/checkpoints/rl"}}
    assert sources(config, Path("/r/logs/metrics/rl-1.jsonl")) == Sources(
        Path("/r/logs/metrics/rl-1.jsonl"), Path("/r/checkpoints/rl")
    )
    config["trainer"]["logger"] = ["console", "tensorboard"]  # no file tracker: the file would never appear
    assert sources(config, Path("/r/logs/metrics/rl-1.jsonl")).metrics is None
    assert sources({}, None) == Sources()


def test_the_log_gets_every_byte_appended_whatever_the_console_shows(tmp_path):
    fixture = FIXTURES / "rl.log"
    log = tmp_path / "logs" / "rl.log"
    first = run_console("--stage", "rl", "--log", str(log), "--", "cat", str(fixture))
    assert first.returncode == 0, first.stderr
    assert log.read_bytes() == fixture.read_bytes()
    assert len(first.stdout.splitlines()) < 40 and b"[rl] step 1/12 |" in first.stdout
    second = run_console("--stage", "rl", "--log", str(log), stdin=fixture.read_bytes())  # from a pipe, appended
    assert second.returncode == 0 and log.read_bytes() == fixture.read_bytes() * 2


def test_verbose_prints_the_output_unchanged(tmp_path):
    fixture = (FIXTURES / "sft.log").read_bytes()
    log = tmp_path / "sft.log"
    proc = run_console(
        "--stage", "sft", "--log", str(log), "--", "cat", str(FIXTURES / "sft.log"), env={"VERBOSE": "1"}
    )
    assert proc.returncode == 0
    head, _, rest = proc.stdout.partition(b"\n")
    assert head.startswith(b"[sft] full log: ") and rest == fixture and log.read_bytes() == fixture


def test_a_crash_keeps_its_exit_status_and_its_error_reaches_the_console(tmp_path):
    crash = "print('step:1 - critic/rewards/mean:0.5', flush=True); raise RuntimeError('the actor died')"
    proc = run_console("--stage", "rl", "--log", str(tmp_path / "rl.log"), "--", sys.executable, "-c", crash)
    out = proc.stdout.decode()
    assert proc.returncode == 1, out
    assert "[rl] step 1 | reward 0.5" in out
    assert "[rl] error: RuntimeError: the actor died (<string>:1 in <module>)" in out
    assert "[rl] failed: exit code 1 after " in out and "    RuntimeError: the actor died" in out
    killed = run_console("--stage", "rl", "--log", str(tmp_path / "k.log"), "--", "sh", "-c", "echo up; kill -9 $$")
    assert killed.returncode == 128 + signal.SIGKILL
    assert "[rl] failed: killed by SIGKILL (out of memory? dmesg tells)" in killed.stdout.decode()


def started(log: Path, on_signal: str, code: int, **popen: object) -> subprocess.Popen:
    """The console running a command that prints its last words and exits ``code`` on signal ``on_signal``; returned
    once the command is up."""
    script = (
        f"import signal, sys, time\n"
        f"def stop(*_):\n    print('stopping cleanly', flush=True); sys.exit({code})\n"
        f"signal.signal(signal.{on_signal}, stop)\nprint('ready', flush=True)\ntime.sleep(60)\n"
    )
    proc = subprocess.Popen(
        [*CONSOLE, "--stage", "rl", "--log", str(log), "--", sys.executable, "-c", script],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        cwd=REPO,
        **popen,
    )
    deadline = time.monotonic() + 60
    while b"ready" not in (log.read_bytes() if log.exists() else b"") and time.monotonic() < deadline:
        time.sleep(0.1)
    return proc


def test_ctrl_c_stops_the_command_and_what_it_prints_while_stopping_reaches_the_log(tmp_path):
    proc = started(tmp_path / "rl.log", "SIGINT", 130, start_new_session=True)
    os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C does: the whole foreground group
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 130 and b"stopping cleanly" in (tmp_path / "rl.log").read_bytes(), out


def test_sigterm_is_passed_on_to_the_command(tmp_path):
    proc = started(tmp_path / "rl.log", "SIGTERM", 143)
    proc.terminate()  # the console only: it hands the signal on and still logs the command's last words
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 143 and b"stopping cleanly" in (tmp_path / "rl.log").read_bytes(), out


def test_a_daemon_the_command_leaves_behind_does_not_keep_the_console_waiting(tmp_path, monkeypatch, capfdbinary):
    from retool.console import cli

    monkeypatch.setattr(cli, "TICK_S", 0.1)
    monkeypatch.setattr(cli, "DRAIN_S", 0.5)
    started = time.monotonic()
    code = cli.run_command("rl", tmp_path / "rl.log", ["sh", "-c", "sleep 30 & echo $!"], [], verbose=False)
    daemon = int((tmp_path / "rl.log").read_text())  # still holding the pipe; ours to stop
    os.kill(daemon, signal.SIGTERM)
    assert code == 0 and time.monotonic() - started < 10, capfdbinary.readouterr().out


def test_failures_show_by_cause_when_the_metrics_exist():
    base = {"critic/rewards/mean": 0.25, "timing_s/step": 12.0}
    assert "failures" not in view.rl_step(3, 12, base, None)
    zero = {
        **base,
        "failures/total/reward_error": 0.0,
        "failures/total/tool_exception": 0.0,
        "failures/total/all": 0.0,
        "failures/share": 0.0,
    }
    assert "| failures 0 |" in view.rl_step(3, 12, zero, None)
    some = {
        **zero,
        "failures/total/tool_exception": 2.0,
        "failures/total/reward_error": 1.0,
        "failures/total/all": 3.0,
        "failures/share": 3 / 32,
    }
    assert "| failures 3 (tool_exception 2, reward_error 1; 9.4% of the step) |" in view.rl_step(3, 12, some, None)
    data = (
        b"(TaskRunnerV1 pid=7) WARNING retool failures step 0 (val): 3 of 288 trajectories failed (1.0%): "
        b"tool_exception 3\n(TaskRunnerV1 pid=7) WARNING retool failures step 1 (train): 2 of 32 trajectories "
        b"failed (6.2%): reward_error 2\n"
    )
    lines = compact(data, "rl")
    assert "[rl] validation at step 0: 3 of 288 trajectories failed (1.0%): tool_exception 3" in lines
    assert not any("(train)" in line or "step 1" in line for line in lines)  # the step's own line will say it


def test_the_recipe_s_stop_message_reaches_the_console_whole():
    data = (FIXTURES / "stop.log").read_bytes()
    lines = compact(data, "rl")
    text = "\n".join(lines)
    assert "[rl] retool: the run was stopped at step 3 (training): 21 of 32 trajectories failed (65.6%)" in text
    assert "[rl]   What to do: the reward function raised on these trajectories." in text
    assert "[rl]   ValueError: injected reward failure on row " in text
    assert not any(line.startswith("[rl]     ") for line in lines)  # the traceback's frames stay in the log


def test_eta_comes_from_the_time_steps_take():
    lines = b"".join(
        b"(TaskRunnerV1 pid=7) step:%d - critic/rewards/mean:0.1 - timing_s/step:9.0\n" % i for i in range(1, 4)
    )
    out = compact(lines, "rl", total=12, seconds_per_line=10.0)
    assert " | ETA 1m40s" in next(line for line in out if line.startswith("[rl] step 2/12"))
    assert " | ETA 1m30s" in next(line for line in out if line.startswith("[rl] step 3/12"))
    assert view.duration(59) == "59s" and view.duration(3 * 3600 + 300) == "3h05m" and view.duration(None) == "?"


def test_warnings_are_shown_once_errors_again_as_they_pile_up_harmless_ones_not_at_all():
    notices = Notices(warning_limit=2)
    assert notices.add(Level("warning", "sandbox slow: 3.2 s")) == "warning: sandbox slow: 3.2 s"
    assert notices.add(Level("warning", "sandbox slow: 9.9 s")) is None  # the same once numbers are blanked
    assert notices.add(Level("warning", "megatron engine is not available: ModuleNotFoundError")) is None
    assert notices.add(Level("warning", "b")) == "warning: b" and notices.add(Level("warning", "c")) is None
    shown = [notices.add(Level("error", "Failed to decode tool call: line 2 column 21")) for _ in range(100)]
    assert [s for s in shown if s] == [
        "error: Failed to decode tool call: line 2 column 21",
        "error (x10 so far): Failed to decode tool call: line 2 column 21",
        "error (x100 so far): Failed to decode tool call: line 2 column 21",
    ]
    assert notices.summary() == (
        "warnings and errors only in the log: 98 repeated, 1 known harmless, 1 beyond the first distinct ones"
    )
    assert fingerprint("Failed to decode tool call: Extra data") == fingerprint("Failed to decode tool call: x")


@pytest.mark.parametrize(
    "line, level",
    [
        ("/x/verl/trainer/main_ppo.py:180: UserWarning: Disabled critic", "warning"),
        ("WARNING 12-02 15:52:51 [importing.py:73] Triton is installed", "warning"),
        ("WARNING:2026-12-02 15:52:54,620:IPC is not supported", "warning"),
        ("2026-12-02 15:52:06,803\tWARNING authentication_token_setup.py:85 -- Token authentication", "warning"),
        ("2026-12-02 15:54:44,975 - WARNING - transfer_queue.utils.common - target_num_threads 8", "warning"),
        ("[rank0]:[W1202 15:51:33.203837264 ProcessGroup.hpp:1006] Warning: No backend of type 0", "warning"),
        ("ERROR:2026-12-02 15:54:48,428:Failed to decode tool call: Expecting ','", "error"),
        ("[2026-12-02 15:51:33,548][/x/fsdp_checkpoint_manager.py][ERROR] - disk full", "error"),
        ("                                  'warning_style': None,", None),  # a config dump, not a warning
        ("ray init kwargs: {'NCCL_DEBUG': 'WARN'}", None),
    ],
)
def test_warning_and_error_shapes_are_recognised_only_where_they_start_a_line(line, level):
    found = level_of(line)
    assert (found.level if found else None) == level


def test_a_traceback_from_a_ray_worker_becomes_one_error_line_even_when_interleaved():
    data = (
        b"(TaskRunner pid=1) Traceback (most recent call last):\n"
        b'(TaskRunner pid=1)   File "/x/verl/trainer/ppo/v1/trainer_base.py", line 812, in fit\n'
        b"(WorkerDict pid=2) step:1 - critic/rewards/mean:0.5\n"
        b"(TaskRunner pid=1)     self.step()\n"
        b"(TaskRunner pid=1) ValueError: batch of 0 prompts\n"
    )
    lines = compact(data, "rl")
    assert "[rl] error: ValueError: batch of 0 prompts (trainer_base.py:812 in fit)" in " ".join(lines)
    assert any(line.startswith("[rl] step 1 | reward 0.5") for line in lines)


def test_a_terminal_gets_a_live_bar_and_a_pipe_only_plain_lines():
    for kind in (Terminal, Plain):
        out, clock = io.StringIO(), Clock()
        console = Console("rl", kind(out), "x.log", total=12, clock=clock)
        clock.now += 30
        console.feed(b"(TaskRunnerV1 pid=7) step:1 - critic/rewards/mean:0.1 - timing_s/step:9.0\n")
        clock.now += 5
        console.tick()
        console.finish(0)
        text = out.getvalue()
        if kind is Terminal:
            assert "\r\x1b[K[rl] [##----------------------] 1/12 | step 2 5s | 9.0 s/step | ETA 1m34s" in text
        else:
            assert "\x1b" not in text and "\r" not in text and "[rl] step 1/12 | reward 0.1" in text


def test_start_up_lines_come_from_the_resolved_config(tmp_path):
    rl = {
        "trainer": {
            "nnodes": 2,
            "n_gpus_per_node": 16,
            "total_training_steps": 130,
            "test_freq": 10,
            "save_freq": 10,
            "val_before_train": True,
            "v1": {"trainer_mode": "sync"},
        },
        "data": {
            "train_files": "/d/dapo_math_17k.parquet",
            "val_files": ["/d/aime_2025.parquet"],
            "train_batch_size": 512,
        },
        "actor_rollout_ref": {"model": {"path": "/m/sft"}, "rollout": {"n": 16, "val_kwargs": {"n": 30}}},
        "ray_kwargs": {"ray_init": {"runtime_env": {"env_vars": {"RETOOL_SANDBOX_URL": "http://h:8080/run_code"}}}},
    }
    lines = header("rl", rl, tmp_path / "run" / "logs" / "rl.log", device="npu", profile="reference")
    assert lines[0] == (
        f"device npu | profile reference | 2 nodes x 16 devices | full log: "
        f"{tmp_path / 'run' / 'logs' / 'rl.log'} (VERBOSE=1 prints it here too)"
    )
    assert lines[1] == "model /m/sft | data /d: train dapo_math_17k.parquet | val aime_2025.parquet"
    assert lines[2] == (
        "130 steps of 512 prompts x 16 samples (sync) | validation before training and every 10 "
        "steps (mean@30) | checkpoint every 10 steps | sandbox http://h:8080/run_code"
    )
    assert len(lines) == 3
    sft = {
        "trainer": {"nnodes": 2, "n_gpus_per_node": 16, "total_epochs": 6, "test_freq": -1, "save_freq": 31},
        "data": {"train_files": "/d/retool_sft.parquet", "train_batch_size": 64},
        "model": {"path": "/m/q"},
        "optim": {"lr": 1e-5},
    }
    rl["ray_kwargs"]["ray_init"]["log_to_driver"] = False  # workers' output would reach neither console nor log
    assert "log_to_driver is false" in header("rl", rl, tmp_path / "rl.log")[-1]
    lines = header("sft", sft, tmp_path / "sft.log", device="npu", profile="reference", environ={"NODE_RANK": "1"})
    assert "node 1: the step lines appear on node 0's console" in lines[0]
    assert lines[2] == "6 epochs, batch 64, lr 1e-05 | checkpoint every 31 steps"


def test_retool_eval_progress_gets_a_line_per_tenth_with_its_eta():
    data = (
        b"".join(
            b"retool-eval: %d/40 samples | acc %.3f so far | tool use 0.50\n" % (i, i / 80) for i in range(2, 41, 2)
        )
        + b"retool-eval: 20 problems x 2 samples in 60 s: acc/mean@2 0.5\n"
    )
    lines = compact(data, "eval", seconds_per_line=3.0, chunk=7)
    progress = [line for line in lines if line.startswith("[eval] samples ")]
    assert [line.split(" |")[0] for line in progress] == [f"[eval] samples {i}/40" for i in range(4, 41, 4)]
    assert "| acc 0.250 so far | tool use 0.50 | 1.5 s/sample | ETA 30s" in progress[4]
    assert "[eval] 20 problems x 2 samples in 60 s: acc/mean@2 0.5" in lines


def test_the_view_failing_never_loses_output(tmp_path, monkeypatch, capfdbinary):
    from retool.console import cli

    def broken(self, data):
        raise KeyError("a bug in the view")

    monkeypatch.setattr(Console, "feed", broken)
    log = tmp_path / "x.log"
    code = cli.run_command("rl", log, ["printf", "a\\nb\\n"], [], verbose=False)
    out = capfdbinary.readouterr().out
    assert code == 0 and log.read_bytes() == b"a\nb\n"
    assert b"the compact view failed (KeyError('a bug in the view'))" in out and out.endswith(b"a\nb\n")


def test_step_lines_are_read_where_tqdm_left_them():
    line = "Epoch 1/1:   1%|          | 1/128 [00:01<03:30,  1.66s/it]step:2 - train/loss:3.171875 - train/lr:0.001"
    assert parse_step(line) == (2, {"train/loss": 3.171875, "train/lr": 0.001})
    assert parse_step("val-core/x/acc/mean@4:np.float64(0.25) - step:3") is None


def test_step_lines_are_read_where_the_dump_thread_left_them():
    # verl's rollout dump thread prints its text and its newline in two writes; the step line can land between them
    line = "(TaskRunnerV1 pid=1) Dumped generations to /run/rollouts/3.jsonlstep:3 - critic/rewards/mean:0.5"
    assert parse_step(line) == (3, {"critic/rewards/mean": 0.5})
    assert parse_step("Dumped generations to /run/rollouts/3.json - timing_s/step:3 - x:1") is None
