"""Does this interpreter hold the device stack a launch needs? ``python -m retool.platform.stack npu|cuda``.

The launchers run it before a real NPU or CUDA run: after `make smoke` a checkout holds .venv with the CPU build of
torch, and an NPU run started from it would fail much later and far less clearly (or train on the CPU). Exit 0 when
the stack is there, 1 with what is missing and what to use instead.
"""

from __future__ import annotations

import sys

FIX = {
    "npu": "run the NPU launchers with the Python of the vllm-ascend / CANN container image (docs/install.md), or "
    "set PYTHON=/path/to/that/python; the checkout's .venv is the CPU stack of `make smoke`",
    "cuda": "run the CUDA launchers with a Python that has the CUDA build of torch and vllm "
    "(pip install -e '.[cuda]'), or set PYTHON=/path/to/that/python; the checkout's .venv is the CPU stack "
    "of `make smoke`",
}


def missing(device: str) -> str | None:
    """What this interpreter lacks for ``device``, or None."""
    try:
        import torch
    except ImportError:
        return "no torch"
    if device == "npu":
        try:
            import torch_npu  # noqa: F401
        except ImportError:
            return f"torch {torch.__version__} without torch_npu"
        return (
            None
            if torch.npu.is_available()
            else ("torch_npu sees no NPU (check the driver mounts and ASCEND_RT_VISIBLE_DEVICES)")
        )
    if device == "cuda":
        if torch.version.cuda is None:
            return f"torch {torch.__version__}, a build without CUDA"
        return None if torch.cuda.is_available() else "a CUDA torch that sees no GPU (check CUDA_VISIBLE_DEVICES)"
    raise ValueError(f"device must be npu or cuda, got {device!r}")


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or args[0] not in FIX:
        print("usage: python -m retool.platform.stack npu|cuda", file=sys.stderr)
        return 2
    problem = missing(args[0])
    if problem is None:
        return 0
    print(f"error: {sys.executable} has {problem}: {FIX[args[0]]}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
