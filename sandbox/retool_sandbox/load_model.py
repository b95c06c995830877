"""The RL step a load test replays: how many calls each trajectory makes, which programs, and when they arrive.

Defaults are the reference run's step (docs/sandbox.md, "Load test"):

- N trajectories in flight together (64 prompts x 16 samples = 1,024), spread over the agent-loop workers (16).
- Calls per trajectory: verl counts ``num_turns`` = user turns + assistant turns + 1, and a tool reply is a user turn,
  so k calls make 2k + 2 turns: the reference's num_turns mean 7.0 at step 0 (5.4 at step 130) is 2.5 (1.7) calls.
  The count is 1 + a geometric number, truncated at the cap, with its parameter solved so the mean matches: every
  trajectory calls at least once (the reference reward penalises an answer without one) and a few run to the cap,
  max_assistant_turns - 1 = 15 calls (verl stops after the 16th assistant turn without running its call).
- Arrivals follow generation, not a flood: before each call and after the last one the model generates an
  exponentially distributed number of tokens (mean ``tokens_between_calls``) at ``tokens_per_s`` per trajectory;
  the next turn starts only when the tool answered. Defaults (paper estimates, not measured): ~2,000 decoded tokens/s
  per die x 16 dies over 1,024 trajectories = 30 tokens/s each, and 4k-token responses over ~3.5 segments = 1,100
  tokens between calls.
- ``session_mode``: ``stateless``, or ``per_trajectory``, where a trajectory's calls share one session that is
  closed when it ends, as the recipe's agent loop does.
- Programs (``load_programs``) are dealt from a shuffled deck, so a run's mix is the stated one.

``plan`` draws all of it from a seed; ``loadtest`` runs it.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

from retool_sandbox.client import SESSION_MODES
from retool_sandbox.load_programs import PROGRAMS, TIMEOUT_PROGRAM, Program

# The reference run (docs/reference.md): 64 prompts x 16 samples, 16 agent-loop workers, at most 16 assistant turns.
REFERENCE_TRAJECTORIES = 1024
REFERENCE_WORKERS = 16
REFERENCE_NUM_TURNS = 7.0  # num_turns mean at step 0 (5.4 at step 130)
REFERENCE_MAX_ASSISTANT_TURNS = 16
REFERENCE_TOKENS_PER_S = 30.0  # paper estimate: ~2,000 tokens/s per die x 16 dies / 1,024 trajectories
REFERENCE_TOKENS_BETWEEN_CALLS = 1100.0  # paper estimate: 4k-token responses over ~3.5 segments


def calls_mean(num_turns_mean: float) -> float:
    """Tool calls per trajectory from verl's num_turns (user + assistant turns + 1, a tool reply being a user turn)."""
    return (num_turns_mean - 2) / 2


def call_count_distribution(mean: float, cap: int) -> list[float]:
    """P(k calls) for k = 0..cap: 1 + a geometric number truncated at ``cap``, its ratio solved so the mean is
    ``mean`` (ValueError unless 1 <= mean <= cap)."""
    if cap < 1 or not 1 <= mean <= cap:
        raise ValueError(
            f"calls per trajectory: the mean must be between 1 and the cap {cap}, got {mean:g} "
            "(num_turns mean = 2 x calls + 2: use --num-turns-mean between 4 and 2 x cap + 2)"
        )

    def shape(ratio: float) -> list[float]:
        weights = [0.0] + [ratio ** (k - 1) for k in range(1, cap + 1)]
        total = sum(weights)
        return [w / total for w in weights]

    low, high = 0.0, 1e6  # the mean rises monotonically with the ratio, from 1 to cap
    for _ in range(200):
        mid = (low + high) / 2
        if sum(k * p for k, p in enumerate(shape(mid))) < mean:
            low = mid
        else:
            high = mid
    return shape((low + high) / 2)


