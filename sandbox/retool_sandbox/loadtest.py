"""``retool-sandbox loadtest``: one RL step's tool calls against any ``/run_code`` server, through ``client``.

The step is ``load_model.LoadSpec`` (the reference run's by default). Each agent-loop worker of it has its own
``SandboxClient`` with the caller's ``load_settings.LoadSettings`` (the ReTool tool's policy and ``max_concurrency``,
8 calls in flight per worker, by default), so deadlines, retries, 504 handling and sessions are the tool's own. The
programs (``load_programs``) run once each on the idle sandbox first (the calibration), so every reply under load can
be compared with it: the same outcome and the same stdout, else it is a wrong answer; a timeout of a program that
finished on the idle sandbox is a false timeout. A program the idle server does not run as it should (a real
SandboxFusion times out on one that prints 6,000 lines; a Python without scipy) is no reason to stop: it stays in
the mix, and each of its calls counts as the server's failure (``fails_when_idle``), reported per program.

Every call is watched: the client gives up once a call has spent its call deadline on the sandbox
(``ClientPolicy.call_deadline``; waits for the worker's own max_concurrency do not count), a call still open after
``HUNG_AFTER_DEADLINES`` deadlines is counted as hung, and a call that raised or that a trajectory never made is
lost. Meanwhile the server's ``/health`` (slots in use, queue, sessions) and, for a retool-sandbox on this host, the
CPU seconds and memory (Pss) of its whole process tree are sampled. ``load_report`` turns the records into the report
and the verdict. Before the load (unless ``baseline_calls`` is 0) the same mix, in trajectories as long as the load's,
runs at concurrency 2 without pauses: the sandbox's own throughput, which the loaded run is compared with.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import math
import os
import resource
import time
import uuid
from dataclasses import dataclass, field, replace
from typing import Any

import aiohttp

from retool_sandbox import host, proctree
from retool_sandbox.client import Reply, SandboxClient, base_url
from retool_sandbox.load_model import LoadSpec, Trajectory, like_lengths, plan
from retool_sandbox.load_programs import PROGRAMS, Program
from retool_sandbox.load_settings import LoadSettings

# A call still open after this many call deadlines counts as hung: it may wait for its worker's earlier calls (each
# within its own deadline) before it spends its own.
HUNG_AFTER_DEADLINES = 4
# Reading the server's CPU and memory from /proc takes at most 1/50 of the time: with a thousand sessions a pass over
# /proc costs tens of milliseconds and a Pss reading more than a second, CPU the sandbox would otherwise have.
MEASURE_SHARE_INVERSE = 50
BASELINE_CONCURRENCY = 2


@dataclass
class Calibration:
    """What a program did on the idle sandbox."""

    status: str
    execution_s: float
    output_bytes: int
    stdout_sha1: str
    weight: int  # the program's share of calls, in percent
    problem: str = ""  # why the idle server did not run it as it should ("": it did)


@dataclass
class CallRecord:
    trajectory: int
    call: int
    program: str
    start: float  # seconds after the run's start, when the trajectory asked the tool
    end: float
    status: str  # a client outcome, or "hung" / "crashed"
    verdict: str  # see load_report.VERDICTS
    execution_s: float | None = None
    limit_wait_s: float = 0.0
    last_attempt_s: float = 0.0
    busy_answers: int = 0
    retries: int = 0
    session_lost: bool = False
    problem: str = ""


@dataclass
class Sample:
    t: float
    health: dict[str, Any] | None
    mem_available_mb: int | None
    cpu_s: float | None = None  # the server tree's CPU seconds so far
    pss_mib: float | None = None
    processes: int | None = None
    host_cpu_s: tuple[float, float] | None = None  # the host's CPU seconds so far: user, kernel (host.cpu_seconds)


@dataclass
class LoadResult:
    spec: LoadSpec
    settings: LoadSettings
    url: str
    health: dict[str, Any] | None  # /health before the run (None: not a retool-sandbox)
    calibration: dict[str, Calibration]
    records: list[CallRecord]
    samples: list[Sample]
    planned_calls: int
    wall_s: float
    client_cpu_s: float  # this process's own CPU seconds during the run
    server_pid: int | None
    baseline: LoadResult | None = None
    baseline_after: LoadResult | None = None  # the same baseline again after the load: the host may have drifted
    notes: list[str] = field(default_factory=list)


def _sha1(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8", "surrogatepass")).hexdigest()


def judge(reply: Reply, program: Program, calibration: dict[str, Calibration]) -> str:
    """The verdict on one answered call (``load_report.VERDICTS``)."""
    if reply.status == "unavailable":
        return "unavailable"
    if reply.status == "sandbox_error":
        return "sandbox_error"
    if program.expect == "timeout":
        return "expected_timeout" if reply.status == "timeout" else "wrong"
    idle = calibration[program.name]
    if idle.problem:
        return "fails_when_idle"
    if reply.status == "timeout":
        return "false_timeout"
    code = reply.run_result.get("return_code")
    if idle.status != "error_exit" and isinstance(code, int) and code < 0:
        return "killed"  # by a signal: the out-of-memory killer, or a fault from outside
    if reply.status != idle.status or _sha1(reply.run_result.get("stdout") or "") != idle.stdout_sha1:
        return "wrong"
    return "right"


class LoadTest:
    """Runs a ``LoadSpec`` against ``url`` with the clients' ``settings``; ``run`` returns a LoadResult.

    ``finished`` counts calls that ended so far (fault tests wait on it to strike mid-run). ``server_pid`` names the
    server process to measure when /health does not (a SandboxFusion on this host); a retool-sandbox on this host is
    found by itself.
    """

    def __init__(
        self,
        url: str,
        spec: LoadSpec,
        settings: LoadSettings,
        *,
        programs: tuple[Program, ...] = PROGRAMS,
        sample_s: float = 1.0,
        cpu_every_s: float = 5.0,
        pss_every_s: float = 60.0,
        server_pid: int | None = None,
        baseline_calls: int = 0,
    ) -> None:
        self.url, self.spec, self.settings, self.programs = url, spec, settings, programs
        self.sample_s, self.cpu_every_s, self.pss_every_s = sample_s, cpu_every_s, pss_every_s
        self.server_pid = server_pid
        self.baseline_calls = baseline_calls
        self.health: dict[str, Any] | None = None
        self.calibration: dict[str, Calibration] = {}
        self.finished = 0
        self._progress = asyncio.Event()

    def _client(self) -> SandboxClient:
        return SandboxClient(self.url, self.settings.policy, max_concurrency=self.settings.max_concurrency)

    async def wait_for_calls(self, count: int, timeout: float) -> None:
        """Return once ``count`` calls of the run have ended (TimeoutError after ``timeout`` seconds)."""

        async def reached() -> None:
            while self.finished < count:
                self._progress.clear()
                await self._progress.wait()

        await asyncio.wait_for(reached(), timeout)

    # ---- calibration ------------------------------------------------------------------------------------------

    async def calibrate(self) -> dict[str, Calibration]:
        """Run every program once, one at a time, statelessly; a program the server does not run as it should gets
        the ``problem`` it had (its calls under load are then the server's failures, not a reason to stop)."""
        client = SandboxClient(self.url, self.settings.policy)
        out = {}
        for program in self.programs:
            reply = await client.run(program.code)
            run = reply.run_result
            problem = ""
            if reply.status != program.expect:
                detail = reply.problem or (run.get("stderr") or "")[-600:]
                problem = f"{reply.status}, not {program.expect}" + (f": {detail.strip()}" if detail.strip() else "")
            stdout, stderr = run.get("stdout") or "", run.get("stderr") or ""
            out[program.name] = Calibration(
                reply.status,
                float(run.get("execution_time") or 0.0),
                len(stdout.encode()) + len(stderr.encode()),
                _sha1(stdout),
                program.weight,
                problem,
            )
        return out

    # ---- the load ---------------------------------------------------------------------------------------------

    async def run(self) -> LoadResult:
        """Calibrate, measure the baseline (unless ``baseline_calls`` is 0), run the load, and the baseline again."""
        await self.prepare()
        baseline = await self.baseline() if self.baseline_calls else None
        result = await self.load()
        result.baseline = baseline
        if baseline is not None:
            result.baseline_after = await self.baseline()
        return result

    async def prepare(self) -> None:
        """Find the server (its /health, its process on this host; a retool-sandbox still warming up is waited for)
        and calibrate the programs; SandboxUnreachable when it does not answer /v1/ping."""
        await asyncio.to_thread(SandboxClient(self.url).wait_ready, 600.0, 10.0)
        self.health = await _health(self.url)
        health = self.health or {}
        if self.server_pid is None and isinstance(health.get("pid"), int) and proctree.is_sandbox_server(health["pid"]):
            self.server_pid = health["pid"]
        self.calibration = await self.calibrate()
        if self.spec.session_mode == "per_trajectory":
            await self.warm_up_sessions()

    async def warm_up_sessions(self) -> None:
        """One session opened and closed before anything is measured: what a server starts once, for its first
        session (retool-sandbox's session zygote, which imports numpy and sympy), is not part of the baseline."""
        client = SandboxClient(self.url, self.settings.policy)
        session_id = f"loadtest-warm-up-{uuid.uuid4().hex[:8]}"
        try:
            await client.run("pass", session_id=session_id)
        finally:
            await client.close_session(session_id)

    async def baseline(self) -> LoadResult:
        """The load's own trajectory lengths (``like_lengths``: about ``baseline_calls`` calls), BASELINE_CONCURRENCY
        trajectories at a time and no pauses: the sandbox's own throughput on the same work as the load."""
        spec = self.spec
        load_lengths = [len(t.calls) for t in plan(replace(spec, timeout_burst=0), self.programs)]
        baseline = LoadSpec(
            trajectories=BASELINE_CONCURRENCY,
            session_mode=spec.session_mode,
            num_turns_mean=spec.num_turns_mean,
            max_assistant_turns=spec.max_assistant_turns,
            tokens_per_s=math.inf,
            tokens_between_calls=0,
            workers=spec.workers,
            live=BASELINE_CONCURRENCY,
            seed=spec.seed + 1,
        )
        return await self._load(
            baseline, lengths=like_lengths(load_lengths, max(1, self.baseline_calls), baseline.seed)
        )

    async def load(self, spec: LoadSpec | None = None) -> LoadResult:
        """Run ``spec`` (default: this test's) after ``prepare``."""
        return await self._load(spec or self.spec)

    async def _load(self, spec: LoadSpec, lengths: list[int] | None = None) -> LoadResult:
        """Run ``spec`` (or, for the baseline, trajectories of these ``lengths``); only the load counts ``finished``."""
        calibration, health, pid = self.calibration, self.health, self.server_pid
        trajectories = plan(spec, self.programs, lengths=lengths)
        count_progress = lengths is None
        clients = [self._client() for _ in range(spec.workers)]
        records: list[CallRecord] = []
        samples: list[Sample] = []
        gate = asyncio.Semaphore(spec.live) if spec.live else None
        run_id = uuid.uuid4().hex[:8]
        usage = resource.getrusage(resource.RUSAGE_SELF)
        started = time.monotonic()
        meter = proctree.CpuMeter(pid) if pid is not None else None
        sampler = asyncio.ensure_future(self._sample(started, meter, samples))

        async def trajectory(t: Trajectory) -> None:
            client = clients[t.worker]
            session_id = f"loadtest-{run_id}-{t.index}" if spec.session_mode == "per_trajectory" else None
            async with gate or contextlib.nullcontext():
                for number, planned in enumerate(t.calls):
                    await asyncio.sleep(planned.think_s)
                    record = await self._call(client, planned.program, session_id, calibration, started)
                    record.trajectory, record.call = t.index, number
                    records.append(record)
                    if count_progress:
                        self.finished += 1
                        self._progress.set()
                await asyncio.sleep(t.final_think_s)  # the answer
                if session_id is not None and t.calls:
                    await client.close_session(session_id)  # what the recipe's agent loop does at the end

        outcomes = await asyncio.gather(*(trajectory(t) for t in trajectories), return_exceptions=True)
        wall = time.monotonic() - started
        sampler.cancel()
        await asyncio.gather(sampler, return_exceptions=True)
        samples.append(await self._reading(started, meter))
        usage_after = resource.getrusage(resource.RUSAGE_SELF)
        notes = [f"a trajectory task failed: {outcome!r}" for outcome in outcomes if isinstance(outcome, BaseException)]
        return LoadResult(
            spec=spec,
            settings=self.settings,
            url=self.url,
            health=health,
            calibration=calibration,
            records=records,
            samples=samples,
            planned_calls=sum(len(t.calls) for t in trajectories),
            wall_s=wall,
            client_cpu_s=(usage_after.ru_utime + usage_after.ru_stime) - (usage.ru_utime + usage.ru_stime),
            server_pid=pid,
            notes=notes,
        )

    async def _call(
        self,
        client: SandboxClient,
        program: Program,
        session_id: str | None,
        calibration: dict[str, Calibration],
        started: float,
    ) -> CallRecord:
        begin = time.monotonic()
        watchdog = HUNG_AFTER_DEADLINES * client.policy.call_deadline()
        try:
            reply = await asyncio.wait_for(client.run(program.code, session_id=session_id), watchdog)
        except asyncio.TimeoutError:
            return CallRecord(
                0,
                0,
                program.name,
                begin - started,
                time.monotonic() - started,
                "hung",
                "hung",
                problem=f"no outcome within {watchdog:g} s",
            )
        except Exception as exc:  # the client must never raise: that is a lost call
            return CallRecord(
                0,
                0,
                program.name,
                begin - started,
                time.monotonic() - started,
                "crashed",
                "crashed",
                problem=f"{type(exc).__name__}: {exc}",
            )
        end = time.monotonic()
        execution = reply.run_result.get("execution_time")
        return CallRecord(
            0,
            0,
            program.name,
            begin - started,
            end - started,
            reply.status,
            judge(reply, program, calibration),
            execution_s=float(execution) if isinstance(execution, (int, float)) else None,
            limit_wait_s=reply.limit_wait_s,
            last_attempt_s=reply.last_attempt_s,
            busy_answers=reply.busy_answers,
            retries=reply.retries,
            session_lost=bool(reply.session_lost),
            problem=reply.problem[:300],
        )

    # ---- sampling ---------------------------------------------------------------------------------------------

    async def _sample(self, started: float, meter: proctree.CpuMeter | None, samples: list[Sample]) -> None:
        """/health every ``sample_s``; the server tree's CPU every ``cpu_every_s`` and its memory every
        ``pss_every_s``, or less often, so that reading them takes at most 1/MEASURE_SHARE_INVERSE of the time. (A
        session killed at its close loses only the CPU it used after the last reading: it is idle then.) Memory is
        also read whenever the live sessions have more than doubled since its last reading, so that a run shorter
        than ``pss_every_s`` still states the memory per session."""
        due = {"cpu": 0.0, "pss": 0.0}
        live_at_pss = 0
        while True:
            now = time.monotonic()
            sample = Sample(
                now - started, await _health(self.url), host.mem_available_mb(), host_cpu_s=host.cpu_seconds()
            )
            live = ((sample.health or {}).get("sessions") or {}).get("live") or 0
            with_pss = now >= due["pss"] or live > 2 * live_at_pss
            if meter is not None and (now >= due["cpu"] or with_pss):
                await self._measure(meter, sample, with_pss)
                spent = time.monotonic() - now
                due["cpu"] = now + max(self.cpu_every_s, MEASURE_SHARE_INVERSE * spent)
                if with_pss:
                    due["pss"] = now + max(self.pss_every_s, MEASURE_SHARE_INVERSE * spent)
                    live_at_pss = live
            samples.append(sample)
            await asyncio.sleep(self.sample_s)

    async def _reading(self, started: float, meter: proctree.CpuMeter | None) -> Sample:
        """A full reading (health, CPU, memory) now."""
        sample = Sample(
            time.monotonic() - started, await _health(self.url), host.mem_available_mb(), host_cpu_s=host.cpu_seconds()
        )
        if meter is not None:
            await self._measure(meter, sample, with_pss=True)
        return sample

    @staticmethod
    async def _measure(meter: proctree.CpuMeter, sample: Sample, with_pss: bool) -> None:
        tree = await asyncio.to_thread(meter.read)
        if tree is not None:
            sample.cpu_s, sample.processes = tree.cpu_s, len(tree.pids)
            if with_pss:
                sample.pss_mib = await asyncio.to_thread(proctree.pss_mib, tree.pids)


async def _health(url: str) -> dict[str, Any] | None:
    """retool-sandbox's /health, or None (another server, or no answer within 2 s)."""
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=2)) as session:
            async with session.get(base_url(url) + "/health") as resp:
                if resp.status != 200:
                    return None
                body = await resp.json(content_type=None)
                return body if isinstance(body, dict) else None
    except (aiohttp.ClientError, asyncio.TimeoutError, ValueError):
        return None


def default_url() -> str:
    return os.environ.get("RETOOL_SANDBOX_URL") or "http://127.0.0.1:8080"
