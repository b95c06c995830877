"""A small aiohttp server that speaks /run_code for tests: it runs code for real (a Python subprocess per request, as
SandboxFusion does) and misbehaves on demand under /<mode>/run_code: 504s (`flaky` for the first `fail_first`
hits, `always504`), `error500`, `hang`, `drop` (closes the connection), `garbage` (HTML), `badshape` (JSON of the wrong
shape), `tle` (a canned time-limit reply), `sandboxerror`, `slow` (counts requests in flight), `session` (replies with
the `session` report a retool-sandbox gives, its cell number set by `state.session_cell`).

    from fake_sandbox import server   # the pytest fixture: (base URL, ServerState)
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from aiohttp import web


async def _run_python(code: str, timeout: float) -> dict:
    """Run code in a fresh interpreter like SandboxFusion; on timeout kill it and keep the partial output."""
    with tempfile.TemporaryDirectory() as work:
        Path(work, "main.py").write_text(code)
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-u", "main.py", cwd=work, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
        )
        out, err = bytearray(), bytearray()

        async def drain(stream, buf):
            while chunk := await stream.read(65536):
                buf.extend(chunk)

        readers = asyncio.gather(drain(proc.stdout, out), drain(proc.stderr, err))
        started = time.monotonic()
        try:
            await asyncio.wait_for(proc.wait(), timeout)
            status, code_ = "Finished", proc.returncode
        except asyncio.TimeoutError:
            proc.kill()
            await proc.wait()
            status, code_ = "TimeLimitExceeded", None
        await readers
    return {
        "status": "Success" if status == "Finished" and code_ == 0 else "Failed",
        "message": "",
        "compile_result": None,
        "run_result": {
            "status": status,
            "execution_time": time.monotonic() - started,
            "return_code": code_,
            "stdout": out.decode(errors="replace"),
            "stderr": err.decode(errors="replace"),
        },
        "executor_pod_name": None,
        "files": {},
    }


@dataclass
class ServerState:
    """What the test server saw, and how the flaky route behaves."""

    payloads: list = field(default_factory=list)
    hits: dict = field(default_factory=dict)
    in_flight: int = 0
    max_in_flight: int = 0
    fail_first: int = 0
    session_cell: int | None = None  # `session` mode: the cell number to report (None: no `session` field at all)


def make_app(state: ServerState) -> web.Application:
    async def execute(request: web.Request) -> web.Response:
        payload = await request.json()
        state.payloads.append(payload)
        return web.json_response(await _run_python(payload["code"], payload["run_timeout"]))

    async def run(request: web.Request) -> web.Response:
        state.hits["run"] = state.hits.get("run", 0) + 1
        return await execute(request)

    async def misbehave(request: web.Request) -> web.StreamResponse:
        mode = request.match_info["mode"]
        state.hits[mode] = state.hits.get(mode, 0) + 1
        if mode == "flaky":
            if state.hits[mode] <= state.fail_first:
                return web.Response(status=504, text="gateway timeout")
            return await execute(request)
        if mode == "always504":
            return web.Response(status=504, text="gateway timeout")
        if mode == "error500":
            return web.Response(status=500, text="internal error")
        if mode == "hang":
            await asyncio.sleep(3600)
        if mode == "drop":
            request.transport.close()
            await asyncio.sleep(1)
            return web.Response()
        if mode == "garbage":
            return web.Response(text="<html>proxy error</html>", content_type="text/html")
        if mode == "badshape":
            return web.json_response({"hello": "world"})
        if mode == "tle":
            return web.json_response(
                {
                    "status": "Failed",
                    "message": "",
                    "run_result": {
                        "status": "TimeLimitExceeded",
                        "execution_time": 5.0,
                        "return_code": None,
                        "stdout": "step 1\nstep 2\n",
                        "stderr": "",
                    },
                }
            )
        if mode == "session":
            payload = await request.json()
            state.payloads.append(payload)
            body = await _run_python(payload["code"], payload["run_timeout"])
            if state.session_cell is not None:
                body["session"] = {"id": payload.get("session_id"), "cell": state.session_cell, "lost": None}
            return web.json_response(body)
        if mode == "sandboxerror":
            return web.json_response({"status": "SandboxError", "message": "runner crashed", "run_result": None})
        if mode == "slow":
            state.in_flight += 1
            state.max_in_flight = max(state.max_in_flight, state.in_flight)
            try:
                await asyncio.sleep(0.2)
            finally:
                state.in_flight -= 1
            return web.json_response(await _run_python("print('ok')", 5))
        return web.Response(status=404)

    app = web.Application()
    app.router.add_post("/run_code", run)
    app.router.add_post("/{mode}/run_code", misbehave)
    return app


@pytest.fixture
async def server():
    """(base URL, ServerState) of a fresh test server on a free port."""
    state = ServerState()
    runner = web.AppRunner(make_app(state), shutdown_timeout=0.1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}", state
    finally:
        await runner.cleanup()
