"""The one client of the ``/run_code`` protocol (SandboxFusion's, which retool-sandbox speaks too).

Everything that talks to a code sandbox comes through here: the load test, the test suite, and in the ReTool recipe
the RL tool (``SandboxClient.run``, async), retool-eval and retool-doctor (``wait_ready``, ``health``, ``run_sync``)
and the sandbox benchmark. This module
owns, in one place:

- URLs: users give a server address (``http://host:8080``) or the full ``/run_code`` URL; ``run_code_url`` and
  ``base_url`` turn either into the other.
- The request body (``run_code_request``): SandboxFusion's fields as verl sends them (compile_timeout = run_timeout,
  memory_limit_MB), plus retool-sandbox's ``session_id`` for stateful sessions.
- The deadline of one attempt: the server's queue wait + the run timeout + a margin (``ClientPolicy``), so a call
  that waits in a busy server's queue is not abandoned while the server still means to run it.
- Retries: HTTP 504 (the server's "every slot stayed busy, retry") up to ``max_retries`` times; a server that is
  not there (connection refused, reset, closed mid-reply; HTTP 502/503 from a proxy in front of it) is retried for
  as long as the waits add up to at most ``reconnect_budget_s``, which rides out a sandbox restart. The wait doubles
  from ``retry_backoff_s`` (capped at ``MAX_BACKOFF_S``). A reply that never came within the deadline is not retried:
  the code may still be running there.
- The deadline of a whole call (``ClientPolicy.call_deadline``): every attempt, wait and reconnect added up. A call
  is answered or given up as ``unavailable`` once it has spent that long on the sandbox, whatever the server does, so
  no trajectory waits forever. Waits for this client's own ``max_concurrency`` are not counted: they end as the calls
  ahead end, and giving a call up for local queueing would drop a trajectory that the sandbox could still serve.
- Outcomes (``classify``): ``ok`` (exit 0), ``error_exit``, ``timeout``, ``sandbox_error`` (the server could not run
  it) and ``unavailable`` (no usable reply at all).
- Sessions: a call with ``session_id`` runs as the next cell of that session on retool-sandbox. The client counts
  the cells it ran per session; when the server's reply says this cell ran in a fresh interpreter although earlier
  ones had run (the server restarted, evicted or lost the session), or the server keeps no sessions at all (a real
  SandboxFusion ignores ``session_id``), ``Reply.session_lost`` says so instead of a silent fresh start.

Depends on aiohttp and the standard library only.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import json
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlsplit

import aiohttp

RUN_CODE_PATH = "/run_code"
# How a caller uses sessions: "stateless" (every call a fresh interpreter) or "per_trajectory" (the calls of one
# trajectory share an interpreter of a retool-sandbox server; a server without sessions is reported on every later call)
SESSION_MODES = ("stateless", "per_trajectory")
OUTCOMES = ("ok", "error_exit", "timeout", "sandbox_error", "unavailable")
MAX_BACKOFF_S = 8.0
RETRY_STATUSES = frozenset({502, 503})  # a proxy saying the sandbox behind it is gone or starting


class SandboxURLError(ValueError):
    """A sandbox address that is not an http(s) URL."""


class SandboxUnreachable(RuntimeError):
    """The sandbox did not answer a health check; the message says what to start or fix."""


def run_code_url(url: str) -> str:
    """The full ``/run_code`` URL from a server address (``http://host:port``) or that URL itself."""
    text = url.strip() if isinstance(url, str) else ""
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise SandboxURLError(f"a sandbox URL must be http(s)://host:port[/run_code], got {url!r}")
    return text.rstrip("/") + RUN_CODE_PATH if parts.path in ("", "/") else text


def base_url(url: str) -> str:
    """The server address (``http://host:port``) of a sandbox URL, with or without ``/run_code``."""
    full = run_code_url(url)
    return full[: -len(RUN_CODE_PATH)] if full.endswith(RUN_CODE_PATH) else full.rstrip("/")


def run_code_request(
    code: str,
    *,
    run_timeout: float,
    memory_limit_mb: int = -1,
    session_id: str | None = None,
    stdin: str | None = None,
    files: dict[str, str] | None = None,
    fetch_files: list[str] | None = None,
) -> dict[str, Any]:
    """The JSON body of one ``/run_code`` call: SandboxFusion's fields as verl sends them (``files`` maps a path to
    base64 content; ``fetch_files`` are read back after the run)."""
    seconds = int(run_timeout) if float(run_timeout).is_integer() else float(run_timeout)  # JSON ints, as verl
    body: dict[str, Any] = {
        "code": code,
        "language": "python",
        "compile_timeout": seconds,
        "run_timeout": seconds,
        "memory_limit_MB": memory_limit_mb,
        "stdin": stdin,
        "files": files or {},
        "fetch_files": fetch_files or [],
    }
    if session_id is not None:
        body["session_id"] = session_id
    return body


@dataclass(frozen=True)
class ClientPolicy:
    """How long and how often to try one call (see the module docstring)."""

    run_timeout: float = 30.0
    memory_limit_mb: int = 1024
    # the longest a server may queue a call before it runs (retool-sandbox --queue-timeout)
    queue_timeout_s: float = 30.0
    http_timeout_margin_s: float = 10.0
    max_retries: int = 3  # retries of HTTP 504
    retry_backoff_s: float = 1.0
    reconnect_budget_s: float = 60.0  # the most time spent waiting for a server that is not there

    def attempt_deadline(self) -> float:
        """Seconds one attempt may take: queued at most queue_timeout_s, then running at most run_timeout."""
        return self.queue_timeout_s + self.run_timeout + self.http_timeout_margin_s

    def call_deadline(self) -> float:
        """Seconds a call may spend on the sandbox before it is given up as unavailable: each of its 1 + max_retries
        attempts may take attempt_deadline and be followed by a wait of at most MAX_BACKOFF_S, and waiting for a server
        that is not there takes at most reconnect_budget_s more. Waits for the client's own max_concurrency are not
        part of it."""
        return (1 + self.max_retries) * (self.attempt_deadline() + MAX_BACKOFF_S) + self.reconnect_budget_s


@dataclass
class Reply:
    """What one call came to. ``body`` is the decoded reply when the server answered HTTP 200 with JSON."""

    status: str  # one of OUTCOMES
    body: dict[str, Any] | None = None
    problem: str = ""  # unavailable / sandbox_error: why, in words
    retries: int = 0
    session_lost: str = ""  # a session cell ran in a fresh interpreter: why the earlier state is gone
    busy_answers: int = 0  # HTTP 504 answers this call got (retried or final)
    limit_wait_s: float = 0.0  # seconds it waited for the client's own max_concurrency, all attempts together
    last_attempt_s: float = 0.0  # seconds of its last HTTP attempt (for a reply: queue wait + run + transport)

    @property
    def run_result(self) -> dict[str, Any]:
        run = (self.body or {}).get("run_result")
        return run if isinstance(run, dict) else {}


def classify(body: Any) -> tuple[str, str]:
    """(outcome, problem) of a decoded /run_code reply; a reply of the wrong shape is ``unavailable``."""
    if not isinstance(body, dict) or body.get("status") not in ("Success", "Failed", "SandboxError"):
        return "unavailable", f"malformed response from the sandbox: {str(body)[:200]!r}"
    run = body.get("run_result")
    if run is not None and not isinstance(run, dict):
        return "unavailable", f"malformed run_result from the sandbox: {str(run)[:200]!r}"
    run = run or {}
    if not all(isinstance(run.get(key) or "", str) for key in ("stdout", "stderr")):
        return "unavailable", "malformed response from the sandbox: stdout/stderr are not strings"
    if run.get("status") == "TimeLimitExceeded":
        return "timeout", ""
    if body["status"] == "SandboxError" or run.get("status") != "Finished":
        return "sandbox_error", str(body.get("message") or f"run status {run.get('status')!r}")[:300]
    if run.get("return_code") not in (0, None):
        return "error_exit", ""
    return "ok", ""


class _Retries:
    """The retry decision shared by the async and the sync transport, and what the call's Reply reports of it."""

    def __init__(self, policy: ClientPolicy) -> None:
        self.policy = policy
        self.count = 0
        self.busy = 0  # 504s retried
        self.busy_answers = 0  # 504s seen
        self.waited = 0.0  # seconds waited for a server that was not there
        self.limit_wait = 0.0
        self.last_attempt = 0.0

    def delay(self, http_status: int | None) -> float | None:
        """Seconds to wait before the next attempt after a failed one, or None to give up.

        ``http_status`` None means the connection failed (refused, reset, closed before the reply).
        """
        wait = min(self.policy.retry_backoff_s * 2**self.count, MAX_BACKOFF_S)
        if http_status == 504:
            self.busy_answers += 1
            if self.busy >= self.policy.max_retries:
                return None
            self.busy += 1
        elif http_status is None or http_status in RETRY_STATUSES:
            if self.waited + wait > self.policy.reconnect_budget_s:
                return None
            self.waited += wait
        else:
            return None
        self.count += 1
        return wait

    def after(self) -> str:
        return f" after {self.count} retries" if self.count else ""

    def reply(self, status: str, body: dict[str, Any] | None = None, problem: str = "") -> Reply:
        return Reply(
            status,
            body,
            problem,
            self.count,
            busy_answers=self.busy_answers,
            limit_wait_s=self.limit_wait,
            last_attempt_s=self.last_attempt,
        )


class SandboxClient:
    """Calls one sandbox server; ``max_concurrency`` bounds this client's requests in flight (per event loop)."""

    def __init__(self, url: str, policy: ClientPolicy | None = None, max_concurrency: int | None = None) -> None:
        self.url = run_code_url(url)
        self.base = base_url(url)
        self.policy = policy or ClientPolicy()
        self.max_concurrency = max_concurrency
        self._semaphore: asyncio.Semaphore | None = None
        self._semaphore_loop: asyncio.AbstractEventLoop | None = None
        self._cells: dict[str, int] = {}  # session id -> cells this client ran in it

    # ---- async: the RL tool -------------------------------------------------------------------------------------

    async def run(self, code: str, session_id: str | None = None) -> Reply:
        """Run ``code`` (as is: no preparation) and classify the reply; never raises for sandbox trouble, and gives up
        once the call has spent the policy's call deadline on the sandbox (waits for this client's own
        ``max_concurrency`` do not count: they end as the calls ahead end, each within its own deadline)."""
        p = self.policy
        payload = run_code_request(
            code, run_timeout=p.run_timeout, memory_limit_mb=p.memory_limit_mb, session_id=session_id
        )
        retries = _Retries(p)
        deadline, budget = p.attempt_deadline(), p.call_deadline()
        spent = 0.0  # seconds in attempts and in the waits between them
        out_of_time = f"no answer within the call deadline of {budget:g} s"
        async with aiohttp.ClientSession() as http_session:
            while True:
                asked = time.monotonic()
                async with self._limiter():  # held per attempt, released while backing off
                    sent = time.monotonic()
                    retries.limit_wait += sent - asked
                    allowed = min(deadline, budget - spent)
                    given_up = ""  # why this attempt ends the call without a reply
                    try:
                        async with http_session.post(
                            self.url, json=payload, timeout=aiohttp.ClientTimeout(total=allowed)
                        ) as resp:
                            status, raw, failure = resp.status, await resp.text(errors="replace"), ""
                    except asyncio.TimeoutError:
                        given_up = (
                            f"no reply within {deadline:g} s"
                            if allowed == deadline
                            else f"{out_of_time}{retries.after()}"
                        )
                    except aiohttp.ClientConnectionError as exc:  # refused, reset, server gone mid-reply
                        status, raw, failure = None, "", f"{type(exc).__name__}: {exc}"
                    except aiohttp.ClientError as exc:
                        given_up = f"{type(exc).__name__}: {exc}"
                    retries.last_attempt = time.monotonic() - sent
                    spent += retries.last_attempt
                if given_up:
                    return retries.reply("unavailable", problem=given_up)
                if status == 200:
                    return self._reply(raw, retries, session_id)
                wait = retries.delay(status)
                if wait is None:
                    return self._failed(status, raw, failure, retries)
                if spent + wait >= budget:
                    failed = self._failed(status, raw, failure, retries)
                    failed.problem = f"{out_of_time}; last: {failed.problem}"
                    return failed
                await asyncio.sleep(wait)
                spent += wait

    async def close_session(self, session_id: str) -> bool:
        """Ask the server to end a session now; best effort (False when it could not be asked)."""
        self._cells.pop(session_id, None)
        try:
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as http_session:
                async with http_session.post(f"{self.base}/sessions/{quote(session_id, safe='')}/close") as resp:
                    await resp.read()
                    return resp.status == 200
        except (aiohttp.ClientError, asyncio.TimeoutError):
            return False

    def _limiter(self) -> Any:
        if self.max_concurrency is None:
            return contextlib.nullcontext()
        # an asyncio.Semaphore belongs to one event loop; tests (and restarts) may bring a new one
        loop = asyncio.get_running_loop()
        if self._semaphore is None or self._semaphore_loop is not loop:
            self._semaphore = asyncio.Semaphore(self.max_concurrency)
            self._semaphore_loop = loop
        return self._semaphore

    # ---- sync: doctor, eval, benchmark, tests -------------------------------------------------------------------

    def run_sync(self, code: str, session_id: str | None = None, **fields: Any) -> Reply:
        """``run`` over urllib, for callers without an event loop (threads are fine). ``fields`` are more request
        fields (``stdin``, ``files``, ``fetch_files``, or ``run_timeout`` / ``memory_limit_mb`` for this call)."""
        p = self.policy
        fields.setdefault("run_timeout", p.run_timeout)
        fields.setdefault("memory_limit_mb", p.memory_limit_mb)
        data = json.dumps(run_code_request(code, session_id=session_id, **fields)).encode()
        retries = _Retries(p)
        deadline = p.queue_timeout_s + float(fields["run_timeout"]) + p.http_timeout_margin_s
        while True:
            request = urllib.request.Request(self.url, data=data, headers={"Content-Type": "application/json"})
            sent = time.monotonic()
            timed_out = False
            try:
                with urllib.request.urlopen(request, timeout=deadline) as resp:
                    status, raw, failure = resp.status, resp.read().decode(errors="replace"), ""
            except urllib.error.HTTPError as exc:
                status, raw, failure = exc.code, exc.read().decode(errors="replace"), ""
            except TimeoutError:
                timed_out = True
            except (urllib.error.URLError, ConnectionError, http.client.HTTPException) as exc:
                reason = getattr(exc, "reason", exc)
                timed_out = isinstance(reason, TimeoutError)
                status, raw, failure = None, "", f"{type(reason).__name__}: {reason}"
            retries.last_attempt = time.monotonic() - sent
            if timed_out:
                return retries.reply("unavailable", problem=f"no reply within {deadline:g} s")
            if status == 200:
                return self._reply(raw, retries, session_id)
            wait = retries.delay(status)
            if wait is None:
                return self._failed(status, raw, failure, retries)
            time.sleep(wait)

    def ping(self, timeout: float = 5.0) -> None:
        """Raise SandboxUnreachable unless ``GET /v1/ping`` answers "pong"."""
        try:
            answer = self._get_json("/v1/ping", timeout)
        except (OSError, ValueError, http.client.HTTPException) as exc:
            raise SandboxUnreachable(
                f"{self.base} does not answer GET /v1/ping ({exc}); start it with "
                f"`retool-sandbox serve --host {urlsplit(self.base).hostname} --port "
                f"{urlsplit(self.base).port or 80}` or fix the URL"
            ) from exc
        if answer != "pong":
            raise SandboxUnreachable(
                f'{self.base}/v1/ping answered {str(answer)[:100]!r}, not "pong": is this a sandbox?'
            )

    def wait_ready(self, timeout: float = 600.0, ping_timeout: float = 5.0) -> dict[str, Any] | None:
        """``ping``, then wait while ``/health`` says ``state`` "warming" (a retool-sandbox whose slots' interpreters
        still start and preimport); return ``/health`` (None for a server without it, such as SandboxFusion).
        SandboxUnreachable as ``ping`` raises it, or (without a ``__cause__``) when still warming after ``timeout``
        seconds."""
        self.ping(ping_timeout)
        deadline = time.monotonic() + timeout
        while True:
            health = self.health(ping_timeout)
            if health is None or health.get("state") != "warming":
                return health
            if time.monotonic() >= deadline:
                raise SandboxUnreachable(
                    f"{self.base} is still warming up after {timeout:g} s (/health state "
                    "warming: its slots' interpreters are starting); wait, or give it fewer "
                    "--slots than this host's cores can start"
                )
            time.sleep(0.5)

    def health(self, timeout: float = 5.0) -> dict[str, Any] | None:
        """retool-sandbox's ``GET /health`` (isolation tier, slots, sessions, counters); None where there is none."""
        try:
            answer = self._get_json("/health", timeout)
        except (OSError, ValueError, http.client.HTTPException):
            return None
        return answer if isinstance(answer, dict) else None

    def _get_json(self, path: str, timeout: float) -> Any:
        with urllib.request.urlopen(self.base + path, timeout=timeout) as resp:
            return json.loads(resp.read() or b"null")

    # ---- shared -------------------------------------------------------------------------------------------------

    def _reply(self, raw: str, retries: _Retries, session_id: str | None) -> Reply:
        try:
            body: Any = json.loads(raw)
        except json.JSONDecodeError:
            body = raw
        status, problem = classify(body)
        reply = retries.reply(status, body if isinstance(body, dict) else None, problem)
        if session_id is not None and status != "unavailable":
            reply.session_lost = self._session_state(session_id, body.get("session"))
        return reply

    def _session_state(self, session_id: str, report: Any) -> str:
        """Why this cell did not find the session's earlier state ("" when it did or this is the first cell)."""
        ran = self._cells.get(session_id, 0)
        if not isinstance(report, dict) or not isinstance(report.get("cell"), int):
            self._cells[session_id] = ran + 1
            return (
                "this sandbox keeps no sessions (no `session` in its reply): every call starts a fresh interpreter"
                if ran
                else ""
            )
        cell = report["cell"]
        self._cells[session_id] = cell
        if report.get("lost"):
            return str(report["lost"])
        if cell <= ran:
            return (
                f"the sandbox no longer had this session ({ran} earlier call(s) ran in it; it was restarted or "
                "dropped the session): this code ran in a fresh interpreter"
            )
        return ""

    @staticmethod
    def _failed(status: int | None, raw: str, failure: str, retries: _Retries) -> Reply:
        if status is None:
            problem = f"{failure}{retries.after()}"
        else:
            problem = f"HTTP {status}{retries.after()}: {raw.strip()[:200]!r}"
        return retries.reply("unavailable", problem=problem)
