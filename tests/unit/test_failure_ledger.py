"""The failure ledger's own bookkeeping (retool.failures.ledger), as a plain object: what a drain hands over, what a
restart looks like to the sampler, and failures a worker could not record."""

from __future__ import annotations

from retool.failures.ledger import FailureLedger


def event(cause: str = "reward_error", uid: str = "u1", session: int = 0, partition: str = "train") -> dict:
    return {
        "partition": partition,
        "kind": "lost",
        "cause": cause,
        "uid": uid,
        "session": session,
        "step": 3,
        "detail": "ValueError: boom",
        "traceback": "Traceback\nValueError: boom",
        "configuration": False,
    }


def test_a_drain_hands_over_each_event_once_with_one_traceback_per_cause():
    ledger = FailureLedger()
    for session in range(3):
        ledger.record(event(session=session))
    ledger.record(event(cause="agent_loop_error", uid="u2"))
    ledger.record(event(partition="val"))
    drained = ledger.drain("train")
    assert [(e["cause"], e["session"]) for e in drained["events"]] == [
        ("reward_error", 0),
        ("reward_error", 1),
        ("reward_error", 2),
        ("agent_loop_error", 0),
    ]
    assert [bool(e["traceback"]) for e in drained["events"]] == [True, False, False, True]
    assert ledger.drain("train")["events"] == []  # handed over once
    assert len(ledger.drain("val")["events"]) == 1  # partitions apart
    ledger.record(event())
    assert ledger.drain("train")["events"][0]["traceback"]  # a new drain shows the cause's traceback again


def test_a_restarted_ledger_has_another_incarnation():
    first, restarted = FailureLedger(), FailureLedger()
    assert first.drain("train")["incarnation"] == first.get_incarnation() != restarted.get_incarnation()


def test_failures_a_worker_could_not_record_are_handed_over_by_number():
    ledger = FailureLedger()
    ledger.record(event(), unrecorded={"train": 2, "val": 1})
    assert ledger.drain("train")["unrecorded"] == 2 and ledger.drain("train")["unrecorded"] == 0
    assert ledger.drain("val")["unrecorded"] == 1


def test_a_configuration_error_is_remembered_for_the_run():
    ledger = FailureLedger()
    ledger.record({**event(), "configuration": True, "detail": "MissingGroundTruth"})
    ledger.drain("train")
    assert ledger.configuration_error()["detail"] == "MissingGroundTruth"
