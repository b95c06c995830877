"""Documented commands redirect output only into folders a fresh clone has or the block made (doc_folders.py):
proved on the real pages, then on copies of README.md with the sandbox line of the quick start written wrongly."""

from __future__ import annotations

import pytest

from doc_commands import REPO
from doc_folders import fresh_clone_folders, folder_problems
from doc_pages import page_names, read_page


@pytest.fixture(scope="module")
def folders() -> set[str]:
    return fresh_clone_folders(REPO)


def test_documented_redirections_write_into_folders_that_exist(folders, docs_summary):
    problems, redirections = [], 0
    for name in page_names(REPO):
        found, count = folder_problems(read_page(REPO / name, name), folders)
        problems += found
        redirections += count
    docs_summary(f"docs-check: {redirections} redirections into files checked against a fresh clone's folders")
    assert redirections >= 4  # the sandbox's log in README, training.md, sandbox.md and multinode.md at least
    assert not problems, "\n".join(map(str, problems))


def test_the_fresh_clone_has_its_tracked_folders_and_not_runs(folders):
    assert {"docs", "docs/zh", "retool/report", "configs/device/rl"} <= folders
    assert not {"runs", "data", ".venv", ".cache"} & folders


def planted(tmp_path, folders, block: str) -> list:
    page = tmp_path / "README.md"
    page.write_text("# A page\n\nText.\n\n```bash\n" + block + "\n```\n")
    return folder_problems(read_page(page, "README.md"), folders)[0]


def test_the_sandbox_line_without_mkdir_is_reported(tmp_path, folders):
    problems = planted(tmp_path, folders, "retool-data download\nnohup retool-sandbox serve >> runs/sandbox.log 2>&1 &")
    assert [(p.page, p.line) for p in problems] == [("README.md", 7)]
    assert "a fresh clone has no runs/" in problems[0].message and "mkdir -p runs" in problems[0].message


@pytest.mark.parametrize(
    "block",
    [
        "mkdir -p runs && nohup retool-sandbox serve >> runs/sandbox.log 2>&1 &",
        "mkdir -p runs/logs\nretool-eval --help > runs/logs/eval.txt",
        "retool-report --help > docs/x.txt 2>&1",  # a folder of the clone
        "retool-sandbox serve >> /shared/logs/s.log &",  # the reader's folder
        "retool-sandbox serve > sandbox.log 2>&1 &",  # the current folder
    ],
)
def test_made_or_existing_folders_pass(tmp_path, folders, block):
    assert planted(tmp_path, folders, block) == []


def test_mkdir_after_the_redirect_is_too_late(tmp_path, folders):
    problems = planted(tmp_path, folders, "retool-sandbox serve >> runs/sandbox.log &\nmkdir -p runs")
    assert [p.line for p in problems] == [6]


def test_an_inline_span_is_checked_too(tmp_path, folders):
    page = tmp_path / "README.md"
    page.write_text("Run `nohup retool-sandbox serve > runs/s.log &` first.\n")
    problems, count = folder_problems(read_page(page, "README.md"), folders)
    assert count == 1 and [p.line for p in problems] == [1]
