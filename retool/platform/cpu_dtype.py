"""The compute dtype of CPU runs: bfloat16 only where the CPU computes it natively, float32 elsewhere.

Without native bf16 (AVX2-only x86, e.g. AMD EPYC Rome/Milan) PyTorch and oneDNN emulate bf16 matrix products and
run them ~60x slower than fp32: the smoke's SFT took 235 s per step instead of ~4 s. With AVX512-BF16 or AMX the
two are close (bench/cpu_dtype.py; docs/performance.md). So the rule is the CPU's flags, not a guess:

- ``bfloat16`` when /proc/cpuinfo lists ``avx512_bf16`` or ``amx_bf16`` (x86) or ``bf16`` (aarch64, e.g. Kunpeng 920B);
- ``float32`` otherwise, and also when ``ONEDNN_MAX_CPU_ISA`` holds oneDNN below AVX512_CORE_BF16 (the way a newer
  CPU is made to behave like an AVX2-only one: its flags still say bf16, its matrix products no longer do).

``RETOOL_CPU_DTYPE=bfloat16|float32`` overrides the rule. configs/device/cpu.env exports the choice as
RETOOL_CPU_DTYPE, the CPU overlays (configs/device/*/cpu.yaml) read it for the trainer's mixed precision and vLLM,
and the smoke summary reports it with its reason.

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


def choose_dtype(flags: set[str], override: str | None = None, onednn_cap: str | None = None) -> tuple[str, str]:
    """(dtype, reason) for a CPU with these flags under ``onednn_cap`` (ONEDNN_MAX_CPU_ISA); ``override``
    (RETOOL_CPU_DTYPE) wins when set."""
    if override:
        if override not in DTYPES:
            raise ValueError(f"RETOOL_CPU_DTYPE must be one of {', '.join(DTYPES)}, got {override!r}")
        return override, "set by RETOOL_CPU_DTYPE"
    native = sorted(flags.intersection(NATIVE_BF16_FLAGS))
    if native and onednn_cap and onednn_cap.upper() in ONEDNN_CAPS_WITHOUT_BF16:
        return "float32", (f"ONEDNN_MAX_CPU_ISA={onednn_cap} holds oneDNN below AVX512_CORE_BF16: bf16 would be "
                           f"emulated although the CPU has {', '.join(native)}")
    if native:
        return "bfloat16", f"the CPU computes bf16 natively ({', '.join(native)})"
    return "float32", "the CPU has no native bf16 (no avx512_bf16 / amx_bf16 / bf16 flag): bf16 would be emulated"


def _cpuinfo(cpuinfo_path: Path) -> str:
    try:
        return cpuinfo_path.read_text()
    except OSError:
        return ""


def host_dtype(cpuinfo_path: Path = Path("/proc/cpuinfo")) -> tuple[str, str]:
    """(dtype, reason) for this host."""
    return choose_dtype(cpu_flags(_cpuinfo(cpuinfo_path)), os.environ.get("RETOOL_CPU_DTYPE") or None,
                        os.environ.get("ONEDNN_MAX_CPU_ISA") or None)


def host_report(cpuinfo_path: Path = Path("/proc/cpuinfo")) -> dict[str, object]:
    """What a run records about its CPU: model name, cores, the flags that matter here, dtype and reason."""
    text = _cpuinfo(cpuinfo_path)
    model = next((line.partition(":")[2].strip() for line in text.splitlines()
                  if line.lower().startswith("model name")), "unknown CPU")
    dtype, reason = host_dtype(cpuinfo_path)
    flags = cpu_flags(text)
    # Set to make a newer CPU behave like an older one (docs/performance.md measures an AVX2-only host that way).
    isa_limits = {k: os.environ[k] for k in ("ONEDNN_MAX_CPU_ISA", "ATEN_CPU_CAPABILITY") if os.environ.get(k)}
    return {"cpu_model": model, "cores": os.cpu_count(), "flags": [f for f in REPORTED_FLAGS if f in flags],
            "isa_limits": isa_limits, "dtype": dtype, "dtype_reason": reason}


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
