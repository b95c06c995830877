#!/usr/bin/env bash
# One launcher for both stages on every device; the run_*.sh files at the repository root only set defaults.
#
#   scripts/launch.sh sft|rl [hydra overrides...]
#
# Environment (all optional):
#   DEVICE          npu | cuda | cpu (default npu); sources configs/device/$DEVICE.env and selects the Hydra overlay
#   PROFILE         reference | improved (default reference; retool.profiles): the overlay configs/profile/<stage>/,
#                   and the profile the data must have been converted with (checked before the run)
#   PYTHON          the interpreter to run verl with. Default: the project's .venv (the CPU stack, `make setup`) for
#                   DEVICE=cpu and for DRY_RUN; for a real npu/cuda run the environment's python3, which must hold
#                   the device stack (torch_npu / CUDA torch): the launch stops with a message when it does not
#   CONFIG_NAME     Hydra config in configs/ (default: the stage name)
#   RUN_DIR         run folder for logs, resolved config and checkpoints (default runs/<stage>-<timestamp>;
#                   multi-node SFT needs the same shared folder on every node, so there it must be set). A RUN_DIR
#                   that already holds <stage>.resolved.yaml is resumed (retool/resume.py): same config, from the
#                   last checkpoint, the log appended, TensorBoard without repeated steps
#   RETOOL_SANDBOX_URL  the /run_code URL the RL tool posts to (configs/tool.yaml). RL refuses a sandbox isolated
#                   less than bwrap unless RETOOL_ACCEPT_WEAK_ISOLATION=1 (retool/sandbox/gate.py)
#   NNODES, NODE_RANK, MASTER_ADDR, MASTER_PORT, NPROC_PER_NODE   multi-node SFT (torchrun); RL uses the Ray cluster
#   DRY_RUN=1       print the fully resolved verl config (extra overrides included) and exit without devices
#
# The config is resolved once, here, into $RUN_DIR/<stage>.resolved.yaml, and verl runs exactly that file: every
# ${oc.env:...} in configs/ takes this shell's value, not that of whichever process (a Ray worker started by
# `ray start` has the raylet's environment) happens to read it. What verl itself reads from the environment inside
# Ray workers (TensorBoard's folder, the tool's sandbox URL) travels in the Ray job's runtime env.
set -euo pipefail

REPO_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
STAGE="${1:?usage: scripts/launch.sh sft|rl [hydra overrides...]}"
shift
case "$STAGE" in
  sft) MODULE=verl.trainer.sft_trainer ;;
  rl) MODULE=verl.trainer.main_ppo ;;
  *) echo "error: unknown stage '$STAGE' (expected sft or rl)" >&2; exit 2 ;;
esac
DEVICE="${DEVICE:-npu}"
DEVICE_ENV="$REPO_DIR/configs/device/$DEVICE.env"
[[ -f "$DEVICE_ENV" ]] || { echo "error: DEVICE=$DEVICE has no $DEVICE_ENV (expected npu, cuda or cpu)" >&2; exit 2; }
if [[ -z "${RUN_DIR:-}" && "$STAGE" == sft && "${NNODES:-1}" != 1 && "${DRY_RUN:-0}" != 1 ]]; then
  echo "error: multi-node SFT (NNODES=$NNODES) needs RUN_DIR set to one shared folder, the same on every node" >&2
  exit 2
fi

if [[ -z "${PYTHON:-}" ]]; then
  # .venv holds the CPU stack: right for the CPU and for resolving configs, wrong for an NPU or CUDA run.
  if [[ ( "$DEVICE" == cpu || "${DRY_RUN:-0}" == 1 ) && -x "$REPO_DIR/.venv/bin/python" ]]; then
    PYTHON="$REPO_DIR/.venv/bin/python"
  else
    PYTHON=python3
  fi
fi
# Looked up, not imported: importing verl takes ~10 s and the next step imports it anyway (a broken install shows there).
"$PYTHON" -c 'import importlib.util as u, sys; sys.exit(not (u.find_spec("retool") and u.find_spec("verl")))' \
  2>/dev/null || {
  echo "error: $PYTHON cannot import the recipe and verl: install them into that environment (pip install -r" \
       "requirements.txt && python -m retool.verl_install install; docs/install.md), or set PYTHON" >&2
  exit 1; }
if [[ "$DEVICE" != cpu && "${DRY_RUN:-0}" != 1 ]]; then
  "$PYTHON" -m retool.platform.stack "$DEVICE"  # stops here, with the fix, when $PYTHON has no $DEVICE stack
fi
# shellcheck source=/dev/null
source "$DEVICE_ENV"

