#!/usr/bin/env bash
# Installs what the project needs, idempotently: Debian's redis-server, chromium and openssl
# (for the tests), a virtualenv .venv with the package (editable) and its pinned dependencies,
# Delta Lake's jars (the plugin's own download into the user's cache, as for any user of the
# package) and Apache Flink's jars for tests/conformance (Maven). Prints only what it installs.
set -euo pipefail
cd "$(dirname "$0")/.."

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
# Runs a command silently; on failure shows its output and fails.
quietly() {
  local log status=0
  log=$(mktemp)
  "$@" >"$log" 2>&1 || status=$?
  [ "$status" = 0 ] || cat "$log" >&2
  rm -f "$log"
  return "$status"
}
apt_install() {
  quietly as_root apt-get update -qq
  quietly as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@"
}

if ! command -v redis-server >/dev/null; then
  echo "Installing redis-server (Debian)"
  apt_install redis-server
fi
if ! command -v chromium >/dev/null; then
  echo "Installing chromium (Debian; headless, opens the explain report in the tests)"
  apt_install chromium
fi
if ! command -v openssl >/dev/null; then
  echo "Installing openssl (Debian; the TLS tests make their certificates with it)"
  apt_install openssl
fi
command -v java >/dev/null || { echo "Java 17+ is needed by Spark" >&2; exit 1; }

stamp=".venv/.installed-$(sha1sum pyproject.toml | cut -c1-12)"
if [ ! -f "$stamp" ]; then
  echo "Installing Python packages into .venv"
  [ -x .venv/bin/python ] || python3 -m venv .venv
  .venv/bin/pip install -q --upgrade pip
  # Without the filter setuptools adds a boxed notice to every editable install (nothing to do).
  PYTHONWARNINGS="ignore:Editable installation" .venv/bin/pip install -q -e ".[test,docs]"
  rm -f .venv/.installed-*; touch "$stamp"
fi

# Delta Lake's jars: a no-op once they are in the cache, one line when it downloads them.
.venv/bin/python feast_stream_backfill/jars.py >/dev/null

if [ ! -f tests/conformance/lib/.complete ]; then
  echo "Fetching Apache Flink's jars from Maven Central (tests/conformance)"
  command -v mvn >/dev/null || { echo "Maven (mvn) is needed for tests/conformance" >&2; exit 1; }
  quietly mvn -q -B -f tests/conformance/pom.xml dependency:copy-dependencies
  touch tests/conformance/lib/.complete
fi
