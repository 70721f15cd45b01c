#!/usr/bin/env bash
# Installs what the project needs, idempotently: Debian's redis-server, a virtualenv with the
# pinned Python packages, and Delta's JVM jars (the plugin's own download, into the user's cache).
set -euo pipefail
cd "$(dirname "$0")/.."

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

if ! command -v redis-server >/dev/null; then
  echo "Installing redis-server (Debian)"
  as_root apt-get update -qq
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq redis-server >/dev/null
fi
if ! command -v chromium >/dev/null; then
  echo "Installing chromium (Debian; headless, opens the explain report in the tests)"
  as_root apt-get update -qq
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq chromium >/dev/null
fi
if ! command -v openssl >/dev/null; then
  echo "Installing openssl (Debian; the TLS tests make their certificates with it)"
  as_root apt-get update -qq
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq openssl >/dev/null
fi
command -v java >/dev/null || { echo "Java 17+ is needed by Spark" >&2; exit 1; }

stamp=".venv/.installed-$(sha1sum pyproject.toml | cut -c1-12)"
if [ ! -f "$stamp" ]; then
  echo "Installing Python packages into .venv"
  [ -x .venv/bin/python ] || python3 -m venv .venv
  .venv/bin/pip install -q --upgrade pip
  .venv/bin/pip install -q -e ".[test,docs]"
  rm -f .venv/.installed-*; touch "$stamp"
fi

# Delta Lake's jars: a no-op once they are in the cache, one line when it downloads them.
.venv/bin/python feast_stream_backfill/jars.py >/dev/null

if [ ! -f tests/conformance/lib/.complete ]; then
  echo "Fetching Apache Flink's jars from Maven Central (tests/conformance)"
  mvn -q -B -f tests/conformance/pom.xml dependency:copy-dependencies
  touch tests/conformance/lib/.complete
fi
