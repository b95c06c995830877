#!/usr/bin/env bash
# CUDA variant of run_qwen3_4b_sft_npu.sh: the same recipe on 8 NVIDIA GPUs per node (configs/device/sft/cuda.yaml).
# Not run on hardware here. Extra arguments are Hydra overrides; DRY_RUN=1 prints the resolved config.
DIR="$(dirname "${BASH_SOURCE[0]}")"
[[ -f "$DIR/run_qwen3_4b_sft_npu.sh" ]] || DIR="$(retool-verl-recipe checkout)"  # copied alone out of the checkout
DEVICE=cuda NPROC_PER_NODE="${NPROC_PER_NODE:-8}" exec "$DIR/run_qwen3_4b_sft_npu.sh" "$@"
