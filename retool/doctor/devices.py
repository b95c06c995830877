"""Devices: which accelerators this host shows (npu / cuda / cpu) against what the config asks for."""

from __future__ import annotations

import os
import platform
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from retool.checklist import FAIL, OK, Check
from retool.doctor.config import dig
from retool.doctor.estimate import GIB

# Device memory when the device is not visible here (checking an NPU launcher on a laptop): Atlas A3, per die.
KNOWN_DEVICE_MEMORY_GB = {"npu": 64.0}


@dataclass
class Devices:
    kind: str  # npu | cuda | cpu
    count: int
    memory_gb: float | None  # per device (host RAM for cpu)
    name: str = ""


def host_memory_gb() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024 / GIB
    except OSError:
        pass
    return None


def detect_devices() -> Devices:
    """NPUs through torch_npu, else CUDA GPUs through torch, else the host CPU."""
    try:
        import torch
    except ImportError:
        return Devices("cpu", 1, host_memory_gb(), platform.processor() or "cpu")
    try:
        import torch_npu  # noqa: F401

        if torch.npu.is_available() and torch.npu.device_count() > 0:
            props = torch.npu.get_device_properties(0)
            return Devices("npu", torch.npu.device_count(), props.total_memory / GIB, props.name)
    except Exception:  # no torch_npu, or no driver: not an NPU host
        pass
    if torch.cuda.is_available() and torch.cuda.device_count() > 0:
        props = torch.cuda.get_device_properties(0)
        return Devices("cuda", torch.cuda.device_count(), props.total_memory / GIB, props.name)
    return Devices("cpu", 1, host_memory_gb(), f"{os.cpu_count()} CPU cores")


def check_devices(devices: Devices, cfg: dict[str, Any] | None) -> Check:
    seen = f"{devices.count} x {devices.kind}" + (f" ({devices.name})" if devices.name else "")
    if cfg is None:
        return Check(OK, "devices", f"{seen} visible; pass --config to compare with a launcher's request")
    want_kind = dig(cfg, "trainer.device", "cuda")
    want = int(dig(cfg, "trainer.n_gpus_per_node", 1) or 1)
    nnodes = int(dig(cfg, "trainer.nnodes", 1) or 1)
    if want_kind == "cpu":
        # CPU runs use a bookkeeping "GPU" per worker; the host is the device.
        return Check(
            OK,
            "devices",
            f"config runs on the host CPU ({os.cpu_count()} cores, {want} worker(s) per node); {seen} visible",
        )
    if devices.kind != want_kind:
        hint = {
            "npu": "is torch_npu installed (the CANN image) and ASCEND_RT_VISIBLE_DEVICES set?",
            "cuda": "is the CUDA build of torch installed and CUDA_VISIBLE_DEVICES set?",
        }.get(want_kind, "")
        return Check(
            FAIL,
            "devices",
            f"config asks for {want} x {want_kind} per node but this host shows {seen}; "
            f"{hint} (or check the config on the target machine)",
        )
    if devices.count < want:
        return Check(
            FAIL,
            "devices",
            f"config asks for {want} x {want_kind} per node (trainer.n_gpus_per_node) but "
            f"only {devices.count} are visible: lower NPROC_PER_NODE / "
            "trainer.n_gpus_per_node or free the devices",
        )
    extra = f"; {devices.count - want} more visible than used" if devices.count > want else ""
    return Check(OK, "devices", f"{want} x {want_kind} per node x {nnodes} node(s) requested, {seen} visible{extra}")
