"""Real sandbox servers on free loopback ports, shared per test session (each starts in about a second)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sysconfig
from pathlib import Path

import pytest
from sandbox_helpers import SECRET, get, reachable_by_others, unprivileged_python

from retool_sandbox.spawn import running_sandbox


def _require_bwrap() -> None:
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is not installed: run scripts/install_system_packages.sh")


@pytest.fixture(scope="session")
def bwrap_url():
    """The default server: auto isolation (must pick bwrap here), 2 slots; generous timeouts for loaded hosts."""
    _require_bwrap()
    opts = dict(isolation="auto", slots=2, default_timeout=20, max_timeout=20)
    with running_sandbox(env={"RETOOL_SECRET": SECRET}, **opts) as url:
        health = get(url + "/health")
        assert health["isolation"] == "bwrap"
        assert health["mode"] == ("fork" if os.geteuid() == 0 else "fresh")
        yield url


@pytest.fixture(scope="session")
def bwrap_fresh_url():
    """bwrap with a new sandbox for every run (--fresh-sandbox-per-run)."""
    _require_bwrap()
    opts = dict(isolation="bwrap", slots=2, default_timeout=20, max_timeout=20, fresh_sandbox_per_run=True)
    with running_sandbox(env={"RETOOL_SECRET": SECRET}, **opts) as url:
        assert get(url + "/health")["mode"] == "fresh"
        yield url


NOBODY = 65534


@pytest.fixture(scope="session")
def bwrap_nonroot_url():
    """The server run as an unprivileged user (nobody): bwrap in its own user namespace, fresh mode.

    This is what most cluster users get. Run as root, the suite starts it through setpriv with the system Python
    (the server needs only aiohttp, taken from this environment's site-packages); run as non-root, the default
    server already is this one.
    """
    _require_bwrap()
    if os.geteuid() != 0:
        pytest.skip("not root: bwrap_url already runs without root")
    purelib = sysconfig.get_paths()["purelib"]
    repo = str(Path(__file__).resolve().parents[1])  # the folder that holds retool_sandbox
    python = "/usr/bin/python3"
    if not all(reachable_by_others(path) for path in (python, purelib, repo)):
        pytest.skip(f"{python}, {purelib} or {repo} is not reachable by an unprivileged user")
    if shutil.which("setpriv") is None:
        pytest.skip("setpriv is not installed: run scripts/install_system_packages.sh")
    as_nobody = [shutil.which("setpriv"), f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
    userns = subprocess.run(
        [*as_nobody, "bwrap", "--unshare-all", "--unshare-user", "--ro-bind", "/", "/", "true"],
        capture_output=True,
        text=True,
    )
    if userns.returncode != 0:
        pytest.skip(f"unprivileged bubblewrap does not work on this host: {userns.stderr.strip()}")
    opts = dict(isolation="auto", slots=2, default_timeout=20, max_timeout=20, python=python)
    env = {"RETOOL_SECRET": SECRET, "PYTHONPATH": purelib, "HOME": "/"}
    with running_sandbox(server=[*as_nobody, python], env=env, **opts) as url:
        health = get(url + "/health")
        assert (health["isolation"], health["mode"], health["uids"]) == ("bwrap", "fresh", None)
        yield url


@pytest.fixture(scope="session")
def rlimit_url():
    if os.geteuid() != 0:
        pytest.skip("the rlimit tier needs root")
    python = unprivileged_python()
    if python is None:
        pytest.skip("no interpreter reachable by an unprivileged uid")
    with running_sandbox(
        isolation="rlimit", slots=2, default_timeout=20, max_timeout=20, python=python, env={"RETOOL_SECRET": SECRET}
    ) as url:
        yield url


@pytest.fixture(scope="session")
def tiny_work_root(tmp_path_factory):
    return tmp_path_factory.mktemp("tiny-work-root")


@pytest.fixture(scope="session")
def tiny_url(tiny_work_root):
    """One slot, a 0.5 s queue timeout, timeouts clamped to 3 s: easy to saturate."""
    opts = dict(slots=1, queue_timeout=0.5, default_timeout=2, max_timeout=3, work_root=tiny_work_root)
    with running_sandbox(**opts) as url:
        yield url


@pytest.fixture(params=["bwrap", "bwrap-fresh", "rlimit", "bwrap-nonroot"])
def tier_url(request) -> tuple[str, str]:
    """Each isolating tier in turn, bwrap also in fresh mode and run without root: (name, base URL)."""
    return request.param, request.getfixturevalue(f"{request.param.replace('-', '_')}_url")
