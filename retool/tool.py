"""CodeInterpreterTool: verl's `code_interpreter` tool, backed by a SandboxFusion-compatible `/run_code` server.

verl imports it by dotted path from configs/tool.yaml (`class_name: retool.tool.CodeInterpreterTool`) inside
each agent-loop worker. One call = one fresh Python process in the sandbox (with `session_mode: per_trajectory` the
calls of one trajectory share one interpreter, whose variables persist; see CodeInterpreterTool):

1. The code is taken from the `code` argument (the ```python fenced part when there is one). When the last
   top-level statement is a bare expression (decided with `ast`), its value is printed like a Python shell
   does: `repr(value)` unless the value is None. Print calls and string literals are left alone.
2. It is POSTed with verl's payload (code, language, compile_timeout, run_timeout, memory_limit_MB, stdin,
   files, fetch_files); HTTP 504 is retried with exponential backoff; at most `max_concurrency` requests of this
   tool instance are in flight. Each attempt's HTTP deadline covers what the server may spend on it: the wait
   for a free slot (`queue_timeout_s`, the server's queue timeout) + run_timeout + `http_timeout_margin_s`.
3. The reply is stdout, then a labelled stderr, then a note (exit code, timeout), cut in the middle to
   `max_output_chars` with the number of characters cut. A timeout keeps the partial output.

It never raises into the agent loop: bad arguments, sandbox outages and malformed replies all become a tool
message the model can read ("sandbox unavailable: ..."). Config errors raise at construction (start-up).

`behaviour: reference` (configs/tool.yaml `config:`) swaps steps 1 and 3 for the rules of the reference run's
tool (verl's recipe/retool `CustomSandboxFusionTool` on top of verl's `SandboxFusionTool`): only the first
```python block, the last non-empty line textually wrapped in `print(...)` unless it starts with `print`
(`reference_prepare_code`), and the reply stdout + stderr when the run finished, else "no stdout here" with no
cut by the tool (`reference_reply`); verl then cuts to `max_tool_response_length`. Step 2 (HTTP, retries,
concurrency, never raising) stays this tool's. docs/tool_and_reward.md lists every difference.
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import json
import logging
import re
import time
import uuid
import weakref
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlsplit

import aiohttp
from verl.tools.base_tool import BaseTool
from verl.tools.schemas import OpenAIFunctionToolSchema, ToolResponse
from verl.utils.rollout_trace import rollout_trace_op

from retool import tool_outcomes
from retool.tool_schema import TOOL_SCHEMA, tool_schema

__all__ = [
    "BEHAVIOURS",
    "NO_STDOUT",
    "TOOL_SCHEMA",
    "CodeInterpreterTool",
    "SandboxSettings",
    "extract_code",
    "format_run_response",
    "prepare_code",
    "print_trailing_expression",
    "reference_extract_code",
    "reference_prepare_code",
    "reference_print_last_line",
    "reference_reply",
    "truncate_middle",
]

logger = logging.getLogger(__name__)

_VALUE_NAME = "_retool_value"
_PYTHON_FENCE_LANGS = ("", "python", "python3", "py")
# an opening fence at a line start with an optional language tag; the body runs to the closing fence or to the
# end (unclosed fence). The line-start rule keeps print("```") in raw code from looking like a fence.
_FENCE = re.compile(r"^[ \t]*```[ \t]*([\w+-]*)[^\n]*\n(.*?)(?:```|\Z)", re.DOTALL | re.MULTILINE)
_NEWLINE = re.compile(rb"\r\n|\r|\n")  # the line ends Python's tokenizer counts (str.splitlines knows more)

# `session_mode` values: "stateless" (every call a fresh interpreter) or "per_trajectory" (the calls of one trajectory
# share an interpreter of the retool-sandbox server; a real SandboxFusion ignores the session id)
SESSION_MODES = ("stateless", "per_trajectory")
# `behaviour` values: "recipe" (this tool's rules, the default) or "reference" (the reference run's rules)
BEHAVIOURS = ("recipe", "reference")
NO_STDOUT = "no stdout here"  # the reference tool's whole reply when the run did not finish
_REFERENCE_OPENING = "```python"


@dataclass(frozen=True)
class SandboxSettings:
    """Validated tool config (the `config:` block of configs/tool.yaml)."""

    sandbox_fusion_url: str
    default_timeout: float = 30.0
    memory_limit_mb: int = 1024
    max_concurrency: int = 8
    max_retries: int = 3
    max_output_chars: int = 2048
    retry_backoff_s: float = 1.0
    queue_timeout_s: float = 30.0
    http_timeout_margin_s: float = 10.0
    behaviour: str = "recipe"  # code preparation and reply text: "recipe" or "reference" (BEHAVIOURS)
    session_mode: str = "stateless"  # "stateless" or "per_trajectory" (SESSION_MODES); see CodeInterpreterTool

    def http_deadline(self) -> float:
        """Seconds one attempt may take: queued at most queue_timeout_s, then running at most default_timeout."""
        return self.queue_timeout_s + self.default_timeout + self.http_timeout_margin_s

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> SandboxSettings:
        """Build from verl's tool config dict; raises ValueError naming the bad key."""
        where = "code_interpreter tool config (configs/tool.yaml `config:`)"
        known = set(cls.__dataclass_fields__) | {"type"}  # `type: native` is read by verl's loader
        unknown = sorted(set(config) - known)
        if unknown:
            raise ValueError(f"{where}: unknown keys {unknown}; known keys are {sorted(known)}")
        url = config.get("sandbox_fusion_url")
        if not isinstance(url, str) or not url.strip():
            raise ValueError(f"{where}: set sandbox_fusion_url (or the RETOOL_SANDBOX_URL environment variable)")
        url = url.strip()
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError(f"{where}: sandbox_fusion_url must be an http(s) URL, got {url!r}")
        if parts.path in ("", "/"):  # a bare server address: use the SandboxFusion endpoint
            url = url.rstrip("/") + "/run_code"

        def number(key: str, minimum: float, integer: bool = False) -> Any:
            value = config.get(key, getattr(cls, key))
            ok = isinstance(value, int) if integer else isinstance(value, (int, float))
            if isinstance(value, bool) or not ok or value < minimum:
                kind = "an integer" if integer else "a number"
                raise ValueError(f"{where}: {key} must be {kind} >= {minimum}, got {value!r}")
            return value

        memory = config.get("memory_limit_mb", cls.memory_limit_mb)
        if isinstance(memory, bool) or not isinstance(memory, int) or (memory <= 0 and memory != -1):
            raise ValueError(f"{where}: memory_limit_mb must be a positive integer or -1 (no limit), got {memory!r}")
        timeout = number("default_timeout", 0)
        if timeout == 0:
            raise ValueError(f"{where}: default_timeout must be > 0 seconds")
        session_mode = config.get("session_mode", cls.session_mode)
        if session_mode not in SESSION_MODES:
            raise ValueError(f"{where}: session_mode must be one of {list(SESSION_MODES)}, got {session_mode!r}")
        behaviour = config.get("behaviour", cls.behaviour)
        if behaviour not in BEHAVIOURS:  # exact spelling: a typo must not silently pick the default
            raise ValueError(f"{where}: behaviour must be one of {list(BEHAVIOURS)}, got {behaviour!r}")
        return cls(
            sandbox_fusion_url=url,
            default_timeout=float(timeout),
            memory_limit_mb=memory,
            max_concurrency=number("max_concurrency", 1, integer=True),
            max_retries=number("max_retries", 0, integer=True),
            max_output_chars=number("max_output_chars", 200, integer=True),
            retry_backoff_s=float(number("retry_backoff_s", 0)),
            queue_timeout_s=float(number("queue_timeout_s", 0)),
            http_timeout_margin_s=float(number("http_timeout_margin_s", 0.1)),
            behaviour=behaviour,
            session_mode=session_mode,
        )


