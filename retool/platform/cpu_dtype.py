"""The compute dtype of CPU runs: float32, unless RETOOL_CPU_DTYPE=bfloat16 asks for bf16.

bf16 buys a CPU run nothing and can cost it its result (docs/performance.md, "CPU smoke run", measures both):

- Where the CPU lacks native bf16 (AVX2-only x86, e.g. AMD EPYC Rome/Milan), PyTorch and oneDNN emulate bf16 matrix
  products many times slower than fp32.
- Where it has it (AVX512-BF16, AMX, Arm BF16), bf16 is hardly faster for the smoke's tiny model, and the smoke's
  GRPO learned far less in bf16 than in fp32: the bf16 rollouts' programs computed the wrong expression more often.
  So float32 is the CPU default everywhere; the NPU and GPU runs keep bf16.

``RETOOL_CPU_DTYPE=bfloat16|float32`` overrides the default; the reason then says whether this CPU emulates bf16
(no native flag, or ``ONEDNN_MAX_CPU_ISA`` holding oneDNN below AVX512_CORE_BF16, the way a newer CPU is made to
behave like an AVX2-only one). configs/device/cpu.env exports the choice as RETOOL_CPU_DTYPE, the CPU overlays
(configs/device/*/cpu.yaml) read it for the trainer's mixed precision and vLLM, and the smoke summary reports it
with its reason.

    python -m retool.platform.cpu_dtype            # prints the dtype
    python -m retool.platform.cpu_dtype --explain  # dtype and the reason
    python -m retool.platform.cpu_dtype --json     # the host's CPU, the deciding flags, dtype and reason
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

DTYPES = ("bfloat16", "float32")
NATIVE_BF16_FLAGS = ("avx512_bf16", "amx_bf16", "bf16")
SET_BY_ENV = "set by RETOOL_CPU_DTYPE"
REPORTED_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "bf16")  # what docs/performance.md states
# oneDNN's ISA caps without bf16 dot products (oneDNN's ONEDNN_MAX_CPU_ISA names, upper case)
ONEDNN_CAPS_WITHOUT_BF16 = ("SSE41", "AVX", "AVX2", "AVX2_VNNI", "AVX2_VNNI_2", "AVX512_CORE", "AVX512_CORE_VNNI")


def cpu_flags(cpuinfo: str) -> set[str]:
    """The feature flags of /proc/cpuinfo text (x86 ``flags`` or aarch64 ``Features`` lines)."""
    flags: set[str] = set()
    for line in cpuinfo.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip().lower() in ("flags", "features"):
            flags.update(value.split())
    return flags


def native_bf16(flags: set[str], onednn_cap: str | None = None) -> tuple[bool, str]:
    """(whether this CPU computes bf16 natively, why) for a CPU with these flags under ``onednn_cap``
    (ONEDNN_MAX_CPU_ISA)."""
    native = sorted(flags.intersection(NATIVE_BF16_FLAGS))
    if native and onednn_cap and onednn_cap.upper() in ONEDNN_CAPS_WITHOUT_BF16:
        return False, (
            f"ONEDNN_MAX_CPU_ISA={onednn_cap} holds oneDNN below AVX512_CORE_BF16: bf16 would be emulated "
            f"although the CPU has {', '.join(native)}"
        )
    if native:
        return True, f"the CPU computes bf16 natively ({', '.join(native)})"
    return False, "the CPU has no native bf16 (no avx512_bf16 / amx_bf16 / bf16 flag): bf16 would be emulated"


def choose_dtype(flags: set[str], override: str | None = None, onednn_cap: str | None = None) -> tuple[str, str]:
    """(dtype, reason) for a CPU with these flags under ``onednn_cap`` (ONEDNN_MAX_CPU_ISA); ``override``
    (RETOOL_CPU_DTYPE) wins when set."""
    if override and override not in DTYPES:
        raise ValueError(f"RETOOL_CPU_DTYPE must be one of {', '.join(DTYPES)}, got {override!r}")
    native, why = native_bf16(flags, onednn_cap)
    if override == "bfloat16":
        return override, SET_BY_ENV + ("" if native else f"; {why}, ~60x slower than float32")
    if override:
        return override, SET_BY_ENV
    return "float32", f"the CPU default: {why}" + ("; RETOOL_CPU_DTYPE=bfloat16 opts in" if native else "")


def _cpuinfo(cpuinfo_path: Path) -> str:
    try:
        return cpuinfo_path.read_text()
    except OSError:
        return ""


def host_dtype(cpuinfo_path: Path = Path("/proc/cpuinfo")) -> tuple[str, str]:
    """(dtype, reason) for this host."""
    return choose_dtype(
        cpu_flags(_cpuinfo(cpuinfo_path)),
        os.environ.get("RETOOL_CPU_DTYPE") or None,
        os.environ.get("ONEDNN_MAX_CPU_ISA") or None,
    )


def host_native_bf16(cpuinfo_path: Path = Path("/proc/cpuinfo")) -> bool:
    """Whether this host computes bf16 natively (under its ONEDNN_MAX_CPU_ISA, if set)."""
    return native_bf16(cpu_flags(_cpuinfo(cpuinfo_path)), os.environ.get("ONEDNN_MAX_CPU_ISA") or None)[0]


def host_report(cpuinfo_path: Path = Path("/proc/cpuinfo")) -> dict[str, object]:
    """What a run records about its CPU: model name, cores, the flags that matter here, dtype and reason."""
    text = _cpuinfo(cpuinfo_path)
    model = next(
        (line.partition(":")[2].strip() for line in text.splitlines() if line.lower().startswith("model name")),
        "unknown CPU",
    )
    dtype, reason = host_dtype(cpuinfo_path)
    flags = cpu_flags(text)
    # Set to make a newer CPU behave like an older one (docs/performance.md measures an AVX2-only host that way).
    isa_limits = {k: os.environ[k] for k in ("ONEDNN_MAX_CPU_ISA", "ATEN_CPU_CAPABILITY") if os.environ.get(k)}
    return {
        "cpu_model": model,
        "cores": os.cpu_count(),
        "flags": [f for f in REPORTED_FLAGS if f in flags],
        "isa_limits": isa_limits,
        "dtype": dtype,
        "dtype_reason": reason,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m retool.platform.cpu_dtype", description=__doc__.split("\n")[0])
    parser.add_argument("--explain", action="store_true", help="also print why")
    parser.add_argument("--json", action="store_true", help="print the host report as JSON")
    args = parser.parse_args(argv)
    try:
        if args.json:
            print(json.dumps(host_report()))
            return 0
        dtype, reason = host_dtype()
    except ValueError as exc:
        parser.error(str(exc))
    print(f"{dtype}\t{reason}" if args.explain else dtype)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
