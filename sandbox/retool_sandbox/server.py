"""HTTP server speaking SandboxFusion's ``/run_code`` protocol with a fixed pool of execution slots.

Endpoints: ``POST /run_code`` (SandboxFusion request/response, field for field), ``GET /v1/ping`` -> "pong",
``GET /health`` (``state``, isolation tier, slots, in-flight and queued requests, counters), and for stateful sessions
``POST /sessions/<id>/close`` or ``DELETE /sessions/<id>`` -> ``{"closed": bool}``.

Start-up: the server listens (and answers) as soon as its tier is chosen, with ``/health`` ``state`` "warming" while
the slots' interpreters and the session zygote start and preimport; once they have, ``state`` is "ready" and it prints
its "retool-sandbox ready at URL" line. Requests that come earlier are served, after the start they wait for.

Sessions (see ``sessions.py``): a ``/run_code`` body with ``"session_id": "<id>"`` (an extra field SandboxFusion
ignores) runs as the next cell of that session; without it a request is stateless, as always.

The request and response shapes are in ``protocol.py``, the options in ``config.py``.

Status codes: 200 whenever the body parsed (the outcome is in ``status``); 422 for an invalid request (missing or
mistyped field, a language other than python, a file path that escapes the work dir), with a FastAPI-style
``detail`` list; 504 when a request waited longer than the queue timeout for a free slot (the only status verl
retries). The run timeout starts when the program starts, never while it waits in the queue.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import os
import resource
import signal
import time
from dataclasses import asdict, dataclass
from typing import Any

from aiohttp import web

from retool_sandbox.config import ServerConfig, preimport_spec
from retool_sandbox.executor import Executor, RunOutcome, RunSpec
from retool_sandbox.isolation import Interpreter
from retool_sandbox.uids import kill_leftovers, reserve_uids
from retool_sandbox.protocol import SESSION_ID, RequestError, parse_run_request, parse_session_id, run_response
from retool_sandbox.sessions import ServerStopping, SessionManager, SessionsFull
from retool_sandbox.tier_choice import choose_isolation

log = logging.getLogger("retool_sandbox")


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
        self.state = "warming"  # "ready" once the slots and the session zygote have started (serve); then "stopping"
        self.sessions = (
            SessionManager(
                executor,
                first_box=2 * cfg.slots,
                max_sessions=cfg.max_sessions,
                idle_timeout=cfg.session_idle_timeout,
                memory_floor_mb=cfg.memory_floor_mb,
            )
            if cfg.max_sessions > 0
            else None
        )
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
        self.state = "stopping"
        if self.sessions is not None:
            await self.sessions.close_all()

    async def close_session(self, request: web.Request) -> web.Response:
        """End a session now (its processes, sandbox and files); idempotent."""
        session_id = request.match_info["session_id"]
        if self.sessions is None or not SESSION_ID.fullmatch(session_id):
            return web.json_response({"closed": False})
        return web.json_response({"closed": self.sessions.close(session_id)})

    async def ping(self, request: web.Request) -> web.Response:
        return web.json_response("pong")

    async def health(self, request: web.Request) -> web.Response:
        iso = self.executor.isolation
        return web.json_response(
            {
                "status": "ok",
                "state": self.state,
                "pid": os.getpid(),
                "isolation": iso.name,
                "mode": self.executor.mode,
                "python": iso.interpreter.executable,
                "python_version": iso.interpreter.version,
                "slots": self.pool.size,
                "uids": None if iso.uid(0) is None else [iso.uid(0), iso.uid(self.cfg.uid_count - 1)],
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
            }
        )

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
        if self.state == "stopping":
            return _retry_later("the server is stopping; retry on the next one", 503)
        if session_id is not None:
            return await self._run_session(session_id, spec)
        slot = await self.pool.acquire(self.cfg.queue_timeout)
        if slot is None:
            self.counters.queue_timeouts += 1
            msg = f"all {self.pool.size} slots stayed busy for the {self.cfg.queue_timeout:g} s queue timeout; retry"
            return _retry_later(msg, 504)
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
            return _retry_later(str(exc), 504)
        except ServerStopping as exc:
            return _retry_later(f"session {session_id!r}: {exc}", 503)
        except Exception as exc:  # a server-side failure must answer SandboxError, not a 500 page
            log.exception("session %r failed", session_id)
            outcome = RunOutcome("Error", None, None, "", "", error=f"sandbox failure: {exc!r}")
        if outcome is None:
            self.counters.queue_timeouts += 1
            msg = (
                f"session {session_id!r}: no slot (or an earlier call of this session still running) within the "
                f"{self.cfg.queue_timeout:g} s queue timeout; retry"
            )
            return _retry_later(msg, 504)
        payload = run_response(outcome)
        self._count(payload, outcome)
        return web.json_response(payload)

    def _count(self, payload: dict[str, Any], outcome: RunOutcome) -> None:
        key = {"Success": "success", "Failed": "failed", "SandboxError": "sandbox_error"}[payload["status"]]
        setattr(self.counters, key, getattr(self.counters, key) + 1)
        self.counters.time_limit_exceeded += outcome.status == "TimeLimitExceeded"
        self.counters.truncated_output += outcome.truncated


def _retry_later(message: str, status: int) -> web.Response:
    """A call this server did not run, answered with a status clients retry: 504, every slot (or session box) stayed
    busy for the queue timeout; 503, the server is stopping, so the call runs on the one that comes up next (the way a
    refused connection is ridden out) instead of being reported as the code's failure."""
    return web.json_response({"status": "SandboxError", "message": message}, status=status)


