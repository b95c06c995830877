"""bench/suite_times.py: the per-part cost of the test suite, from pytest's JUnit report."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest

from retool.constants import REPO_ROOT

spec = importlib.util.spec_from_file_location("suite_times", REPO_ROOT / "bench" / "suite_times.py")
suite_times = importlib.util.module_from_spec(spec)
spec.loader.exec_module(suite_times)


def test_parts_outcomes_and_totals_from_a_real_pytest_report(tmp_path):
    tests = tmp_path / "tests" / "unit"
    tests.mkdir(parents=True)
    (tests / "test_sample.py").write_text(
        "import pytest, time\n"
        "def test_slow():\n    time.sleep(0.3)\n"
        "def test_fails():\n    assert 0\n"
        "@pytest.mark.skip(reason='x')\ndef test_skipped():\n    pass\n"
    )
    report = tmp_path / "suite.xml"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            f"--junitxml={report}",
            "--rootdir",
            str(tmp_path),
            str(tests),
        ],
        cwd=tmp_path,
        capture_output=True,
    )
    cases, suite = suite_times.read_cases(report)
    assert {c["part"] for c in cases} == {"tests/unit"}
    assert sorted(c["outcome"] for c in cases) == ["failed", "passed", "skipped"]
    out = tmp_path / "performance.md"
    assert (
        suite_times.main(
            [
                str(report),
                "--label",
                "AVX2-only (emulated)",
                "--make-wall-s",
                "600",
                "--commit",
                "abc1234",
                "--output",
                str(out),
            ]
        )
        == 0
    )
    text = out.read_text()
    assert "<!-- test-suite-avx2-only-emulated:start -->" in text
    assert "by `make test` at commit abc1234 (" in text
    assert "| `tests/unit` | 3 | 1 failed, 1 passed, 1 skipped |" in text
    assert "the whole `make test`, setup included, 600 s (10.0 min)" in text
    assert "s `tests.unit.test_sample::test_slow`" in text

    # make test's two phases: one report each, their walls added and named
    e2e = tmp_path / "tests" / "e2e"
    e2e.mkdir()
    (e2e / "test_run.py").write_text("import time\ndef test_run():\n    time.sleep(0.2)\n")
    second = tmp_path / "e2e.xml"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            f"--junitxml={second}",
            "--rootdir",
            str(tmp_path),
            str(e2e),
        ],
        cwd=tmp_path,
        capture_output=True,
    )
    assert suite_times.main([str(report), str(second), "--label", "two phases", "--output", str(out)]) == 0
    text = out.read_text()
    assert "| `tests/e2e` | 1 | 1 passed |" in text and "| `tests/unit` | 3 |" in text
    walls = [float(suite_times.read_cases(path)[1]["time"]) for path in (report, second)]
    assert f"pytest {sum(walls):.0f} s" in text and f"(suite {walls[0]:.0f} s, e2e {walls[1]:.0f} s)" in text


def test_a_file_that_is_not_a_junit_report_is_a_clear_error(tmp_path, capsys):
    bad = tmp_path / "x.xml"
    bad.write_text("<html/>")
    assert suite_times.main([str(bad), "--label", "x", "--output", str(tmp_path / "p.md")]) == 2
    assert "holds no <testsuite>" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        suite_times.main([str(bad)])


def test_without_commit_the_recipe_checkout_is_named():
    described = subprocess.run(
        ["git", "-C", str(REPO_ROOT), "describe", "--always", "--dirty"], capture_output=True, text=True
    ).stdout.strip()
    assert suite_times.checkout_commit() == (described or None)
