"""The failure ledger: one small Ray actor per run where every failed trajectory is recorded as it happens.

Agent-loop workers (retool.failures.worker), on any node, record an event per failed trajectory; the trainer's
sampler (retool.failures.sampler) drains the events at each step, and asks between polls whether a configuration
error has been seen, so a run stops at the first one instead of at the end of the step. The actor keeps counts and
the first event of each cause per partition, so its memory does not grow with the run.

Event (a dict): ``partition`` ("train" | "val"), ``kind`` ("lost" | "masked"), ``cause`` (retool.failures.causes),
``step`` (the prompt's global step), ``uid``, ``session``, ``where`` (node and process), ``detail`` (the exception
or the tool's problem, one line), ``traceback`` (text), ``configuration`` (True for a configuration error).
"""

from __future__ import annotations

import os
import socket
from collections import Counter
from typing import Any

import ray

LEDGER_NAME = "retool_failure_ledger"


class FailureLedger:
    def __init__(self) -> None:
        self._counts: dict[str, Counter] = {}
        self._first: dict[str, dict[str, dict[str, Any]]] = {}
        self._configuration_error: dict[str, Any] | None = None

    def record(self, event: dict[str, Any]) -> None:
        partition = event["partition"]
        self._counts.setdefault(partition, Counter())[(event["kind"], event["cause"])] += 1
        self._first.setdefault(partition, {}).setdefault(event["cause"], event)
        if event.get("configuration") and self._configuration_error is None:
            self._configuration_error = event

    def drain(self, partition: str) -> dict[str, Any]:
        """What was recorded for ``partition`` since the last drain: {"lost": {cause: n}, "masked": {cause: n},
        "first": {cause: event}}; the partition starts afresh."""
        counts = self._counts.pop(partition, Counter())
        drained: dict[str, Any] = {"lost": {}, "masked": {}, "first": self._first.pop(partition, {})}
        for (kind, cause), n in counts.items():
            drained[kind][cause] = n
        return drained

    def configuration_error(self) -> dict[str, Any] | None:
        """The first configuration error recorded in this run (it stays until the run ends)."""
        return self._configuration_error


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
