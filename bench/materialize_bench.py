"""Materialization keys/s against what the redis-server itself takes, on the same server.

* ``redis-benchmark -t hset -P 100 -n N -r N -q``: pipelined HSETs from C, each one field into
  one hash: the yardstick;
* the plugin's writer (``compute_engine.write_online``: the mapInArrow writer ``feast
  materialize`` runs), writing a cached state of ``--keys`` keys (3 features, in
  ``--partitions`` partitions, which the writer merges into one task per core, one fewer for
  this local Redis) from the Spark executors into an empty Redis, with ``skip_dedup: true``
  (HSET only) and with Feast's rule (``HMGET _ts`` first, every key written), then again
  (every key read, none rewritten);
* ``redis-benchmark`` sending an HSET of the same sizes as a row the plugin stored (a new key,
  keys drawn from 2e9, with ``_ts`` and the feature fields, each under its own name): the
  ceiling for Feast's row format on this server (and, for comparison with earlier runs, the
  same with fields of one length under one name and keys drawn from ``--keys``);
* Feast's own ``RedisOnlineStore.online_write_batch`` in one process on 100k of those rows.

Each plugin line also gives the CPU time redis-server spent in it and that of the Spark
processes (driver, executors, Python workers): on a 2-core machine they share the cores.
The plugin's times follow a warm-up write on every partition (the executors' Python workers
start and import Feast once).

A redis-server on a free port is started and stopped by the script (no persistence).

    .venv/bin/python -m bench.materialize_bench --keys 2000000
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import socket
import subprocess
import tempfile
import time
from datetime import timedelta
from pathlib import Path

import redis
from feast import Entity, Field, FileSource, KafkaSource, RepoConfig, StreamFeatureView, ValueType
from feast.aggregation import Aggregation
from feast.data_format import DeltaFormat, JsonFormat
from feast.infra.online_stores.redis import RedisOnlineStore
from feast.types import Float64, Int64, String
from feast.utils import _convert_arrow_to_proto
from pyspark.sql import functions as F

from feast_stream_backfill.feast_plugin.compute_engine import write_online
from feast_stream_backfill.spark import get_spark


def start_redis() -> tuple[subprocess.Popen, int]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [shutil.which("redis-server") or "redis-server", "--port", str(port), "--save", ""]
        + ["--appendonly", "no", "--bind", "127.0.0.1"],
        stdout=subprocess.DEVNULL,
    )
    client = redis.Redis(port=port)
    for _ in range(200):
        try:
            client.ping()
            return proc, port
        except redis.ConnectionError:
            time.sleep(0.05)
    raise RuntimeError("redis-server did not start")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time a process has used (``/proc/<pid>/stat``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def own_cpu_seconds(server: int) -> float:
    """CPU seconds of this process and its descendants but ``server``: the Spark driver JVM,
    its executor threads and the Python workers (children that ended count through their
    parent)."""
    parents, times = {}, {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # ended meanwhile
            continue
        pid = int(stat.parent.name)
        parents[pid] = int(fields[1])
        times[pid] = sum(int(f) for f in fields[11:15])  # utime stime cutime cstime
    mine, grew = {os.getpid()}, True
    while grew:
        more = {pid for pid, parent in parents.items() if parent in mine} - mine - {server}
        mine, grew = mine | more, bool(more)
    return sum(times[pid] for pid in mine) / os.sysconf("SC_CLK_TCK")


def redis_benchmark(
    server: subprocess.Popen, port: int, n: int, command: list[str] | None = None, keys: int = 0
) -> tuple[float, float]:
    """redis-benchmark's pipelined rate (requests/s) on the server at ``port``, and the server's
    CPU seconds in it: its own HSET test (one field into one hash) or ``command``
    (``__rand_int__`` replaced by a random number below ``keys``, default ``n``)."""
    test = command or ["-t", "hset"]
    busy = cpu_seconds(server.pid)
    done = subprocess.run(
        ["redis-benchmark", "-p", str(port), "-P", "100", "-n", str(n), "-r", str(keys or n), "-q"]
        + test,
        capture_output=True,
        text=True,
        check=True,
    )
    rate = re.findall(r": ([0-9.]+) requests per second", done.stdout.replace("\r", "\n"))
    return float(rate[-1]), cpu_seconds(server.pid) - busy


def same_shape(client: redis.Redis, distinct: bool = True) -> list[str]:
    """An HSET of the same sizes as a stored Feast row (key, ``_ts`` and feature fields and
    values), in ASCII, its key made distinct by ``__rand_int__``. ``distinct``: each field its
    own name, as in the row (else all fields of one length share a name, as in earlier runs:
    the server then stores 2 fields instead of 5)."""
    key = client.randomkey()
    command = ["HSET", "k" * (len(key) - len("__rand_int__")) + "__rand_int__"]
    for i, (field, value) in enumerate(client.hgetall(key).items()):
        name = f"{i}".ljust(len(field), "f") if distinct else "f" * len(field)
        command += [name, "v" * len(value)]
    return command


def view() -> StreamFeatureView:
    user = Entity(name="user", join_keys=["user_id"], value_type=ValueType.STRING)
    archive = FileSource(
        name="a", path="unused", file_format=DeltaFormat(), timestamp_field="event_time"
    )
    source = KafkaSource(
        name="s",
        topic="s",
        kafka_bootstrap_servers="localhost:9092",
        message_format=JsonFormat(schema_json="user_id string, amount double"),
        timestamp_field="event_time",
        batch_source=archive,
    )
    minute = timedelta(minutes=5)
    return StreamFeatureView(
        name="user_spend_5m",
        source=source,
        entities=[user],
        ttl=timedelta(hours=1),
        schema=[
            Field(name="user_id", dtype=String),
            Field(name="spend_5m", dtype=Float64),
            Field(name="transactions_5m", dtype=Int64),
            Field(name="max_amount_5m", dtype=Float64),
        ],
        aggregations=[
            Aggregation(column="amount", function=f, time_window=minute, name=n)
            for f, n in (
                ("sum", "spend_5m"),
                ("count", "transactions_5m"),
                ("max", "max_amount_5m"),
            )
        ],
        timestamp_field="event_time",
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=2_000_000)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--master", default="local[*]", help="Spark master, e.g. local[1]")
    parser.add_argument("--repeat", type=int, default=1, help="runs into an empty Redis, each")
    args = parser.parse_args()
    proc, port = start_redis()
    try:
        client = redis.Redis(port=port)
        ceiling, busy = redis_benchmark(proc, port, args.keys)
        client.flushall()
        print(
            f"redis-benchmark -t hset -P 100 -n {args.keys} -r {args.keys} (one field into one "
            f"hash): {ceiling:,.0f} HSET/s; redis-server busy {busy:.1f} s"
        )

        spark = get_spark(
            {"spark.sql.shuffle.partitions": str(args.partitions), "spark.master": args.master}
        )
        spv = view()
        work = Path(tempfile.mkdtemp(prefix="materialize_bench_"))
        config = RepoConfig(
            project="bench",
            provider="local",
            registry=str(work / "registry.db"),
            online_store={"type": "redis", "connection_string": f"127.0.0.1:{port}"},
            entity_key_serialization_version=3,
        )
        state = (
            spark.range(0, args.keys, 1, args.partitions)
            .select(
                F.format_string("u%08d", "id").alias("user_id"),
                (F.col("id") % 1000 / 7).alias("spend_5m"),
                (F.col("id") % 50).alias("transactions_5m"),
                (F.col("id") % 300 / 3).alias("max_amount_5m"),
                F.timestamp_millis(F.lit(1_767_225_600_000) + F.col("id") % 3_600_000).alias(
                    "emit_time"
                ),
            )
            .cache()
        )
        state.count()
        skipping = config.model_copy(deep=True)
        skipping.online_store.skip_dedup = True
        warm_up = state.where(F.col("user_id").endswith("000"))  # rows in every partition
        write_online(warm_up, spv, config)
        runs = (
            *[("skip_dedup, into an empty Redis", skipping)] * args.repeat,
            *[("Feast's rule, into an empty Redis", config)] * args.repeat,
            ("Feast's rule, rerun (all skipped)", config),
        )
        best = 0.0
        for label, run_config in runs:
            if "empty" in label:
                client.flushall()
            started, busy, spark = (
                time.perf_counter(),
                cpu_seconds(proc.pid),
                own_cpu_seconds(proc.pid),
            )
            written = write_online(state, spv, run_config)
            elapsed = time.perf_counter() - started
            rate = written / elapsed
            best = max(best, rate) if "empty" in label else best
            print(
                f"plugin {label}: {written:,} keys in {elapsed:.1f} s = {rate:,.0f} keys/s "
                f"({rate / ceiling:.0%} of the one-field HSET above); redis-server busy "
                f"{cpu_seconds(proc.pid) - busy:.1f} s, Spark (driver, executors, Python "
                f"workers) {own_cpu_seconds(proc.pid) - spark:.1f} s"
            )
        assert client.dbsize() == args.keys
        command, earlier = same_shape(client), same_shape(client, distinct=False)
        client.flushall()
        # Keys drawn from 2e9: new keys, as the plugin's (drawn from --keys, a third repeat).
        shaped, shaped_busy = redis_benchmark(proc, port, args.keys, command, keys=2_000_000_000)
        assert (
            client.dbsize() > 0.99 * args.keys
            and client.hlen(client.randomkey()) == len(command) // 2 - 1
        )
        client.flushall()
        shaped_before, _ = redis_benchmark(proc, port, args.keys, earlier)
        client.flushall()
        print(
            f"redis-benchmark, an HSET of a stored row's sizes ({len(command) // 2 - 1} fields, "
            f"{len(command[1])}-byte key, new keys): {shaped:,.0f} HSET/s, redis-server busy "
            f"{shaped_busy:.1f} s; the plugin's best run is {best / shaped:.0%} of it\n"
            f"  (as measured before: fields of one length under one name, keys from --keys: "
            f"{shaped_before:,.0f} HSET/s, the plugin {best / shaped_before:.0%} of it)"
        )

        client.flushall()
        sample = (
            state.limit(100_000)
            .withColumnRenamed("emit_time", "event_time")
            .toArrow()
            .to_batches(max_chunksize=10_000)
        )
        value_types = {"user_id": ValueType.STRING}
        store = RedisOnlineStore()
        started = time.perf_counter()
        rows = 0
        for batch in sample:
            data = _convert_arrow_to_proto(batch, spv, value_types)
            store.online_write_batch(config, spv, data, None)
            rows += batch.num_rows
        rate = rows / (time.perf_counter() - started)
        print(f"Feast's online_write_batch, one process: {rows:,} keys at {rate:,.0f} keys/s")
    finally:
        proc.terminate()
        proc.wait()


if __name__ == "__main__":
    main()
