#!/usr/bin/env bash
# One launcher for both stages on every device; the run_*.sh files at the repository root only set defaults.
#
#   scripts/launch.sh sft|rl [hydra overrides...]
#
# Environment (all optional):
#   DEVICE          npu | cuda | cpu (default npu); sources configs/device/$DEVICE.env and selects the Hydra overlay
#   PROFILE         reference | improved (default reference; retool.profiles): the overlay configs/profile/<stage>/,
#                   and the profile the data must have been converted with (checked before the run)
#   TRAINER_MODE    rl only: sync | colocate_async | separate_async (default sync, the reference run's): verl's v1
#                   trainer mode, the overlay configs/trainer_mode/rl/ (docs/training.md, "Trainer modes")
#   PYTHON          the interpreter to run verl with. Default: the project's .venv (the CPU stack, `make setup`) for
#                   DEVICE=cpu and for DRY_RUN; for a real npu/cuda run the environment's python3, which must hold
#                   the device stack (torch_npu / CUDA torch): the launch stops with a message when it does not
#   CONFIG_NAME     Hydra config in configs/ (default: the stage name)
#   RUN_DIR         run folder for logs, resolved config and checkpoints (default runs/<stage>-<timestamp>;
#                   multi-node SFT needs the same shared folder on every node, so there it must be set). A RUN_DIR
#                   that already holds <stage>.resolved.yaml is resumed (retool/resume.py): same config, from the
#                   last checkpoint, the log appended, TensorBoard without repeated steps, the workers' environment
#                   (sandbox URL, TensorBoard folder, device variables) this launch's
#   RETOOL_SANDBOX_URL  the /run_code URL the RL tool posts to (configs/tool.yaml; 127.0.0.1 is each node's own). RL
#                   checks every node first (retool/node_check.py) and refuses a sandbox isolated less than bwrap
#                   unless RETOOL_ACCEPT_WEAK_ISOLATION=1 (retool/sandbox_gate.py)
#   NNODES, NODE_RANK, MASTER_ADDR, MASTER_PORT, NPROC_PER_NODE   multi-node SFT (torchrun); RL uses the Ray cluster
#   DRY_RUN=1       print the fully resolved verl config (extra overrides included) and exit without devices
#   VERBOSE=1       print verl's whole output on the console, not the compact view (the log has it either way)
#   SHAKEDOWN=1     the run's own config for a handful of steps (configs/shakedown/<stage>.yaml, applied last): SFT
#                   5 steps, then its checkpoint merged to RUN_DIR/sft_merged and loaded; RL one validation on 8
#                   problems x 2 and step 1, then a relaunch that resumes from its checkpoint and runs step 2.
#                   retool-shakedown RUN_DIR prints the checklist (retool/shakedown/, docs/training.md "The shakedown")
#
# The config is resolved once, here, into $RUN_DIR/<stage>.resolved.yaml, and verl runs exactly that file: every
# ${oc.env:...} in configs/ takes this shell's value, not that of whichever process (a Ray worker started by
# `ray start` has the raylet's environment) happens to read it. What verl itself reads from the environment inside
# Ray workers (TensorBoard's folder, the tool's sandbox URL, configs/device/$DEVICE.env) travels in the Ray job's
# runtime env.
set -euo pipefail
# The whole script is one function, read before it runs: editing this file (a `git pull`) while a run is
# going cannot change what the running launch does next.
main() {

LAUNCH_START="$(date +%s.%N)"
REPO_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
STAGE="${1:?usage: scripts/launch.sh sft|rl [hydra overrides...]}"
shift
LAUNCH_ARGS=("$@")  # a shakedown's RL launch starts again with them
SHAKEDOWN_ARGS=()
case "${SHAKEDOWN:-0}" in
  1) SHAKEDOWN_ARGS=("+shakedown=$STAGE"); RUN_KIND=shakedown ;;  # last: it caps the steps of every other overlay
  0) RUN_KIND="${RETOOL_RUN_KIND:-run}" ;;
  *) echo "error: SHAKEDOWN=$SHAKEDOWN: expected 1 (a shakedown of this launch's config) or unset" >&2; exit 2 ;;
esac
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