CONFIG_NAME="${CONFIG_NAME:-$STAGE}"
PROFILE="${PROFILE:-reference}"
[[ -f "$REPO_DIR/configs/profile/$STAGE/$PROFILE.yaml" ]] \
  || { echo "error: PROFILE=$PROFILE has no configs/profile/$STAGE/$PROFILE.yaml (expected reference or improved)" >&2
       exit 2; }
export RETOOL_REPO_DIR="$REPO_DIR"
if [[ -z "${RUN_DIR:-}" ]]; then
  RUN_DIR="$REPO_DIR/runs/$STAGE-$(date +%Y%m%d-%H%M%S)"
fi
RUN_DIR="$(realpath -m "$RUN_DIR")"  # absolute: Hydra reads the resolved config from here, and Ray workers write here
export RUN_DIR RETOOL_RUN_DIR="$RUN_DIR"
# verl's TensorBoard logger (and its validation-generations TEXT tab) writes where this points.
export TENSORBOARD_DIR="${TENSORBOARD_DIR:-$RUN_DIR/tensorboard/$STAGE}"

HYDRA_ARGS=(--config-path "$REPO_DIR/configs" --config-name "$CONFIG_NAME" "device/$STAGE=$DEVICE"
            "profile/$STAGE=$PROFILE")
if [[ "$STAGE" == rl ]]; then
  RUNTIME_ENV="+ray_kwargs.ray_init.runtime_env.env_vars"
  HYDRA_ARGS+=("$RUNTIME_ENV.TENSORBOARD_DIR='$TENSORBOARD_DIR'")
  [[ -z "${RETOOL_SANDBOX_URL:-}" ]] || HYDRA_ARGS+=("$RUNTIME_ENV.RETOOL_SANDBOX_URL='$RETOOL_SANDBOX_URL'")
fi

if [[ "${DRY_RUN:-0}" == "1" ]]; then
  # Hydra composes and prints the config, then exits: no Ray, no process group, no device.
  exec "$PYTHON" -m "$MODULE" "${HYDRA_ARGS[@]}" "$@" --cfg job --resolve
fi

mkdir -p "$RUN_DIR/logs"
RESOLVED="$STAGE.resolved.yaml"
RESUME_ARGS=()
PARTIAL="$(mktemp "$RUN_DIR/.$RESOLVED.XXXXXX")"  # renamed into place whole: other nodes may read it
"$PYTHON" -m "$MODULE" "${HYDRA_ARGS[@]}" "$@" --cfg job --resolve > "$PARTIAL" 2> "$RUN_DIR/logs/$STAGE.resolve.log" \
  || { cat "$RUN_DIR/logs/$STAGE.resolve.log" >&2; rm -f "$PARTIAL"; exit 1; }
if [[ -f "$RUN_DIR/$RESOLVED" ]]; then
  # Resume: verl runs the saved config again (the new one must not differ); one node of a multi-node SFT cleans up.
  CLEAN=()
  [[ "${NODE_RANK:-0}" == 0 ]] || CLEAN=(--check-only)
  RESUME_OUT="$("$PYTHON" -m retool.resume prepare --stage "$STAGE" --run-dir "$RUN_DIR" --new-config "$PARTIAL" \
                "${CLEAN[@]}")" || { rm -f "$PARTIAL"; exit 1; }
  rm -f "$PARTIAL"
  [[ -z "$RESUME_OUT" ]] || mapfile -t RESUME_ARGS <<< "$RESUME_OUT"
else
  mv "$PARTIAL" "$RUN_DIR/$RESOLVED"
fi
# Data converted for another profile would train on one schema text or prompt wording and roll out with another.
"$PYTHON" -m retool.profiles check --profile "$PROFILE" --config "$RUN_DIR/$RESOLVED"
if [[ "$STAGE" == rl ]]; then
  "$PYTHON" -m retool.sandbox.gate "${RETOOL_SANDBOX_URL:-http://127.0.0.1:8080/run_code}"
fi
RUN_ARGS=(--config-path "$RUN_DIR" --config-name "${RESOLVED%.yaml}" hydra.run.dir="$RUN_DIR/hydra"
          "${RESUME_ARGS[@]}")

LOG="$RUN_DIR/logs/$STAGE.log"
echo "[$STAGE] device=$DEVICE profile=$PROFILE config=$CONFIG_NAME run_dir=$RUN_DIR log=$LOG"
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
    -m "$MODULE" "${RUN_ARGS[@]}" 2>&1 | tee -a "$LOG"
else
  "$PYTHON" -m "$MODULE" "${RUN_ARGS[@]}" 2>&1 | tee -a "$LOG"
fi
# The stage's next command, with this run's real paths (so a second run never picks up an older folder).
DEVICE="$DEVICE" "$PYTHON" -m retool.next_step "$STAGE" "$RUN_DIR" || true
