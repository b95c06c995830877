"""What the launchers print and what the pages show are the same commands, and the numbers a page shows are the ones
the code computes.

- When RL ends, scripts/launch.sh prints the report, merge and evaluation commands (retool/next_step.py). Every
  documented block that shows one of them for a run folder ``runs/rl-<name>`` (English and Chinese pages) must show
  exactly what next_step prints for that folder, given the reference NPU run's resolved config (a DRY_RUN of
  ``./run_qwen3_4b_dapo_npu.sh``, as the docs check runs it): the same words, whitespace and comments aside.
- docs/reference.md's generated section ``reproduction-band`` is what ``retool.report.band.section()`` renders now.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from doc_commands import _DRY_RUNS, REPO, _dry_run
from doc_pages import console_commands, page_names, read_page
from retool import next_step
from retool.markdown_sections import markers
from retool.report import band
from shell_words import SimpleCommand, simple_commands

RL_RUN = re.compile(r"(?<![\w/])(runs/rl-[\w.-]+)/(?:merged|tensorboard/rl|checkpoints/rl/global_step_(\d+)/actor)\b")


def printed_kind(command: SimpleCommand) -> str | None:
    """Which of the RL stage's printed commands this is: eval, report or merge."""
    words = command.words
    if words[:1] == ("retool-eval",):
        return "eval"
    if words[:1] == ("retool-report",):
        return "report"
    if len(words) > 3 and words[1:4] == ("-m", "verl.model_merger", "merge") and "--backend" in words:
        return "merge"
    return None


def documented() -> list[tuple[str, int, str, str, SimpleCommand]]:
    """(page, line, run folder, checkpoint step or "", command) of every printed-kind command naming an RL run."""
    found = []
    for name in page_names(REPO):
        page = read_page(REPO / name, name)
        for block in page.shell_blocks():
            for command in simple_commands(console_commands(block)):
                match = next(filter(None, (RL_RUN.search(w) for w in command.words)), None)
                if printed_kind(command) and match:
                    found.append((name, block.first_line + command.line - 1, match[1], match[2] or "", command))
    return found


@pytest.fixture(scope="module")
def reference_config() -> dict:
    key = ("run_qwen3_4b_dapo_npu.sh", (), ())  # the README's RL launch as the docs check dry-runs it
    if key not in _DRY_RUNS:
        _DRY_RUNS[key] = _dry_run(REPO, *key)
    proc = _DRY_RUNS[key]
    assert proc.returncode == 0, proc.stderr[-2000:]
    return yaml.safe_load(re.split(r"^# ----.*$", proc.stdout, flags=re.M)[-1])


def printed(run: str, step: str, profile: str, config: dict, root: Path, monkeypatch) -> list[SimpleCommand]:
    """What next_step prints when the RL stage of ``run`` ends, its folder laid out under ``root``."""
    folder = root / run
    checkpoints = folder / "checkpoints" / "rl"
    (checkpoints / f"global_step_{step}").mkdir(parents=True, exist_ok=True)
    (checkpoints / "latest_checkpointed_iteration.txt").write_text(step)
    config = {**config, "trainer": {**config["trainer"], "default_local_dir": f"{run}/checkpoints/rl"}}
    (folder / "rl.resolved.yaml").write_text(yaml.safe_dump(config))
    monkeypatch.chdir(root)
    monkeypatch.setenv("DEVICE", "npu")
    monkeypatch.setenv("PROFILE", profile)
    monkeypatch.delenv("SHAKEDOWN", raising=False)
    return simple_commands("\n".join(next_step.commands("rl", Path(run))))


@pytest.mark.verl
def test_documented_commands_after_rl_are_the_printed_ones(reference_config, tmp_path, monkeypatch, docs_summary):
    shown = documented()
    steps = {run: step for _, _, run, step, _ in shown if step}
    problems, kinds = [], set()
    for page, line, run, _, command in shown:
        words = command.words
        profile = words[words.index("--profile") + 1] if "--profile" in words else "reference"
        expected = {
            printed_kind(c): c
            for c in printed(run, steps.get(run, "130"), profile, reference_config, tmp_path, monkeypatch)
        }
        kind = printed_kind(command)
        kinds.add(kind)
        if (command.env, command.words) != (expected[kind].env, expected[kind].words):
            problems.append(f"{page}:{line}: {' '.join(words)}\n  printed: {' '.join(expected[kind].words)}")
    docs_summary(
        f"docs-check: {len(shown)} documented report/merge/eval commands compared with what the RL stage prints"
    )
    assert kinds == {"eval", "report", "merge"} and len(shown) >= 6
    assert not problems, "the RL stage prints other commands than the pages show:\n" + "\n".join(problems)


@pytest.mark.verl
def test_the_printed_eval_command_runs_vllm_as_the_reference_validation(reference_config, tmp_path, monkeypatch):
    commands = printed("runs/rl-a3", "130", "reference", reference_config, tmp_path, monkeypatch)
    evaluation = next(c for c in commands if printed_kind(c) == "eval")
    assert evaluation.words[-4:] == ("--device", "npu", "--tensor-parallel-size", "4")


def test_the_reproduction_band_on_the_page_is_the_computed_one():
    start, end = markers(band.SECTION)
    text = (REPO / "docs" / "reference.md").read_text()
    assert start in text and end in text, "docs/reference.md lacks the reproduction-band section"
    on_page = text.split(start, 1)[1].split(end, 1)[0].lstrip("\n")
    assert on_page == band.section(), "run: python -m retool.report.band --write docs/reference.md"


def test_a_changed_eval_command_would_be_seen():
    """The comparison reads words, not text: a flag missing from a documented command changes them."""
    shown = "retool-eval --model runs/rl-a3/merged --n 30 --output runs/rl-a3/eval"
    printed_words = simple_commands(shown + " --device npu --tensor-parallel-size 4")[0].words
    assert simple_commands(shown)[0].words != printed_words
    assert RL_RUN.search("runs/rl-a3/checkpoints/rl/global_step_120/actor").groups() == ("runs/rl-a3", "120")
