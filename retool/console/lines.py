"""What one line of a stage's output is: pure functions over text, no state.

The stage's output is verl's, torchrun's, Ray's and vLLM's, interleaved in one pipe. Facts it is parsed by (verl
0.9.1, Ray 2.60, vLLM 0.27, read from their output in a real CPU smoke run; tests/fixtures/console/):

- verl's console logger prints one line per step, ``step:N - key:value - key:value ...``, numbers formatted with
  ``pprint.pformat`` (so numpy scalars read ``np.float64(0.5)``). It may follow a tqdm bar on the same physical line,
  because tqdm ends its updates with ``\\r``, not ``\\n``.
- verl's v1 trainer dumps rollouts in a background thread that then prints ``Dumped generations to <path>.jsonl``.
  ``print`` writes its text and its newline separately, so the main thread's step line can land between the two:
  ``Dumped generations to /x/3.jsonlstep:3 - ...`` (seen in a CI run of the smoke on a loaded host).
- Ray prefixes what its actors print with ``(Name pid=N[, ip=A])``, in ANSI colour; the driver prints it.
- Warnings and errors come in a dozen shapes (Python's warnings module, logging formats of verl, vLLM, Ray, Hydra,
  TransferQueue, torch's C++ log). Only those shapes count, each anchored at the start of the line, so a config dump
  that holds the word WARN or error is never mistaken for one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
# (TaskRunnerV1 pid=12239) / (pid=13266) / (raylet) / (Worker pid=1, ip=10.0.0.2)
RAY_PREFIX = re.compile(r"^\((?P<source>[\w.:-]+)?(?: ?pid=\d+)?(?:, ip=[\w.:-]+)?\) ")
STEP = re.compile(r"(?:(?<![\w/])|(?<=\.jsonl))step:(?P<step>\d+)(?P<rest> - .*)$")
NUMPY_SCALAR = re.compile(r"^np\.\w+\((?P<value>[^()]*)\)$")
# "Epoch 1/1:  10%|█         | 13/128 [00:19<01:47,  1.07it/s]", "Training Progress:   0%|   | 0/12 [00:00<?, ?it/s]"
BAR = re.compile(r"(?P<desc>[^\r|:]{0,120}?):\s+\d{1,3}%\|[^|]*\|\s*(?P<n>\d+)/(?P<total>\d+) (?:\[[^\]]*\])?")
EPOCH = re.compile(r"Epoch (?P<epoch>\d+)/(?P<epochs>\d+)")
TOTAL_STEPS = re.compile(r"\bTotal (?:training )?steps: (?P<total>\d+)")

_TIME = r"\d{2}:\d{2}:\d{2}(?:[.,]\d+)?"
_DATE = r"\d{4}-\d{2}-\d{2}"
LEVEL_SHAPES = [
    # Python's warnings module: "/path/x.py:32: UserWarning: message"
    re.compile(r"^(?P<where>\S+):\d+: (?P<level>\w*Warning): (?P<message>.*)"),
    # verl (logging.basicConfig): "WARNING:2026-12-02 15:52:54,620:message"
    re.compile(rf"^(?P<level>WARNING|ERROR|CRITICAL):{_DATE} {_TIME}:(?P<message>.*)"),
    # vLLM: "WARNING 12-02 15:52:51 [importing.py:73] message"
    re.compile(rf"^(?P<level>WARNING|ERROR|CRITICAL) \d{{2}}-\d{{2}} {_TIME} \[(?P<where>[^\]]+)\] (?P<message>.*)"),
    # Ray: "2026-12-02 15:52:06,803\tWARNING authentication_token_setup.py:85 -- message"
    re.compile(rf"^{_DATE} {_TIME}\s+(?P<level>WARNING|ERROR|CRITICAL) (?P<where>\S+) -- (?P<message>.*)"),
    # logging's default long format: "2026-12-02 15:54:44,975 - WARNING - transfer_queue.utils.common - message"
    re.compile(rf"^{_DATE} {_TIME} - (?P<level>WARNING|ERROR|CRITICAL) - (?P<where>\S+) - (?P<message>.*)"),
    # Hydra / verl checkpoint manager: "[2026-12-02 15:51:33,548][/path/x.py][WARNING] - message"
    re.compile(rf"^\[{_DATE} {_TIME}\]\[(?P<where>[^\]]*)\]\[(?P<level>WARNING|ERROR|CRITICAL)\] - (?P<message>.*)"),
    # torch / glog C++: "[rank0]:W1202 15:48:41.708000 7854 path.py:56] message", "[W1202 15:54:04.2 utils.cpp:68] ..."
    re.compile(rf"^(?:\[rank\d+\]:)?\[?(?P<level>[WEF])\d{{4}} {_TIME} (?:\d+ )?(?P<where>\S+:\d+)\] (?P<message>.*)"),
    # Ray's C++ log: "[2026-12-02 15:54:44,975 E 1234 5678] core_worker.cc:123: message"
    re.compile(rf"^\[{_DATE} {_TIME} (?P<level>[WEF]) \d+ \d+\] (?P<where>\S+:\d+): (?P<message>.*)"),
    # plain prefixes: "Warning: Failed to set NUMA affinity", "ERROR: ...", "Fatal Python error: ..."
    re.compile(r"^(?P<level>Warning|WARNING|WARN|Error|ERROR|FATAL|Fatal Python error):? (?P<message>.*)"),
]
# Inside a traceback, the exception line: a (dotted) class name, maybe Ray's wrapped cause, then ": message" or nothing.
EXCEPTION = re.compile(r"^(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:\([\w.]*\))?(?::\s.*)?$")
# Failures that print no level word.
FATAL_SHAPES = re.compile(
    r"^(?:Killed$|Segmentation fault|Bus error|Aborted|\*\*\* SIG\w+|Error executing job with "
    r"overrides|torch\.distributed\.elastic\.multiprocessing\.errors\.ChildFailedError)"
)


@dataclass(frozen=True)
class Level:
    """A warning or an error line: ``level`` is "warning" or "error"; ``message`` without timestamps or prefixes."""

    level: str
    message: str
    where: str = ""


def clean(segment: str) -> tuple[str, str]:
    """(the Ray source name or "", the text without ANSI colour and Ray prefix)."""
    text = ANSI.sub("", segment)
    match = RAY_PREFIX.match(text)
    if match:
        return match.group("source") or "", text[match.end() :]
    return "", text


def segments(text: str) -> list[str]:
    """A chunk of output split at newlines and at tqdm's carriage returns."""
    return re.split(r"\r\n|\r|\n", text)