# `python -m` and `-c` put the working directory first on sys.path: launched from the CANN 样例's verl/recipe/retool,
# its retool.py (or a verl/, reward.py, tool.py there) would be imported instead of the recipe and verl. Every
# process started from here inherits this (torchrun's ranks too); Ray's workers get retool/launch_path.py's hook.
export PYTHONSAFEPATH=1
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
  case "$DEVICE" in  # docs/install.md: a plain pip install on the NPU image would replace its torch_npu and vLLM
    npu) how="cd $REPO_DIR && bash scripts/install_npu.sh" ;;
    cpu) how="cd $REPO_DIR && make setup (the launch then takes .venv/bin/python when PYTHON is unset)" ;;
    *) how="cd $REPO_DIR && $PYTHON -m pip install -e '.[cuda]' && $PYTHON -m retool.verl_install install" ;;
  esac
  [[ "$DEVICE" != npu || "$PYTHON" == python3 ]] || how="cd $REPO_DIR && PYTHON=$PYTHON bash scripts/install_npu.sh"
  echo "error: $PYTHON cannot import the recipe and verl: install them into that environment ($how;" \
       "docs/install.md), or set PYTHON to the interpreter that has them" >&2
  exit 1; }
# PYTHONSAFEPATH needs Python >= 3.11 (the NPU image has 3.12): an older one imports from the launch folder, which
# is harmless only in the checkout itself.
if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
   && [[ "$(pwd -P)" != "$(cd "$REPO_DIR" && pwd -P)" ]]; then
  echo "error: $PYTHON is older than Python 3.11, which puts the folder a launch runs from ($PWD) first on" \
       "sys.path: a retool.py or verl/ there would be imported instead of the recipe's. Launch from the checkout" \
       "(cd $REPO_DIR), or set PYTHON to a Python >= 3.11" >&2
  exit 1
fi
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
  FOLDER="$STAGE"
  [[ "$RUN_KIND" != shakedown ]] || FOLDER=shakedown  # a shakedown's RL stage goes into its SFT stage's folder
  RUN_DIR="$REPO_DIR/runs/$FOLDER-$(date +%Y%m%d-%H%M%S)"
fi
RUN_DIR="$(realpath -m "$RUN_DIR")"  # absolute: Hydra reads the resolved config from here, and Ray workers write here
export RUN_DIR RETOOL_RUN_DIR="$RUN_DIR"
# verl's TensorBoard logger (and its validation-generations TEXT tab) writes where this points.
export TENSORBOARD_DIR="${TENSORBOARD_DIR:-$RUN_DIR/tensorboard/$STAGE}"
# verl's metric stream (its `file` tracker in trainer.logger), which the console view reads: each launch of the run
# folder its own numbered file, since verl truncates the file it opens. Only global rank 0 writes it: the other nodes
# of a multi-node SFT neither name one nor wait for it (their consoles show their own output).
NODE_SUFFIX=""  # a multi-node SFT's other nodes: ".node<rank>" on their own log and Hydra folder (below)
[[ "$STAGE" != sft || "${NODE_RANK:-0}" == 0 ]] || NODE_SUFFIX=".node$NODE_RANK"
if [[ -z "$NODE_SUFFIX" ]]; then
  LAUNCH_NO=1
  for earlier in "$RUN_DIR/logs/metrics/$STAGE"-*.jsonl; do
    number="${earlier##*-}"; number="${number%.jsonl}"
    [[ ! "$number" =~ ^[0-9]+$ ]] || (( number < LAUNCH_NO )) || LAUNCH_NO=$(( number + 1 ))
  done
  export VERL_FILE_LOGGER_PATH="$RUN_DIR/logs/metrics/$STAGE-$LAUNCH_NO.jsonl"
else
  unset VERL_FILE_LOGGER_PATH
fi

HYDRA_ARGS=(--config-path "$REPO_DIR/configs" --config-name "$CONFIG_NAME" "device/$STAGE=$DEVICE"
            "profile/$STAGE=$PROFILE")
