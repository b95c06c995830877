#!/usr/bin/env bash
# One launcher for both stages on every device; the run_*.sh files at the repository root only set defaults.
#
#   scripts/launch.sh sft|dapo [hydra overrides...]
#
# Environment (all optional):
#   DEVICE          npu | cuda | cpu (default npu); sources configs/device/$DEVICE.env and selects the Hydra overlay
#   CONFIG_NAME     Hydra config in configs/ (default: the stage name)
#   RUN_DIR         run folder for logs, resolved config and checkpoints (default runs/<stage>-<timestamp>)
#   NNODES, NODE_RANK, MASTER_ADDR, MASTER_PORT, NPROC_PER_NODE   multi-node SFT (torchrun); RL uses the Ray cluster
#   DRY_RUN=1       print the fully resolved verl config (extra overrides included) and exit without devices
set -euo pipefail

REPO_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
STAGE="${1:?usage: scripts/launch.sh sft|dapo [hydra overrides...]}"
shift
case "$STAGE" in
  sft) MODULE=verl.trainer.sft_trainer ;;
  dapo) MODULE=verl.trainer.main_ppo ;;
  *) echo "error: unknown stage '$STAGE' (expected sft or dapo)" >&2; exit 2 ;;
esac

DEVICE="${DEVICE:-npu}"
DEVICE_ENV="$REPO_DIR/configs/device/$DEVICE.env"
[[ -f "$DEVICE_ENV" ]] || { echo "error: DEVICE=$DEVICE has no $DEVICE_ENV (expected npu, cuda or cpu)" >&2; exit 2; }
# shellcheck source=/dev/null
source "$DEVICE_ENV"

CONFIG_NAME="${CONFIG_NAME:-$STAGE}"
# The project venv when there is one (make setup), else the image's python (NPU/CUDA containers).
if [[ -z "${PYTHON:-}" ]]; then
  if [[ -x "$REPO_DIR/.venv/bin/python" ]]; then PYTHON="$REPO_DIR/.venv/bin/python"; else PYTHON=python3; fi
fi
export RETOOL_REPO_DIR="$REPO_DIR"
HYDRA_ARGS=(--config-path "$REPO_DIR/configs" --config-name "$CONFIG_NAME" "device/$STAGE=$DEVICE")

if [[ "${DRY_RUN:-0}" == "1" ]]; then
  # Hydra composes and prints the config, then exits: no Ray, no process group, no device.
  exec "$PYTHON" -m "$MODULE" "${HYDRA_ARGS[@]}" "$@" --cfg job --resolve
fi

RUN_DIR="${RUN_DIR:-$REPO_DIR/runs/$STAGE-$(date +%Y%m%d-%H%M%S)}"
mkdir -p "$RUN_DIR/logs"
export RETOOL_RUN_DIR="$RUN_DIR"
# verl's TensorBoard logger (and its validation-generations TEXT tab) writes where this points.
export TENSORBOARD_DIR="${TENSORBOARD_DIR:-$RUN_DIR/tensorboard/$STAGE}"
# Keep the exact configuration next to the results it produced.
"$PYTHON" -m "$MODULE" "${HYDRA_ARGS[@]}" "$@" --cfg job --resolve > "$RUN_DIR/$STAGE.resolved.yaml" 2> "$RUN_DIR/logs/$STAGE.resolve.log" \
  || { cat "$RUN_DIR/logs/$STAGE.resolve.log" >&2; exit 1; }

LOG="$RUN_DIR/logs/$STAGE.log"
echo "[$STAGE] device=$DEVICE config=$CONFIG_NAME run_dir=$RUN_DIR log=$LOG"
set -o pipefail
if [[ "$STAGE" == sft ]]; then
  if [[ -z "${MASTER_PORT:-}" ]]; then
    # One node: any free loopback port (two runs on one host must not collide). Several nodes: agree on 29500.
    if [[ "${NNODES:-1}" == 1 ]]; then
      MASTER_PORT="$("$PYTHON" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
    else
      MASTER_PORT=29500
    fi
  fi
  "$PYTHON" -m torch.distributed.run \
    --nnodes="${NNODES:-1}" --node_rank="${NODE_RANK:-0}" --nproc_per_node="${NPROC_PER_NODE:-1}" \
    --master_addr="${MASTER_ADDR:-127.0.0.1}" --master_port="$MASTER_PORT" \
    -m "$MODULE" "${HYDRA_ARGS[@]}" "$@" hydra.run.dir="$RUN_DIR/hydra" 2>&1 | tee "$LOG"
else
  "$PYTHON" -m "$MODULE" "${HYDRA_ARGS[@]}" "$@" hydra.run.dir="$RUN_DIR/hydra" 2>&1 | tee "$LOG"
fi