def number(text: str) -> float | None:
    """A value as verl's console logger prints it (``0.5``, ``np.float64(0.5)``, ``nan``, ``True``); None otherwise."""
    text = text.strip()
    match = NUMPY_SCALAR.match(text)
    if match:
        text = match.group("value")
    if text in ("True", "False"):
        return float(text == "True")
    try:
        return float(text)
    except ValueError:
        return None


def parse_step(text: str) -> tuple[int, dict[str, float]] | None:
    """(step, metrics) of a verl console-logger line, wherever it starts in ``text``; None if it is not one."""
    match = STEP.search(text)
    if not match:
        return None
    metrics: dict[str, float] = {}
    for item in match.group("rest").split(" - ")[1:]:
        key, sep, raw = item.rpartition(":")
        value = number(raw) if sep else None
        if key and value is not None:
            metrics[key.strip()] = value
    return int(match.group("step")), metrics


def parse_bar(text: str) -> tuple[str, int, int, int] | None:
    """(description, done, total, where the bar ends in ``text``) of a tqdm bar update; None if there is none."""
    match = BAR.search(text)
    if not match:
        return None
    return match.group("desc").strip(), int(match.group("n")), int(match.group("total")), match.end()


def level_of(text: str) -> Level | None:
    """The warning or error ``text`` (already cleaned) states, or None."""
    if FATAL_SHAPES.match(text):
        return Level("error", text.strip())
    for shape in LEVEL_SHAPES:
        match = shape.match(text)
        if match:
            level = match.group("level")
            kind = "warning" if level.upper().startswith("W") or level.endswith("Warning") else "error"
            message = match.group("message").strip()
            if level.endswith("Warning") and level != "Warning":
                message = f"{level}: {message}"  # keep the category: DeprecationWarning: ...
            where = match.groupdict().get("where") or ""
            return Level(kind, message, where)
    return None


def is_exception_line(text: str) -> bool:
    """Whether ``text``, seen inside a traceback, is its exception line (``ValueError: ...``, ``KeyboardInterrupt``,
    ``ray.exceptions.RayTaskError(StopRun): ...``)."""
    return not text.startswith((" ", "\t")) and bool(EXCEPTION.match(text.rstrip()))


def fingerprint(message: str) -> str:
    """``message`` with what varies between repeats blanked, for de-duplication: numbers and hex ids, and the detail
    after ``event: `` when the event is worded at length (``Failed to decode tool call: Extra data ...``)."""
    event, sep, _ = message.partition(": ")
    text = event if sep and len(event) >= 20 else message
    text = re.sub(r"\b[0-9a-fA-F]{8}(?:-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}\b", "#", text)  # uuids
    text = re.sub(r"0x[0-9a-fA-F]+|\b[0-9a-f]{16,}\b", "#", text)  # addresses, Ray's actor ids
    text = re.sub(r"\d+(?:\.\d+)?", "#", text)
    return re.sub(r"\s+", " ", text).strip()[:300]
