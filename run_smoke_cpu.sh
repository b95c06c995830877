#!/usr/bin/env bash
# The whole ReTool recipe in miniature on a CPU: the same verl, vLLM, Ray, configs and code paths as the NPU run,
# with a tiny Qwen3 (pre-trained to copy digits and call the tool: assets/smoke_model) and a synthetic tool task.
# Stages: build assets -> start the embedded sandbox -> SFT -> merge to Hugging Face format -> GRPO with real
# tool calls on the correctness-only reward (validation on synthetic + an AIME 2025 slice) -> summary. One run
# folder holds logs, resolved configs, TensorBoard events of both stages and summary.{json,md}.
#   ./run_smoke_cpu.sh                 # RUN_DIR=runs/smoke-<time>
#   DRY_RUN=1 ./run_smoke_cpu.sh       # print both resolved verl configs and exit
# Extra arguments are Hydra overrides for the RL stage; SFT_ARGS="k=v ..." for the SFT stage.
set -euo pipefail
REPO_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
export DEVICE=cpu
# The improved profile by default: one prompt shape for SFT and RL, which a tiny model needs (retool/smoke/build.py).
export PROFILE="${PROFILE:-improved}"
PYTHON="${PYTHON:-$REPO_DIR/.venv/bin/python}"
[[ -x "$PYTHON" ]] || { echo "error: $PYTHON not found; run 'make setup' (or 'make smoke')" >&2; exit 1; }
read -r -a SFT_EXTRA <<< "${SFT_ARGS:-}"

ASSETS="${SMOKE_ASSETS:-$REPO_DIR/.cache/smoke-assets}"
export RETOOL_DATA_DIR="$ASSETS/data" RETOOL_SMOKE_MODEL="$ASSETS/model"

if [[ "${DRY_RUN:-0}" == "1" ]]; then
  echo "# ---- SFT (scripts/launch.sh sft +smoke=sft) ----"
  "$REPO_DIR/scripts/launch.sh" sft +smoke=sft "${SFT_EXTRA[@]}"
  echo "# ---- RL (scripts/launch.sh rl +smoke=rl) ----"
  exec "$REPO_DIR/scripts/launch.sh" rl +smoke=rl "$@"
fi

export RUN_DIR="${RUN_DIR:-$REPO_DIR/runs/smoke-$(date +%Y%m%d-%H%M%S)}"
mkdir -p "$RUN_DIR/logs"
"$PYTHON" -m retool.platform.cpu_dtype --json > "$RUN_DIR/logs/host.json"  # the CPU and the dtype it gets
git -C "$REPO_DIR" describe --always --dirty > "$RUN_DIR/logs/commit.txt" 2>/dev/null || true  # what code ran
STAGES="$RUN_DIR/logs/stages.tsv"
: > "$STAGES"
stage() {  # stage NAME command...: run one stage, record its wall time
  local name="$1" start
  shift
  start=$(date +%s.%N)
  echo "==> [$name] $(date +%T)"
  "$@"
  printf '%s\t%s\t%s\n' "$name" "$start" "$(date +%s.%N)" >> "$STAGES"
}

# Host memory in use, sampled every second, for the summary's per-stage peaks.
( while :; do printf '%s\t%s\n' "$(date +%s.%N)" \
    "$(awk '/^MemTotal/{t=$2} /^MemAvailable/{a=$2} END{print t-a}' /proc/meminfo)"; sleep 1; done \
) > "$RUN_DIR/logs/memory.tsv" &
MEMWATCH_PID=$!
SANDBOX_PID=""
cleanup() {
  kill "$MEMWATCH_PID" 2>/dev/null || true
  if [[ -n "$SANDBOX_PID" ]]; then kill "$SANDBOX_PID" 2>/dev/null || true; wait "$SANDBOX_PID" 2>/dev/null || true; fi
}
trap cleanup EXIT

stage assets "$PYTHON" -m retool.smoke.build --out "$ASSETS" --aime-rows "${SMOKE_AIME_ROWS:-8}" --rl-val-rows 64 --profile "$PROFILE"

SANDBOX_PORT="${SANDBOX_PORT:-$("$PYTHON" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')}"
SANDBOX_BASE="http://127.0.0.1:$SANDBOX_PORT"
export RETOOL_SANDBOX_URL="$SANDBOX_BASE/run_code"
"$PYTHON" -m retool.sandbox serve --host 127.0.0.1 --port "$SANDBOX_PORT" > "$RUN_DIR/logs/sandbox.log" 2>&1 &
SANDBOX_PID=$!
"$PYTHON" - "$SANDBOX_BASE" <<'EOF'
import sys, time, urllib.request
deadline = time.time() + 60
while True:
    try:
        urllib.request.urlopen(sys.argv[1] + "/v1/ping", timeout=2).read()
        break
    except OSError:
        if time.time() > deadline:
            sys.exit(f"error: the sandbox at {sys.argv[1]} did not answer within 60 s (see logs/sandbox.log)")
        time.sleep(0.3)
EOF
echo "==> sandbox ready at $SANDBOX_BASE ($(grep -m1 -io 'isolation[^,]*' "$RUN_DIR/logs/sandbox.log" || true))"

stage sft "$REPO_DIR/scripts/launch.sh" sft +smoke=sft "${SFT_EXTRA[@]}"

SFT_CKPT="$RUN_DIR/checkpoints/sft"
SFT_STEP="$(cat "$SFT_CKPT/latest_checkpointed_iteration.txt")"
export RETOOL_SFT_MODEL="$RUN_DIR/sft_merged"
stage merge "$PYTHON" -m verl.model_merger merge --backend fsdp \
  --local_dir "$SFT_CKPT/global_step_$SFT_STEP" --target_dir "$RETOOL_SFT_MODEL"

stage rl "$REPO_DIR/scripts/launch.sh" rl +smoke=rl "$@"

curl -fsS "$SANDBOX_BASE/health" > "$RUN_DIR/sandbox_health.json" || echo "warning: sandbox /health did not answer" >&2
"$PYTHON" -m retool.smoke.summary --run-dir "$RUN_DIR"
"$PYTHON" -m retool.report --logdir "$RUN_DIR/tensorboard" --output "$RUN_DIR/report"
