"""The CPU platform plugin: loaded through verl's own hook, never auto-selected, and usable where verl uses a device."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.verl


def run_python(code: str, **env: str) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if not k.startswith("VERL_")}
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], env={**base, **env}, capture_output=True, text=True, timeout=120
    )


def test_verl_loads_the_platform_through_its_plugin_hook():
    proc = run_python(
        """
        import torch
        from verl.utils.device import get_device_name, get_device_id, get_nccl_backend, get_torch_device
        print(get_device_name(), get_nccl_backend(), f"{get_device_name()}:{get_device_id()}")
        t = torch.zeros(2).to(get_device_id())
        print(t.device, get_torch_device().get_device_name())
        """,
        VERL_USE_EXTERNAL_MODULES="retool.platform.cpu",
        VERL_PLATFORM="cpu",
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.splitlines() == ["cpu gloo cpu:0", "cpu CPU"]


def test_the_platform_is_never_auto_selected():
    # Loaded but not asked for: a CPU-only Ray actor on a GPU cluster must still resolve to the accelerator.
    proc = run_python(
        """
        from retool.platform.cpu import PlatformCPU
        print(PlatformCPU().is_platform_available(use_smi_check=True))
        """
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "False"


def test_device_index_reads_as_cpu_and_formats_as_zero():
    from retool.platform.cpu import CpuDeviceIndex

    index = CpuDeviceIndex()
    assert index == "cpu" and f"cpu:{index}" == "cpu:0" and int(index) == 0


def test_device_module_answers_the_cuda_style_calls_verl_makes():
    import torch

    from retool.platform.cpu import CPU_DEVICE_MODULE as dev

    free, total = dev.mem_get_info()
    assert 0 < free <= total
    assert dev.max_memory_allocated() >= dev.memory_allocated() > 0
    state = dev.get_rng_state()
    first = torch.rand(3)
    dev.set_rng_state(state)
    assert torch.equal(first, torch.rand(3))
    dev.manual_seed(7)
    assert dev.device_count() == 1 and dev.is_available()
    dev.empty_cache()
    dev.synchronize()