def extract_code(text: str) -> str:
    """The Python to run: the ```python (or untagged) fenced blocks joined, else the text itself."""
    blocks = [body for lang, body in _FENCE.findall(text) if lang.lower() in _PYTHON_FENCE_LANGS]
    return "\n".join(block.rstrip() for block in blocks) + "\n" if blocks else text


def print_trailing_expression(code: str) -> str:
    """Make a final bare expression print its value like a Python shell (repr, skipped when None).

    Only the last top-level statement is rewritten, by source offsets, so the rest of the code (comments,
    formatting) reaches the sandbox untouched. Code that does not parse is returned as is: the sandbox then
    reports the SyntaxError to the model.
    """
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError):  # ValueError: null bytes
        return code
    if not tree.body or not isinstance(tree.body[-1], ast.Expr):
        return code
    last = tree.body[-1]
    value = last.value
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == "print":
        return code
    if isinstance(value, ast.Constant) and isinstance(value.value, str):  # a trailing note/docstring
        return code
    # ast offsets are UTF-8 byte columns on lines split the way the tokenizer splits them
    data = code.encode("utf-8")
    starts = [0] + [m.end() for m in _NEWLINE.finditer(data)]
    begin = starts[last.lineno - 1] + last.col_offset
    end = starts[last.end_lineno - 1] + last.end_col_offset
    expr = data[begin:end].decode("utf-8")
    rest = data[end:].decode("utf-8")  # only comments, blanks or a ';' can follow the last statement
    return (
        f"{data[:begin].decode('utf-8')}{_VALUE_NAME} = ({expr}){rest}\n"
        f"if {_VALUE_NAME} is not None:\n    print(repr({_VALUE_NAME}))\n"
    )


