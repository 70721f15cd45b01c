#!/usr/bin/env bash
# The test suite (tests start and stop their own redis-server on a free loopback port), in two
# processes, a test file each at a time (a file's fixtures stay in one process): most tests wait
# on JVM starts and small Spark jobs, so two at once overlap the waits. The files go out in
# collection order, where tests/conftest.py puts the longest first (SLOWEST_FILES), so that
# both processes finish together; xdist's own order (most tests first) handed out the file that
# builds and installs the wheel (minutes, in one test) 34th of 54.
# Before it: the linter, and the docs site built strictly (a broken link or a page missing from
# the nav fails), into a temporary directory.
# tests/test_install.py needs PyPI and Maven Central: it builds the wheel, pip-installs it into a
# fresh virtualenv and runs a feature repo with it.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/ruff check .
site=$(mktemp -d)
trap 'rm -rf "$site"' EXIT
NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs build --strict -d "$site" 2>&1 | { grep -v '^INFO' || true; }
.venv/bin/python -m pytest -n 2 --dist loadfile --no-loadscope-reorder "$@"