if [[ "$STAGE" == rl ]]; then
  TRAINER_MODE="${TRAINER_MODE:-sync}"
  [[ -f "$REPO_DIR/configs/trainer_mode/rl/$TRAINER_MODE.yaml" ]] || { echo "error: TRAINER_MODE=$TRAINER_MODE has no" \
    "configs/trainer_mode/rl/$TRAINER_MODE.yaml (expected sync, colocate_async or separate_async)" >&2; exit 2; }
  HYDRA_ARGS+=("trainer_mode/rl=$TRAINER_MODE")
  # Ray's GCS keeps the events of its last 100,000 tasks by default, and grows by hundreds of MB to get there (the
  # soak, docs/performance.md); the last few steps' tasks are what anyone inspects. Read by the GCS that verl's
  # ray.init starts here; a cluster started by `ray start` takes it from that shell (docs/multinode.md).
  export RAY_task_events_max_num_task_in_gcs="${RAY_task_events_max_num_task_in_gcs:-5000}"
  RUNTIME_ENV="+ray_kwargs.ray_init.runtime_env.env_vars"
  HYDRA_ARGS+=("$RUNTIME_ENV.TENSORBOARD_DIR='$TENSORBOARD_DIR'"
               "$RUNTIME_ENV.VERL_FILE_LOGGER_PATH='$VERL_FILE_LOGGER_PATH'")
  [[ -z "${RETOOL_SANDBOX_URL:-}" ]] || HYDRA_ARGS+=("$RUNTIME_ENV.RETOOL_SANDBOX_URL='$RETOOL_SANDBOX_URL'")
  # Ray puts this launch's folder first on every worker's sys.path (on every node): the hook takes it out again.
  # PYTHONSAFEPATH for what the workers start, also where `ray start` brought them up without this environment.
  HYDRA_ARGS+=("+ray_kwargs.ray_init.runtime_env.worker_process_setup_hook=retool.launch_path.undo_driver_paths"
               "$RUNTIME_ENV.PYTHONSAFEPATH='1'")
  # On a cluster started by `ray start` (RAY_ADDRESS) its nodes declare their resources, and ray.init refuses the
  # sizes configs/device/rl/cpu.yaml gives a Ray of its own.
  [[ -z "${RAY_ADDRESS:-}" || "$DEVICE" != cpu ]] || HYDRA_ARGS+=(ray_kwargs.ray_init.num_cpus=null
                                                                ray_kwargs.ray_init.num_gpus=null)
  # The device variables too: workers that `ray start` brought up on other nodes never read $DEVICE_ENV.
  for name in $(sed -nE 's/^[[:space:]]*export[[:space:]]+([A-Za-z_][A-Za-z0-9_]*).*/\1/p' "$DEVICE_ENV" | sort -u); do
    value="${!name}"
    HYDRA_ARGS+=("$RUNTIME_ENV.$name='${value//\'/\\\'}'")
  done
fi

# Composes the config as $MODULE's Hydra entry point would, without importing verl (retool/compose.py): 1 s, not 10.
COMPOSE=("$PYTHON" -m retool.compose "${HYDRA_ARGS[@]}")
if [[ "${DRY_RUN:-0}" == "1" ]]; then
  # Hydra composes and prints the config, then exits: no Ray, no process group, no device.
  exec "${COMPOSE[@]}" "$@" "${SHAKEDOWN_ARGS[@]}" --cfg job --resolve
fi

mkdir -p "$RUN_DIR/logs/metrics"
RESOLVED="$STAGE.resolved.yaml"
RESUME_ARGS=()
RESUMING=false
PARTIAL="$(mktemp "$RUN_DIR/.$RESOLVED.XXXXXX")"  # renamed into place whole: other nodes may read it
"${COMPOSE[@]}" "$@" "${SHAKEDOWN_ARGS[@]}" --cfg job --resolve > "$PARTIAL" \
  2> "$RUN_DIR/logs/$STAGE$NODE_SUFFIX.resolve.log" \
  || { cat "$RUN_DIR/logs/$STAGE$NODE_SUFFIX.resolve.log" >&2; rm -f "$PARTIAL"; exit 1; }
if [[ "$STAGE" == rl ]]; then
  # What would otherwise fail inside the run: a reward manager that drops num_turns, no failure accounting, no
  # code_interpreter tool, rows without a ground truth (retool/failures/preflight.py). Checked before the run folder
  # takes the config, so a refused launch leaves nothing behind to resume.
  "$PYTHON" -m retool.failures.preflight "$PARTIAL" || { rm -f "$PARTIAL"; exit 1; }
fi
if [[ -f "$RUN_DIR/$RESOLVED" ]]; then
  # Resume: verl runs the saved config again (the new one must not differ); one node of a multi-node SFT cleans up.
  CLEAN=()
  [[ "${NODE_RANK:-0}" == 0 ]] || CLEAN=(--check-only)
  RESUME_OUT="$("$PYTHON" -m retool.resume prepare --stage "$STAGE" --run-dir "$RUN_DIR" --new-config "$PARTIAL" \
                "${CLEAN[@]}")" || { rm -f "$PARTIAL"; exit 1; }
  rm -f "$PARTIAL"
  [[ -z "$RESUME_OUT" ]] || mapfile -t RESUME_ARGS <<< "$RESUME_OUT"
  RESUMING=true
else
  mv "$PARTIAL" "$RUN_DIR/$RESOLVED"
