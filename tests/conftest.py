from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import pytest
import redis
from feast.repo_config import load_repo_config
from feast.repo_operations import apply_total
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from feast_stream_backfill.spark import DEFAULT_CONF, get_spark

# Every Spark JVM the tests start, here or in a `feast` subprocess, reads these defaults.
os.environ["SPARK_CONF_DIR"] = str(Path(__file__).resolve().parent / "spark_conf")


def pytest_terminal_summary(terminalreporter) -> None:
    """How many cases each strategy was checked against the simulator on, when any were."""
    differential = sys.modules.get("tests.test_differential")
    if differential is not None and differential.CHECKED:
        cases = ", ".join(f"{name} {n}" for name, n in sorted(differential.CHECKED.items()))
        terminalreporter.write_line(f"differential cases per strategy: {cases}")


#: The files that take longest, longest first (the sums of their tests' phases in
#: ``bash scripts/test.sh --durations=120``, and each file run alone). scripts/test.sh hands
#: whole files to two processes in collection order (``--dist loadfile
#: --no-loadscope-reorder``): a long file handed out last kept one process busy alone at the
#: end, so these go out first.
SLOWEST_FILES = (
    "test_install.py",
    "test_differential_unsorted.py",
    "test_differential.py",
    "test_hostile_input.py",
    "test_sql_views.py",
    "test_differential_hypothesis.py",
    "test_feast_integration.py",
    "test_faults.py",
    "test_explain_cli.py",
    "test_enrichment_differential.py",
    "test_idleness.py",
    "test_materialize.py",
    "test_flink_sql_conformance.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The files of ``SLOWEST_FILES`` first, in its order; the others after, as collected."""
    rank = {name: i for i, name in enumerate(SLOWEST_FILES)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))


#: Two cores: a task per core (more partitions of a few rows each only add tasks).
SHUFFLE_PARTITIONS = "2"


@pytest.fixture(scope="session")
def spark() -> SparkSession:
    """The suite's session. A bare one Feast started in this process (it does when it builds a
    ``mode="spark"`` view with a udf, as a test file run earlier here may) is stopped first, as
    the plugin's ``spark_for`` does: ``get_spark`` would hand it over without Delta Lake."""
    active = SparkSession.getActiveSession()
    delta = DEFAULT_CONF["spark.sql.extensions"]
    if active is not None and delta not in active.conf.get("spark.sql.extensions", ""):
        active.stop()
    return get_spark(
        {"spark.sql.shuffle.partitions": SHUFFLE_PARTITIONS, "spark.default.parallelism": "2"}
    )


@pytest.fixture(autouse=True)
def _shuffle_partitions_restored():
    """A feature repo's ``spark_conf`` is applied to the shared session (feature_repo/ asks
    for 16 partitions): put it back after the test so later tests do not run 16 tasks a
    shuffle on a few rows (the tests run without adaptive coalescing)."""
    yield
    active = SparkSession.getActiveSession()
    if active is not None and active.conf.get("spark.sql.shuffle.partitions") != SHUFFLE_PARTITIONS:
        active.conf.set("spark.sql.shuffle.partitions", SHUFFLE_PARTITIONS)


#: What tests/spark_conf/ switches off, as Spark ships it and users run it.
SPARK_AS_SHIPPED = {
    "spark.sql.codegen.wholeStage": "true",
    "spark.sql.codegen.factoryMode": "FALLBACK",
    "spark.sql.adaptive.enabled": "true",
}


@pytest.fixture
def spark_as_shipped(spark: SparkSession) -> SparkSession:
    """The shared session with generated code and adaptive plans on, for one test: the
    suite's defaults switch them off to save compile time, so a few cases prove that what
    users run gives the same logs."""
    before = {name: spark.conf.get(name) for name in SPARK_AS_SHIPPED}
    for name, value in SPARK_AS_SHIPPED.items():
        spark.conf.set(name, value)
    yield spark
    for name, value in before.items():
        spark.conf.set(name, value)


def archive(spark: SparkSession, rows: list[tuple], key: str = "user") -> DataFrame:
    """An archived topic from ``(partition, offset, event_time_ms, key, amount)`` tuples."""
    df = spark.createDataFrame(
        rows, f"partition int, offset long, et long, {key} string, amount double"
    )
    return df.withColumn("event_time", F.timestamp_millis("et")).drop("et")


def collect_log(result, extra: Sequence[str] = ()) -> tuple[list[tuple], dict[tuple, int]]:
    """A backfill's emissions and dropped counts in the simulator's shape (times in ms); the
    ``extra`` feature columns are appended to each emission (features the simulator lacks)."""
    ms = F.unix_millis
    emissions = [
        tuple(r)
        for r in result.emissions.select(
            "user",
            ms("window_start"),
            ms("window_end"),
            ms("emit_time"),
            "emit_sequence",
            "firing",
            "record_count",
            "sum",
            "min",
            "max",
            *extra,
        ).collect()
    ]
    return emissions, dropped_per_start(result.dropped, "user")


def dropped_per_start(dropped: DataFrame, key: Column | str) -> dict[tuple, int]:
    """The dropped records per (key, window start), the simulator's shape: a start's windows
    summed (cumulative windows share their start)."""
    per_start: dict[tuple, int] = {}
    for r in dropped.select(key, F.unix_millis("window_start"), "dropped_count").collect():
        per_start[(r[0], r[1])] = per_start.get((r[0], r[1]), 0) + r[2]
    return per_start


def feature_store_yaml(project: str, redis_server: str, registry: str = "data/registry.db") -> str:
    """A feature repo's ``feature_store.yaml``: the plugin's offline store and compute engine,
    a real redis-server online; ``registry``: its YAML value (Feast's file registry by
    default)."""
    return f"""project: {project}
provider: local
registry: {registry}
entity_key_serialization_version: 3
online_store: {{type: redis, connection_string: "{redis_server}"}}
offline_store:
  type: feast_stream_backfill.feast_plugin.offline_store.StreamBackfillOfflineStore
batch_engine:
  type: feast_stream_backfill.feast_plugin.compute_engine.StreamBackfillComputeEngine
"""


@pytest.fixture
def make_archive(spark):
    return lambda rows, key="user": archive(spark, rows, key)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def redis_server():
    """A real redis-server on a free loopback port, for the whole session: ``host:port``."""
    exe = shutil.which("redis-server")
    if exe is None:
        pytest.fail("redis-server is not installed: run scripts/setup.sh (installs Debian's)")
    port = _free_port()
    proc = subprocess.Popen(
        [exe, "--bind", "127.0.0.1", "--port", str(port), "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
    )
    client = redis.Redis(host="127.0.0.1", port=port)
    deadline = time.monotonic() + 20
    while True:
        try:
            client.ping()
            break
        except redis.ConnectionError:
            if time.monotonic() > deadline or proc.poll() is not None:
                proc.kill()
                pytest.fail(f"redis-server did not start on 127.0.0.1:{port}")
            time.sleep(0.05)
    yield f"127.0.0.1:{port}"
    proc.terminate()
    proc.wait(timeout=10)


def apply_in_process(path: Path, *, validate_sources: bool = False) -> None:
    """``feast apply`` of the repo at ``path`` in this process: the command's own code on the
    tests' Spark session, without a second JVM; its ``features`` module is forgotten after, as
    other tests import their own."""
    config = load_repo_config(path, path / "feature_store.yaml")
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(path)
        patch.syspath_prepend(str(path))
        try:
            apply_total(config, path, skip_source_validation=not validate_sources)
        finally:
            sys.modules.pop("features", None)
