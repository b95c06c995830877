#!/usr/bin/env bash
# Keeps `retool-sandbox serve` up on this node for a days-long run: starts it again whenever it exits (a crash, an
# out-of-memory kill, a kill by hand), after RESTART_PAUSE_S seconds (2). The training rides the gap out: the tool
# retries a call it got no answer for within its reconnect budget (reconnect_budget_s, 60 s by default).
#
#   nohup scripts/keep_sandbox_up.sh --host 127.0.0.1 --port 8080 >> runs/sandbox.log 2>&1 &
#
# Arguments go to `retool-sandbox serve` as they are. SIGTERM, SIGINT or SIGHUP to this script stop the server and
# then the script. Each restart is logged with its time and the exit status it follows. Where systemd runs, a unit
# with `Restart=always` does the same (docs/troubleshooting.md, "Keeping the sandbox up").
set -u

SANDBOX=${RETOOL_SANDBOX_BIN:-retool-sandbox}
PAUSE=${RESTART_PAUSE_S:-2}
server=
restarts=0

stop() {
  if [ -n "$server" ]; then
    kill -TERM "$server" 2>/dev/null
    wait "$server" 2>/dev/null
  fi
  echo "[keep_sandbox_up] $(date -u +%FT%TZ) stopped after $restarts restarts" >&2
  exit 0
}
trap stop TERM INT HUP

while :; do
  "$SANDBOX" serve "$@" &
  server=$!
  echo "[keep_sandbox_up] $(date -u +%FT%TZ) started retool-sandbox serve, pid $server" >&2
  wait "$server"
  status=$?
  server=
  restarts=$((restarts + 1))
  echo "[keep_sandbox_up] $(date -u +%FT%TZ) retool-sandbox serve exited with status $status; restart $restarts" \
       "in ${PAUSE} s" >&2
  sleep "$PAUSE" &
  wait $!
done
