"""retool/checklist.py: the one checklist the doctor, the shakedown, the preflight and the node check print. A check
takes the worst status of what it found, prints its first line beside its name and the others under it (never
wrapped), and any failure makes the exit status 1."""

from __future__ import annotations

import pytest

from retool.checklist import FAIL, NEXT, OK, SKIP, STATUSES, WARN, Check, exit_status, render, summary, worst


def test_a_check_takes_the_worst_of_what_it_found_in_the_order_found():
    found = Check(OK, "stages")
    found.ok("sft: steps 1-5 of 5 logged")
    assert found.status == OK
    found.bad("rl: steps 1 of 2 logged; step 2 missing")
    found.warn("a warning after the failure")
    found.ok("more evidence")
    assert found.status == FAIL  # neither a warning nor evidence makes a failed check pass again
    assert found.details == [
        "sft: steps 1-5 of 5 logged",
        "rl: steps 1 of 2 logged; step 2 missing",
        "a warning after the failure",
        "more evidence",
    ]
    skipped = Check(SKIP, "resume", "a smoke run is not asked to resume")
    skipped.ok("evidence")
    assert skipped.status == SKIP  # what was not checked never turns into a pass


def test_the_statuses_run_from_the_best_to_the_worst():
    assert STATUSES == (OK, SKIP, NEXT, WARN, FAIL)
    assert worst([OK, WARN, SKIP]) == WARN and worst([NEXT, OK]) == NEXT and worst([WARN, FAIL, OK]) == FAIL
    assert worst([]) == OK


def test_an_unknown_status_is_refused_with_its_name():
    with pytest.raises(ValueError, match=r"check 'speed': status 'pass' is not one of OK, SKIP, NEXT, WARN, FAIL"):
        Check("pass", "speed", "1 s per step")


def test_the_renderer_puts_the_first_line_beside_the_name_and_the_others_under_it_unwrapped():
    long = "x" * 300  # as long as it is: a message stays one line for grep
    checks = [
        Check(OK, "python", "3.11.9"),
        Check(FAIL, "node 10.0.0.2", "worker environment as launched (6 variables)", long),
        Check(NEXT, "model", "MODEL_PATH is not set", step="sft"),
        Check(WARN, "empty"),
    ]
    assert render(checks).split("\n") == [
        "[ OK ] python: 3.11.9",
        "[FAIL] node 10.0.0.2: worker environment as launched (6 variables)",
        "       " + long,
        "[NEXT] model: MODEL_PATH is not set",
        "[WARN] empty",
    ]


def test_the_summary_counts_each_status_that_occurs_and_a_failure_sets_the_exit_status():
    checks = [Check(OK, "a", "x"), Check(OK, "b", "x"), Check(SKIP, "c", "why"), Check(NEXT, "d", "later")]
    assert summary(checks) == "2 ok, 1 skipped, 1 not there yet"
    assert exit_status(checks) == 0
    checks += [Check(WARN, "e", "look"), Check(FAIL, "f", "fix")]
    assert summary(checks) == "2 ok, 1 warning(s), 1 failure(s), 1 skipped, 1 not there yet"
    assert exit_status(checks) == 1
    assert summary([]) == "nothing checked" and exit_status([]) == 0
