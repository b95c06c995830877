"""retool_sandbox.client against real HTTP servers on 127.0.0.1: a misbehaving test server (tests/helpers/
fake_sandbox.py) and the embedded retool-sandbox. No verl here: the client is what the tool, the doctor, eval, the
benchmark and the tests share."""

from __future__ import annotations

import asyncio
import time

import pytest
from aiohttp import web
from fake_sandbox import ServerState, make_app

from retool_sandbox.client import (
    ClientPolicy,
    SandboxClient,
    SandboxUnreachable,
    SandboxURLError,
    base_url,
    run_code_url,
)
from retool_sandbox import client as client_module
from retool_sandbox.spawn import running_sandbox
from ports import free_port

FAST = ClientPolicy(
    run_timeout=5,
    queue_timeout_s=0,
    http_timeout_margin_s=1,
    max_retries=2,
    retry_backoff_s=0.05,
    reconnect_budget_s=0.3,
)


def test_urls_normalise_one_way():
    assert run_code_url("http://h:1") == run_code_url("http://h:1/") == "http://h:1/run_code"
    assert run_code_url(" http://h:1/x/run_code ") == "http://h:1/x/run_code"
    assert base_url("http://h:1/run_code") == base_url("http://h:1") == "http://h:1"
    for bad in ("ftp://h/run_code", "h:1", "", None):
        with pytest.raises(SandboxURLError):
            run_code_url(bad)


async def test_the_body_is_verls(server):
    url, seen = server
    reply = await SandboxClient(url, ClientPolicy(run_timeout=5, memory_limit_mb=512)).run("print('hello')")
    assert reply.status == "ok" and reply.run_result["stdout"] == "hello\n"
    (payload,) = seen.payloads
    assert set(payload) == {
        "code",
        "language",
        "compile_timeout",
        "run_timeout",
        "memory_limit_MB",
        "stdin",
        "files",
        "fetch_files",
    }
    assert payload["compile_timeout"] == payload["run_timeout"] == 5 and isinstance(payload["run_timeout"], int)
    assert (payload["memory_limit_MB"], payload["stdin"], payload["files"], payload["fetch_files"]) == (
        512,
        None,
        {},
        [],
    )


async def test_504_is_retried_with_doubling_backoff(server):
    url, seen = server
    seen.fail_first = 2
    started = time.monotonic()
    reply = await SandboxClient(url + "/flaky/run_code", FAST).run("print(42)")
    assert reply.status == "ok" and reply.retries == 2 and seen.hits["flaky"] == 3
    assert time.monotonic() - started >= 0.05 + 0.1


async def test_504_forever_gives_up_after_max_retries(server):
    url, seen = server
    reply = await SandboxClient(url + "/always504/run_code", FAST).run("1")
    assert reply.status == "unavailable" and reply.problem.startswith("HTTP 504 after 2 retries")
    assert seen.hits["always504"] == 3


async def test_other_http_errors_are_final(server):
    url, seen = server
    reply = await SandboxClient(url + "/error500/run_code", FAST).run("1")
    assert reply.status == "unavailable" and reply.problem.startswith("HTTP 500") and "internal error" in reply.problem
    assert seen.hits["error500"] == 1 and reply.retries == 0


@pytest.mark.parametrize(
    ("mode", "phrase"),
    [("garbage", "malformed response"), ("badshape", "malformed response"), ("hang", "no reply within 1.5 s")],
)
async def test_unusable_replies_are_unavailable(server, mode, phrase):
    url, _ = server
    started = time.monotonic()
    policy = ClientPolicy(run_timeout=1, queue_timeout_s=0, http_timeout_margin_s=0.5, retry_backoff_s=0.05)
    reply = await SandboxClient(f"{url}/{mode}/run_code", policy).run("1")
    assert reply.status == "unavailable" and phrase in reply.problem and time.monotonic() - started < 5


async def test_a_dropped_connection_is_retried_within_the_budget(server):
    url, seen = server
    reply = await SandboxClient(url + "/drop/run_code", FAST).run("1")
    assert reply.status == "unavailable" and reply.retries >= 2 and seen.hits["drop"] == reply.retries + 1
    assert "retries" in reply.problem


