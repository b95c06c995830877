#!/usr/bin/env bash
# ReTool RL (DAPO-style GRPO + code tool) of the SFT model on 8 x Atlas A3 (16 dies) per node.
# Extra arguments are Hydra overrides, passed on. Start the sandbox first (docs/sandbox.md).
#   [PROFILE=improved] MODEL_PATH=<the SFT model the SFT stage printed> ./run_qwen3_4b_dapo_npu.sh [key=value ...]
#   RUN_DIR=runs/rl-<time> ./run_qwen3_4b_dapo_npu.sh   # resume a crashed run in its own folder
#   DRY_RUN=1 ./run_qwen3_4b_dapo_npu.sh       # print the resolved verl config, no devices needed
#   TRAINER_MODE=separate_async ./run_qwen3_4b_dapo_npu.sh   # or colocate_async; default sync (docs/training.md)
# The sandbox is RETOOL_SANDBOX_URL (default http://127.0.0.1:8080/run_code, each node its own); the launch stops if
# it isolates code less than bubblewrap does, unless RETOOL_ACCEPT_WEAK_ISOLATION=1.
# Multi-node: start a Ray cluster (ray start --head / ray start --address=HEAD:6379), then run this on the head
# with NNODES=<nodes>.
set -euo pipefail
REPO_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# Copied out of the checkout, as the CANN 样例 copies its scripts into verl/recipe/retool? Use the installed recipe's.
[[ -f "$REPO_DIR/scripts/paths.sh" ]] || REPO_DIR="$(retool-verl-recipe checkout 2>/dev/null)" || { echo "error: $0" \
  "is outside the ReTool checkout and no installed recipe is found: bash scripts/install_npu.sh in the checkout" >&2; exit 1; }
source "$REPO_DIR/scripts/paths.sh"
export DEVICE="${DEVICE:-npu}"
if [[ -z "${MODEL_PATH:-}" ]]; then  # no default: RL starts from this user's SFT model, wherever it was saved
  how="set MODEL_PATH to the model the SFT stage printed at its end (python -m retool.next_step sft runs/sft-<time> prints it again)"
  if [[ "${DRY_RUN:-0}" != "1" ]]; then echo "error: MODEL_PATH is not set: $how" >&2; exit 2; fi
  echo "warning: MODEL_PATH is not set; the config shows a placeholder ($how)" >&2
  MODEL_PATH="MODEL_PATH-not-set"
fi
export PROFILE="${PROFILE:-reference}"   # reference | improved (docs/reference.md)
DATA_DIR="${DATA_DIR:-$REPO_DIR/data/$PROFILE}"   # what retool-data prepare --profile $PROFILE writes
if [[ -n "${SANDBOX_URL:-}" ]]; then  # the old name: refuse it rather than post code somewhere else
  echo "error: SANDBOX_URL is not read; set RETOOL_SANDBOX_URL (the one variable the tool, doctor and docs use)" >&2
  exit 2
fi
# The sandbox on each node (docs/training.md); scripts/launch.sh hands it to the Ray workers.
export RETOOL_SANDBOX_URL="${RETOOL_SANDBOX_URL:-http://127.0.0.1:8080/run_code}"
require_file "$MODEL_PATH" "run the SFT stage and set MODEL_PATH to the model path it printed (docs/training.md)"
require_file "$DATA_DIR/dapo_math_17k.parquet" "retool-data download, then retool-data prepare --profile $PROFILE --out $DATA_DIR (README)"
require_file "$DATA_DIR/aime_2025.parquet" "retool-data download, then retool-data prepare --profile $PROFILE --out $DATA_DIR (README)"
# separate_async: ROLLOUT_DEVICES of each node's devices serve the rollout (default half), the rest train.
DEVICES="${NPROC_PER_NODE:-16}"
SPLIT=(trainer.n_gpus_per_node="$DEVICES")
if [[ "${TRAINER_MODE:-sync}" == separate_async ]]; then
  ROLLOUT_DEVICES="${ROLLOUT_DEVICES:-$((DEVICES / 2))}"
  [[ "$ROLLOUT_DEVICES" =~ ^[0-9]+$ ]] && (( ROLLOUT_DEVICES > 0 && ROLLOUT_DEVICES < DEVICES )) || {
    echo "error: ROLLOUT_DEVICES=$ROLLOUT_DEVICES must leave devices to both the rollout and the trainer (1 to" \
         "$((DEVICES - 1)) of the $DEVICES per node)" >&2; exit 2; }
  SPLIT=(trainer.n_gpus_per_node="$((DEVICES - ROLLOUT_DEVICES))"
         actor_rollout_ref.rollout.n_gpus_per_node="$ROLLOUT_DEVICES")
fi
exec "$REPO_DIR/scripts/launch.sh" rl \
  actor_rollout_ref.model.path="$MODEL_PATH" \
  data.train_files="$DATA_DIR/dapo_math_17k.parquet" \
  data.val_files="$DATA_DIR/aime_2025.parquet" \
  trainer.nnodes="${NNODES:-1}" "${SPLIT[@]}" \
  "$@"
