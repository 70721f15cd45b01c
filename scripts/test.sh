#!/usr/bin/env bash
# The test suite (tests start and stop their own redis-server on a free loopback port).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/ruff check .
.venv/bin/python -m pytest "$@"
