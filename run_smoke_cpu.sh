#!/usr/bin/env bash
# The whole ReTool recipe in miniature on a CPU: the same verl, vLLM, Ray, configs and code paths as the NPU run,
# with a tiny Qwen3 (pre-trained to copy digits and call the tool: assets/smoke_model) and a synthetic tool task.
# Stages: build assets -> start the embedded sandbox -> SFT -> merge to Hugging Face format -> GRPO with real
# tool calls on the correctness-only reward (validation on synthetic + an AIME 2025 slice) -> summary. One run
# folder holds logs, resolved configs, TensorBoard events of both stages and summary.{json,md}.
#   ./run_smoke_cpu.sh                 # RUN_DIR=runs/smoke-<time>
#   DRY_RUN=1 ./run_smoke_cpu.sh       # print both resolved verl configs and exit
#   VERBOSE=1 ./run_smoke_cpu.sh       # verl's whole output on the console (it is in logs/<stage>.log either way)
#   SHAKEDOWN=1 ./run_smoke_cpu.sh     # the shakedown of the smoke's config (SFT 5 steps, merge and load, RL step 1,
#                                      # a relaunch resuming from it for step 2), then its checklist (retool-shakedown)
# Extra arguments are Hydra overrides for the RL stage; SFT_ARGS="k=v ..." for the SFT stage; SANDBOX_ARGS="--slots 4
# ..." for the smoke's `retool-sandbox serve`.
set -euo pipefail
# The whole script is one function, read before it runs: editing this file (a `git pull`) while a run is
# going cannot change what the running launch does next.
main() {
REPO_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
export PYTHONSAFEPATH=1  # the launch folder stays off sys.path for the sandbox and helpers too (scripts/launch.sh)
export DEVICE=cpu
export RETOOL_RUN_KIND=smoke  # logs/launches.jsonl: retool-shakedown asks a smoke for everything but a resume
# The improved profile by default: one prompt shape for SFT and RL, which a tiny model needs (retool/smoke/build.py).
export PROFILE="${PROFILE:-improved}"
PYTHON="${PYTHON:-$REPO_DIR/.venv/bin/python}"
[[ -x "$PYTHON" ]] || { echo "error: $PYTHON not found; run 'make setup' (or 'make smoke')" >&2; exit 1; }
read -r -a SFT_EXTRA <<< "${SFT_ARGS:-}"
read -r -a SANDBOX_EXTRA <<< "${SANDBOX_ARGS:-}"

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

SANDBOX_PORT="${SANDBOX_PORT:-$("$PYTHON" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')}"
SANDBOX_BASE="http://127.0.0.1:$SANDBOX_PORT"
export RETOOL_SANDBOX_URL="$SANDBOX_BASE/run_code"
"$PYTHON" -m retool_sandbox serve --host 127.0.0.1 --port "$SANDBOX_PORT" "${SANDBOX_EXTRA[@]}" \
  > "$RUN_DIR/logs/sandbox.log" 2>&1 &
SANDBOX_PID=$!
"$PYTHON" - "$SANDBOX_BASE" <<'EOF'
import sys, time, urllib.request
from retool_sandbox.client import SandboxClient, SandboxUnreachable
deadline = time.time() + 60
while True:
    try:
        urllib.request.urlopen(sys.argv[1] + "/v1/ping", timeout=2).read()
        break
    except OSError:
        if time.time() > deadline:
            sys.exit(f"error: the sandbox at {sys.argv[1]} did not answer within 60 s (see logs/sandbox.log)")
        time.sleep(0.3)
try:  # it answers while its slots still start: wait until /health says it is ready
    SandboxClient(sys.argv[1]).wait_ready()
except SandboxUnreachable as exc:
    sys.exit(f"error: {exc} (see logs/sandbox.log)")
EOF
echo "==> sandbox ready at $SANDBOX_BASE ($(grep -m1 -io 'isolation[^,]*' "$RUN_DIR/logs/sandbox.log" || true))"
# The RL stage refuses a sandbox weaker than bubblewrap: say so now, with the fix, not after assets, SFT and merge.
"$PYTHON" -m retool.sandbox_gate "$RETOOL_SANDBOX_URL" || {
  echo "error: the smoke stops before its first stage: its RL stage would refuse this sandbox ($RUN_DIR/logs/sandbox.log" \
       "says why each stronger tier failed); fix it as above and run the smoke again" >&2
  exit 1; }

stage assets "$PYTHON" -m retool.smoke.build --out "$ASSETS" --aime-rows "${SMOKE_AIME_ROWS:-8}" --rl-val-rows 64 --profile "$PROFILE"

stage sft "$REPO_DIR/scripts/launch.sh" sft +smoke=sft "${SFT_EXTRA[@]}"

export RETOOL_SFT_MODEL="$RUN_DIR/sft_merged"
# verl's merger (its output in logs/merge.log), then the merge loaded as RL will load it (logs/merge.json); a
# shakedown's SFT launch has done both already.
[[ "${SHAKEDOWN:-0}" == 1 ]] || stage merge "$PYTHON" -m retool.shakedown.merge --run-dir "$RUN_DIR"

stage rl "$REPO_DIR/scripts/launch.sh" rl +smoke=rl "$@"

curl -fsS "$SANDBOX_BASE/health" > "$RUN_DIR/sandbox_health.json" || echo "warning: sandbox /health did not answer" >&2
if [[ "${SHAKEDOWN:-0}" == 1 ]]; then  # no learning to summarise in 2 steps: the checklist is the verdict
  "$PYTHON" -m retool.shakedown "$RUN_DIR"  # exits 1 when a line fails
  exit 0
fi
"$PYTHON" -m retool.smoke.summary --run-dir "$RUN_DIR" --brief  # the verdicts; all of it in summary.md
"$PYTHON" -m retool.report --logdir "$RUN_DIR/tensorboard" --output "$RUN_DIR/report"
}
main "$@"
exit "$?"
