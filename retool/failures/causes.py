"""What can go wrong inside a trajectory, named once: the causes, the configuration errors, and what to do about each.

Kept free of verl, Ray and torch: the reward (which must import without them) raises the configuration errors
defined here, and the launch-time checks and the unit tests use the rest.

A trajectory fails in one of two ways:
- **lost**: an exception escaped it (verl logs it, marks the prompt's group ``failure`` and pads or evicts it):
  ``reward_error`` when the reward raised, ``agent_loop_error`` for anything else (the loop, the model server,
  tokenization);
- **masked**: it finished, but a tool call got no answer from the code, so the recipe's agent loop kept it out of
  the loss: ``sandbox_unavailable`` (the sandbox did not answer within the client's retries) or
  ``tool_exception`` (the tool itself raised).
A ``ConfigurationError`` anywhere in an exception's chain makes it a configuration error: the same fault will hit
every trajectory, so the run stops at its first occurrence.
"""

from __future__ import annotations

from collections.abc import Iterator

CAUSES = ("reward_error", "tool_exception", "agent_loop_error", "sandbox_unavailable")
LOST_CAUSES = ("reward_error", "agent_loop_error")
MASKED_CAUSES = ("sandbox_unavailable", "tool_exception")

# Where verl reads the failure limits (trainer.v1.sampler.sampler_kwargs), named in every message.
SETTINGS_KEY = "trainer.v1.sampler.sampler_kwargs"

ADVICE = {
    "reward_error": "the reward function raised on these trajectories. Read the traceback: a bug in the reward "
    "(reward.custom_reward_function) or rows it cannot score (reward_model.ground_truth, "
    "data_source of the rows the message names); fix it and relaunch with the same RUN_DIR to resume",
    "agent_loop_error": "the agent loop raised (the loop itself, the rollout server, tokenization of a turn). Read "
    "the traceback in the log; an out-of-memory or a dead rollout server shows there too",
    "sandbox_unavailable": "tool calls got no answer from the sandbox within the client's retries "
    "(reconnect_budget_s in the tool config). Check that `retool-sandbox serve` runs on "
    "every node and answers at RETOOL_SANDBOX_URL (`retool-doctor`), read its log, and give "
    "it more slots (--slots) if it answered 504 (all slots busy)",
    "tool_exception": "the tool raised instead of answering (a bug in the tool or a reply it could not parse). "
    "Read the traceback; the model was told 'Error executing tool' on those calls",
}


class ConfigurationError(Exception):
    """A fault of the run's configuration or data, not of one trajectory: every trajectory would hit it.

    The recipe's failure accounting stops the run at the first one, with this message.
    """


class MissingGroundTruth(ConfigurationError, ValueError):
    """A row has no usable ``reward_model.ground_truth``."""


class BadGroundTruth(ConfigurationError, TypeError):
    """A row's ``reward_model.ground_truth`` is neither text nor a number."""


class BadRewardSetting(ConfigurationError, ValueError):
    """A reward keyword (reward.custom_reward_function.reward_kwargs) has a value the reward does not know."""


class UnknownTool(ConfigurationError, LookupError):
    """The model called the tool the recipe trains, but the run's tool config does not provide it."""


# verl's reward managers index these keys of a row unguarded: a KeyError naming one means the data lacks it.
_ROW_KEYS = ("ground_truth", "reward_model", "data_source")


def exception_chain(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and what caused it: ``__cause__``/``__context__`` and the ``cause`` of Ray's task errors."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        nested = getattr(current, "cause", None)  # ray.exceptions.RayTaskError keeps the original here
        if isinstance(nested, BaseException) and id(nested) not in seen:
            current = nested
        else:
            current = current.__cause__ or current.__context__


def configuration_error(exc: BaseException) -> BaseException | None:
    """The configuration error in ``exc``'s chain, or None when it is a fault of this trajectory only."""
    for link in exception_chain(exc):
        if isinstance(link, ConfigurationError):
            return link
        if isinstance(link, KeyError) and link.args and link.args[0] in _ROW_KEYS:
            return link
    return None


def describe(exc: BaseException) -> str:
    """One line: the innermost exception's type and message."""
    *_, last = exception_chain(exc)
    return f"{type(last).__name__}: {last}"
