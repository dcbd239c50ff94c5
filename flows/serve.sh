#!/usr/bin/env bash
# `make serve` / `make stop`: a self-hosted Prefect server on 127.0.0.1, the process work pool
# `realm-local`, every deployment of prefect.yaml, and one worker. PIDs and logs: work/serve/.
set -euo pipefail
cd "$(dirname "$0")/.."
action=${1:-start}
port=${2:-4200}
bin=.venv/bin
state=${REALM_WORK_DIR:-$PWD/work}/serve
mkdir -p "$state"
export REALM_PROJECT_DIR=$PWD
export PREFECT_HOME=${REALM_WORK_DIR:-$PWD/work}/prefect-server
export PREFECT_SERVER_ANALYTICS_ENABLED=false
export PREFECT_API_URL=http://127.0.0.1:$port/api
mkdir -p "$PREFECT_HOME"
# where the nightly grow-knowledge deployment reads documents from (flows/knowledge.py)
mkdir -p "${REALM_WORK_DIR:-$PWD/work}/documents"

# A process counts as running unless it is gone or a zombie (nothing may reap it here).
running() { local st; st=$(ps -o stat= -p "$1" 2>/dev/null) && [[ $st != Z* ]]; }
# The process, everything in its process group and session (flow runs the worker started), and
# every descendant that left them.
family() {
  local p
  echo "$1"; pgrep -g "$1" 2>/dev/null || true; pgrep -s "$1" 2>/dev/null || true
  for p in $(pgrep -P "$1" 2>/dev/null); do family "$p"; done
}
alive_of() { local p; for p in "$@"; do running "$p" && echo "$p"; done | sort -un; }

# SIGTERM to the whole family, 10 s grace, then SIGKILL to whatever is left; says what happened
# and fails if anything still runs.
stop_pid() {
  local f=$state/$1.pid pid pids left
  [[ -f $f ]] || return 0
  pid=$(cat "$f")
  if ! running "$pid"; then
    echo "$1 (pid $pid) was not running"; rm -f "$f"; return 0
  fi
  pids=$(family "$pid" | sort -un)
  kill -TERM -- "-$pid" 2>/dev/null || true
  kill -TERM $pids 2>/dev/null || true
  for _ in $(seq 50); do
    left=$(alive_of $pids)
    [[ -z $left ]] && break
    sleep 0.2
  done
  if [[ -n $left ]]; then
    kill -KILL -- "-$pid" 2>/dev/null || true
    kill -KILL $left 2>/dev/null || true
    sleep 0.5
    echo "$1 (pid $pid): $(wc -w <<<"$left") process(es) ignored SIGTERM for 10 s and were killed"
  fi
  left=$(alive_of $pids)
  if [[ -n $left ]]; then
    echo "could not stop $1: pids $(tr '\n' ' ' <<<"$left")still running" >&2
    return 1
  fi
  echo "stopped $1 (pid $pid, $(wc -w <<<"$pids") process(es))"
  rm -f "$f"
}

case $action in
stop)
  status=0
  stop_pid worker || status=1
  stop_pid server || status=1
  exit $status
  ;;
start)
  if [[ -f $state/server.pid ]] && kill -0 "$(cat "$state/server.pid")" 2>/dev/null; then
    echo "a server is already running (pid $(cat "$state/server.pid")); make stop first" >&2
    exit 1
  fi
  # Bound to loopback only, never 0.0.0.0.
  setsid "$bin/prefect" server start --host 127.0.0.1 --port "$port" >"$state/server.log" 2>&1 &
  echo $! >"$state/server.pid"
  for _ in $(seq 120); do
    curl -sf "$PREFECT_API_URL/health" >/dev/null && break
    kill -0 "$(cat "$state/server.pid")" 2>/dev/null || { cat "$state/server.log" >&2; exit 1; }
    sleep 1
  done
  curl -sf "$PREFECT_API_URL/health" >/dev/null || { echo "server did not come up; see $state/server.log" >&2; exit 1; }
  "$bin/prefect" work-pool create realm-local --type process --overwrite >/dev/null
  "$bin/prefect" --no-prompt deploy --all
  setsid "$bin/prefect" worker start --pool realm-local --name realm-worker >"$state/worker.log" 2>&1 &
  echo $! >"$state/worker.pid"
  printf 'export PREFECT_API_URL=%s\nexport PREFECT_HOME=%s\n' "$PREFECT_API_URL" "$PREFECT_HOME" >"$state/env.sh"
  cat <<MSG

Prefect UI:  http://127.0.0.1:$port
Run the pipeline:
  source $state/env.sh
  .venv/bin/prefect deployment run realm/full-pipeline
Stop:        make stop      (logs in $state/)
MSG
  ;;
*) echo "usage: serve.sh start|stop [port]" >&2; exit 2 ;;
esac