@dataclass(frozen=True)
class LoadSpec:
    """One load test: the step to replay and how hard (see the module docstring for the defaults' sources)."""

    trajectories: int = REFERENCE_TRAJECTORIES
    session_mode: str = "stateless"
    num_turns_mean: float = REFERENCE_NUM_TURNS
    max_assistant_turns: int = REFERENCE_MAX_ASSISTANT_TURNS
    tokens_per_s: float = REFERENCE_TOKENS_PER_S  # per trajectory; float("inf") = no pauses
    tokens_between_calls: float = REFERENCE_TOKENS_BETWEEN_CALLS
    workers: int = REFERENCE_WORKERS
    live: int | None = None  # trajectories in flight at once; None = all of them (an RL step)
    timeout_burst: int = 0  # extra one-call trajectories running TIMEOUT_PROGRAM, arriving together
    timeout_burst_at_s: float = 0.0  # when they arrive, seconds after the start
    seed: int = 0

    def __post_init__(self) -> None:
        checks = [  # named as retool-sandbox loadtest's options
            (self.trajectories >= 1, "--trajectories must be >= 1"),
            (self.session_mode in SESSION_MODES, f"--session-mode must be one of {list(SESSION_MODES)}"),
            (self.max_assistant_turns >= 2, "--max-assistant-turns must be >= 2"),
            (self.tokens_per_s > 0, "--tokens-per-s must be > 0"),
            (self.tokens_between_calls >= 0, "--tokens-between-calls must be >= 0"),
            (self.workers >= 1, "--workers must be >= 1"),
            (self.live is None or self.live >= 1, "live trajectories must be >= 1"),
            (
                self.timeout_burst >= 0 and self.timeout_burst_at_s >= 0,
                "--timeout-burst and --timeout-burst-at must be >= 0",
            ),
        ]
        errors = [message for ok, message in checks if not ok]
        if errors:
            raise ValueError("invalid load test: " + "; ".join(errors))
        call_count_distribution(self.calls_mean, self.max_calls)  # raises for an impossible mean

    @property
    def calls_mean(self) -> float:
        return calls_mean(self.num_turns_mean)

    @property
    def max_calls(self) -> int:
        return self.max_assistant_turns - 1

    def think_s(self, tokens: float) -> float:
        return 0.0 if math.isinf(self.tokens_per_s) else tokens / self.tokens_per_s


@dataclass(frozen=True)
class PlannedCall:
    program: Program
    think_s: float  # generation time before this call


@dataclass(frozen=True)
class Trajectory:
    index: int
    worker: int
    calls: tuple[PlannedCall, ...]
    final_think_s: float  # generation after the last call (the answer)


def plan(
    spec: LoadSpec, programs: tuple[Program, ...] = PROGRAMS, lengths: Sequence[int] | None = None
) -> list[Trajectory]:
    """Every trajectory's calls, programs and pauses, drawn from ``spec.seed`` (the same seed, the same step); with
    ``lengths``, one trajectory per entry making that many calls instead of ``spec.trajectories`` drawn ones.

    Programs are dealt from a shuffled deck that holds each one ``weight`` times, reshuffled when it runs out, so a
    run's mix is the stated one (up to its last deck) and two runs of different sizes compare like with like.
    """
    rng = random.Random(spec.seed)
    counts = call_count_distribution(spec.calls_mean, spec.max_calls)
    deck: list[Program] = []

    def deal() -> Program:
        if not deck:
            deck.extend(p for p in programs for _ in range(p.weight))
            rng.shuffle(deck)
        return deck.pop()

    def tokens() -> float:
        return rng.expovariate(1 / spec.tokens_between_calls) if spec.tokens_between_calls else 0.0

    out: list[Trajectory] = []
    drawn = (rng.choices(range(len(counts)), counts)[0] for _ in range(spec.trajectories))
    for k in lengths if lengths is not None else drawn:
        index = len(out)
        calls = tuple(PlannedCall(deal(), spec.think_s(tokens())) for _ in range(k))
        out.append(Trajectory(index, index % spec.workers, calls, spec.think_s(tokens())))
    for _ in range(spec.timeout_burst):
        index = len(out)
        out.append(
            Trajectory(index, index % spec.workers, (PlannedCall(TIMEOUT_PROGRAM, spec.timeout_burst_at_s),), 0.0)
        )
    return out


def like_lengths(lengths: Sequence[int], calls: int, seed: int) -> list[int]:
    """About ``calls`` calls' worth of trajectory lengths spread like ``lengths``: evenly spaced quantiles of them, in
    a shuffled order. A baseline run with these makes as many calls per trajectory (per session) as the load whose
    lengths they are, so the two differ only in how many trajectories run at once."""
    ordered = sorted(k for k in lengths if k > 0)
    if not ordered:
        return []
    count = max(1, round(calls * len(ordered) / sum(ordered)))
    picked = [ordered[min(len(ordered) - 1, int((i + 0.5) * len(ordered) / count))] for i in range(count)]
    random.Random(seed).shuffle(picked)
    return picked
