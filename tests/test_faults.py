"""Faults, with the real parts: a Redis that fills up, two materializations at once, an archive
that gains a Delta version while a backfill reads it, the driver killed while it writes the
emission log (on demand, ``FSB_FRESH_PROCESS_TESTS=1``: a driver process of its own). (A Redis
killed mid-materialize: ``test_materialize``; an executor killed mid-backfill on a Spark
cluster: ``bench/executor_fault.py``, on demand.)

The Feast repository (:mod:`tests.bulk_repo`): ``USERS`` users with one record each in one
1-minute window, so each view writes one Redis key per user.
"""

from __future__ import annotations

import importlib
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
import redis
from delta.tables import DeltaTable
from feast import FeatureStore
from pyspark.sql import functions as F

from feast_stream_backfill import (
    Aggregation,
    ArchivedTopic,
    StreamJob,
    TumblingWindows,
    WatermarkStrategy,
)
from feast_stream_backfill.emission_store import ensure_emission_log, fingerprint, stored_metadata
from feast_stream_backfill.feast_plugin.online_writer import OnlineStoreWriteError
from tests.bulk_repo import END, START, make_repo
from tests.test_materialize import RedisServer

USERS = 3_000


def store_on(repo: Path, address: str) -> FeatureStore:
    """The repository's store writing to the Redis at ``address`` (read when it is opened)."""
    os.environ["FSB_REDIS"] = address
    return FeatureStore(repo_path=str(repo))


@pytest.fixture(scope="module")
def repo(tmp_path_factory, spark) -> Path:
    """Feast's SQL registry (SQLite): materializations at once each record their interval, and
    Feast's file registry does not support concurrent writers (feast-dev/feast#2176)."""
    path = tmp_path_factory.mktemp("faults_repo")
    os.environ["FSB_REDIS"] = "127.0.0.1:1"  # apply does not connect
    registry = f'{{registry_type: sql, path: "sqlite:///{path}/data/registry.sqlite"}}'
    make_repo(spark, path, USERS, "faults", registry)
    assert (path / "data" / "registry.sqlite").exists()
    assert not (path / "data" / "registry.db").exists()
    return path


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """A redis-server of the module's own (databases: one per outcome compared)."""
    server = RedisServer(tmp_path_factory.mktemp("faults_redis"))
    yield server
    server.stop()


def dump(server: RedisServer, db: int) -> dict[bytes, dict[bytes, bytes]]:
    """Every key of database ``db`` with every field and its bytes."""
    reader = redis.Redis(host="127.0.0.1", port=server.port, db=db, **server.client_options)
    return {k: reader.hgetall(k) for k in sorted(reader.keys())}


def test_a_full_redis_fails_the_command_naming_the_store_and_the_keys_written(repo, tmp_path):
    """``maxmemory`` about 300 kB above an empty Redis, ``noeviction``: the keys that fit are
    written, the rest refused (``OOM``); the error names the store and counts exactly the keys
    written, and no interval is recorded as materialized."""
    full = RedisServer(tmp_path / "full", "--maxmemory-policy", "noeviction")
    try:
        used = full.client.info("memory")["used_memory"]
        full.client.config_set("maxmemory", used + 300_000)
        store = store_on(repo, full.address)
        with pytest.raises(OnlineStoreWriteError) as failed:
            store.materialize(START, END, ["spend"])
        message = str(failed.value)
        keys = full.client.dbsize()
        assert 0 < keys < USERS, keys
        assert f"writing 'spend' to the online store at '{full.address}' failed part-way" in (
            message
        )
        assert "OOM command not allowed when used memory > 'maxmemory'" in message
        reported = int(re.search(r"at least ([\d,]+) keys", message)[1].replace(",", ""))
        assert reported == keys, message
        assert (
            store_on(repo, full.address).get_stream_feature_view("spend").materialization_intervals
            == []
        )
    finally:
        full.stop()


def materialize_at_once(repo: Path, address: str, views: list[list[str]]) -> None:
    """One ``materialize`` per entry of ``views``, each from its own thread and store, started
    together; every one must succeed."""
    stores = [store_on(repo, address) for _ in views]
    errors: list[BaseException] = []
    start = threading.Barrier(len(views))

    def run(store: FeatureStore, names: list[str]) -> None:
        start.wait()
        try:
            store.materialize(START, END, names)
        except BaseException as exc:  # reported below, in the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=run, args=pair) for pair in zip(stores, views, strict=True)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(600)
    assert not errors, errors