def _packages(modules: list[str]) -> str:
    """The preimported modules for the ready line: the packages, and how many submodules came with them (/health
    lists each)."""
    shown = [name for name in modules if "." not in name or name.split(".")[0] not in modules]
    more = len(modules) - len(shown)
    return (",".join(shown) or "none") + (f" (+{more} submodules)" if more else "")


def _url(host: str, port: int) -> str:
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


async def serve(cfg: ServerConfig) -> None:
    """Pick the isolation tier, listen, print the ready line, and run until SIGTERM/SIGINT."""
    interpreter = await asyncio.to_thread(Interpreter.probe, cfg.python)
    uid_base, uid_lock = reserve_uids(cfg.uid_count, cfg.uid_base)
    if uid_lock is not None:
        left = await asyncio.to_thread(kill_leftovers, uid_base, cfg.uid_count)
        if left:
            log.warning(
                "killed %d processes that a server which held uids %d.. before left running: %s",
                len(left),
                uid_base,
                "; ".join(left[:10]),
            )
    _raise_open_files_limit(cfg)
    executor, notes = await choose_isolation(
        cfg.isolation,
        interpreter,
        ceiling=cfg.ceiling(),
        uid_base=uid_base,
        work_root=cfg.work_root,
        max_output_bytes=cfg.max_output_bytes,
        fresh=cfg.fresh_sandbox_per_run,
        preimport=preimport_spec(cfg.preimport),
    )
    try:
        await _listen(cfg, executor, interpreter, notes)
    finally:
        await executor.close()
        if uid_lock is not None:
            os.close(uid_lock)


def _raise_open_files_limit(cfg: ServerConfig) -> None:
    """Lift the soft limit on open files to the hard one: a thousand sessions hold a few thousand descriptors (a
    control socket, a pidfd and a log pipe each), more than the usual soft limit of 1024."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
    needed = 8 * cfg.slots + 4 * cfg.max_sessions + 256
    if wanted != resource.RLIM_INFINITY and wanted < needed:
        log.warning(
            "the open-files limit (%d) is below the ~%d that %d slots and %d sessions may need; raise it "
            "(ulimit -n) or lower --max-sessions",
            wanted,
            needed,
            cfg.slots,
            cfg.max_sessions,
        )


async def _listen(cfg: ServerConfig, executor: Executor, interpreter: Interpreter, notes: list[str]) -> None:
    executor.prestart(cfg.slots)
    for note in notes:
        log.warning("isolation tier skipped: %s", note)
    if cfg.preimport not in (None, "", "none") and executor.mode != "fork":
        log.warning("--preimport applies to fork mode only; this server runs in %s mode", executor.mode)
    if executor.isolation.name == "none":
        log.warning("isolation 'none': user code runs as this server's user with its filesystem and network")
    sandbox = SandboxApp(cfg, executor)
    runner = web.AppRunner(sandbox.app, access_log=None, shutdown_timeout=5.0)
    await runner.setup()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):  # before the warm-up: a stop then still cleans up
        loop.add_signal_handler(sig, stop.set)
    try:
        site = web.TCPSite(runner, cfg.host, cfg.port)
        await site.start()
        url = _url(cfg.host, runner.addresses[0][1])
        print(
            f"retool-sandbox warming up at {url}: the slots' sandboxes and the sessions' interpreter start; "
            "/health says state warming until they have",
            flush=True,
        )
        warm = asyncio.ensure_future(executor.warm_up(sessions=cfg.max_sessions > 0))
        stopped = asyncio.ensure_future(stop.wait())
        await asyncio.wait({warm, stopped}, return_when=asyncio.FIRST_COMPLETED)
        if not warm.done():
            warm.cancel()
            return
        if warm.result():
            log.warning("ready before every sandbox started: %s", warm.result())
        sandbox.state = "ready"
        print(
            f"retool-sandbox ready at {url} (isolation: {executor.isolation.name}, "
            f"mode: {executor.mode}, slots: {cfg.slots}, python: {interpreter.executable} {interpreter.version}, "
            f"preimport: {_packages(executor.preimported)}, sessions: {cfg.max_sessions})",
            flush=True,
        )
        await stopped
    finally:
        await runner.cleanup()
