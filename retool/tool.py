"""CodeInterpreterTool: verl's `code_interpreter` tool, backed by a SandboxFusion-compatible `/run_code` server.

verl imports it by dotted path from configs/tool.yaml (`class_name: retool.tool.CodeInterpreterTool`) inside
each agent-loop worker. One call = one fresh Python process in the sandbox:

1. The code is taken from the `code` argument (the ```python fenced part when there is one). When the last
   top-level statement is a bare expression (decided with `ast`), its value is printed like a Python shell
   does: `repr(value)` unless the value is None. Print calls and string literals are left alone.
2. It is POSTed with verl's payload (code, language, compile_timeout, run_timeout, memory_limit_MB, stdin,
   files, fetch_files); HTTP 504 is retried with exponential backoff; at most `max_concurrency` requests of this
   tool instance are in flight; the HTTP timeout is run_timeout + `http_timeout_margin_s`.
3. The reply is stdout, then a labelled stderr, then a note (exit code, timeout), cut in the middle to
   `max_output_chars` with the number of characters cut. A timeout keeps the partial output.

It never raises into the agent loop: bad arguments, sandbox outages and malformed replies all become a tool
message the model can read ("sandbox unavailable: ..."). Config errors raise at construction (start-up).
"""

from __future__ import annotations

import ast
import asyncio
import json
import logging
import re
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import aiohttp
from verl.tools.base_tool import BaseTool
from verl.tools.schemas import OpenAIFunctionToolSchema, ToolResponse
from verl.utils.rollout_trace import rollout_trace_op

from retool.tool_schema import TOOL_SCHEMA, tool_schema

__all__ = [
    "TOOL_SCHEMA",
    "CodeInterpreterTool",
    "SandboxSettings",
    "extract_code",
    "format_run_response",
    "prepare_code",
    "print_trailing_expression",
    "truncate_middle",
]

logger = logging.getLogger(__name__)

_VALUE_NAME = "_retool_value"
_PYTHON_FENCE_LANGS = ("", "python", "python3", "py")
# an opening fence at a line start with an optional language tag; the body runs to the closing fence or to the
# end (unclosed fence). The line-start rule keeps print("```") in raw code from looking like a fence.
_FENCE = re.compile(r"^[ \t]*```[ \t]*([\w+-]*)[^\n]*\n(.*?)(?:```|\Z)", re.DOTALL | re.MULTILINE)
_NEWLINE = re.compile(rb"\r\n|\r|\n")  # the line ends Python's tokenizer counts (str.splitlines knows more)


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
    http_timeout_margin_s: float = 10.0

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
        return cls(
            sandbox_fusion_url=url,
            default_timeout=float(timeout),
            memory_limit_mb=memory,
            max_concurrency=number("max_concurrency", 1, integer=True),
            max_retries=number("max_retries", 0, integer=True),
            max_output_chars=number("max_output_chars", 200, integer=True),
            retry_backoff_s=float(number("retry_backoff_s", 0)),
            http_timeout_margin_s=float(number("http_timeout_margin_s", 0.1)),
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
    """verl BaseTool running Python in a /run_code sandbox. Stateless: create/release are verl's defaults.

    `execute` returns (ToolResponse(text=...), 0.0, metrics); metrics hold status ("ok", "error_exit",
    "timeout", "sandbox_error", "unavailable", "bad_input"), timed_out, sandbox_error, retries,
    truncated_chars, latency_s. verl 0.9.1's ToolAgentLoop discards tool metrics; they serve tests and benches.
    """

    def __init__(self, config: dict[str, Any], tool_schema: OpenAIFunctionToolSchema | None = None):
        self.settings = SandboxSettings.from_config(dict(config or {}))
        super().__init__(config, tool_schema)
        self._semaphore: asyncio.Semaphore | None = None
        self._semaphore_loop: asyncio.AbstractEventLoop | None = None

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
        code = parameters.get("code") if isinstance(parameters, dict) else None
        if not isinstance(code, str) or not code.strip():
            text = (
                "Error: code_interpreter needs a non-empty string argument `code` with Python code, "
                f"got {type(code).__name__ if code is not None else 'no code'}."
            )
            metrics = {"status": "bad_input", "timed_out": 0, "sandbox_error": 0, "truncated_chars": 0, "retries": 0}
        else:
            try:
                text, metrics = await self.run_code(prepare_code(code))
            except Exception as exc:  # last resort: a bug here must not kill the rollout
                logger.exception("code_interpreter failed unexpectedly")
                text, metrics = _unavailable(f"internal tool error {type(exc).__name__}: {exc}")
                metrics["retries"] = 0
        metrics["latency_s"] = time.monotonic() - started
        return ToolResponse(text=text), 0.0, metrics

    async def run_code(self, code: str) -> tuple[str, dict[str, Any]]:
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
        http_timeout = s.default_timeout + s.http_timeout_margin_s
        limiter = self._limiter()
        retries = 0
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
        return text, metrics
