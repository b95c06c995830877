#!/usr/bin/env bash
# ReTool RL (DAPO-style GRPO + code tool) of the SFT model on 8 x Atlas A3 (16 dies) per node.
# Extra arguments are Hydra overrides, passed on. Start the sandbox first (docs/sandbox.md).
#   [PROFILE=improved] MODEL_PATH=<the SFT model the SFT stage printed> ./run_qwen3_4b_dapo_npu.sh [key=value ...]
#   RUN_DIR=runs/rl-<time> ./run_qwen3_4b_dapo_npu.sh   # resume a crashed run in its own folder
#   DRY_RUN=1 ./run_qwen3_4b_dapo_npu.sh       # print the resolved verl config, no devices needed
# The sandbox is RETOOL_SANDBOX_URL (default http://127.0.0.1:8080/run_code, each node its own); the launch stops if
# it isolates code less than bubblewrap does, unless RETOOL_ACCEPT_WEAK_ISOLATION=1.
# Multi-node: start a Ray cluster (ray start --head / ray start --address=HEAD:6379), then run this on the head
# with NNODES=<nodes>.
set -euo pipefail
REPO_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$REPO_DIR/scripts/paths.sh"
export DEVICE="${DEVICE:-npu}"
MODEL_PATH="${MODEL_PATH:-$REPO_DIR/checkpoints/sft/merged}"   # the SFT model (README: the SFT stage prints its path)
export PROFILE="${PROFILE:-reference}"   # reference | improved (docs/reference.md)
DATA_DIR="${DATA_DIR:-$REPO_DIR/data/$PROFILE}"   # what retool-data prepare --profile $PROFILE writes
if [[ -n "${SANDBOX_URL:-}" ]]; then  # the old name: refuse it rather than post code somewhere else
  echo "error: SANDBOX_URL is not read; set RETOOL_SANDBOX_URL (the one variable the tool, doctor and docs use)" >&2
  exit 2
fi
# The sandbox on each node (README step 5); scripts/launch.sh hands it to the Ray workers.
export RETOOL_SANDBOX_URL="${RETOOL_SANDBOX_URL:-http://127.0.0.1:8080/run_code}"
require_file "$MODEL_PATH" "run the SFT stage and merge it (README)"
require_file "$DATA_DIR/dapo_math_17k.parquet" "retool-data download, then retool-data prepare --profile $PROFILE --out $DATA_DIR (README)"
require_file "$DATA_DIR/aime_2025.parquet" "retool-data download, then retool-data prepare --profile $PROFILE --out $DATA_DIR (README)"
exec "$REPO_DIR/scripts/launch.sh" rl \
  actor_rollout_ref.model.path="$MODEL_PATH" \
  data.train_files="$DATA_DIR/dapo_math_17k.parquet" \
  data.val_files="$DATA_DIR/aime_2025.parquet" \
  trainer.nnodes="${NNODES:-1}" trainer.n_gpus_per_node="${NPROC_PER_NODE:-16}" \
  "$@"