fi
FULL="$RUN_DIR/shakedown/$STAGE.full.yaml"
if [[ -n "${SHAKEDOWN_ARGS[*]}" && "${NODE_RANK:-0}" == 0 && ! -f "$FULL" ]]; then
  # The long run this shakedown stands for: retool-shakedown compares the two configs and projects its wall time.
  mkdir -p "$RUN_DIR/shakedown"
  "${COMPOSE[@]}" "$@" --cfg job --resolve > "$FULL.partial" \
    2>> "$RUN_DIR/logs/$STAGE.resolve.log" && mv "$FULL.partial" "$FULL"
fi
# Data converted for another profile would train on one schema text or prompt wording and roll out with another.
"$PYTHON" -m retool.profiles check --profile "$PROFILE" --config "$RUN_DIR/$RESOLVED"
if [[ "$STAGE" == rl ]]; then
  # Every node verl will run on: its own sandbox (answers, bwrap, runs a program), the worker environment, its devices.
  "$PYTHON" -m retool.node_check --config "$RUN_DIR/$RESOLVED"
fi
# Each node of a multi-node SFT its own log and Hydra folder: on shared storage one file would interleave them.
RUN_ARGS=(--config-path "$RUN_DIR" --config-name "${RESOLVED%.yaml}" hydra.run.dir="$RUN_DIR/hydra$NODE_SUFFIX"
          "${RESUME_ARGS[@]}")

LOG="$RUN_DIR/logs/$STAGE$NODE_SUFFIX.log"
launch_record() {  # logs/launches.jsonl, a line when verl starts and one when it ended well (retool/shakedown/)
  local fields='{"event": "%s", "stage": "%s", "kind": "%s", "device": "%s", "node_rank": "%s", "resume": %s, '
  printf "$fields"'"start": %s, "time": %s}\n' "$1" "$STAGE" "$RUN_KIND" "$DEVICE" "${NODE_RANK:-0}" "$RESUMING" \
    "$LAUNCH_START" "$(date +%s.%N)" >> "$RUN_DIR/logs/launches.jsonl"  # one write: nodes share the file
}
launch_record start
# verl runs under retool/console/: its whole output is appended to $LOG byte for byte, the console gets a compact
# view (start-up, a line per step, warnings and errors at once; VERBOSE=1: everything), and verl's exit status is kept.
CONSOLE=("$PYTHON" -m retool.console --stage "$STAGE" --log "$LOG" --config "$RUN_DIR/$RESOLVED" --device "$DEVICE"
         --profile "$PROFILE" --)
if [[ "$STAGE" == sft ]]; then
  if [[ -z "${MASTER_PORT:-}" ]]; then
    # One node: any free loopback port (two runs on one host must not collide). Several nodes: agree on 29500.
    if [[ "${NNODES:-1}" == 1 ]]; then
      MASTER_PORT="$("$PYTHON" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
    else
      MASTER_PORT=29500
    fi
  fi
  "${CONSOLE[@]}" "$PYTHON" -m torch.distributed.run \
    --nnodes="${NNODES:-1}" --node_rank="${NODE_RANK:-0}" --nproc_per_node="${NPROC_PER_NODE:-1}" \
    --master_addr="${MASTER_ADDR:-127.0.0.1}" --master_port="$MASTER_PORT" \
    -m "$MODULE" "${RUN_ARGS[@]}"
else
  "${CONSOLE[@]}" "$PYTHON" -m "$MODULE" "${RUN_ARGS[@]}"
fi
launch_record end
if [[ -n "${SHAKEDOWN_ARGS[*]}" && "${NODE_RANK:-0}" == 0 ]]; then
  if [[ "$STAGE" == sft ]]; then
    "$PYTHON" -m retool.shakedown.merge --run-dir "$RUN_DIR"  # to Hugging Face format, then loaded as RL will
  else
    NEXT="$("$PYTHON" -m retool.shakedown.relaunch --run-dir "$RUN_DIR")"  # "relaunch" after the first launch
    # the first launch ended at step 1's checkpoint: the same RUN_DIR again is an ordinary resume, which runs step 2
    [[ "$NEXT" != relaunch ]] || exec "$REPO_DIR/scripts/launch.sh" rl "${LAUNCH_ARGS[@]}"
  fi
fi
# The stage's next command, with this run's real paths (so a second run never picks up an older folder).
DEVICE="$DEVICE" "$PYTHON" -m retool.next_step "$STAGE" "$RUN_DIR" || true
}
main "$@"
exit "$?"
