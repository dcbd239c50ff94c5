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

stop_pid() {
  local f=$state/$1.pid
  if [[ -f $f ]] && kill -0 "$(cat "$f")" 2>/dev/null; then
    kill -- "-$(cat "$f")" 2>/dev/null || kill "$(cat "$f")"
    for _ in $(seq 50); do kill -0 "$(cat "$f")" 2>/dev/null || break; sleep 0.2; done
    echo "stopped $1 (pid $(cat "$f"))"
  fi
  rm -f "$f"
}

case $action in
stop)
  stop_pid worker
  stop_pid server
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