async def test_a_server_that_is_not_there_is_waited_for_then_given_up():
    target = f"http://127.0.0.1:{free_port()}"
    started = time.monotonic()
    reply = await SandboxClient(target, FAST).run("1")
    waited = time.monotonic() - started
    assert reply.status == "unavailable" and reply.retries == 2  # 0.05 + 0.1, then 0.2 would pass the 0.3 s budget
    assert 0.15 <= waited < 3 and "Connect" in reply.problem


async def test_a_restarting_server_is_reached_once_it_is_back():
    """Connection refused while the server restarts; the call lands once it listens again."""
    port = free_port()
    state = ServerState()

    async def start_later():
        await asyncio.sleep(0.6)
        runner = web.AppRunner(make_app(state), shutdown_timeout=0.1)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        return runner

    starter = asyncio.ensure_future(start_later())
    policy = ClientPolicy(run_timeout=5, queue_timeout_s=0, retry_backoff_s=0.1, reconnect_budget_s=10)
    reply = await SandboxClient(f"http://127.0.0.1:{port}", policy).run("print('back')")
    runner = await starter
    try:
        assert reply.status == "ok" and reply.run_result["stdout"] == "back\n" and reply.retries >= 2
    finally:
        await runner.cleanup()


async def test_sandbox_errors_are_classified(server):
    url, _ = server
    reply = await SandboxClient(url + "/sandboxerror/run_code", FAST).run("1")
    assert reply.status == "sandbox_error" and reply.problem == "runner crashed"
    reply = await SandboxClient(url + "/tle/run_code", FAST).run("1")
    assert reply.status == "timeout" and reply.run_result["stdout"] == "step 1\nstep 2\n"
    reply = await SandboxClient(url, FAST).run("raise SystemExit(3)")
    assert reply.status == "error_exit" and reply.run_result["return_code"] == 3


async def test_concurrency_is_bounded_per_client(server):
    url, seen = server
    client = SandboxClient(url + "/slow/run_code", FAST, max_concurrency=2)
    replies = await asyncio.gather(*(client.run("1") for _ in range(6)))
    assert [r.run_result["stdout"] for r in replies] == ["ok\n"] * 6
    assert seen.max_in_flight == 2


async def test_a_fresh_interpreter_under_an_old_session_is_reported(server):
    url, seen = server
    client = SandboxClient(url + "/session/run_code", FAST)
    for cell in (1, 2):
        seen.session_cell = cell
        assert (await client.run("1", session_id="s")).session_lost == ""
    seen.session_cell = 1  # the server restarted: this cell found an empty interpreter
    lost = (await client.run("1", session_id="s")).session_lost
    assert "no longer had this session" in lost and "2 earlier call(s)" in lost
    seen.session_cell = None  # a server without sessions (SandboxFusion ignores session_id)
    other = SandboxClient(url + "/session/run_code", FAST)
    assert (await other.run("1", session_id="t")).session_lost == ""
    assert "keeps no sessions" in (await other.run("1", session_id="t")).session_lost
    assert (await other.run("1")).session_lost == ""  # stateless calls never are


async def test_sync_client_retries_and_classifies(server):
    url, seen = server
    seen.fail_first = 1

    def calls():
        return (
            SandboxClient(url, FAST).run_sync("print(6 * 7)", stdin="x"),
            SandboxClient(url + "/flaky/run_code", FAST).run_sync("print(1)"),
            SandboxClient(url + "/always504/run_code", FAST).run_sync("1"),
            SandboxClient(f"http://127.0.0.1:{free_port()}", FAST).run_sync("1"),
        )

    ok, flaky, busy, gone = await asyncio.to_thread(calls)
    assert ok.status == "ok" and ok.run_result["stdout"] == "42\n" and seen.payloads[0]["stdin"] == "x"
    assert flaky.status == "ok" and flaky.retries == 1
    assert busy.status == "unavailable" and busy.problem.startswith("HTTP 504 after 2 retries")
    assert gone.status == "unavailable" and gone.retries == 2


def test_ping_and_health_of_the_embedded_sandbox():
    with running_sandbox(slots=1) as url:
        client = SandboxClient(url)
        client.ping()
        health = client.health()
        assert health["slots"] == 1 and health["isolation"] in ("bwrap", "rlimit", "none")
        reply = client.run_sync("import math\nprint(math.comb(10, 3))")
        assert reply.status == "ok" and reply.run_result["stdout"] == "120\n"
    with pytest.raises(SandboxUnreachable, match="does not answer GET /v1/ping"):
        SandboxClient(url).ping(timeout=2)
    assert SandboxClient(url).health(timeout=2) is None