def prepare_code(text: str) -> str:
    """What the tool sends for a `code` argument: fenced part extracted, trailing expression printed."""
    return print_trailing_expression(extract_code(text))


# ---- behaviour: reference. Reproductions of the reference tool's rules, faults included (docs/tool_and_reward.md).
def reference_extract_code(text: str) -> str:
    """The reference's code: the body of the first closed ```python fence, stripped; else `text` unchanged.

    Only the literal `python` right after the backticks opens a block, anywhere in the text: ```py, ```Python
    and untagged fences do not (the fenced text then runs as is), ```python3 does and its `3` becomes code. A
    ```python with no closing ``` after it is no block. Later blocks are dropped. Unmatched text is not stripped.
    """
    opening = text.find(_REFERENCE_OPENING)
    if opening < 0:
        return text
    body_start = opening + len(_REFERENCE_OPENING)
    closing = text.find("```", body_start)
    if closing < 0:  # no later opening can have a closing either: there is no block at all
        return text
    return text[body_start:closing].strip()


def reference_print_last_line(code: str) -> str:
    """The reference's implicit print, purely textual: the last line that is not "" becomes `print(<line>)`
    unless it starts with `print`.

    Lines are split on "\\n" only and a line of spaces counts as non-empty. Valid code often breaks: an
    assignment `x = 1` becomes `print(x = 1)` (TypeError), the closing line of a multi-line statement
    `print())` (SyntaxError), an indented last line leaves its block (IndentationError), a comment line
    `print(# ...)` (SyntaxError); `printed = 1` and `print(a)  ;b` are left alone. The reference did exactly this.
    """
    lines = code.split("\n")
    for index in range(len(lines) - 1, -1, -1):
        line = lines[index]
        if line == "":
            continue
        if not line.startswith("print"):
            lines[index] = f"print({line})"
        break
    return "\n".join(lines)


def reference_prepare_code(text: str) -> str:
    """What the tool sends in reference behaviour: first ```python block, last line wrapped in print."""
    return reference_print_last_line(reference_extract_code(text))


