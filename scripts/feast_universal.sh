#!/usr/bin/env bash
# Feast 0.67.0's own universal offline-store tests (sdk/python/tests/integration/offline_store)
# against this plugin's offline store and compute engine, on demand (not in CI: too slow).
#
#   bash scripts/feast_universal.sh [pytest args...]     e.g. -x, -k historical, -n 2
#
# Feast's tests are not in its PyPI sdist, so they come from Feast's git repository at FEAST_REF
# (default v0.67.0): FEAST_GIT is its URL (default GitHub; a shallow sparse clone) or a local git
# directory (read with git archive). Only sdk/python/tests and sdk/python/pytest.ini are used, so
# the installed feast==0.67.0 is what the tests import. They run in a separate virtualenv
# (.venv-feast-universal: feast[test,grpcio]==0.67.0 and this plugin, editable) with a local
# redis-server on a free loopback port instead of containers. Exclusions, each with its reason:
# tests/feast_universal/exclusions.txt.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
FEAST_GIT=${FEAST_GIT:-https://github.com/feast-dev/feast}
FEAST_REF=${FEAST_REF:-v0.67.0}
work=$repo/.feast-universal
venv=$repo/.venv-feast-universal

bash scripts/setup.sh   # redis-server, Java check, Delta's jars

ref=$FEAST_REF   # a local repository's ref is cached by its commit, so a moved branch refetches
[ -d "$FEAST_GIT" ] && ref=$(git -C "$FEAST_GIT" rev-parse "$FEAST_REF^{commit}")
src=$work/$(echo "$ref" | tr -c 'A-Za-z0-9._\n-' _)
if [ ! -f "$src/.complete" ]; then
  echo "Fetching Feast's tests at $FEAST_REF from $FEAST_GIT"
  rm -rf "$src"; mkdir -p "$src"
  if [ -d "$FEAST_GIT" ]; then
    git -C "$FEAST_GIT" archive "$ref" sdk/python/tests sdk/python/pytest.ini | tar -x -C "$src"
    echo "$ref" > "$src/.commit"
  else
    git clone -q --depth 1 --branch "$FEAST_REF" --filter=blob:none --sparse "$FEAST_GIT" "$src/clone"
    git -C "$src/clone" sparse-checkout set sdk/python/tests
    git -C "$src/clone" rev-parse HEAD > "$src/.commit"
    mv "$src/clone/sdk" "$src/sdk"; rm -rf "$src/clone"
  fi
  touch "$src/.complete"
fi

stamp="$venv/.installed-$(sha1sum pyproject.toml | cut -c1-12)"
if [ ! -f "$stamp" ]; then
  echo "Installing feast[test,grpcio]==0.67.0 and this plugin into $venv"
  [ -x "$venv/bin/python" ] || python3 -m venv "$venv"
  "$venv/bin/pip" install -q --upgrade pip
  "$venv/bin/pip" install -q "feast[test,grpcio]==0.67.0" -e .
  rm -f "$venv"/.installed-*; touch "$stamp"
fi

port=$("$venv/bin/python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
redis-server --bind 127.0.0.1 --port "$port" --save "" --appendonly no >/dev/null &
redis_pid=$!
trap 'kill "$redis_pid" 2>/dev/null || true' EXIT
for _ in $(seq 50); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done

dirty=$(git diff --quiet HEAD -- feast_stream_backfill || echo " + uncommitted changes")
echo "Feast tests $FEAST_REF (commit $(cat "$src/.commit")), plugin $(git rev-parse --short HEAD)$dirty"
cd "$src/sdk/python"
FEAST_IS_LOCAL_TEST=True \
FULL_REPO_CONFIGS_MODULE=stream_backfill_repo_configuration \
FSB_REDIS="127.0.0.1:$port" \
PYTHONPATH="$repo/tests/feast_universal" \
  "$venv/bin/python" -m pytest -c pytest.ini tests/integration/offline_store --integration -n 0 \
    -p stream_backfill_exclusions --exclusions "$repo/tests/feast_universal/exclusions.txt" \
    -p no:cacheprovider --show-capture=no "$@"
