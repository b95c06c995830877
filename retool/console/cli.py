"""``python -m retool.console``: run a stage, append every byte it prints to its log file, show the compact view.

    python -m retool.console --stage rl --log RUN/logs/rl.log --config RUN/rl.resolved.yaml \\
        --device cpu --profile improved -- python -m verl.trainer.main_ppo ...     # what scripts/launch.sh runs
    some-command 2>&1 | python -m retool.console --stage rl --log x.log          # the same view of a pipe

The log file receives the command's output (stdout and stderr, as one stream) byte for byte, appended, flushed as it
arrives: the same file ``cmd 2>&1 | tee -a LOG`` would write. The console gets the compact view
(retool.console.stream): start-up in a few lines, a line per step and per validation, warnings and errors at once,
and a progress bar when stdout is a terminal. ``VERBOSE=1`` (or ``--verbose``) prints the output unchanged instead.

Exit status: the command's, or 128+N when signal N ended it (a pipe's writer is not ours to know: 0). Ctrl-C reaches
the command (same process group) and is ignored here, so what the command prints while it stops still reaches the
log; SIGTERM and SIGHUP are passed on to it. If the compact view itself fails, the output is printed unchanged from
then on: nothing is ever lost from the console or the log because of it.
"""

from __future__ import annotations

import argparse
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, BinaryIO

from retool.console.output import for_stdout
from retool.console.sources import Sources
from retool.console.startup import header, shown_path
from retool.console.stream import Console, exit_reason
from retool.doctor.config import dig, planned_steps

TICK_S = 1.0  # redraw a terminal's status bar this often
DRAIN_S = 10.0  # after the command exits, how long its children may stay quiet before we stop reading
DRAIN_MAX_S = 60.0  # and how long they may go on writing


def load_config(path: Path | None) -> dict[str, Any]:
    """The resolved stage config, or {} (the view then shows less, the stage still runs)."""
    if path is None:
        return {}
    try:
        import yaml

        config = yaml.safe_load(path.read_text())
    except (OSError, ValueError) as exc:
        print(f"[console] note: cannot read {path} ({exc}); the start-up lines will be shorter", file=sys.stderr)
        return {}
    return config if isinstance(config, dict) else {}


class Sink:
    """The log file (appended, flushed per chunk) and, in verbose mode or after the view failed, the console."""

    def __init__(self, log: Path, console: Console | None):
        log.parent.mkdir(parents=True, exist_ok=True)
        self.log: BinaryIO | None = open(log, "ab")
        self.console = console
        self.stdout = sys.stdout.buffer

    def write(self, data: bytes) -> None:
        if self.log is not None:
            try:
                self.log.write(data)
                self.log.flush()
            except OSError as exc:  # a full disk must not stop the run or hide its output
                self.log = None
                self.raw_from_now(f"cannot write the log any more ({exc})")
        if self.console is None:
            self.stdout.write(data)
            self.stdout.flush()
            return
        try:
            self.console.feed(data)
        except Exception as exc:  # noqa: BLE001 -- the view is a convenience; the output must go on
            self.raw_from_now(f"the compact view failed ({exc!r})")
            self.stdout.write(data)
            self.stdout.flush()

    def raw_from_now(self, why: str) -> None:
        self.console = None
        self.stdout.write(f"\n[console] {why}; printing the output unchanged from here\n".encode())
        self.stdout.flush()

    def tick(self) -> None:
        if self.console is not None:
            try:
                self.console.tick()
            except Exception as exc:  # noqa: BLE001
                self.raw_from_now(f"the compact view failed ({exc!r})")

    def close(self, returncode: int | None) -> None:
        if self.console is not None:
            self.console.finish(returncode)
        if self.log is not None:
            self.log.close()


def pump(fd: int, sink: Sink, child: subprocess.Popen | None) -> None:
    """Copy ``fd`` to ``sink`` until end of file. Once ``child`` has exited, a grandchild (a daemon the stage left) may
    hold the pipe open: stop when it has been quiet for DRAIN_S, or DRAIN_MAX_S after the exit whatever it prints."""
    exited = quiet_since = None
    while True:
        ready, _, _ = select.select([fd], [], [], TICK_S)
        now = time.monotonic()
        if ready:
            data = os.read(fd, 1 << 16)
            if not data:
                return
            sink.write(data)
            quiet_since = None
        else:
            sink.tick()
            quiet_since = quiet_since or now
        if child is not None and child.poll() is not None:
            exited = exited or now
            if now - exited > DRAIN_MAX_S or (quiet_since and now - quiet_since > DRAIN_S):
                return


