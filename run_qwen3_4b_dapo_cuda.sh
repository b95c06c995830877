#!/usr/bin/env bash
# CUDA variant of run_qwen3_4b_dapo_npu.sh: the same recipe on 8 NVIDIA GPUs per node (configs/device/rl/cuda.yaml).
# Not run on hardware here. Extra arguments are Hydra overrides; DRY_RUN=1 prints the resolved config.
DEVICE=cuda NPROC_PER_NODE="${NPROC_PER_NODE:-8}" exec "$(dirname "${BASH_SOURCE[0]}")/run_qwen3_4b_dapo_npu.sh" "$@"
