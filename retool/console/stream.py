"""The compact view of a stage's output: fed the raw bytes as they come, it prints what a person follows.

    [rl] step 3/12 | reward -0.19 | acc 0.41 | tool 0.62 (0.62 calls) | turns 3.2 | resp 63 tok | failures 0 | ...
    [rl] validation at step 12: acc mean@4: aime_2025 0.000, synthetic_arith 0.527 | turns 3.4
    [rl] error: ValueError: ... (trainer_base.py:812 in fit)

Steps and validations (retool.console.view), the end of start-up and checkpoints come from the files the stage
writes (retool.console.sources: verl's metric stream and checkpoint marker), read at every ``tick``; without them
(a pipe of verl's output) from verl's lines for the same facts. From the output: warnings and errors
(retool.console.notices), the innermost exception of every traceback, the recipe's own messages (``retool: ...``),
the number of steps verl's progress bars show and the prompt groups its replay buffer reports (nothing structured
holds these). tests/unit/test_console_upstream.py finds each scraped text in the pinned stack. Dropped from the
console (not from the log): config dumps, progress bars of loading, Ray and vLLM start-up chatter, traceback frames.
When the stage fails, ``finish`` prints the last lines of its output and where the whole log is.
"""

from __future__ import annotations

import codecs
import re
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from retool.console import view
from retool.console.lines import (
    EPOCH,
    TOTAL_STEPS,
    Level,
    clean,
    is_exception_line,
    level_of,
    parse_bar,
    parse_step,
    segments,
)
from retool.console.notices import Notices
from retool.console.output import Plain, bar
from retool.console.sources import JsonLines, Sources, step_metrics
from retool.console.startup import shown_path
from retool.resume import latest_checkpoint

LOG_PREFIX = re.compile(r"^(?:INFO|DEBUG):\d{4}-\d{2}-\d{2} [\d:,.]+:")
RESUMING = re.compile(r"^Resuming from \S+")
CHECKPOINT = re.compile(r"^Saving checkpoint to:? (?P<path>\S+)")
READY = re.compile(r"^all initialize finished, ready to fit")
PROGRESS = "Training Progress"  # the description of verl's RL progress bar
# verl's replay buffer while a batch rolls out: "pending: 0, running: 70, finished: 2, failure: 0"
GROUPS = re.compile(
    r"^pending: (?P<pending>\d+), running: (?P<running>\d+), finished: (?P<finished>\d+), "
    r"failure: (?P<failure>\d+)"
)
# retool-eval's own lines: progress ("retool-eval: 30/300 samples | acc 0.267 | ..."), result, warnings, errors
OWN_PREFIX = "retool-eval: "
SAMPLES = re.compile(r"^retool-eval: (?P<done>\d+)/(?P<total>\d+) samples(?P<rest>.*)$")
FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<func>\S+)')
# the recipe's own messages for the user (retool/failures/: why the run was stopped and what to do)
RECIPE_PREFIX = "retool: "
BLOCK_LINES = 20  # shown lines at most
# the failure accounting's line per batch with failures; training steps show them in their own line
FAILED_BATCH = re.compile(r"^WARNING retool failures step (?P<step>\d+) \((?P<partition>\w+)\): (?P<text>.*)$")
PARTIAL_LIMIT = 1 << 20  # a "line" longer than this is handled in pieces
POLL_S = 0.5  # read the stage's files at most this often
TAIL_LINES = 15


@dataclass
class Traceback:
    frames: list[str] = field(default_factory=list)
    exception: str = ""


class Pace:
    """Wall-clock seconds per step over the last ``WINDOW`` steps, from the times their lines arrive: validations and
    checkpoints inside the window count, as they will in the remaining time, and a slowdown shows within a few
    steps. The interval before the first step line (warm-up) counts only until a second one arrives."""

    WINDOW = 20

    def __init__(self) -> None:
        self.begin: tuple[int, float] | None = None
        self.marks: list[tuple[int, float]] = []

    def start(self, step: int, now: float) -> None:
        if self.begin is None and not self.marks:
            self.begin = (step, now)

    def mark(self, step: int, now: float) -> None:
        self.marks = [*self.marks[-self.WINDOW :], (step, now)]

    def per_step(self) -> float | None:
        marks = self.marks if len(self.marks) >= 2 or self.begin is None else [self.begin, *self.marks]
        if len(marks) < 2:
            return None
        (first_step, first_time), (last_step, last_time) = marks[0], marks[-1]
        if last_step <= first_step or last_time <= first_time:
            return None
        return (last_time - first_time) / (last_step - first_step)