def verbose_requested(environ: dict[str, str] | os._Environ = os.environ) -> bool:
    """VERBOSE=1 (anything but empty or 0): the full output on the console."""
    return environ.get("VERBOSE", "0") not in ("", "0")


def exit_status(returncode: int) -> int:
    return 128 - returncode if returncode < 0 else returncode


def sources(config: dict[str, Any], metrics: Path | None) -> Sources:
    """What the stage will write that the console can read: verl's metric stream when ``trainer.logger`` has its
    ``file`` tracker and the launch named the file; the checkpoint folder when the config names one."""
    loggers = dig(config, "trainer.logger", None) or []
    checkpoints = dig(config, "trainer.default_local_dir", None)
    return Sources(
        metrics=metrics if metrics and "file" in loggers else None,
        checkpoints=Path(checkpoints) if checkpoints else None,
    )


def run_command(
    stage: str,
    log: Path,
    command: list[str] | None,
    header_lines: list[str],
    *,
    verbose: bool,
    total: int | None = None,
    validates_first: bool = False,
    env: dict[str, str] | None = None,
    stage_sources: Sources | None = None,
) -> int:
    """Run ``command`` (None: read stdin; ``env``: its environment, default this one's) with its output appended to
    ``log`` and shown on the console; its exit status."""
    console = None
    if verbose:
        for line in header_lines:
            print(f"[{stage}] {line}", flush=True)
    else:
        console = Console(
            stage,
            for_stdout(),
            shown_path(log),
            total=total,
            validates_first=validates_first,
            header=header_lines,
            sources=stage_sources,
        )
    sink = Sink(log, console)
    child = None
    if command:
        child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
        for signum in (signal.SIGTERM, signal.SIGHUP):
            signal.signal(signum, lambda number, _frame: child.send_signal(number))
        fd = child.stdout.fileno()
    else:
        fd = sys.stdin.fileno()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # after Popen: the command keeps the default handler
    pump(fd, sink, child)
    returncode = child.wait() if child is not None else None
    sink.close(returncode)
    if verbose and returncode:
        print(f"[{stage}] failed: {exit_reason(returncode)}; full log: {shown_path(log)}", flush=True)
    return exit_status(returncode) if returncode is not None else 0


def run(args: argparse.Namespace) -> int:
    config = load_config(args.config)
    lines = list(args.header) or (
        header(args.stage, config, args.log, device=args.device, profile=args.profile)
        if config
        else [f"full log: {shown_path(args.log)}"]
    )
    return run_command(
        args.stage,
        args.log,
        args.command,
        lines,
        verbose=args.verbose,
        total=planned_steps(config, count_data=False),
        validates_first=bool((config.get("trainer") or {}).get("val_before_train", False)),
        stage_sources=sources(config, args.metrics),
    )


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m retool.console", description=__doc__.split("\n\n")[0])
    parser.add_argument("--stage", required=True, help="the tag of each console line: sft, rl, eval, ...")
    parser.add_argument("--log", type=Path, required=True, help="the log file; every byte of the output is appended")
    parser.add_argument("--config", type=Path, default=None, help="the stage's resolved config (<stage>.resolved.yaml)")
    parser.add_argument("--device", default=None, help="for the start-up lines")
    parser.add_argument("--profile", default=None, help="for the start-up lines")
    parser.add_argument("--header", action="append", default=[], help="a start-up line instead of the config's")
    parser.add_argument(
        "--metrics",
        type=Path,
        default=os.environ.get("VERL_FILE_LOGGER_PATH") or None,
        help="verl's metric stream, read when the config's trainer.logger has 'file' "
        "(default: $VERL_FILE_LOGGER_PATH, which scripts/launch.sh sets)",
    )
    parser.add_argument(
        "--verbose",
        action="store_true",
        default=verbose_requested(),
        help="print the output unchanged (default: on when VERBOSE=1)",
    )
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- the command to run (else: read stdin)")
    args = parser.parse_args(argv)
    if args.command[:1] == ["--"]:
        args.command = args.command[1:]
    return args


def main(argv: list[str] | None = None) -> int:
    return run(parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