async def test_queued_calls_get_a_deadline_that_covers_the_queue():
    # 1 slot, 4 programs of 2.5 s at once: the last one waits ~7.5 s for the slot, then runs 2.5 s.
    code = "import time\ntime.sleep(2.5)\nprint('done')"
    with running_sandbox(slots=1, default_timeout=3, max_timeout=5, queue_timeout=30) as url:
        client = SandboxClient(
            url, ClientPolicy(run_timeout=3, queue_timeout_s=30, http_timeout_margin_s=1, max_retries=0)
        )
        replies = await asyncio.gather(*(client.run(code) for _ in range(4)))
        assert [(r.status, r.run_result.get("stdout")) for r in replies] == [("ok", "done\n")] * 4
        # control: a deadline of run timeout + margin alone (no queue allowance) gives up on the queued calls
        short = SandboxClient(
            url, ClientPolicy(run_timeout=3, queue_timeout_s=0, http_timeout_margin_s=1, max_retries=0)
        )
        replies = await asyncio.gather(*(short.run(code) for _ in range(4)))
        assert sum(r.status == "unavailable" for r in replies) >= 2


def test_the_recipes_runtime_extra_is_the_sandboxs_and_requirements_runtime():
    import tomllib

    from retool.constants import REPO_ROOT

    def extra(pyproject):
        return sorted(tomllib.loads(pyproject.read_text())["project"]["optional-dependencies"]["runtime"])

    lines = (REPO_ROOT / "requirements-runtime.txt").read_text().splitlines()
    listed = sorted(line.strip() for line in lines if line.strip() and not line.startswith("#"))
    assert extra(REPO_ROOT / "pyproject.toml") == extra(REPO_ROOT / "sandbox" / "pyproject.toml") == listed


def test_the_load_tests_default_settings_are_the_tools():
    from retool.constants import REPO_ROOT
    from retool.tool_settings import ToolSettings
    from retool_sandbox.load_settings import LoadSettings, load_settings

    tool = ToolSettings(sandbox_fusion_url="http://127.0.0.1:1/run_code")
    assert LoadSettings() == LoadSettings(tool.client_policy(), tool.max_concurrency, tool.session_mode)
    assert load_settings(str(REPO_ROOT / "configs" / "tool.yaml")) == LoadSettings()


# moved from the sandbox's own tests: they need tests/helpers' misbehaving server
async def test_waits_for_the_clients_own_concurrency_are_not_charged_to_the_deadline(server, monkeypatch):
    url, _ = server
    monkeypatch.setattr(client_module, "MAX_BACKOFF_S", 0.1)
    policy = ClientPolicy(
        run_timeout=1, queue_timeout_s=0, http_timeout_margin_s=0.5, max_retries=0, reconnect_budget_s=0
    )
    assert policy.call_deadline() == pytest.approx(1.6)
    # one call in flight per client: the second waits for the first, which hangs until its attempt deadline, and then
    # gets its own full attempt (3 s in all, past the 1.6 s deadline, which counts only time on the sandbox)
    client = SandboxClient(url + "/hang/run_code", policy, max_concurrency=1)
    first, second = await asyncio.gather(client.run("print(1)"), client.run("print(2)"))
    for reply in (first, second):
        assert reply.status == "unavailable" and reply.problem == "no reply within 1.5 s", reply.problem
        assert reply.last_attempt_s == pytest.approx(1.5, abs=0.3)
    assert first.limit_wait_s < 0.1 and second.limit_wait_s == pytest.approx(1.5, abs=0.3)


async def test_504_answers_are_counted(server):
    url, seen = server
    seen.fail_first = 2
    policy = ClientPolicy(
        run_timeout=5,
        queue_timeout_s=0,
        http_timeout_margin_s=1,
        max_retries=3,
        retry_backoff_s=0.01,
        reconnect_budget_s=0,
    )
    reply = await SandboxClient(url + "/flaky/run_code", policy).run("print(42)")
    assert (reply.status, reply.busy_answers, reply.retries) == ("ok", 2, 2) and reply.last_attempt_s > 0
