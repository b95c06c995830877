"""HTTP server speaking SandboxFusion's ``/run_code`` protocol with a fixed pool of execution slots.

Endpoints: ``POST /run_code`` (SandboxFusion request/response, field for field), ``GET /v1/ping`` -> "pong",
``GET /health`` (isolation tier, slots, in-flight and queued requests, counters), and for stateful sessions
``POST /sessions/<id>/close`` or ``DELETE /sessions/<id>`` -> ``{"closed": bool}``.

Sessions (see ``sessions.py``): a ``/run_code`` body with ``"session_id": "<id>"`` (an extra field SandboxFusion
ignores) runs as the next cell of that session; without it a request is stateless, as always.

Status codes: 200 whenever the body parsed (the outcome is in ``status``); 422 for an invalid request (missing or
mistyped field, a language other than python, a file path that escapes the work dir), with a FastAPI-style
``detail`` list; 504 when a request waited longer than the queue timeout for a free slot (the only status verl
retries). The run timeout starts when the program starts, never while it waits in the queue.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import collections
import logging
import os
import re
import signal
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from aiohttp import web

from retool.sandbox.executor import (
    Executor,
    RunOutcome,
    RunSpec,
    choose_isolation,
    cpu_seconds_for,
    preimport_spec,
    validate_paths,
)
from retool.sandbox.isolation import UID_BLOCK, Interpreter, Limits, reserve_uids
from retool.sandbox.sessions import SessionManager, SessionsFull

log = logging.getLogger("retool.sandbox")

# The language names SandboxFusion accepts; anything else is a 422 there too.
SANDBOXFUSION_LANGUAGES = frozenset(
    "python python2 cpp nodejs go go_test java php csharp bash typescript sql rust cuda lua R perl D_ut ruby scala "
    "julia pytest junit kotlin_script jest verilog python_gpu lean swift racket gtest react".split()
)


@dataclass
class ServerConfig:
    """Server options (see ``retool-sandbox serve --help``); validated on construction."""

    host: str = "127.0.0.1"
    port: int = 8080
    slots: int = field(default_factory=lambda: os.cpu_count() or 1)
    isolation: str = "auto"
    python: str = sys.executable
    default_timeout: float = 10.0
    max_timeout: float = 60.0
    queue_timeout: float = 30.0
    max_output_bytes: int = 1 << 20
    max_memory_mb: int = 4096
    max_processes: int = 128
    max_file_size_mb: int = 64
    uid_base: int | None = None  # None: the first free block (see isolation.reserve_uids)
    work_root: str | None = None
    max_request_mb: int = 64
    fresh_sandbox_per_run: bool = False  # True: a new sandbox per run instead of forking runs in a slot's sandbox
    preimport: str | None = None  # fork mode: modules imported before forking programs; None = DEFAULT_PREIMPORT
    max_sessions: int | None = None  # None: min(64, the uids left after the slots'); 0 = sessions disabled
    session_idle_timeout: float = 300.0

    @property
    def sessions(self) -> int:
        """How many sessions may exist at once (each takes a uid of the block after the slots' two each)."""
        return min(64, UID_BLOCK - 2 * self.slots) if self.max_sessions is None else self.max_sessions

    def __post_init__(self) -> None:
        checks = [
            (1 <= self.slots <= UID_BLOCK // 2, f"slots must be in 1..{UID_BLOCK // 2}"),
            (0 <= self.port <= 65535, "port must be in 0..65535"),
            (self.default_timeout > 0, "default_timeout must be > 0"),
            (self.max_timeout >= self.default_timeout, "max_timeout must be >= default_timeout"),
            (self.queue_timeout > 0, "queue_timeout must be > 0"),
            (self.max_output_bytes >= 1024, "max_output_bytes must be >= 1024"),
            (self.max_memory_mb >= 0, "max_memory_mb must be >= 0 (0 = no limit)"),
            (self.max_processes >= 4, "max_processes must be >= 4"),
            (self.max_file_size_mb >= 1, "max_file_size_mb must be >= 1"),
            (self.uid_base is None or 1000 <= self.uid_base <= 2**31 - UID_BLOCK,
             "uid_base must be >= 1000 (an unprivileged uid range)"),
            (self.isolation in ("auto", "bwrap", "rlimit", "none"), "isolation must be auto, bwrap, rlimit or none"),
            (0 <= self.sessions <= UID_BLOCK - 2 * self.slots,
             f"max_sessions must be in 0..{UID_BLOCK} - 2 x slots (each slot takes two of the {UID_BLOCK} uids)"),
            (self.session_idle_timeout > 0, "session_idle_timeout must be > 0"),
        ]
        try:
            preimport_spec(self.preimport)
        except ValueError as exc:
            checks.append((False, str(exc)))
        errors = [msg for ok, msg in checks if not ok]
        if errors:
            raise ValueError("invalid sandbox configuration: " + "; ".join(errors))

    def ceiling(self) -> Limits:
        """The largest limits any run gets (requests can only lower memory and, via the timeout, CPU time)."""
        return Limits(
            memory_mb=self.max_memory_mb or None,
            cpu_seconds=cpu_seconds_for(self.max_timeout),
            max_processes=self.max_processes,
            max_file_size_mb=self.max_file_size_mb,
        )


class RequestError(ValueError):
    """An invalid /run_code body; ``loc`` names the field."""

    def __init__(self, loc: str, msg: str) -> None:
        super().__init__(f"{loc}: {msg}")
        self.loc, self.msg = loc, msg


class SlotPool:
    """A fixed set of slot numbers handed out first-come first-served, with a bounded wait."""

    def __init__(self, n: int) -> None:
        self._free = list(range(n - 1, -1, -1))
        self._waiters: collections.deque[asyncio.Future[int]] = collections.deque()
        self.size = n

    @property
    def in_use(self) -> int:
        return self.size - len(self._free)

    @property
    def queued(self) -> int:
        return sum(1 for w in self._waiters if not w.done())

    async def acquire(self, timeout: float) -> int | None:
        """A free slot, or None if none became free within ``timeout`` seconds."""
        if self._free and not self.queued:
            return self._free.pop()
        fut: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._waiters.append(fut)
        try:
            return await asyncio.wait_for(asyncio.shield(fut), timeout)
        except asyncio.TimeoutError:
            if fut.done():  # a slot arrived just as the wait expired: take it
                return fut.result()
            fut.cancel()
            return None
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():
                self.release(fut.result())
            fut.cancel()
            raise
        finally:
            if fut in self._waiters and fut.done():
                self._waiters.remove(fut)

    def release(self, slot: int) -> None:
        while self._waiters:
            fut = self._waiters.popleft()
            if not fut.done():
                fut.set_result(slot)
                return
        self._free.append(slot)


def _number(body: dict, key: str, default: float | None) -> float | None:
    value = body.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise RequestError(key, f"must be a number, got {value!r}")
    return float(value)


def parse_run_request(body: Any, cfg: ServerConfig) -> RunSpec:
    """Validate a /run_code body into a RunSpec (timeouts and memory clamped to the server's maxima)."""
    if not isinstance(body, dict):
        raise RequestError("body", "must be a JSON object")
    for key in ("code", "language"):
        if key not in body:
            raise RequestError(key, "field required")
        if not isinstance(body[key], str):
            raise RequestError(key, f"must be a string, got {type(body[key]).__name__}")
    language = body["language"]
    if language != "python":
        known = "a SandboxFusion language" if language in SANDBOXFUSION_LANGUAGES else "not a SandboxFusion language"
        raise RequestError("language", f"{language!r} ({known}) is not supported; this server runs only 'python'")
    timeout = _number(body, "run_timeout", cfg.default_timeout)
    if timeout <= 0:
        raise RequestError("run_timeout", f"must be > 0 seconds, got {timeout}")
    timeout = min(timeout, cfg.max_timeout)
    _number(body, "compile_timeout", None)
    memory = _number(body, "memory_limit_MB", -1)
    cap = cfg.max_memory_mb or None
    memory_mb = cap if memory <= 0 else (int(memory) if cap is None else min(int(memory), cap))
    stdin = body.get("stdin")
    if stdin is not None and not isinstance(stdin, str):
        raise RequestError("stdin", "must be a string or null")
    files_in = body.get("files")
    files_in = {} if files_in is None else files_in
    if not isinstance(files_in, dict):
        raise RequestError("files", "must be an object mapping path -> base64 content")
    files = {}
    for path, content in files_in.items():
        if content is None:
            content = ""
        if not isinstance(content, str):
            raise RequestError(f"files.{path}", "content must be a base64 string")
        try:
            files[path] = base64.b64decode(content, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise RequestError(f"files.{path}", f"content is not valid base64 ({exc})") from None
    fetch = body.get("fetch_files")
    fetch = [] if fetch is None else fetch
    if not isinstance(fetch, list) or not all(isinstance(p, str) for p in fetch):
        raise RequestError("fetch_files", "must be a list of path strings")
    try:
        files, fetch_paths = validate_paths(files, fetch)
    except ValueError as exc:
        loc, _, msg = str(exc).partition(": ")
        raise RequestError(loc, msg) from None
    return RunSpec(
        code=body["code"], timeout_s=timeout, memory_mb=memory_mb,
        stdin=None if stdin is None else stdin.encode("utf-8", "surrogatepass"),
        files=files, fetch_files=fetch_paths,
    )


_SESSION_ID = re.compile(r"[A-Za-z0-9._:@+=-]{1,200}")


def parse_session_id(body: Any) -> str | None:
    """The optional ``session_id`` of a /run_code body (None or absent: a stateless run)."""
    value = body.get("session_id") if isinstance(body, dict) else None
    if value is None:
        return None
    if not isinstance(value, str) or not _SESSION_ID.fullmatch(value):
        raise RequestError("session_id", "must be 1-200 characters of letters, digits and ._:@+=- (or null for a "
                                         f"stateless run), got {str(value)[:80]!r}")
    return value


def run_response(outcome: RunOutcome) -> dict[str, Any]:
    """SandboxFusion's RunCodeResponse for one run."""
    run_result = {
        "status": outcome.status,
        "execution_time": outcome.execution_time if outcome.status != "Error" else None,
        "return_code": outcome.return_code if outcome.status == "Finished" else None,
        "stdout": outcome.stdout,
        "stderr": outcome.stderr,
    }
    if outcome.status == "Error":
        status = "SandboxError"
    elif outcome.status == "Finished" and outcome.return_code == 0:
        status = "Success"
    else:
        status = "Failed"
    return {
        "status": status,
        "message": outcome.error,
        "compile_result": None,
        "run_result": run_result,
        "executor_pod_name": None,
        "files": outcome.files,
    }


@dataclass
class Counters:
    requests: int = 0
    success: int = 0
    failed: int = 0
    sandbox_error: int = 0
    time_limit_exceeded: int = 0
    truncated_output: int = 0
    rejected: int = 0
    queue_timeouts: int = 0


class SandboxApp:
    """The aiohttp application around one Executor and one SlotPool."""

    def __init__(self, cfg: ServerConfig, executor: Executor) -> None:
        self.cfg, self.executor = cfg, executor
        self.pool = SlotPool(cfg.slots)
        self.counters = Counters()
        self.started = time.time()
        self.sessions = SessionManager(
            executor, first_box=2 * cfg.slots, max_sessions=cfg.sessions, idle_timeout=cfg.session_idle_timeout,
        ) if cfg.sessions > 0 else None
        self.app = web.Application(client_max_size=cfg.max_request_mb * 1024 * 1024)
        self.app.router.add_post("/run_code", self.run_code)
        self.app.router.add_get("/v1/ping", self.ping)
        self.app.router.add_get("/health", self.health)
        self.app.router.add_post("/sessions/{session_id}/close", self.close_session)
        self.app.router.add_delete("/sessions/{session_id}", self.close_session)
        self.app.on_startup.append(self._on_startup)
        self.app.on_shutdown.append(self._on_shutdown)

    async def _on_startup(self, app: web.Application) -> None:
        if self.sessions is not None:
            self.sessions.start()

    async def _on_shutdown(self, app: web.Application) -> None:
        if self.sessions is not None:
            await self.sessions.close_all()

    async def close_session(self, request: web.Request) -> web.Response:
        """End a session now (its processes, sandbox and files); idempotent."""
        session_id = request.match_info["session_id"]
        if self.sessions is None or not _SESSION_ID.fullmatch(session_id):
            return web.json_response({"closed": False})
        return web.json_response({"closed": self.sessions.close(session_id)})

    async def ping(self, request: web.Request) -> web.Response:
        return web.json_response("pong")

    async def health(self, request: web.Request) -> web.Response:
        iso = self.executor.isolation
        return web.json_response({
            "status": "ok",
            "pid": os.getpid(),
            "isolation": iso.name,
            "mode": self.executor.mode,
            "python": iso.interpreter.executable,
            "python_version": iso.interpreter.version,
            "slots": self.pool.size,
            "uids": None if iso.uid(0) is None else [iso.uid(0), iso.uid(2 * self.pool.size + self.cfg.sessions - 1)],
            "preimport": self.executor.preimported,
            "sessions": None if self.sessions is None else self.sessions.health(),
            "in_flight": self.pool.in_use,
            "queued": self.pool.queued,
            "limits": {
                "default_timeout": self.cfg.default_timeout,
                "max_timeout": self.cfg.max_timeout,
                "queue_timeout": self.cfg.queue_timeout,
                "max_output_bytes": self.cfg.max_output_bytes,
                "max_memory_mb": self.cfg.max_memory_mb,
                "max_processes": self.cfg.max_processes,
                "max_file_size_mb": self.cfg.max_file_size_mb,
            },
            "counters": asdict(self.counters),
            "sandboxes": {"started": self.executor.sandboxes_started, "retired": self.executor.sandboxes_retired},
            "uptime_s": round(time.time() - self.started, 3),
        })

    def _reject(self, loc: str, msg: str) -> web.Response:
        self.counters.rejected += 1
        return web.json_response({"detail": [{"loc": ["body", loc], "msg": msg, "type": "value_error"}]}, status=422)

    async def run_code(self, request: web.Request) -> web.Response:
        self.counters.requests += 1
        try:
            body = await request.json()
        except ValueError as exc:
            return self._reject("body", f"invalid JSON: {exc}")
        try:
            spec = parse_run_request(body, self.cfg)
            session_id = parse_session_id(body)
            if session_id is not None and self.sessions is None:
                raise RequestError("session_id", "sessions are disabled on this server (--max-sessions 0)")
        except RequestError as exc:
            return self._reject(exc.loc, exc.msg)
        if session_id is not None:
            return await self._run_session(session_id, spec)
        slot = await self.pool.acquire(self.cfg.queue_timeout)
        if slot is None:
            self.counters.queue_timeouts += 1
            msg = f"all {self.pool.size} slots stayed busy for the {self.cfg.queue_timeout:g} s queue timeout; retry"
            return web.json_response({"status": "SandboxError", "message": msg}, status=504)
        try:
            outcome = await self.executor.run(slot, spec)
        except Exception as exc:  # a server-side failure must answer SandboxError, not a 500 page
            log.exception("run failed on slot %d", slot)
            outcome = RunOutcome("Error", None, None, "", "", error=f"sandbox failure: {exc!r}")
        finally:
            self.pool.release(slot)
        payload = run_response(outcome)
        self._count(payload, outcome)
        log.debug("slot %d: %s/%s in %s s", slot, payload["status"], outcome.status, outcome.execution_time)
        return web.json_response(payload)

    async def _run_session(self, session_id: str, spec: RunSpec) -> web.Response:
        try:
            outcome = await self.sessions.run(session_id, spec, self.cfg.queue_timeout, self.pool)
        except SessionsFull as exc:
            self.counters.queue_timeouts += 1
            return web.json_response({"status": "SandboxError", "message": str(exc)}, status=504)
        except Exception as exc:  # a server-side failure must answer SandboxError, not a 500 page
            log.exception("session %r failed", session_id)
            outcome = RunOutcome("Error", None, None, "", "", error=f"sandbox failure: {exc!r}")
        if outcome is None:
            self.counters.queue_timeouts += 1
            msg = (f"session {session_id!r}: no slot (or an earlier call of this session still running) within the "
                   f"{self.cfg.queue_timeout:g} s queue timeout; retry")
            return web.json_response({"status": "SandboxError", "message": msg}, status=504)
        payload = run_response(outcome)
        self._count(payload, outcome)
        return web.json_response(payload)

    def _count(self, payload: dict[str, Any], outcome: RunOutcome) -> None:
        key = {"Success": "success", "Failed": "failed", "SandboxError": "sandbox_error"}[payload["status"]]
        setattr(self.counters, key, getattr(self.counters, key) + 1)
        self.counters.time_limit_exceeded += outcome.status == "TimeLimitExceeded"
        self.counters.truncated_output += outcome.truncated


def _url(host: str, port: int) -> str:
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


async def serve(cfg: ServerConfig) -> None:
    """Pick the isolation tier, listen, print the ready line, and run until SIGTERM/SIGINT."""
    interpreter = await asyncio.to_thread(Interpreter.probe, cfg.python)
    uid_base, uid_lock = reserve_uids(cfg.uid_base)
    executor, notes = await choose_isolation(
        cfg.isolation, interpreter, ceiling=cfg.ceiling(), uid_base=uid_base, work_root=cfg.work_root,
        max_output_bytes=cfg.max_output_bytes, fresh=cfg.fresh_sandbox_per_run, preimport=preimport_spec(cfg.preimport),
    )
    try:
        await _listen(cfg, executor, interpreter, notes)
    finally:
        await executor.close()
        if uid_lock is not None:
            os.close(uid_lock)


async def _listen(cfg: ServerConfig, executor: Executor, interpreter: Interpreter, notes: list[str]) -> None:
    executor.prestart(cfg.slots)
    for note in notes:
        log.warning("isolation tier skipped: %s", note)
    if cfg.preimport not in (None, "", "none") and executor.mode != "fork":
        log.warning("--preimport applies to fork mode only; this server runs in %s mode", executor.mode)
    if executor.isolation.name == "none":
        log.warning("isolation 'none': user code runs as this server's user with its filesystem and network")
    runner = web.AppRunner(SandboxApp(cfg, executor).app, access_log=None, shutdown_timeout=5.0)
    await runner.setup()
    try:
        site = web.TCPSite(runner, cfg.host, cfg.port)
        await site.start()
        port = runner.addresses[0][1]
        print(
            f"retool-sandbox ready at {_url(cfg.host, port)} (isolation: {executor.isolation.name}, "
            f"mode: {executor.mode}, slots: {cfg.slots}, python: {interpreter.executable} {interpreter.version}, "
            f"preimport: {','.join(executor.preimported) or 'none'}, sessions: {cfg.sessions})",
            flush=True,
        )
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
    finally:
        await runner.cleanup()
