"""The failure ledger: one small Ray actor per run where every failed trajectory is recorded as it happens.

Agent-loop workers (retool.failures.worker), on any node, record an event per failed trajectory; the trainer's
sampler (retool.failures.sampler) drains the events while it waits for a batch and when it samples one, and asks
for a configuration error, so a run stops at the first one instead of at the end of the step. The actor holds only
the events since the last drain and the first configuration error, so its memory does not grow with the run.

Event (a dict): ``partition`` ("train" | "val"), ``kind`` ("lost" | "masked"), ``cause`` (retool.failures.causes),
``step`` (the prompt's global step), ``uid``, ``session``, ``where`` (node and process), ``detail`` (the exception
or the tool's problem, one line), ``traceback`` (text), ``configuration`` (True for a configuration error).

Counts must not vanish: Ray restarts the actor if its process dies, and a restarted ledger has forgotten what it
held. Each incarnation has its own id, which the sampler compares at every drain, so a restart is said in the log and
in the step's record. A worker that cannot reach the ledger keeps the number of events it could not record and hands
it over with its next event (``unrecorded``), so those failures are still counted, by number if not by cause.
"""

from __future__ import annotations

import os
import socket
import uuid
from typing import Any

import ray

LEDGER_NAME = "retool_failure_ledger"


class FailureLedger:
    def __init__(self) -> None:
        self.incarnation = uuid.uuid4().hex
        self._events: dict[str, list[dict[str, Any]]] = {}
        self._causes: dict[str, set[str]] = {}
        self._unrecorded: dict[str, int] = {}
        self._configuration_error: dict[str, Any] | None = None

    def record(self, event: dict[str, Any], unrecorded: dict[str, int] | None = None) -> str:
        """Keep ``event``; ``unrecorded`` counts, per partition, events the caller failed to record before.
        Returns this incarnation's id."""
        partition = event["partition"]
        causes = self._causes.setdefault(partition, set())
        if event["cause"] in causes:
            event = {**event, "traceback": ""}  # the first traceback of a cause per drain is the one shown
        causes.add(event["cause"])
        self._events.setdefault(partition, []).append(event)
        for partition, n in (unrecorded or {}).items():
            self._unrecorded[partition] = self._unrecorded.get(partition, 0) + n
        if event.get("configuration") and self._configuration_error is None:
            self._configuration_error = event
        return self.incarnation

    def drain(self, partition: str) -> dict[str, Any]:
        """What was recorded for ``partition`` since the last drain: {"incarnation", "events", "unrecorded"}; the
        partition starts afresh. The sampler counts them (tracebacks are kept whole only for the first per cause)."""
        self._causes.pop(partition, None)
        return {
            "incarnation": self.incarnation,
            "events": self._events.pop(partition, []),
            "unrecorded": self._unrecorded.pop(partition, 0),
        }

    def configuration_error(self) -> dict[str, Any] | None:
        """The first configuration error recorded by this incarnation (it stays until the run ends)."""
        return self._configuration_error

    def get_incarnation(self) -> str:
        return self.incarnation


def ledger_handle() -> ray.actor.ActorHandle:
    """The run's ledger, created on first use (the sampler creates it at start-up; workers find it by name)."""
    remote = ray.remote(num_cpus=0, max_restarts=-1)(FailureLedger)
    return remote.options(name=LEDGER_NAME, get_if_exists=True, lifetime=None).remote()


def where() -> str:
    """This process: node address and pid, so a message can say which node failed."""
    try:
        node = ray.util.get_node_ip_address()
    except Exception:  # outside Ray (unit tests): the host name still says where
        node = socket.gethostname()
    return f"{node} pid {os.getpid()}"
