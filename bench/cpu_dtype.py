"""bf16 vs fp32 on this CPU: the measurement behind retool.platform.cpu_dtype's rule.

Times the operation that dominates the smoke's SFT step, the vocabulary projection of the tiny Qwen (hidden 128 ->
151,936 logits) forward and backward, in fp32 and under bf16 autocast, and writes a section of
docs/performance.md with both times, the CPU's flags and what the rule picks. Run it once as is and once with
``ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2`` to see an AVX2-only CPU on a newer one.

    python bench/cpu_dtype.py --label "this host" [--tokens 256] [--output docs/performance.md]
"""

from __future__ import annotations

import argparse
import datetime
import statistics
import time
from pathlib import Path

import torch

from retool.constants import REPO_ROOT
from retool.markdown_sections import replace_section, slug
from retool.platform.cpu_dtype import host_report

HIDDEN, VOCAB = 128, 151_936


def time_step(dtype: str, tokens: int, repeats: int) -> float:
    """Median seconds of one forward + backward of the projection."""
    torch.manual_seed(0)
    x = torch.randn(tokens, HIDDEN, requires_grad=True)
    projection = torch.nn.Linear(HIDDEN, VOCAB, bias=False)
    times = []
    for _ in range(repeats + 1):  # the first is a warm-up
        started = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == "bfloat16"):
            logits = projection(x)
        logits.float().logsumexp(-1).mean().backward()
        times.append(time.perf_counter() - started)
    return statistics.median(times[1:])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--label", required=True, help="names the section, e.g. 'AVX2-only (emulated)'")
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--output", type=Path, default=REPO_ROOT / "docs" / "performance.md")
    args = parser.parse_args(argv)
    host = host_report()
    seconds = {dtype: time_step(dtype, args.tokens, args.repeats) for dtype in ("float32", "bfloat16")}
    faster = min(seconds, key=seconds.get)
    limits = ", ".join(f"{k}={v}" for k, v in host["isa_limits"].items())
    section = "\n".join(
        [
            f"### bf16 vs fp32: {args.label}",
            "",
            f"Measured {datetime.date.today().isoformat()} by `bench/cpu_dtype.py` on {host['cpu_model']}, "
            f"{host['cores']} cores{f' with {limits}' if limits else ''}; flags {', '.join(host['flags']) or 'none'}. "
            f"Vocabulary projection of the tiny model ({args.tokens} tokens x {HIDDEN} -> {VOCAB:,}), forward and "
            f"backward, median of {args.repeats}.",
            "",
            "| dtype | seconds |",
            "|---|---|",
            *(f"| {dtype} | {value:.3f} |" for dtype, value in seconds.items()),
            "",
            f"bf16 / fp32 = {seconds['bfloat16'] / seconds['float32']:.2f}; faster here: {faster}. "
            f"The rule picks {host['dtype']} ({host['dtype_reason']}).",
            "",
        ]
    )
    replace_section(args.output, f"cpu-dtype-{slug(args.label)}", section)
    print(section)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
