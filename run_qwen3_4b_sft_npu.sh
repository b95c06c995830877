#!/usr/bin/env bash
# ReTool SFT of Qwen3-4B-Instruct-2507 on 8 x Atlas A3 (16 dies). Extra arguments are Hydra overrides, passed on.
#   [PROFILE=improved] [MODEL_PATH=<model folder>] [DATA_DIR=<data folder>] ./run_qwen3_4b_sft_npu.sh [key=value ...]
#   RUN_DIR=runs/sft-<time> ./run_qwen3_4b_sft_npu.sh   # resume a crashed run in its own folder
#   DRY_RUN=1 ./run_qwen3_4b_sft_npu.sh        # print the resolved verl config, no devices needed
set -euo pipefail
REPO_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# Copied out of the checkout, as the CANN 样例 copies its scripts into verl/recipe/retool? Use the installed recipe's.
[[ -f "$REPO_DIR/scripts/paths.sh" ]] || REPO_DIR="$(retool-verl-recipe checkout 2>/dev/null)" || { echo "error: $0" \
  "is outside the ReTool checkout and no installed recipe is found: bash scripts/install_npu.sh in the checkout" >&2; exit 1; }
source "$REPO_DIR/scripts/paths.sh"
export DEVICE="${DEVICE:-npu}" NPROC_PER_NODE="${NPROC_PER_NODE:-16}"
MODEL_PATH="${MODEL_PATH:-$REPO_DIR/models/Qwen3-4B-Instruct-2507}"   # where retool-data download puts it; or a hub id
export PROFILE="${PROFILE:-reference}"   # reference | improved (docs/reference.md)
DATA_DIR="${DATA_DIR:-$REPO_DIR/data/$PROFILE}"   # what retool-data prepare --profile $PROFILE writes
require_file "$DATA_DIR/retool_sft.parquet" "retool-data download, then retool-data prepare --profile $PROFILE --out $DATA_DIR (README)"
exec "$REPO_DIR/scripts/launch.sh" sft \
  model.path="$MODEL_PATH" \
  data.train_files="$DATA_DIR/retool_sft.parquet" \
  trainer.nnodes="${NNODES:-1}" trainer.n_gpus_per_node="$NPROC_PER_NODE" \
  "$@"
