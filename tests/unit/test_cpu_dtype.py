"""retool.platform.cpu_dtype: bf16 only where the CPU computes it natively (else it is emulated, ~60x slower)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from retool.platform.cpu_dtype import choose_dtype, cpu_flags, host_report

EPYC_MILAN = "processor\t: 0\nmodel name\t: AMD EPYC 7763 64-Core Processor\nflags\t\t: fpu sse2 avx fma avx2 bmi2\n"
SAPPHIRE_RAPIDS = "model name\t: Intel(R) Xeon(R) Platinum 8480+\nflags\t\t: avx2 avx512f avx512_bf16 amx_bf16\n"
EPYC_GENOA = "model name\t: AMD EPYC 9654\nflags\t\t: avx2 avx512f avx512_bf16\n"
KUNPENG_920 = "processor\t: 0\nBogoMIPS\t: 200.00\nFeatures\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics\n"
ARM_BF16 = "processor\t: 0\nFeatures\t: fp asimd sve bf16 i8mm\n"


@pytest.mark.parametrize(
    ("cpuinfo", "dtype"),
    [(EPYC_MILAN, "float32"), (SAPPHIRE_RAPIDS, "bfloat16"), (EPYC_GENOA, "bfloat16"), (KUNPENG_920, "float32"),
     (ARM_BF16, "bfloat16"), ("", "float32")],
)
def test_rule_follows_the_native_bf16_flags(cpuinfo, dtype):
    chosen, reason = choose_dtype(cpu_flags(cpuinfo))
    assert chosen == dtype
    assert ("natively" in reason) == (dtype == "bfloat16")


@pytest.mark.parametrize(("cap", "dtype"), [("AVX2", "float32"), ("avx512_core", "float32"),
                                           ("AVX512_CORE_BF16", "bfloat16"), ("AVX512_CORE_AMX", "bfloat16"),
                                           (None, "bfloat16")])
def test_a_onednn_cap_below_bf16_gives_float32_on_a_bf16_cpu(cap, dtype):
    chosen, reason = choose_dtype(cpu_flags(SAPPHIRE_RAPIDS), None, cap)
    assert chosen == dtype
    if dtype == "float32":
        assert reason.startswith(f"ONEDNN_MAX_CPU_ISA={cap} holds oneDNN below AVX512_CORE_BF16")
    assert choose_dtype(cpu_flags(SAPPHIRE_RAPIDS), "bfloat16", cap)[0] == "bfloat16"  # the override still wins


def test_host_report_under_an_avx2_cap(tmp_path, monkeypatch):
    monkeypatch.delenv("RETOOL_CPU_DTYPE", raising=False)
    monkeypatch.delenv("ATEN_CPU_CAPABILITY", raising=False)  # the emulated AVX2 host sets it too
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    path = tmp_path / "cpuinfo"
    path.write_text(EPYC_GENOA)
    report = host_report(path)
    assert report["dtype"] == "float32" and report["isa_limits"] == {"ONEDNN_MAX_CPU_ISA": "AVX2"}


def test_override_wins_and_a_bad_one_names_the_variable():
    assert choose_dtype(cpu_flags(EPYC_MILAN), "bfloat16") == ("bfloat16", "set by RETOOL_CPU_DTYPE")
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
    out = subprocess.run([sys.executable, "-m", "retool.platform.cpu_dtype"], env=env, capture_output=True,
                         text=True, check=True).stdout
    assert out == "float32\n"
    report = json.loads(subprocess.run([sys.executable, "-m", "retool.platform.cpu_dtype", "--json"], env=env,
                                       capture_output=True, text=True, check=True).stdout)
    assert report["dtype"] == "float32" and report["dtype_reason"] == "set by RETOOL_CPU_DTYPE"
    bad = subprocess.run([sys.executable, "-m", "retool.platform.cpu_dtype"], env={**env, "RETOOL_CPU_DTYPE": "x"},
                         capture_output=True, text=True)
    assert bad.returncode == 2 and "RETOOL_CPU_DTYPE must be one of" in bad.stderr
