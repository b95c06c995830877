#!/usr/bin/env bash
# ReTool RL (DAPO-style GRPO + code tool) of the SFT model on 8 x Atlas A3 (16 dies) per node.
# Extra arguments are Hydra overrides, passed on. Start the sandbox first (docs/sandbox.md).
#   MODEL_PATH=checkpoints/sft/merged DATA_DIR=/data/retool RETOOL_SANDBOX_URL=http://127.0.0.1:8080/run_code \
#     ./run_qwen3_4b_dapo_npu.sh
#   DRY_RUN=1 ./run_qwen3_4b_dapo_npu.sh       # print the resolved verl config, no devices needed
# Multi-node: start a Ray cluster (ray start --head / ray start --address=HEAD:6379), then run this on the head
# with NNODES=<nodes>.
set -euo pipefail
REPO_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$REPO_DIR/scripts/paths.sh"
export DEVICE="${DEVICE:-npu}"
MODEL_PATH="${MODEL_PATH:-$REPO_DIR/checkpoints/sft/merged}"   # the merged SFT model (README step 4)
DATA_DIR="${DATA_DIR:-$REPO_DIR/data}"
if [[ -n "${SANDBOX_URL:-}" ]]; then  # the old name: refuse it rather than post code somewhere else
  echo "error: SANDBOX_URL is not read; set RETOOL_SANDBOX_URL (the one variable the tool, doctor and docs use)" >&2
  exit 2
fi
# The sandbox on each node (README step 5); scripts/launch.sh hands it to the Ray workers.
export RETOOL_SANDBOX_URL="${RETOOL_SANDBOX_URL:-http://127.0.0.1:8080/run_code}"
require_file "$MODEL_PATH" "run the SFT stage and merge it (README)"
require_file "$DATA_DIR/dapo_math_17k.parquet" "retool-prepare-rl --input BytedTsinghua-SIA/DAPO-Math-17k --dedupe --output $DATA_DIR/dapo_math_17k.parquet"
require_file "$DATA_DIR/aime_2025.parquet" "retool-prepare-rl --input yentinglin/aime_2025 --output $DATA_DIR/aime_2025.parquet"
exec "$REPO_DIR/scripts/launch.sh" dapo \
  actor_rollout_ref.model.path="$MODEL_PATH" \
  data.train_files="$DATA_DIR/dapo_math_17k.parquet" \
  data.val_files="$DATA_DIR/aime_2025.parquet" \
  trainer.nnodes="${NNODES:-1}" trainer.n_gpus_per_node="${NPROC_PER_NODE:-16}" \
  "$@"