def reference_reply(body: Any) -> str:
    """The reference's tool text for a /run_code reply: stdout + stderr, unlabelled and unseparated, when
    `run_result.status` is "Finished" (whatever the exit code and the top-level status), else NO_STDOUT.

    A time limit, a sandbox error and no usable reply at all (`body` None: connection error, HTTP error, 504
    after the retries, non-JSON) all give NO_STDOUT, losing any partial output. No length cut here: the
    reference tool had none, verl's agent loop cuts to `max_tool_response_length`.
    """
    run = body.get("run_result") if isinstance(body, dict) else None
    if not isinstance(run, dict) or run.get("status") != "Finished":
        return NO_STDOUT
    stdout, stderr = run.get("stdout") or "", run.get("stderr") or ""
    if not isinstance(stdout, str) or not isinstance(stderr, str):
        return NO_STDOUT  # the reference's `stdout + stderr` would raise; its worker then returned no text
    return stdout + stderr


def truncate_middle(text: str, limit: int) -> tuple[str, int]:
    """Cut `text` to at most `limit` characters keeping head and tail; returns (text, characters cut)."""
    if len(text) <= limit:
        return text, 0
    marker_len = len(f"\n... [{len(text)} characters cut] ...\n")  # an upper bound on the marker's length
    keep = max(limit - marker_len, 0)
    head, tail = keep // 2, keep - keep // 2
    cut = len(text) - head - tail
    return f"{text[:head]}\n... [{cut} characters cut] ...\n{text[len(text) - tail:]}", cut


def _join_output(stdout: str, stderr: str) -> str:
    parts = []
    if stdout:
        parts.append(stdout.rstrip("\n"))
    if stderr:
        parts.append("[stderr]\n" + stderr.rstrip("\n"))
    return "\n".join(parts)


def format_run_response(body: Any, timeout: float, max_chars: int) -> tuple[str, dict[str, Any]]:
    """Turn a /run_code JSON reply into the tool text and metrics; a reply of the wrong shape is an error text."""
    if not isinstance(body, dict) or body.get("status") not in ("Success", "Failed", "SandboxError"):
        return _unavailable(f"malformed response from the sandbox: {str(body)[:200]!r}")
    run = body.get("run_result")
    if run is not None and not isinstance(run, dict):
        return _unavailable(f"malformed run_result from the sandbox: {str(run)[:200]!r}")
    run = run or {}
    stdout, stderr = run.get("stdout") or "", run.get("stderr") or ""
    if not isinstance(stdout, str) or not isinstance(stderr, str):
        return _unavailable("malformed response from the sandbox: stdout/stderr are not strings")
    run_status, return_code = run.get("status"), run.get("return_code")

    metrics = {"status": "ok", "timed_out": 0, "sandbox_error": 0}
    if run_status == "TimeLimitExceeded":
        metrics.update(status="timeout", timed_out=1)
        note = f"[Execution timed out after {timeout:g} s; the output above is partial]"
    elif body["status"] == "SandboxError" or run_status != "Finished":
        metrics.update(status="sandbox_error", sandbox_error=1)
        message = str(body.get("message") or f"run status {run_status!r}")[:300]
        note = f"[sandbox error, the code may not have run: {message}]"
    elif return_code not in (0, None):
        metrics["status"] = "error_exit"
        signal_hint = f" (killed by signal {-return_code})" if isinstance(return_code, int) and return_code < 0 else ""
        note = f"[exit code {return_code}{signal_hint}]"
    else:
        note = "" if stdout or stderr else "(no output)"
    output = _join_output(stdout, stderr)
    budget = max_chars - len(note) - 1
    output, cut = truncate_middle(output, max(budget, 0))
    metrics["truncated_chars"] = cut
    return "\n".join(part for part in (output, note) if part), metrics


def _unavailable(reason: str) -> tuple[str, dict[str, Any]]:
    text = f"sandbox unavailable: {reason}. No result for this call; the tool may work again later."
    return text, {"status": "unavailable", "timed_out": 0, "sandbox_error": 1, "truncated_chars": 0}


