"""A CPU platform for verl, so the whole recipe runs in miniature on a machine without accelerators.

verl 0.9.1 ships cuda / npu / rocm platforms and, when none is available, falls back to nvidia (and then asks for
NCCL). This module registers a ``cpu`` platform through verl's own plugin hook. It is loaded by setting

    VERL_USE_EXTERNAL_MODULES=retool.platform.cpu   (verl imports it on ``import verl``, in every Ray worker)
    VERL_PLATFORM=cpu                               (skips auto-detection)

which the CPU device profile does (configs/device/cpu.env). It is never auto-selected: on GPU or NPU machines
nothing changes unless those variables are set.

What the CPU run needs beyond a device name:
- ``current_device()`` is used both as a torch device (``model.to(device=...)``) and inside ``f"{name}:{index}"``
  strings, so it returns a ``str`` that reads ``"cpu"`` but formats as ``"0"``.
- ``torch.cpu`` lacks the CUDA-style memory, RNG and IPC helpers verl calls on the device module; ``CpuDeviceModule``
  answers them with host-RAM figures and the CPU generator.
- verl's training engines are registered only for cuda/npu; the FSDP engine is device-agnostic, so
  ``VERL_ENGINE_DEVICE`` (read by verl's engine registry) selects it under the cuda key.
- Ray worker bundles request a GPU resource; Ray is started with a bookkeeping ``num_gpus`` (one per worker), and
  the resource name stays ``GPU`` so verl's placement code is unchanged.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from types import ModuleType
from typing import Any

import torch

from verl.plugin.platform.platform_base import PlatformBase
from verl.plugin.platform.platform_manager import PlatformRegistry

# The FSDP engine is registered for ("cuda", "npu") only; it runs unchanged on CPU tensors.
os.environ.setdefault("VERL_ENGINE_DEVICE", "cuda")


class CpuDeviceIndex(str):
    """``"cpu"`` for torch (``tensor.to(index)``), ``"0"`` inside format strings (``f"cpu:{index}"``)."""

    def __new__(cls) -> CpuDeviceIndex:
        return super().__new__(cls, "cpu")

    def __format__(self, spec: str) -> str:
        return format(0, spec)

    def __int__(self) -> int:
        return 0

    def __index__(self) -> int:
        return 0


def _host_memory() -> tuple[int, int]:
    """(available, total) bytes of host RAM."""
    import psutil

    mem = psutil.virtual_memory()
    return mem.available, mem.total


def _process_rss() -> int:
    import psutil

    return psutil.Process().memory_info().rss


class CpuDeviceModule(ModuleType):
    """``torch.cpu`` plus the CUDA-style calls verl makes on its device module."""

    def __init__(self) -> None:
        super().__init__("retool_cpu_device")
        self._peak_rss = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(torch.cpu, name)

    # --- memory: host RAM stands in for device memory ---
    def empty_cache(self) -> None:
        return None

    def ipc_collect(self) -> None:
        return None

    def mem_get_info(self, device: Any = None) -> tuple[int, int]:
        return _host_memory()

    def set_per_process_memory_fraction(self, fraction: float, device: Any = None) -> None:
        return None

    def memory_allocated(self, device: Any = None) -> int:
        rss = _process_rss()
        self._peak_rss = max(self._peak_rss, rss)
        return rss

    memory_reserved = memory_allocated

    def max_memory_allocated(self, device: Any = None) -> int:
        return max(self._peak_rss, self.memory_allocated())

    max_memory_reserved = max_memory_allocated

    def reset_peak_memory_stats(self, device: Any = None) -> None:
        self._peak_rss = 0

    # --- RNG: the CPU generator is the only one ---
    def get_rng_state(self, device: Any = None) -> torch.Tensor:
        return torch.get_rng_state()

    def set_rng_state(self, state: torch.Tensor, device: Any = None) -> None:
        torch.set_rng_state(state)

    def manual_seed(self, seed: int) -> None:
        torch.manual_seed(seed)

    manual_seed_all = manual_seed

    def get_device_name(self, device: Any = None) -> str:
        return "CPU"

    def current_device(self) -> CpuDeviceIndex:
        return CpuDeviceIndex()


CPU_DEVICE_MODULE = CpuDeviceModule()


@PlatformRegistry.register(platform="cpu")
class PlatformCPU(PlatformBase):
    """verl platform for host CPUs: gloo collectives, vLLM's CPU backend for rollout."""

    @property
    def device_name(self) -> str:
        return "cpu"

    @property
    def vendor_name(self) -> str:
        return "cpu"

    @property
    def device_module(self) -> ModuleType:
        return CPU_DEVICE_MODULE

    def is_available(self) -> bool:
        return True

    def is_platform_available(self, use_smi_check: bool = False) -> bool:
        # Never claimed during auto-detection: a CPU-only Ray actor on a GPU cluster must still resolve to the
        # cluster's accelerator. The CPU platform is chosen explicitly with VERL_PLATFORM=cpu.
        return os.environ.get("VERL_PLATFORM", "").strip().lower() == "cpu"

    def current_device(self) -> CpuDeviceIndex:
        return CpuDeviceIndex()

    def device_count(self) -> int:
        return 1

    def set_device(self, device_index: int) -> None:
        return None

    def synchronize(self, device_index: int | None = None) -> None:
        return None

    def manual_seed(self, seed: int) -> None:
        torch.manual_seed(seed)

    def manual_seed_all(self, seed: int) -> None:
        torch.manual_seed(seed)

    def set_allocator_settings(self, settings: str) -> None:
        return None

    def empty_cache(self) -> None:
        return None

    def get_device_capability(self, device_index: int = 0) -> tuple[int | None, int | None]:
        return None, None

    def communication_backend_name(self) -> str:
        return "gloo"

    def visible_devices_envvar(self) -> str:
        # Ray sets CUDA_VISIBLE_DEVICES for the bookkeeping GPU resource; nothing reads it on CPU.
        return "CUDA_VISIBLE_DEVICES"

    def ray_resource_name(self) -> str:
        return "GPU"

    def ray_resource_options(self, num_gpus: float) -> dict[str, Any]:
        return {"num_gpus": num_gpus}

    def ray_noset_envvars(self) -> list[str]:
        return []

    def is_ipc_supported(self) -> bool:
        return False

    def rollout_env_vars(self) -> dict[str, str]:
        return {}

    @contextmanager
    def nvtx_range(self, msg: str):
        yield

    def profiler_start(self) -> None:
        return None

    def profiler_stop(self) -> None:
        return None

    def cudart(self) -> Any:
        return None
