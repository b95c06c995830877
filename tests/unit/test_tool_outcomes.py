"""retool.tool_outcomes: the counts the tool keeps per trajectory and the reward fields made of them."""

from __future__ import annotations

import pytest

from retool.tool_outcomes import OUTCOME_KEYS, outcome_fields, record


def test_counts_per_status_truncation_retries_and_lost_sessions():
    fields: dict = {}
    for status, cut, lost, retries in [
        ("ok", 0, 0, 0),
        ("ok", 10, 1, 2),
        ("error_exit", 0, 0, 0),
        ("bad_input", 0, 0, 0),
        ("timeout", 5, 0, 0),
        ("sandbox_error", 0, 0, 0),
        ("unavailable", 0, 0, 3),
    ]:
        record(fields, {"status": status, "truncated_chars": cut, "session_lost": lost, "retries": retries})
    assert fields == {
        "tool_calls": 7,
        "tool_ok": 2,
        "tool_error": 2,
        "tool_timeout": 1,
        "tool_unavailable": 2,
        "tool_truncated": 2,
        "tool_retried": 2,
        "tool_session_lost": 1,
    }
    assert outcome_fields(fields) == {k: float(fields.get(k, 0)) for k in OUTCOME_KEYS}  # trajectory_masked: 0


def test_no_calls_are_zeros_and_unknown_status_is_an_error():
    assert outcome_fields({"num_turns": 2}) == dict.fromkeys(OUTCOME_KEYS, 0.0)
    with pytest.raises(ValueError, match="unknown tool status 'weird'"):
        record({}, {"status": "weird"})
