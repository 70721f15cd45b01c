#!/usr/bin/env bash
# The test suite (tests start and stop their own redis-server on a free loopback port), in two
# processes, a test file each at a time (a file's fixtures stay in one process): most tests wait
# on JVM starts and small Spark jobs, so two at once take about 13 min where one took 16-17.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/ruff check .
.venv/bin/python -m pytest -n 2 --dist loadfile "$@"
