#!/usr/bin/env bash
# A real Spark standalone cluster on 127.0.0.1 from the installed pyspark: one master, one
# worker, each its own JVM (executors are separate processes from the driver, as on a cluster).
#
#   scripts/spark_cluster.sh start [CORES] [MEMORY]   # prints the master URL (spark://...)
#   scripts/spark_cluster.sh stop
#   scripts/spark_cluster.sh url
#
# Then point anything at it: `--master "$(scripts/spark_cluster.sh url)"` for the benches, or
# `spark_conf: {spark.master: spark://127.0.0.1:PORT}` in feature_store.yaml for Feast.
# State (pids, logs, work dirs) lives in .spark-cluster/ (git-ignored).
set -euo pipefail
cd "$(dirname "$0")/.."
STATE=.spark-cluster
PY=.venv/bin/python
SPARK_HOME=$($PY -c "import os, pyspark; print(os.path.dirname(pyspark.__file__))")
export SPARK_HOME SPARK_LOCAL_IP=127.0.0.1 PYSPARK_PYTHON="$PWD/$PY"

free_port() { $PY -c "import socket; s=socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])"; }

daemon() {  # daemon NAME CLASS ARGS...: runs a Spark daemon in the background, pid in STATE
  local name=$1; shift
  nohup "$SPARK_HOME/bin/spark-class" "$@" >"$STATE/$name.log" 2>&1 &
  echo $! >"$STATE/$name.pid"
}

wait_for() {  # wait_for FILE PATTERN WHAT: the daemon logged PATTERN, or fail with its log
  for _ in $(seq 120); do
    grep -q "$2" "$1" 2>/dev/null && return 0
    sleep 0.5
  done
  echo "spark_cluster: $3 did not come up; its log ($1):" >&2
  tail -20 "$1" >&2
  exit 1
}

start() {
  local cores=${1:-$(nproc)} memory=${2:-4g}
  if [ -f "$STATE/url" ] && kill -0 "$(cat "$STATE/master.pid")" 2>/dev/null; then
    cat "$STATE/url"
    return
  fi
  mkdir -p "$STATE/work"
  local port ui
  port=$(free_port)
  ui=$(free_port)
  daemon master org.apache.spark.deploy.master.Master \
    --host 127.0.0.1 --port "$port" --webui-port "$ui"
  wait_for "$STATE/master.log" "I have been elected leader" "the master"
  daemon worker org.apache.spark.deploy.worker.Worker "spark://127.0.0.1:$port" \
    --host 127.0.0.1 --cores "$cores" --memory "$memory" --webui-port "$(free_port)" \
    --work-dir "$PWD/$STATE/work"
  wait_for "$STATE/worker.log" "Successfully registered with master" "the worker"
  echo "spark://127.0.0.1:$port" | tee "$STATE/url"
}

stop() {
  for name in worker master; do
    if [ -f "$STATE/$name.pid" ]; then
      kill "$(cat "$STATE/$name.pid")" 2>/dev/null || true
      rm -f "$STATE/$name.pid"
    fi
  done
  rm -f "$STATE/url"
}

case "${1:-}" in
  start) shift; start "$@" ;;
  stop) stop ;;
  url) cat "$STATE/url" ;;
  *) echo "usage: $0 start [CORES] [MEMORY] | stop | url" >&2; exit 2 ;;
esac
