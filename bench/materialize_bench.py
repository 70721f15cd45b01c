"""Materialization keys/s against what the redis-server itself takes, on the same server.

* ``redis-benchmark -t hset -P 100 -n N -r N -q``: pipelined HSETs from C, the ceiling;
* the plugin's writer (``compute_engine.write_online``: the mapInArrow writer ``feast
  materialize`` runs), writing a cached state of ``--keys`` keys (3 features) from the Spark
  executors, into an empty Redis (every key written), then again (Feast's rule: every key read,
  none rewritten);
* Feast's own ``RedisOnlineStore.online_write_batch`` in one process on 100k of those rows.

The plugin's times follow a warm-up write (the executors' Python workers start and import
Feast once, about a second each on an idle machine).

A redis-server on a free port is started and stopped by the script (no persistence).

    .venv/bin/python -m bench.materialize_bench --keys 2000000
"""

from __future__ import annotations

import argparse
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


def redis_benchmark(port: int, n: int) -> float:
    """redis-benchmark's pipelined HSET rate (requests/s) on the server at ``port``."""
    done = subprocess.run(
        ["redis-benchmark", "-p", str(port), "-t", "hset", "-P", "100", "-n", str(n)]
        + ["-r", str(n), "-q"],
        capture_output=True,
        text=True,
        check=True,
    )
    rate = re.findall(r"HSET: ([0-9.]+) requests per second", done.stdout.replace("\r", "\n"))
    return float(rate[-1])


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
    args = parser.parse_args()
    proc, port = start_redis()
    try:
        client = redis.Redis(port=port)
        ceiling = redis_benchmark(port, args.keys)
        client.flushall()
        print(
            f"redis-benchmark -t hset -P 100 -n {args.keys} -r {args.keys}: {ceiling:,.0f} HSET/s"
        )

        spark = get_spark({"spark.sql.shuffle.partitions": str(args.partitions)})
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
        write_online(state.limit(10_000), spv, config)  # warm-up: Python workers import Feast
        client.flushall()
        for label in ("into an empty Redis", "rerun (all skipped)"):
            started = time.perf_counter()
            written = write_online(state, spv, config)
            elapsed = time.perf_counter() - started
            rate = written / elapsed
            print(
                f"plugin {label}: {written:,} keys in {elapsed:.1f} s = {rate:,.0f} keys/s "
                f"({rate / ceiling:.0%} of redis-benchmark)"
            )
        assert client.dbsize() == args.keys

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
