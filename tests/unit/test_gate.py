"""retool.sandbox_gate against real sandboxes: bwrap passes, a weaker tier stops an RL launch unless accepted, and a
sandbox that answers but runs no program is refused."""

from __future__ import annotations

import pytest

from retool.sandbox_gate import (
    ACCEPT_VARIABLE,
    GRACE_VARIABLE,
    RESTART_GRACE_S,
    isolation_verdict,
    main,
    restart_grace_s,
    sandbox_verdict,
)
from retool_sandbox.spawn import running_sandbox


def test_bwrap_passes():
    with running_sandbox(isolation="bwrap", slots=1) as url:
        ok, message = isolation_verdict(url + "/run_code", environ={})
        ran = sandbox_verdict(url + "/run_code", environ={})
        assert main([url]) == 0
    assert ok and message.endswith("isolation bwrap")
    assert ran == (True, f"sandbox {url}: isolation bwrap; ran print(6*7)")


def test_a_sandbox_that_runs_no_program_is_refused():
    # a real server that answers pings and /health but whose run timeout (1 ms) no program meets
    with running_sandbox(slots=1, default_timeout=0.001, max_timeout=0.001) as url:
        ok, message = sandbox_verdict(url, environ={})
        assert isolation_verdict(url, environ={})[0]  # the tier alone would have let it through
    assert not ok and "did not run print(6*7): outcome timeout" in message and "its log says why" in message


@pytest.mark.parametrize("isolation", ["rlimit", "none"])
def test_a_weaker_tier_stops_unless_accepted_by_name(isolation, capsys):
    # the rlimit tier runs code as an unprivileged uid, which cannot reach a venv under /root: the system python
    with running_sandbox(isolation=isolation, slots=1, python="/usr/bin/python3") as url:
        refused = isolation_verdict(url, environ={})
        accepted = isolation_verdict(url, environ={ACCEPT_VARIABLE: "1"})
        misspelt = isolation_verdict(url, environ={ACCEPT_VARIABLE: "yes"})
        assert main([url]) == 1
    assert not refused[0] and f"isolation '{isolation}'" in refused[1] and "bubblewrap" in refused[1]
    assert accepted[0] and accepted[1].startswith("warning:") and f"{ACCEPT_VARIABLE}=1" in accepted[1]
    assert not misspelt[0]
    assert "error: sandbox" in capsys.readouterr().err


def test_no_sandbox_and_no_url_are_refused():
    ok, message = isolation_verdict("http://127.0.0.1:9/run_code", environ={GRACE_VARIABLE: "1"})
    assert not ok and "does not answer GET /v1/ping" in message and "(refused connections for 1 s)" in message
    ok, message = isolation_verdict("http://127.0.0.1:9/run_code", environ={GRACE_VARIABLE: "soon"})
    assert not ok and f"{GRACE_VARIABLE}='soon' is not a number of seconds" in message
    assert restart_grace_s({}) == RESTART_GRACE_S == 30
    ok, message = isolation_verdict("127.0.0.1:8080", environ={})
    assert not ok and "http(s)" in message
