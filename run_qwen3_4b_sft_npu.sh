#!/usr/bin/env bash
# ReTool SFT of Qwen3-4B-Instruct-2507 on 8 x Atlas A3 (16 dies). Extra arguments are Hydra overrides, passed on.
#   MODEL_PATH=/models/Qwen3-4B-Instruct-2507 DATA_DIR=/data/retool ./run_qwen3_4b_sft_npu.sh [key=value ...]
#   DRY_RUN=1 ./run_qwen3_4b_sft_npu.sh        # print the resolved verl config, no devices needed
set -euo pipefail
REPO_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$REPO_DIR/scripts/paths.sh"
export DEVICE="${DEVICE:-npu}" NPROC_PER_NODE="${NPROC_PER_NODE:-16}"
MODEL_PATH="${MODEL_PATH:-Qwen/Qwen3-4B-Instruct-2507}"   # a hub id or a local directory
DATA_DIR="${DATA_DIR:-$REPO_DIR/data}"
require_file "$DATA_DIR/retool_sft.parquet" "python retool_sft_preprocess.py --input JoeYing/ReTool-SFT --output $DATA_DIR/retool_sft.parquet"
exec "$REPO_DIR/scripts/launch.sh" sft \
  model.path="$MODEL_PATH" \
  data.train_files="$DATA_DIR/retool_sft.parquet" \
  trainer.nnodes="${NNODES:-1}" trainer.n_gpus_per_node="$NPROC_PER_NODE" \
  "$@"