class CodeInterpreterTool(BaseTool):
    """verl BaseTool running Python in a /run_code sandbox. Stateless by default (create is verl's default); with
    `session_mode: per_trajectory` each trajectory's calls run in one retool-sandbox session (see _session_id).

    `execute` returns (ToolResponse(text=...), 0.0, metrics); metrics hold status ("ok", "error_exit",
    "timeout", "sandbox_error", "unavailable", "bad_input"), timed_out, sandbox_error, retries,
    truncated_chars, latency_s. verl 0.9.1's ToolAgentLoop discards them, so each call is also counted into its
    trajectory's ``agent_data.extra_fields`` (retool.tool_outcomes), which reaches the reward and TensorBoard.
    With ``behaviour: reference`` the sent code and the text follow the reference tool; metrics keep these
    statuses (truncated_chars is then 0: the tool does not cut).
    """

    def __init__(self, config: dict[str, Any], tool_schema: OpenAIFunctionToolSchema | None = None):
        self.settings = SandboxSettings.from_config(dict(config or {}))
        super().__init__(config, tool_schema)
        self._semaphore: asyncio.Semaphore | None = None
        self._semaphore_loop: asyncio.AbstractEventLoop | None = None
        self._instance_sessions: set[str] = set()  # per_trajectory without agent_data: one session per instance

    # -- session_mode: per_trajectory ------------------------------------------------------------------------------
    # verl 0.9.1's ToolAgentLoop creates and releases a tool instance around every single call, so instance_id is
    # per call; the trajectory is the `agent_data` object it passes to execute. Its session id is kept on that
    # object, and the session is closed when the object is garbage-collected at the trajectory's end (the server
    # also evicts idle sessions). Callers without agent_data get one session per instance_id, closed by release.
    def _session_id(self, instance_id: str, agent_data: Any) -> str | None:
        if self.settings.session_mode != "per_trajectory":
            return None
        if agent_data is None:
            self._instance_sessions.add(instance_id)
            return instance_id
        session_id = getattr(agent_data, "_retool_session_id", None)
        if session_id is None:
            session_id = uuid.uuid4().hex
            agent_data._retool_session_id = session_id
            try:
                weakref.finalize(agent_data, self._close_soon, session_id, asyncio.get_running_loop())
            except TypeError:  # not weak-referenceable: the server's idle eviction ends the session
                pass
        return session_id

    def _close_soon(self, session_id: str, loop: asyncio.AbstractEventLoop) -> None:
        with contextlib.suppress(RuntimeError):  # the loop is closed: the server evicts the session when idle
            loop.call_soon_threadsafe(lambda: asyncio.ensure_future(self.close_session(session_id)))

    async def close_session(self, session_id: str) -> None:
        """Ask the server to end a session now (best effort: failures are logged, never raised)."""
        base = self.settings.sandbox_fusion_url.rsplit("/", 1)[0]
        try:
            timeout = aiohttp.ClientTimeout(total=10)
            async with aiohttp.ClientSession(timeout=timeout) as http:
                async with http.post(f"{base}/sessions/{quote(session_id, safe='')}/close") as resp:
                    await resp.read()
        except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
            logger.info("code_interpreter: closing session %s failed: %s", session_id, exc)

    async def release(self, instance_id: str, **kwargs) -> None:
        if instance_id in self._instance_sessions:
            self._instance_sessions.discard(instance_id)
            await self.close_session(instance_id)
        await super().release(instance_id, **kwargs)

    def get_openai_tool_schema(self) -> OpenAIFunctionToolSchema:
        """The schema from retool.tool_schema, used when the YAML gives no `tool_schema`."""
        return OpenAIFunctionToolSchema.model_validate(tool_schema())

    def _limiter(self) -> asyncio.Semaphore:
        # an asyncio.Semaphore belongs to one event loop; tests (and restarts) may bring a new one
        loop = asyncio.get_running_loop()
        if self._semaphore is None or self._semaphore_loop is not loop:
            self._semaphore = asyncio.Semaphore(self.settings.max_concurrency)
            self._semaphore_loop = loop
        return self._semaphore

    @rollout_trace_op
    async def execute(self, instance_id: str, parameters: dict[str, Any], **kwargs) -> tuple[ToolResponse, float, dict]:
        """Run parameters["code"]; never raises (except cancellation), every failure is a readable text."""
        started = time.monotonic()
        reference = self.settings.behaviour == "reference"
        code = parameters.get("code") if isinstance(parameters, dict) else None
        # a blank string is refused here; the reference ran it (`print(   )` for "   "), so reference behaviour does
        if not isinstance(code, str) or (not code.strip() and not reference):
            text = (
                "Error: code_interpreter needs a non-empty string argument `code` with Python code, "
                f"got {type(code).__name__ if code is not None else 'no code'}."
            )
            metrics = {"status": "bad_input", "timed_out": 0, "sandbox_error": 0, "truncated_chars": 0, "retries": 0}
        else:
            try:
                prepared = reference_prepare_code(code) if reference else prepare_code(code)
                session_id = self._session_id(instance_id, kwargs.get("agent_data"))
                if session_id is None:
                    text, metrics = await self.run_code(prepared)
                else:
                    text, metrics = await self.run_code(prepared, session_id=session_id)
            except Exception as exc:  # last resort: a bug here must not kill the rollout
                logger.exception("code_interpreter failed unexpectedly")
                text, metrics = _unavailable(f"internal tool error {type(exc).__name__}: {exc}")
                metrics["retries"] = 0
                if reference:  # the reference model saw nothing else than output or NO_STDOUT; the log has the error
                    text = NO_STDOUT
        metrics["latency_s"] = time.monotonic() - started
        agent_data = kwargs.get("agent_data")
        if agent_data is not None:
            tool_outcomes.record(agent_data.extra_fields, metrics)
        return ToolResponse(text=text), 0.0, metrics

    async def run_code(self, code: str, session_id: str | None = None) -> tuple[str, dict[str, Any]]:
        """POST `code` as is (no preparation) and format the reply; returns (text, metrics)."""
        s = self.settings
        # whole seconds go out as JSON integers, as verl sends them
        seconds = int(s.default_timeout) if s.default_timeout.is_integer() else s.default_timeout
        payload = {
            "code": code,
            "language": "python",
            "compile_timeout": seconds,
            "run_timeout": seconds,
            "memory_limit_MB": s.memory_limit_mb,
            "stdin": None,
            "files": {},
            "fetch_files": [],
        }
        if session_id is not None:  # session_mode per_trajectory: the next cell of that session
            payload["session_id"] = session_id
        http_timeout = s.http_deadline()
        limiter = self._limiter()
        retries = 0
        body: Any = None  # the decoded 200 reply, if any (reference behaviour builds its text from it)
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=http_timeout)) as session:
            while True:
                async with limiter:  # held per attempt, released during backoff
                    try:
                        async with session.post(url=s.sandbox_fusion_url, json=payload) as resp:
                            status, raw = resp.status, await resp.text(errors="replace")
                    except asyncio.TimeoutError:
                        result = _unavailable(f"no reply within {http_timeout:g} s")
                        break
                    except aiohttp.ClientError as exc:
                        result = _unavailable(f"{type(exc).__name__}: {exc}")
                        break
                if status == 504 and retries < s.max_retries:
                    await asyncio.sleep(s.retry_backoff_s * 2**retries)
                    retries += 1
                    continue
                if status != 200:
                    after = f" after {retries} retries" if retries else ""
                    result = _unavailable(f"HTTP {status}{after}: {raw.strip()[:200]!r}")
                else:
                    try:
                        body = json.loads(raw)
                    except json.JSONDecodeError:
                        body = raw
                    result = format_run_response(body, s.default_timeout, s.max_output_chars)
                break
        text, metrics = result
        if metrics["status"] == "unavailable":
            logger.warning("code_interpreter: %s", text)
        metrics["retries"] = retries
        if s.behaviour == "reference":
            # metrics keep this tool's classification (they feed retool.tool_outcomes); only the text changes
            text = reference_reply(body)
            metrics["truncated_chars"] = 0  # the tool does not cut; verl's agent loop does
        return text, metrics
