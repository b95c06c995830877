"""retool.platform.cpu_dtype: float32 on every CPU unless RETOOL_CPU_DTYPE asks for bf16; the reason says whether
this CPU computes bf16 natively or would emulate it (~60x slower)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from retool.platform.cpu_dtype import choose_dtype, cpu_flags, host_native_bf16, host_report, native_bf16

EPYC_MILAN = "processor\t: 0\nmodel name\t: AMD EPYC 7763 64-Core Processor\nflags\t\t: fpu sse2 avx fma avx2 bmi2\n"
SAPPHIRE_RAPIDS = "model name\t: Intel(R) Xeon(R) Platinum 8480+\nflags\t\t: avx2 avx512f avx512_bf16 amx_bf16\n"
EPYC_GENOA = "model name\t: AMD EPYC 9654\nflags\t\t: avx2 avx512f avx512_bf16\n"
KUNPENG_920 = "processor\t: 0\nBogoMIPS\t: 200.00\nFeatures\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics\n"
ARM_BF16 = "processor\t: 0\nFeatures\t: fp asimd sve bf16 i8mm\n"


@pytest.mark.parametrize(
    ("cpuinfo", "native"),
    [
        (EPYC_MILAN, False),
        (SAPPHIRE_RAPIDS, True),
        (EPYC_GENOA, True),
        (KUNPENG_920, False),
        (ARM_BF16, True),
        ("", False),
    ],
)
def test_float32_is_the_default_and_the_reason_names_the_native_bf16_flags(cpuinfo, native):
    chosen, reason = choose_dtype(cpu_flags(cpuinfo))
    assert chosen == "float32" and reason.startswith("the CPU default: ")
    assert ("natively" in reason) == native and ("RETOOL_CPU_DTYPE=bfloat16 opts in" in reason) == native
    assert ("would be emulated" in reason) == (not native)


@pytest.mark.parametrize(
    ("cap", "native"),
    [("AVX2", False), ("avx512_core", False), ("AVX512_CORE_BF16", True), ("AVX512_CORE_AMX", True), (None, True)],
)
def test_a_onednn_cap_below_bf16_makes_bf16_emulated_on_a_bf16_cpu(cap, native):
    assert native_bf16(cpu_flags(SAPPHIRE_RAPIDS), cap)[0] == native
    chosen, reason = choose_dtype(cpu_flags(SAPPHIRE_RAPIDS), "bfloat16", cap)  # the override still wins
    assert chosen == "bfloat16" and reason.startswith("set by RETOOL_CPU_DTYPE")
    if not native:
        assert f"ONEDNN_MAX_CPU_ISA={cap} holds oneDNN below AVX512_CORE_BF16" in reason and "~60x slower" in reason
    else:
        assert reason == "set by RETOOL_CPU_DTYPE"


def test_host_report_under_an_avx2_cap(tmp_path, monkeypatch):
    monkeypatch.delenv("RETOOL_CPU_DTYPE", raising=False)
    monkeypatch.delenv("ATEN_CPU_CAPABILITY", raising=False)  # the emulated AVX2 host sets it too
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    path = tmp_path / "cpuinfo"
    path.write_text(EPYC_GENOA)
    report = host_report(path)
    assert report["dtype"] == "float32" and report["isa_limits"] == {"ONEDNN_MAX_CPU_ISA": "AVX2"}
    assert "ONEDNN_MAX_CPU_ISA=AVX2 holds oneDNN below AVX512_CORE_BF16" in report["dtype_reason"]
    assert not host_native_bf16(path)
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA")
    assert host_native_bf16(path)


def test_override_wins_and_a_bad_one_names_the_variable():
    chosen, reason = choose_dtype(cpu_flags(EPYC_MILAN), "bfloat16")  # allowed, and the reason warns
    assert chosen == "bfloat16" and reason.startswith("set by RETOOL_CPU_DTYPE; the CPU has no native bf16")
    assert choose_dtype(cpu_flags(SAPPHIRE_RAPIDS), "float32") == ("float32", "set by RETOOL_CPU_DTYPE")
    with pytest.raises(ValueError, match="RETOOL_CPU_DTYPE must be one of bfloat16, float32, got 'bf16'"):
        choose_dtype(set(), "bf16")


def test_host_report_of_a_cpuinfo_file(tmp_path, monkeypatch):
    monkeypatch.delenv("RETOOL_CPU_DTYPE", raising=False)
    path = tmp_path / "cpuinfo"
    path.write_text(EPYC_MILAN * 2)
    report = host_report(path)
    assert report["cpu_model"] == "AMD EPYC 7763 64-Core Processor"
    assert report["flags"] == ["avx2"] and report["dtype"] == "float32"


def test_cli_prints_what_the_launcher_exports(monkeypatch):
    env = {"RETOOL_CPU_DTYPE": "float32", "PATH": "/usr/bin:/bin"}
    out = subprocess.run(
        [sys.executable, "-m", "retool.platform.cpu_dtype"], env=env, capture_output=True, text=True, check=True
    ).stdout
    assert out == "float32\n"
    report = json.loads(
        subprocess.run(
            [sys.executable, "-m", "retool.platform.cpu_dtype", "--json"],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )
    assert report["dtype"] == "float32" and report["dtype_reason"] == "set by RETOOL_CPU_DTYPE"
    bad = subprocess.run(
        [sys.executable, "-m", "retool.platform.cpu_dtype"],
        env={**env, "RETOOL_CPU_DTYPE": "x"},
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 2 and "RETOOL_CPU_DTYPE must be one of" in bad.stderr
