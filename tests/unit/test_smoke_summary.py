"""retool.smoke.summary on a run folder laid out here the way run_smoke_cpu.sh and verl leave it."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import yaml

from retool.smoke.summary import main, render_markdown, summarise

QUESTIONS = [f"What is {i} * 11?" for i in range(6)]


def make_run(run_dir: Path) -> None:
    (run_dir / "logs").mkdir(parents=True)
    (run_dir / "logs" / "stages.tsv").write_text("assets\t0\t10\nsft\t10\t410\nmerge\t410\t420\nrl\t420\t700\n")
    (run_dir / "logs" / "memory.tsv").write_text(
        "".join(f"{t}\t{1048576 * (1 + t // 100)}\n" for t in range(0, 700, 50))
    )
    (run_dir / "logs" / "host.json").write_text(
        json.dumps(
            {
                "cpu_model": "AMD EPYC 7763",
                "cores": 2,
                "flags": ["avx2"],
                "isa_limits": {},
                "dtype": "float32",
                "dtype_reason": "the CPU has no native bf16",
            }
        )
    )
    val_file = run_dir / "rl_val_synthetic.parquet"
    pq.write_table(pa.table({"prompt": [[{"role": "user", "content": q}] for q in QUESTIONS]}), val_file)
    (run_dir / "sft.resolved.yaml").write_text(
        yaml.safe_dump({"engine": {"mixed_precision": {"param_dtype": "float32"}}})
    )
    (run_dir / "rl.resolved.yaml").write_text(
        yaml.safe_dump(
            {
                "data": {"val_files": [str(val_file), str(run_dir / "rl_val_aime2025.parquet")]},
                "actor_rollout_ref": {
                    "actor": {"fsdp_config": {"mixed_precision": {"param_dtype": "float32"}}},
                    "rollout": {"dtype": "float32"},
                },
            }
        )
    )
    for folder, step, used in (
        ("validation", 0, 0.0),
        ("validation", 5, 1.0),
        ("rollouts", 1, 0.0),
        ("rollouts", 2, 1.0),
    ):
        (run_dir / folder).mkdir(exist_ok=True)
        rows = [
            {"input": f"user\n{q}\nassistant\n", "output": "\\boxed{1}", "score": -1.0, "acc": 0.0, "used_tool": used}
            for q in QUESTIONS
            for _ in range(2)
        ]
        rows.append(
            {"input": "user\nAn AIME problem\nassistant\n", "output": "", "score": -1.4, "acc": 0.0, "used_tool": 0.0}
        )
        (run_dir / folder / f"{step}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_summary_states_dtype_and_learning_verdict_of_the_synthetic_set(tmp_path):
    make_run(tmp_path / "run")
    s = summarise(tmp_path / "run")
    assert s["stages"]["sft"]["wall_s"] == 400.0 and s["total_wall_s"] == 700.0
    assert s["compute"]["dtype"] == s["compute"]["sft_dtype"] == s["compute"]["rollout_dtype"] == "float32"
    used = s["learning"]["changes"]["used_tool"]
    assert used["prompts"] == 6 and used["delta"] == 1.0 and used["verdict"] == "rose"  # the AIME row left out
    markdown = render_markdown(s)
    assert "Compute dtype `float32` (the CPU has no native bf16)" in markdown
    assert "- used_tool 0.000 -> 1.000 (+1.000, 95% CI" in markdown


def test_missing_dumps_are_said_not_hidden(tmp_path):
    make_run(tmp_path / "run")
    for path in (tmp_path / "run" / "validation").iterdir():
        path.unlink()
    markdown = render_markdown(summarise(tmp_path / "run"))
    assert "- not available: " in markdown and "no <step>.jsonl dumps" in markdown


def test_performance_section_goes_into_its_own_markers(tmp_path):
    make_run(tmp_path / "run")
    perf = tmp_path / "performance.md"
    perf.write_text("# Performance\n\nhand-written\n")
    assert main(["--run-dir", str(tmp_path / "run"), "--performance", str(perf), "--label", "AVX2-only host"]) == 0
    text = perf.read_text()
    assert "hand-written" in text and "<!-- smoke-avx2-only-host:start -->" in text
    assert "### CPU smoke run: AVX2-only host" in text and "| total | 700.0 (11.7 min) |" in text
    assert "CPU flags that decide the dtype: avx2" in text


def test_brief_prints_the_verdicts_in_a_few_lines_and_writes_the_whole_summary(tmp_path, capsys):
    make_run(tmp_path / "run")
    assert main(["--run-dir", str(tmp_path / "run"), "--brief"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("Verdict: held-out accuracy ") and len(out) <= 8, out
    assert any("used_tool 0.000 -> 1.000" in line for line in out)
    assert out[-1] == f"The whole summary (times, memory, curves): {tmp_path / 'run' / 'summary.md'}"
    assert "| stage | wall time (s)" in (tmp_path / "run" / "summary.md").read_text()


def test_an_async_run_s_summary_says_how_stale_its_data_was(tmp_path):
    from torch.utils.tensorboard import SummaryWriter

    make_run(tmp_path / "run")
    config = yaml.safe_load((tmp_path / "run" / "rl.resolved.yaml").read_text())
    config["trainer"] = {"v1": {"trainer_mode": "separate_async"}}
    (tmp_path / "run" / "rl.resolved.yaml").write_text(yaml.safe_dump(config))
    writer = SummaryWriter(str(tmp_path / "run" / "tensorboard" / "rl"))
    for step, (mean, most, spans) in enumerate([(0.0, 0, 1.0), (1.0, 1, 1.0), (1.25, 2, 1.5)], start=1):
        writer.add_scalar("training/off_policy/trajectory_staleness/mean", mean, step)
        writer.add_scalar("training/off_policy/trajectory_staleness/max", most, step)
        writer.add_scalar("training/off_policy/trajectory_spans/max", 2 if spans > 1 else 1, step)
        writer.add_scalar("training/off_policy/trajectory_spans/mean", spans, step)
    writer.close()
    s = summarise(tmp_path / "run")
    assert s["trainer_mode"] == "separate_async"
    assert s["off_policy"]["staleness_mean"] == 0.75 and s["off_policy"]["staleness_max"] == 2
    assert (
        "Trainer mode `separate_async`: trained trajectories were 0.75 model versions behind on average (most 2"
        in render_markdown(s)
    )
