"""README.md and docs/ (English and Chinese) show commands that run here. The checker (doc_commands.py) reads the
real pages, then copies of README.md with one mistake planted at the end, which it must report alone, with the
copy's name and the planted line. Launchers are dry-run (DRY_RUN=1), which composes verl's Hydra configs."""

from __future__ import annotations

import re
from decimal import Decimal

import pytest

from doc_commands import REPO, Problem, Project, check_docs, load_pages, unapplied_overrides
from doc_pages import page_names
from retool.markdown_sections import markers


@pytest.fixture(scope="module")
def project() -> Project:
    return Project()


@pytest.mark.verl
def test_every_documented_command_runs_here(project, docs_summary):
    report = check_docs(load_pages(REPO, page_names(REPO)), project)
    docs_summary(report.summary())
    print(report.summary())
    assert report.counts["console"] > 0 and report.counts["launcher"] > 0 and report.counts["paths"] > 0
    assert not report.problems, "\n".join(map(str, report.problems))


def planted(tmp_path, project, text: str) -> tuple[list[Problem], int, object]:
    """Problems that appending ``text`` to a copy of README.md adds, the copy's line of the text's first line, and
    the report of the planted copy."""
    original = (REPO / "README.md").read_text().rstrip("\n") + "\n\n"
    copy = tmp_path / "README.md"
    copy.write_text(original)
    baseline = check_docs(load_pages(tmp_path, ["README.md"]), project)
    copy.write_text(original + text)
    report = check_docs(load_pages(tmp_path, ["README.md"]), project)
    report.counts = report.counts - baseline.counts  # what the planted text adds
    return [p for p in report.problems if p not in baseline.problems], original.count("\n") + 1, report


def bash(*lines: str) -> str:
    return "\n".join(["```bash", *lines, "```", ""])


@pytest.mark.parametrize(
    "command, message",
    [
        (
            "retool-prepare-rl --input retool/datasets/aime2025/test.jsonl --dedup --output data/x.parquet",
            "retool-prepare-rl: unknown option --dedup (did you mean --dedupe?)",
        ),
        ("retool-sandbox server --port 8080", "retool-sandbox: unknown subcommand 'server'"),
        ("retool-sandbox serve --isolation docker", "--isolation 'docker' is not one of auto, bwrap, rlimit, none"),
        ("python -m retool.verl_install install --sauce git", "unknown option --sauce"),
        (
            "retool-sft-preprocess --input /data/ReTool-SFT --output data/x.parquet "
            "--tool-config configs/no_such_tool.yaml",
            "configs/no_such_tool.yaml does not exist in the repository",
        ),
        (
            "retool-eval --data retool/datasets/aime2026/test.jsonl --n 2",
            "retool/datasets/aime2026/test.jsonl does not exist in the repository",
        ),
        ("cat config/tool.yaml", "the repository has no config/ (did you mean configs/?)"),
        ("make smoke-test", "make: the Makefile has no target 'smoke-test'"),
    ],
)
def test_a_planted_command_mistake_is_reported_with_its_line(tmp_path, project, command, message):
    new, first, _ = planted(tmp_path, project, "Some text.\n\n" + bash("# a comment", command))
    assert [(p.page, p.line) for p in new] == [("README.md", first + 4)], new
    assert message in new[0].message


def test_a_wrong_flag_in_an_inline_command_is_reported(tmp_path, project):
    new, first, _ = planted(tmp_path, project, "Then run `retool-eval --model runs/x\n--limt 4` and read it.\n")
    assert [(p.page, p.line, p.message) for p in new] == [
        ("README.md", first, "retool-eval: unknown option --limt (did you mean --limit?)")
    ]


def test_console_blocks_check_only_their_prompt_lines(tmp_path, project):
    new, first, _ = planted(
        tmp_path, project, "```console\n$ retool-doctor --no-such-check\nretool-doctor --this-is-output\n```\n"
    )
    assert [(p.line, p.message) for p in new] == [(first + 1, "retool-doctor: unknown option --no-such-check")]


@pytest.mark.verl
def test_a_hydra_override_that_does_not_apply_fails_the_dry_run(tmp_path, project):
    new, first, report = planted(
        tmp_path, project, bash("DRY_RUN=1 ./run_qwen3_4b_sft_npu.sh \\", "    trainer.no_such_setting=1")
    )
    assert [(p.page, p.line) for p in new] == [("README.md", first + 1)], new
    assert "./run_qwen3_4b_sft_npu.sh trainer.no_such_setting=1 exited 1" in new[0].message
    assert "no_such_setting" in new[0].message.split("exited 1")[1]  # Hydra's own complaint, not a usage error


def test_an_override_is_checked_against_the_resolved_config():
    printed = "trainer:\n  total_epochs: 6\n  logger: [console]\nmodel:\n  path: /models/q\n"
    assert unapplied_overrides(REPO, ("trainer.total_epochs=6", "model.path=/models/q", "+smoke=rl"), printed) == []
    assert unapplied_overrides(REPO, ("trainer.total_epochs=3",), printed) == [
        "override trainer.total_epochs=3 did not reach the resolved config (it holds 6)"
    ]
    assert unapplied_overrides(REPO, ("+trainer.extra=1",), printed) == [
        "override +trainer.extra=1 did not reach the resolved config (it holds nothing)"
    ]