def test_materializations_at_once_leave_redis_as_one_run(repo, server, caplog):
    """Two runs of one view at once, from a cold cache: both backfill and both commit the
    emission log (Delta refuses the later commit of two at once; the plugin writes again, same
    content), then both write Redis. Then two views at once. Each database ends byte-identical
    to a single run."""
    caplog.set_level(logging.WARNING, logger="feast_stream_backfill.emission_store")
    shutil.rmtree(repo / "data" / "emission_log", ignore_errors=True)  # both runs backfill
    address = server.address
    materialize_at_once(repo, f"{address},db=1", [["spend"], ["spend"]])
    materialize_at_once(repo, f"{address},db=2", [["spend"], ["top"]])
    store_on(repo, f"{address},db=3").materialize(START, END, ["spend"])
    store_on(repo, f"{address},db=4").materialize(START, END, ["spend", "top"])

    single = dump(server, 3)
    assert len(single) == USERS
    assert dump(server, 1) == single
    both = dump(server, 4)
    assert len(both) == USERS
    # Per view: _ts and its features (spend: user_id, spend, n; top: user_id, top).
    assert Counter(len(fields) for fields in both.values()) == {7: USERS}
    assert dump(server, 2) == both


@pytest.mark.skipif(
    not os.environ.get("FSB_FRESH_PROCESS_TESTS"),
    reason="two feast commands, each its own Spark JVM (about a minute): FSB_FRESH_PROCESS_TESTS=1",
)
def test_two_feast_materialize_commands_at_once_leave_redis_as_one_run(repo, server):
    """As above with two ``feast materialize`` processes (each its own driver and JVM), started
    together from a cold emission log: Redis ends byte-identical to one run."""
    shutil.rmtree(repo / "data" / "emission_log", ignore_errors=True)
    feast = str(Path(sys.executable).parent / "feast")
    env = {**os.environ, "FSB_REDIS": f"{server.address},db=5"}
    command = [feast, "materialize", START.isoformat(), END.isoformat(), "--views", "spend"]
    runs = [
        subprocess.Popen(command, cwd=repo, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        for _ in range(2)
    ]
    outputs = [run.communicate(timeout=900) for run in runs]
    for run, (_, err) in zip(runs, outputs, strict=True):
        assert run.returncode == 0, err.decode()[-3000:]
    store_on(repo, f"{server.address},db=6").materialize(START, END, ["spend"])
    single = dump(server, 6)
    assert len(single) == USERS
    assert dump(server, 5) == single


def archive_job(path: str) -> StreamJob:
    return StreamJob(
        topics=[ArchivedTopic("t", path=path)],
        keys=["user"],
        window=TumblingWindows(size_ms=60_000),
        aggregations=[Aggregation("amount", "sum", "s"), Aggregation("amount", "count", "n")],
        watermark=WatermarkStrategy(out_of_orderness_ms=0),
    )


def write_records(spark, path: str, rows: list[tuple], mode: str = "error") -> None:
    """``(partition, offset, event time in seconds, user, amount)`` rows into the Delta table."""
    spark.createDataFrame(
        rows, "partition int, offset long, s long, user string, amount double"
    ).select(
        "partition", "offset", F.timestamp_seconds("s").alias("event_time"), "user", "amount"
    ).write.format("delta").mode(mode).save(path)


#: Version 0: u1 in [0, 60 s) and [60, 120 s), the watermark firing both at 130 s.
VERSION_0 = [(0, 0, 10, "u1", 1.0), (0, 1, 70, "u1", 2.0), (0, 2, 130, "u2", 4.0)]
#: Version 1 appends a record at 200 s: [120, 180 s) fires for u2 too.
VERSION_1 = [(0, 3, 200, "u3", 8.0)]


def log_rows(spark, path: str) -> list[tuple]:
    """(user, window start in ms, sum) of each emission."""
    log = spark.read.format("delta").load(path)
    return sorted(
        tuple(r) for r in log.select("user", F.unix_millis("window_start"), "s").collect()
    )


def table(spark, path: str) -> list[tuple]:
    """Every row of the Delta table, every column."""
    return sorted(tuple(r) for r in spark.read.format("delta").load(path).collect())


def test_an_archive_version_committed_while_the_backfill_reads_it_is_not_mixed_in(
    spark, tmp_path, monkeypatch
):
    """The backfill reads the archive at the version its fingerprint names, whatever is
    committed meanwhile: here version 1 lands right after the records are first read (every
    Spark action after that would see it). The next call sees the new version and
    recomputes."""
    archive, log = str(tmp_path / "archive"), str(tmp_path / "log")
    write_records(spark, archive, VERSION_0)
    job = archive_job(archive)
    at_0 = fingerprint(spark, job)

    records_module = importlib.import_module("feast_stream_backfill.job_records")
    read = records_module.observed_records

    def read_then_commit(*args, **kwargs):
        records = read(*args, **kwargs)
        monkeypatch.setattr(records_module, "observed_records", read)
        write_records(spark, archive, VERSION_1, mode="append")
        return records

    monkeypatch.setattr(records_module, "observed_records", read_then_commit)
    ensure_emission_log(spark, job, log)
    assert DeltaTable.forPath(spark, archive).history(1).first()["version"] == 1
    assert stored_metadata(spark, log)["fingerprint"] == at_0
    assert stored_metadata(spark, log)["stats"]["records_read"] == 3
    assert log_rows(spark, log) == [("u1", 0, 1.0), ("u1", 60_000, 2.0)]

    ensure_emission_log(spark, job, log)
    assert stored_metadata(spark, log)["fingerprint"] == fingerprint(spark, job) != at_0
    assert log_rows(spark, log) == [("u1", 0, 1.0), ("u1", 60_000, 2.0), ("u2", 120_000, 4.0)]


#: The driver of the next test: backfills into the log and, once the emission log's Delta
#: write is under way (a task of the write is running), holds there until it is killed.
KILLED_DRIVER = """
import sys, time
from pathlib import Path
from feast_stream_backfill import emission_store
from feast_stream_backfill.spark import get_spark
from tests.test_faults import archive_job

archive, log, marker = sys.argv[1:]
spark = get_spark({"spark.sql.shuffle.partitions": "2"})
backfill = emission_store.backfill

def hold(batches):
    for batch in batches:
        Path(marker).touch()
        time.sleep(600)
        yield batch

def held_while_writing(spark, job):
    result = backfill(spark, job)
    result.emissions = result.emissions.mapInArrow(hold, result.emissions.schema)
    return result

emission_store.backfill = held_while_writing
emission_store.ensure_emission_log(spark, archive_job(archive), log)
"""


@pytest.mark.skipif(
    not os.environ.get("FSB_FRESH_PROCESS_TESTS"),
    reason="starts a driver process of its own (a Spark JVM, 25-65 s): FSB_FRESH_PROCESS_TESTS=1",
)
def test_the_driver_killed_while_committing_the_emission_log_leaves_the_previous_version(
    spark, tmp_path
):
    """The log is made for version 0 of the archive; version 1 lands; a driver process
    recomputes it and is killed (SIGKILL, its JVM and workers with it) while its write is under
    way. The stored log is still the version-0 one, readable, with its metadata; a rerun writes
    the log an undisturbed run writes."""
    archive, log = str(tmp_path / "archive"), str(tmp_path / "log")
    write_records(spark, archive, VERSION_0)
    job = archive_job(archive)
    ensure_emission_log(spark, job, log)
    before = table(spark, log), stored_metadata(spark, log)
    write_records(spark, archive, VERSION_1, mode="append")

    marker = tmp_path / "writing"
    driver = subprocess.Popen(
        [sys.executable, "-c", KILLED_DRIVER, archive, log, str(marker)],
        cwd=Path(__file__).resolve().parent.parent,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    deadline = time.monotonic() + 300
    while not marker.exists():
        assert driver.poll() is None, driver.stderr.read().decode()[-3000:]
        assert time.monotonic() < deadline, "the driver did not start writing in 300 s"
        time.sleep(0.1)
    os.killpg(driver.pid, signal.SIGKILL)
    driver.wait(60)

    assert DeltaTable.forPath(spark, log).history(1).first()["version"] == 0
    assert (table(spark, log), stored_metadata(spark, log)) == before

    undisturbed = str(tmp_path / "undisturbed")
    ensure_emission_log(spark, job, undisturbed)
    ensure_emission_log(spark, job, log)
    assert table(spark, log) == table(spark, undisturbed)
    assert len(table(spark, log)) == 3
    assert stored_metadata(spark, log) == stored_metadata(spark, undisturbed)
    assert table(spark, log + "_dropped") == table(spark, undisturbed + "_dropped")
