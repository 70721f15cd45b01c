#!/usr/bin/env bash
# The demo, end to end on the embedded defaults (local Spark, Delta, a local redis-server).
# DEMO_RECORDS=200000 scripts/demo.sh for a quicker run.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh

port=$(.venv/bin/python -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
redis-server --bind 127.0.0.1 --port "$port" --save "" --appendonly no >/dev/null &
redis_pid=$!
trap 'kill $redis_pid 2>/dev/null || true' EXIT
export FSB_REDIS="127.0.0.1:$port"
for _ in $(seq 100); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done

.venv/bin/python -m examples.demo "$@"
