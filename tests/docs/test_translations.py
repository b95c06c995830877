"""Every English page with a Chinese version (README.zh-CN.md, docs/zh/<page>.md) shows the same command blocks and
inline commands as it, in both directions, and the same figures (doc_translations.py); proved on the real pages and
on copies of README.md with a block taken away or added, or a figure changed."""

from __future__ import annotations

import re

from doc_commands import REPO, Project
from doc_pages import page_names, read_page
from doc_translations import translation_problems


def test_english_and_chinese_pages_show_the_same_commands(docs_summary):
    names = page_names(REPO)
    problems, pairs = translation_problems(REPO, names, Project())
    docs_summary(f"docs-check: {pairs} English/Chinese page pairs compared")
    assert not problems, "\n".join(map(str, problems))


def _chinese_copy(tmp_path) -> tuple[list[str], list]:
    """README.md and a "Chinese" copy whose shell comments are translated and whose spacing differs: the same
    commands. Returns the copy's lines and the English page's shell blocks."""
    english = (REPO / "README.md").read_text()
    (tmp_path / "README.md").write_text(english)
    page = read_page(tmp_path / "README.md", "README.md")
    lines = english.split("\n")
    for block in page.shell_blocks():
        for index in range(block.first_line - 1, block.first_line - 1 + block.text.count("\n") + 1):
            lines[index] = re.sub(r"(^|\s)#.*$", r"\1# 中文说明", lines[index]).replace(" --", "   --", 1)
    return lines, page.shell_blocks()


def test_translated_comments_and_spacing_still_pair(tmp_path):
    lines, blocks = _chinese_copy(tmp_path)
    assert blocks, "README.md has no shell block to pair"
    (tmp_path / "README.zh-CN.md").write_text("\n".join(lines))
    problems, pairs = translation_problems(tmp_path, ["README.md", "README.zh-CN.md"], Project())
    assert (problems, pairs) == ([], 1)


def test_a_block_missing_from_the_chinese_page_is_reported(tmp_path):
    lines, blocks = _chinese_copy(tmp_path)
    first = blocks[0]
    end = first.first_line + first.text.count("\n") + 1  # the closing fence's index
    (tmp_path / "README.zh-CN.md").write_text("\n".join(lines[: first.line - 1] + lines[end:]))
    problems, _ = translation_problems(tmp_path, ["README.md", "README.zh-CN.md"], Project())
    assert [(p.page, p.line) for p in problems] == [("README.md", first.line)], problems
    assert "no counterpart in README.zh-CN.md" in problems[0].message


def test_a_block_only_in_the_chinese_page_is_reported(tmp_path):
    lines, _ = _chinese_copy(tmp_path)
    extra = ["", "```bash", "retool-doctor --config run_qwen3_4b_sft_npu.sh", "```", ""]
    (tmp_path / "README.zh-CN.md").write_text("\n".join(lines + extra))
    problems, _ = translation_problems(tmp_path, ["README.md", "README.zh-CN.md"], Project())
    assert [(p.page, p.line) for p in problems] == [("README.zh-CN.md", len(lines) + 2)], problems
    assert "no counterpart in README.md: retool-doctor --config run_qwen3_4b_sft_npu.sh" in problems[0].message


def test_an_inline_command_missing_from_one_side_is_reported(tmp_path):
    lines, _ = _chinese_copy(tmp_path)
    (tmp_path / "README.zh-CN.md").write_text("\n".join(lines + ["", "运行 `retool-eval --n 4 --limit 2`。", ""]))
    problems, _ = translation_problems(tmp_path, ["README.md", "README.zh-CN.md"], Project())
    assert [(p.page, p.line) for p in problems] == [("README.zh-CN.md", len(lines) + 2)], problems
    assert "inline command is not in README.md" in problems[0].message


def test_a_chinese_page_without_its_english_page_is_reported(tmp_path):
    (tmp_path / "docs" / "zh").mkdir(parents=True)
    (tmp_path / "docs" / "zh" / "lost.md").write_text("# 孤页\n")
    problems, pairs = translation_problems(tmp_path, ["docs/zh/lost.md"], Project())
    assert pairs == 0 and [(p.page, p.message) for p in problems] == [
        ("docs/zh/lost.md", "Chinese page without its English page docs/lost.md")
    ]


def test_english_pages_without_a_chinese_version_are_not_paired(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "only.md").write_text("```bash\nmake test\n```\n")
    assert translation_problems(tmp_path, ["docs/only.md"], Project()) == ([], 0)


def test_a_figure_changed_on_one_side_is_reported(tmp_path):
    lines, _ = _chinese_copy(tmp_path)
    english = (tmp_path / "README.md").read_text().split("\n")
    at = next(i for i, line in enumerate(lines) if "0.57" in line)
    lines[at] = lines[at].replace("0.57", "0.58", 1)
    (tmp_path / "README.zh-CN.md").write_text("\n".join(lines))
    problems, _ = translation_problems(tmp_path, ["README.md", "README.zh-CN.md"], Project())
    assert ("README.zh-CN.md", at + 1, "0.58 is not in README.md") in problems
    if sum("0.57" in line for line in english) == 1:  # the only 0.57 of the English page is gone from the copy
        assert any(p.page == "README.md" and p.message == "0.57 is not in README.zh-CN.md" for p in problems)


def test_figures_are_read_as_written_in_either_language(tmp_path):
    (tmp_path / "docs" / "zh").mkdir(parents=True)
    (tmp_path / "docs" / "a.md").write_text(
        "About 2.1x faster on 1,791,700 rows; reward -0.4 "
        "([link](https://example.com/v0.23.0)); took 45.3<!-- from x#y --> s.\n"
    )
    (tmp_path / "docs" / "zh" / "a.md").write_text("约快 2.1 倍，共 1791700 行；扣 0.4 分；耗时 45.3 秒。\n")
    assert translation_problems(tmp_path, ["docs/a.md", "docs/zh/a.md"], Project()) == ([], 1)


def test_a_summary_may_leave_figures_out_but_not_add_them(tmp_path, monkeypatch):
    import doc_translations

    (tmp_path / "docs" / "zh").mkdir(parents=True)
    (tmp_path / "docs" / "b.md").write_text("Sampling SD 0.0165, band 0.49 to 0.65.\n")
    (tmp_path / "docs" / "zh" / "b.md").write_text("区间 0.49 到 0.66。\n")
    names = ["docs/b.md", "docs/zh/b.md"]
    problems, _ = translation_problems(tmp_path, names, Project())
    assert sorted(p.message for p in problems) == [
        "0.0165 is not in docs/zh/b.md",
        "0.65 is not in docs/zh/b.md",
        "0.66 is not in docs/b.md",
    ]
    monkeypatch.setattr(doc_translations, "SUMMARIES", {"docs/b.md"})
    problems, _ = translation_problems(tmp_path, names, Project())
    assert [(p.page, p.message) for p in problems] == [("docs/zh/b.md", "0.66 is not in docs/b.md")]