class Console:
    """One stage's compact view. ``feed`` raw output bytes; ``tick`` now and then (redraws a terminal's bar);
    ``finish`` with the stage's exit status."""

    def __init__(
        self,
        stage: str,
        out: Plain,
        log_name: str,
        *,
        total: int | None = None,
        validates_first: bool = False,
        header: Iterable[str] = (),
        sources: Sources | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.tag, self.out, self.log_name, self.clock = f"[{stage}]", out, log_name, clock
        self.total, self.validates_first = total, validates_first
        self.notices = Notices()
        self.pace = Pace()
        self.tracebacks: dict[str, Traceback] = {}  # per process (Ray source), the one being printed
        self.blocks: dict[str, int] = {}  # per process, lines shown of a "retool: " message
        self.tail: deque[str] = deque(maxlen=TAIL_LINES)
        self.started = self.phase_since = clock()
        self.phase = "starting"
        self.last_step: int | None = None
        self.steps_done = 0
        self.unit = "step"  # what last_step counts: steps, or retool-eval's samples
        self.reported_pace: float | None = None  # verl's timing_s/step, until wall-clock times say more
        self.note = ""  # the status bar's detail of the current phase (prompt groups done)
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self._partial = ""
        sources = sources or Sources()
        self.metrics = JsonLines(sources.metrics) if sources.metrics else None
        self.checkpoints = sources.checkpoints
        self.checkpoint = latest_checkpoint(self.checkpoints, strict=False)  # a resumed stage's: not announced again
        self.polled = float("-inf")
        for line in header:
            self.say(line)
        self.tick()

    # ------------------------------------------------------------------ output

    def say(self, text: str) -> None:
        self.out.line(f"{self.tag} {text}")

    def _phase(self, phase: str) -> None:
        if phase != self.phase:
            self.phase, self.phase_since, self.note = phase, self.clock(), ""

    def status(self) -> str:
        """The terminal's status bar: progress, the current phase and how long it has run, pace and ETA."""
        now = self.clock()
        parts = []
        if self.total:
            done = self.last_step or 0
            parts.append(f"{bar(done, self.total)} {done}/{self.total}")
        parts.append(f"{self.phase} {view.duration(now - self.phase_since)}" + (f" ({self.note})" if self.note else ""))
        pace = self.pace.per_step() or self.reported_pace
        if pace:
            parts.append(view.seconds_per_step(pace))
            remaining = self._remaining(pace)
            if remaining is not None:
                parts.append(view.eta(max(0.0, remaining - (now - self.phase_since))))
        return f"{self.tag} " + " | ".join(parts)

    def tick(self) -> None:
        if self.clock() - self.polled >= POLL_S:
            self.poll()
        self.out.status(self.status())

    def poll(self) -> None:
        """What the stage wrote to its files since the last poll: training begun, steps, a new checkpoint."""
        self.polled = self.clock()
        if self.metrics is not None:
            if self.phase == "starting" and self.metrics.exists():
                self._ready()
            for record in self.metrics.new():
                found = step_metrics(record)
                if found:
                    self._step(*found)
        if self.checkpoints is not None:
            step = latest_checkpoint(self.checkpoints, strict=False)
            if step is not None and step != self.checkpoint:
                self.checkpoint = step
                self.say(f"checkpoint: {shown_path(self.checkpoints / f'global_step_{step}')}")

    # ------------------------------------------------------------------ input

    def feed(self, data: bytes) -> None:
        text = self._partial + self._decoder.decode(data)
        cut = max(text.rfind("\n"), text.rfind("\r"))
        if cut < 0 and len(text) < PARTIAL_LIMIT:
            self._partial = text
            return
        complete, self._partial = (text[:cut], text[cut + 1 :]) if cut >= 0 else (text, "")
        for segment in segments(complete):
            self.handle(segment)
        self.tick()

    def handle(self, segment: str) -> None:
        source, text = clean(segment)
        for _ in range(5):  # tqdm bars, possibly several, then what was printed right after them
            progress = parse_bar(text)
            if not progress:
                break
            self._bar(*progress[:3])
            text = text[progress[3] :]
        if not text.strip():
            return
        self.tail.append(text[:300])
        if self._block(source, text) or self._traceback(source, text):
            return
        step = parse_step(text)
        if step:
            if self.metrics is None:  # else the metric stream has the same numbers
                self._step(*step)
            return
        failed = FAILED_BATCH.match(text)
        if failed:
            if failed.group("partition") != "train":
                self.say(f"validation at step {failed.group('step')}: {failed.group('text')}")
            return
        notice = level_of(text)
        if notice:
            self._notice(notice)
        else:
            self._info(LOG_PREFIX.sub("", text))

    def _notice(self, notice: Level) -> None:
        shown = self.notices.add(notice)
        if shown:
            first = sum(self.notices.shown.values()) == 1 and not shown.startswith("error (x")
            self.say(shown + (f" [each shown once; all in {self.log_name}]" if first else ""))

    def _traceback(self, source: str, text: str) -> bool:
        """Collect a traceback per process; its innermost exception becomes one error line when the traceback ends
        (Ray nests the remote traceback under ``RayTaskError(...)``: the last exception line is the real one). True
        when ``text`` was part of one."""
        if text.startswith("Traceback (most recent call last)"):
            self._end_traceback(source)
            self.tracebacks[source] = Traceback()
            return True
        trace = self.tracebacks.get(source)
        if trace is None:
            return False
        if text.startswith((" ", "\t")):
            trace.frames.append(text)
            return True
        if is_exception_line(text):
            trace.exception = text.strip()
            return True
        self._end_traceback(source)
        return False

    def _end_traceback(self, source: str) -> None:
        trace = self.tracebacks.pop(source, None)
        if trace is None or not (trace.exception or trace.frames):
            return
        message = trace.exception or f"a traceback cut off before its exception; last: {trace.frames[-1].strip()}"
        self._notice(Level("error", message, _last_frame(trace.frames)))

    def _block(self, source: str, text: str) -> bool:
        """The recipe's own messages (``retool: ...``, e.g. why the failure accounting stopped the run) are shown
        with the lines that follow them from the same process, without traceback frames. True when shown."""
        if text.startswith(RECIPE_PREFIX):
            self.blocks[source] = 0
            self.say(text)
            return True
        if source not in self.blocks:
            return False
        if (
            not text.strip()
            or text.startswith("Traceback")
            or self.blocks[source] >= BLOCK_LINES
            or parse_step(text)
            or level_of(text)
        ):
            del self.blocks[source]
            return False
        if not text.startswith((" ", "\t")):  # frames of the example traceback stay in the log
            self.blocks[source] += 1
            self.out.line(f"{self.tag}   {text[:300]}")
        return True

    def _bar(self, desc: str, done: int, total: int) -> None:
        epoch = EPOCH.search(desc)
        if desc.endswith(PROGRESS):
            self.total = self.total or total
        elif epoch:
            self.total = self.total or total * int(epoch.group("epochs"))
        else:
            return
        if self.phase in ("starting", "validating", "ready"):
            if self.phase == "starting":
                self.say(f"training starts after {view.duration(self.clock() - self.started)} of start-up")
            self._phase(f"step {done + 1}")
            self.pace.start(done, self.clock())

    def _step(self, step: int, metrics: dict[str, float]) -> None:
        now = self.clock()
        if view.is_training_step(metrics):
            self.pace.mark(step, now)
            self.last_step = step
            self.steps_done += 1
            self.reported_pace = metrics.get("timing_s/step", self.reported_pace)
            remaining = self._remaining(self.pace.per_step() or self.reported_pace)
            if "train/loss" in metrics:
                line = view.sft_step(step, self.total, metrics, self.pace.per_step(), remaining)
            else:
                line = view.rl_step(step, self.total, metrics, remaining)
            self.say(line)
        validation = view.validation(step, metrics)
        if validation:
            self.say(validation)
        if self.total and (self.last_step or 0) >= self.total:
            self._phase("finishing")
        else:
            self._phase(f"step {(self.last_step or step) + 1}")
            self.pace.start(step, now)

    def _remaining(self, pace: float | None) -> float | None:
        if not pace or not self.total:
            return None
        return max(0, self.total - (self.last_step or 0)) * pace

    def _info(self, text: str) -> None:
        total = TOTAL_STEPS.search(text)
        if total and not self.total:
            self.total = int(total.group("total"))
        if RESUMING.match(text) or CHECKPOINT.match(text):
            if self.checkpoints is None:  # else the launch said where it resumes, and the marker tells saves
                self.say(
                    text if RESUMING.match(text) else f"checkpoint: {shown_path(CHECKPOINT.match(text).group('path'))}"
                )
        elif READY.match(text):
            if self.metrics is None:  # else the metric stream's file marks it
                self._ready()
        elif GROUPS.match(text):
            groups = {key: int(value) for key, value in GROUPS.match(text).groupdict().items()}
            self.note = f"{groups['finished']}/{sum(groups.values())} prompts done" + (
                f", {groups['failure']} failed" if groups["failure"] else ""
            )
        elif SAMPLES.match(text):
            self._samples(SAMPLES.match(text))
        elif text.startswith(OWN_PREFIX):
            self.say(text[len(OWN_PREFIX) :])

    def _ready(self) -> None:
        """verl's workers are up and training begins (with the validation before it, if any)."""
        startup = view.duration(self.clock() - self.started)
        if self.validates_first or self.metrics is None:
            self.say(
                f"workers ready after {startup}" + ("; validating before training" if self.validates_first else "")
            )
            self._phase("validating" if self.validates_first else "ready")
        else:  # verl opened its metric stream as the first step begins
            self.say(f"training starts after {startup} of start-up")
            self._phase(f"step {(self.checkpoint or 0) + 1}")
            self.pace.start(self.checkpoint or 0, self.clock())

    def _samples(self, match: re.Match) -> None:
        """retool-eval's progress: every update on a terminal's bar, a line at each tenth of the way."""
        done, total, now = int(match.group("done")), int(match.group("total")), self.clock()
        self.unit = "sample"
        if self.last_step is None:
            self.say(f"sampling starts after {view.duration(now - self.started)} of start-up")
            self.pace.start(0, now)
        tenth_before = (self.last_step or 0) * 10 // max(total, 1)
        self.total, self.last_step, self.steps_done = total, done, done
        self.pace.mark(done, now)
        self._phase("sampling" if done < total else "finishing")
        if done * 10 // max(total, 1) > tenth_before or done == total:
            pace = self.pace.per_step()
            parts = [f"samples {done}/{total}{match.group('rest')}"]
            if pace:
                parts.append(f"{1 / pace:.2f} samples/s" if pace < 1 else f"{pace:.1f} s/sample")
                parts.append(view.eta((total - done) * pace))
            self.say(" | ".join(parts))

    # ------------------------------------------------------------------ end

    def finish(self, returncode: int | None) -> None:
        """The stage's last lines: done (steps, time), or failed (why, the last lines of output); the log's path."""
        if self._partial:
            self.handle(self._partial)
            self._partial = ""
        self.poll()  # what the stage wrote just before it ended
        for source in list(self.tracebacks):  # tracebacks the end of the output cut off
            self._end_traceback(source)
        self.out.status("")
        elapsed = view.duration(self.clock() - self.started)
        where = " | ".join(filter(None, [f"full log: {self.log_name}", self.notices.summary()]))
        if not returncode:
            steps = f": {self.steps_done} {self.unit}{'s' if self.steps_done != 1 else ''}" if self.steps_done else ""
            self.say(f"done{steps} in {elapsed} | {where}")
        else:
            self.say(f"failed: {exit_reason(returncode)} after {elapsed}; the last lines of its output:")
            for line in self.tail:
                self.out.line(f"    {line}")
            self.say(where)
        self.out.close()


def _last_frame(frames: list[str]) -> str:
    for text in reversed(frames):
        match = FRAME.match(text)
        if match:
            return f"{match.group('file').rsplit('/', 1)[-1]}:{match.group('line')} in {match.group('func')}"
    return ""


def exit_reason(returncode: int) -> str:
    """``exit code 1``, or ``killed by SIGKILL (out of memory?)`` for a negative (signal) or 128+N status."""
    import signal

    number = -returncode if returncode < 0 else returncode - 128 if returncode > 128 else 0
    if number:
        try:
            name = signal.Signals(number).name
        except ValueError:
            name = f"signal {number}"
        hint = " (out of memory? dmesg tells)" if name == "SIGKILL" else ""
        return f"killed by {name}{hint}"
    return f"exit code {returncode}"