def test_a_launcher_placeholder_asks_for_a_value_or_a_marker(tmp_path, project):
    new, first, _ = planted(tmp_path, project, bash("NNODES=<n> ./run_qwen3_4b_dapo_npu.sh"))
    assert [p.line for p in new] == [first + 1], new
    assert "run_qwen3_4b_dapo_npu.sh: placeholder '<n>' cannot be dry-run" in new[0].message


def _section_with_numbers() -> tuple[str, list[str]]:
    text = (REPO / "docs" / "performance.md").read_text()
    for name in re.findall(r"<!-- (\S+):start -->", text):
        start, end = markers(name)
        section = text.split(start, 1)[1].split(end, 1)[0]
        numbers = re.findall(r"(?<![\w.])\d+\.\d\d(?![\w]|\.\d)", section)
        if numbers:
            return name, numbers
    pytest.fail("docs/performance.md has no generated section with a two-decimal figure")


def test_quoted_numbers_must_match_their_generated_section(tmp_path, project):
    name, numbers = _section_with_numbers()
    rounded = Decimal(numbers[0]).quantize(Decimal("0.1"))
    source = f"<!-- from docs/performance.md#{name} -->"
    new, first, report = planted(
        tmp_path,
        project,
        "\n".join(
            [
                f"It took {numbers[0]} s{source}, about {rounded} s{source}.",
                f"It took 98765.4321 s{source}.",
                "Nowhere: 12 s<!-- from docs/performance.md#no-such-section -->.",
                f"No figure{source}.",
                "",
            ]
        ),
    )
    assert report.counts["numbers"] == 5
    assert [(p.line, p.message) for p in new] == [
        (first + 1, f"quoted number 98765.4321 is not in docs/performance.md#{name}"),
        (first + 2, "quoted number: docs/performance.md has no section no-such-section"),
        (first + 3, f"quote marker of docs/performance.md#{name} follows no number"),
    ]


def test_skip_markers_need_a_reason_and_something_to_skip(tmp_path, project):
    new, first, report = planted(
        tmp_path,
        project,
        "\n".join(
            [
                "<!-- docs-check: skip (needs the host's Docker and its NPU devices) -->",
                "```bash",
                "docker run -itd --name retool --device=/dev/davinci0 image bash",
                "```",
                "",
                "<!-- docs-check: skip -->",
                "```bash",
                "retool-report --logdir runs/x --output report/",
                "```",
                "",
                "<!-- docs-check: skip (nothing follows) -->",
                "",
                "plain prose",
                "",
            ]
        ),
    )
    assert report.counts["skipped"] == 1  # the marker without a reason skips nothing
    assert [p.line for p in new] == [first + 5, first + 10], new
    assert "without a reason" in new[0].message and "marks nothing" in new[1].message


def test_a_block_for_another_machine_is_checked_without_its_placeholders(tmp_path, project):
    """An NPU quick start is not skipped: its flags meet the real parsers (a wrapper script's too), and a launcher
    whose MODEL_PATH only the SFT run gives is dry-run without it. A skip marker may not hide such a block."""
    new, first, report = planted(
        tmp_path,
        project,
        "\n".join(
            [
                "<!-- docs-check: elsewhere (needs an Ascend NPU) -->",
                "```bash",
                "bash scripts/install_npu.sh --no-verl --dry-rn",
                "retool-doctor --stage instal --config run_qwen3_4b_dapo_npu.sh",
                "MODEL_PATH=<the path the SFT stage printed> ./run_qwen3_4b_dapo_npu.sh trainer.save_freq=5",
                "```",
                "",
                "<!-- docs-check: skip (needs an Ascend NPU) -->",
                "```bash",
                "retool-data download --source modelscope",
                "```",
                "",
            ]
        ),
    )
    assert report.counts["elsewhere"] == 1 and report.counts["launcher"] == 1
    assert [(p.line, p.message) for p in new] == [
        (first + 2, "python -m retool.npu_install: unknown option --dry-rn (did you mean --dry-run?)"),
        (first + 3, "retool-doctor: --stage 'instal' is not one of install, sft, rl"),
        (
            first + 7,
            "a skip marker hides commands of this project: mark the block <!-- docs-check: elsewhere "
            "(reason) --> so their arguments are still checked",
        ),
    ]


def test_untagged_blocks_of_commands_or_overrides_are_reported(tmp_path, project):
    new, first, _ = planted(
        tmp_path,
        project,
        "\n".join(
            [
                "```",
                ".venv/bin/pytest tests/docs",
                "```",
                "",
                "```",
                "trainer.total_epochs=2        # fewer epochs",
                "+reward.custom_reward_function.reward_kwargs.x=1",
                "```",
                "",
                "```",
                "configs/   the Hydra configs",
                "```",
                "",
            ]
        ),
    )
    assert [p.line for p in new] == [first, first + 4], new
    assert "tag it ```bash" in new[0].message and "bare Hydra overrides" in new[1].message
