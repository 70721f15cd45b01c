"""``feast materialize`` into real redis-servers: late firings, incremental runs, a Redis killed
part-way, and the writer's bytes against Feast's own ``RedisOnlineStore.online_write_batch``.

View ``spend_1m``: one partition, 1-minute tumbling windows, B = 0, allowed lateness L = 2 min,
min gap D1 = 1 s (so ``pt_i = max(pt_{i-1} + 1 s, et_i)``), 200 ms periodic watermark::

    offset  et        user  amount  pt        what it makes happen
    0       10:00:10  u1    1       10:00:10
    1       10:00:40  u3    32      10:00:40
    2       10:01:30  u1    2       10:01:30  tick 10:01:30: W = 10:01:29.999 fires [10:00, 10:01):
                                              u1 = 1, u3 = 32, at 10:01:30
    3       10:02:30  u1    4       10:02:30  tick 10:02:30: W = 10:02:29.999 fires [10:01, 10:02):
                                              u1 = 2, at 10:02:30
    4       10:00:20  u1    8       10:02:31  late for [10:00, 10:01) (W >= 10:00:59.999), kept
                                              (W < 10:00:59.999 + L): late firing u1 = 1 + 8 = 9
    5       10:01:10  u2    16      10:02:32  late for [10:01, 10:02): late firing u2 = 16
    6       10:09:00  u3    64      10:09:00  tick 10:09:00 fires [10:02, 10:03): u1 = 4

At 10:03 Redis holds u1 = 9 (the late firing of the OLDER window [10:00, 10:01) written at
10:02:31 overwrote [10:01, 10:02)'s 2), u2 = 16, u3 = 32; at 10:10 u1 = 4.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from datetime import datetime, timedelta
from pathlib import Path

import dill
import pyarrow as pa
import pytest
import redis
from feast import FeatureStore
from feast.infra.online_stores.redis import RedisOnlineStore
from feast.utils import _convert_arrow_to_proto
from google.protobuf.timestamp_pb2 import Timestamp
from pyspark.sql import functions as F

from feast_stream_backfill.feast_plugin.compute_engine import _write_partition
from feast_stream_backfill.feast_plugin.view_rows import emissions_for
from tests.bulk_repo import write_bulk_archive
from tests.conftest import _free_port, apply_in_process

FEAST = str(Path(sys.executable).parent / "feast")
BULK_USERS = 20_000

FEATURES_PY = """
from datetime import timedelta

from feast import Entity, FeatureView, Field, FileSource, KafkaSource, StreamFeatureView, ValueType
from feast.aggregation import Aggregation
from feast.data_format import DeltaFormat, JsonFormat
from feast.types import Float64, Int64, String

from feast_stream_backfill.feast_plugin import archive_tags, backfill_tags

user = Entity(name="user", join_keys=["user_id"], value_type=ValueType.STRING)
item = Entity(name="item", join_keys=["item_id"], value_type=ValueType.STRING)  # not user's


def topic(name):
    archive = FileSource(name=name + "_archive", path="data/archive/" + name,
                         file_format=DeltaFormat(), timestamp_field="event_time",
                         tags=archive_tags())
    return KafkaSource(name=name, topic=name, kafka_bootstrap_servers="localhost:9092",
                       message_format=JsonFormat(schema_json="user_id string, amount double"),
                       timestamp_field="event_time", batch_source=archive,
                       watermark_delay_threshold=timedelta(0))


def view(name, source, **tags):
    minute = timedelta(minutes=1)
    return StreamFeatureView(
        name=name, source=source, entities=[user], ttl=timedelta(hours=1),
        schema=[Field(name="user_id", dtype=String), Field(name="spend", dtype=Float64),
                Field(name="n", dtype=Int64)],
        aggregations=[Aggregation(column="amount", function="sum", time_window=minute,
                                  name="spend"),
                      Aggregation(column="amount", function="count", time_window=minute,
                                  name="n")],
        timestamp_field="event_time", tags=backfill_tags(**tags))


spend_1m = view("spend_1m", topic("small"), allowed_lateness=timedelta(minutes=2),
                min_gap=timedelta(seconds=1))
bulk_spend = view("bulk_spend", topic("bulk"))
profile = FeatureView(
    name="profile", entities=[user], ttl=timedelta(hours=1),
    schema=[Field(name="user_id", dtype=String), Field(name="score", dtype=Float64),
            Field(name="visits", dtype=Int64)],
    source=FileSource(name="profiles", path="data/profile", file_format=DeltaFormat(),
                      timestamp_field="event_ts", created_timestamp_column="created",
                      field_mapping={"score_raw": "score"}))
"""

YAML = """project: mat
provider: local
registry: data/registry.db
entity_key_serialization_version: 3
online_store: {type: redis, connection_string: "${FSB_REDIS}"}
offline_store:
  type: feast_stream_backfill.feast_plugin.offline_store.StreamBackfillOfflineStore
  spark_conf: {spark.master: "local[2]", spark.sql.shuffle.partitions: "4"}
batch_engine:
  type: feast_stream_backfill.feast_plugin.compute_engine.StreamBackfillComputeEngine
"""

#: Batch view ``profile`` (source column ``score_raw`` is feature ``score``), materialized over
#: [10:00, 10:10]: u1's 10:05 row (its 10:20 row is after END), u2's tie at 10:03 goes to the
#: later created 11:30 (score 4), u3's only row (09:59) is before START, u4's is at END.
PROFILE = [
    ("u1", 1.0, 1, "10:01:00", "10:01:00"),
    ("u1", 2.0, 2, "10:05:00", "10:05:00"),
    ("u1", 99.0, 99, "10:20:00", "10:20:00"),
    ("u2", 4.0, 4, "10:03:00", "11:30:00"),
    ("u2", 3.0, 3, "10:03:00", "11:00:00"),
    ("u3", 5.0, 5, "09:59:00", "09:59:00"),
    ("u4", 6.0, 6, "10:10:00", "10:10:00"),
]

SMALL = [
    (0, "10:00:10", "u1", 1.0),
    (1, "10:00:40", "u3", 32.0),
    (2, "10:01:30", "u1", 2.0),
    (3, "10:02:30", "u1", 4.0),
    (4, "10:00:20", "u1", 8.0),
    (5, "10:01:10", "u2", 16.0),
    (6, "10:09:00", "u3", 64.0),
]


def t(hms: str) -> datetime:
    return datetime.fromisoformat(f"2026-01-01T{hms}+00:00")


class RedisServer:
    """A redis-server of our own, which a test may kill and restart (with its append-only file)."""

    def __init__(
        self, workdir: Path, *args: str, port: int | None = None, **client: object
    ) -> None:
        """``args``: more redis-server options (they override the defaults: ``--port 0
        --tls-port PORT`` for TLS only); ``client``: redis-py options of the test's client."""
        self.port, self.dir = port or _free_port(), workdir
        self.args, self.client_options = args, client
        workdir.mkdir(parents=True, exist_ok=True)
        self.address = f"127.0.0.1:{self.port}"
        self.start()

    def start(self) -> None:
        exe = shutil.which("redis-server")
        assert exe, "redis-server is not installed: run scripts/setup.sh"
        args = ["--bind", "127.0.0.1", "--port", str(self.port), "--dir", str(self.dir)]
        args += ["--save", "", "--appendonly", "yes", *self.args]
        self.proc = subprocess.Popen([exe, *args], stdout=subprocess.DEVNULL)
        self.client = redis.Redis(host="127.0.0.1", port=self.port, **self.client_options)
        deadline = time.monotonic() + 20
        while True:
            try:
                if self.client.ping():
                    return
            except redis.ConnectionError:
                assert time.monotonic() < deadline and self.proc.poll() is None, "no redis"
                time.sleep(0.02)

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=10)

    def content(self) -> dict[bytes, dict[bytes, bytes]]:
        return {k: self.client.hgetall(k) for k in sorted(self.client.keys())}


class FreezingProxy:
    """A TCP proxy in front of Redis that forwards the first ``budget`` bytes clients send, then
    holds the rest: the writers are then certainly part-way, whatever the machine's speed."""

    def __init__(self, target_port: int, budget: int) -> None:
        self.target, self.budget = target_port, budget
        self.frozen = threading.Event()
        self.lock = threading.Lock()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self.listener.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            client, _ = self.listener.accept()
            try:
                server = socket.create_connection(("127.0.0.1", self.target))
            except OSError:
                client.close()
                continue
            threading.Thread(target=self._up, args=(client, server), daemon=True).start()
            threading.Thread(target=self._down, args=(server, client), daemon=True).start()

    def _up(self, client: socket.socket, server: socket.socket) -> None:
        while data := client.recv(65536):
            with self.lock:
                allowed = data[: self.budget]
                self.budget -= len(allowed)
            server.sendall(allowed)
            if len(allowed) < len(data):
                self.frozen.set()
                return

    def _down(self, server: socket.socket, client: socket.socket) -> None:
        try:
            while data := server.recv(65536):
                client.sendall(data)
        except OSError:
            pass
        client.close()


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    root = tmp_path_factory.mktemp("redis")
    made = {name: RedisServer(root / name) for name in ("a", "b")}
    yield made
    for server in made.values():
        if server.proc.poll() is None:
            server.stop()


@pytest.fixture(scope="module")
def repo(tmp_path_factory, spark):
    path = tmp_path_factory.mktemp("mat_repo")
    (path / "features.py").write_text(FEATURES_PY)
    (path / "feature_store.yaml").write_text(YAML)
    spark.createDataFrame(
        [(0, o, f"2026-01-01 {hms}", u, a) for o, hms, u, a in SMALL],
        "partition int, offset long, ts string, user_id string, amount double",
    ).select(
        "partition", "offset", F.to_timestamp("ts").alias("event_time"), "user_id", "amount"
    ).write.format("delta").save(str(path / "data/archive/small"))
    spark.createDataFrame(
        [(u, s, v, f"2026-01-01 {e}", f"2026-01-01 {c}") for u, s, v, e, c in PROFILE],
        "user_id string, score_raw double, visits long, e string, c string",
    ).select(
        "user_id",
        "score_raw",
        "visits",
        F.to_timestamp("e").alias("event_ts"),
        F.to_timestamp("c").alias("created"),
    ).write.format("delta").save(str(path / "data/profile"))
    write_bulk_archive(spark, str(path / "data/archive/bulk"), BULK_USERS)
    os.environ["FSB_REDIS"] = "127.0.0.1:1"
    # `feast apply`, in this process: the command's own code, on the tests' Spark session
    # (tests/test_feast_integration.py and tests/test_apply_checks.py run the command).
    apply_in_process(path, validate_sources=True)
    return path


def store_on(repo: Path, server: RedisServer) -> FeatureStore:
    os.environ["FSB_REDIS"] = server.address
    return FeatureStore(repo_path=str(repo))


def spend(store: FeatureStore, users: list[str]) -> list:
    return store.get_online_features(["spend_1m:spend"], [{"user_id": u} for u in users]).to_dict()[
        "spend"
    ]


def stored_ts(server: RedisServer, store: FeatureStore, user: str) -> datetime:
    """The ``_ts`` Feast stored with ``user``'s spend_1m row."""
    (key,) = [k for k, v in server.content().items() if user.encode() in k]
    stamp = Timestamp()
    stamp.ParseFromString(server.content()[key][b"_ts:spend_1m"])
    return stamp.ToDatetime().replace(tzinfo=t("00:00").tzinfo)


def test_three_incremental_runs_leave_redis_byte_identical_to_one_over_their_union(repo, servers):
    a = servers["a"]
    a.client.flushall()
    store = store_on(repo, a)
    store.materialize(t("10:00:00"), t("10:01:45"), ["spend_1m"])
    assert spend(store, ["u1", "u2", "u3"]) == [1.0, None, 32.0]
    assert stored_ts(a, store, "u1") == t("10:01:30")
    store.materialize_incremental(t("10:02:30"), ["spend_1m"])  # from 10:01:45
    assert spend(store, ["u1", "u2", "u3"]) == [2.0, None, 32.0]
    store.materialize_incremental(t("10:10:00"), ["spend_1m"])  # from 10:02:30
    assert spend(store, ["u1", "u2", "u3"]) == [4.0, 16.0, 32.0]
    assert stored_ts(a, store, "u1") == t("10:09:00")
    incremental = a.content()
    assert len(incremental) == 3

    a.client.flushall()
    store.materialize(t("10:00:00"), t("10:10:00"), ["spend_1m"])
    assert a.content() == incremental
    store.materialize(t("10:00:00"), t("10:10:00"), ["spend_1m"])
    assert a.content() == incremental, "a rerun changes nothing"


def test_a_late_firing_of_an_older_window_overwrites_the_newer_value(repo, servers):
    a = servers["a"]
    a.client.flushall()
    store = store_on(repo, a)
    store.materialize(t("10:00:00"), t("10:03:00"), ["spend_1m"])
    assert spend(store, ["u1", "u2", "u3", "u4"]) == [9.0, 16.0, 32.0, None]
    assert stored_ts(a, store, "u1") == t("10:02:31")


@pytest.mark.skipif(
    not os.environ.get("FSB_FRESH_PROCESS_TESTS"),
    reason="a feast command, its own Spark JVM (37-71 s; the dead-Redis check runs in CI "
    "in-process, tests/test_faults.py): FSB_FRESH_PROCESS_TESTS=1",
)
def test_redis_killed_mid_materialize_fails_the_command_and_a_rerun_converges(repo, servers):
    killed, reference = servers["a"], servers["b"]
    killed.client.flushall()
    reference.client.flushall()
    store = store_on(repo, killed)
    emissions_for(store.config, store.get_stream_feature_view("bulk_spend")).count()  # cached

    # The writers reach Redis through a proxy that lets ~3 MB through (of ~5 MB), then holds.
    proxy = FreezingProxy(killed.port, budget=3_000_000)
    cli = subprocess.Popen(
        [FEAST, "materialize", "2026-01-01T00:00:00", "2026-01-01T11:00:00", "-v", "bulk_spend"],
        cwd=repo,
        env={**os.environ, "FSB_REDIS": proxy.address},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proxy.frozen.wait(300), "materialize did not write in 300 s"
    # Complete HSETs are among the bytes let through; Redis may still be applying them.
    deadline = time.monotonic() + 60
    while (partial := killed.client.dbsize()) == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert 0 < partial < BULK_USERS, f"not part-way: {partial} keys"
    killed.kill()  # the writers are held by the proxy, mid-write
    output, _ = cli.communicate(timeout=300)

    assert cli.returncode != 0, output
    assert f"writing 'bulk_spend' to the online store at '{proxy.address}' failed" in output
    fresh = FeatureStore(repo_path=str(repo))
    assert fresh.get_stream_feature_view("bulk_spend").materialization_intervals == []

    killed.start()  # from its append-only file: the keys written before the kill are there
    assert 0 < killed.client.dbsize() < BULK_USERS
    store_on(repo, killed).materialize(t("00:00:00"), t("11:00:00"), ["bulk_spend"])
    store_on(repo, reference).materialize(t("00:00:00"), t("11:00:00"), ["bulk_spend"])
    converged, uninterrupted = killed.content(), reference.content()
    assert len(uninterrupted) == BULK_USERS
    assert converged == uninterrupted


def _sample_view(key_type):
    from feast import Entity, FeatureView, Field, FileSource
    from feast.types import Bool, Float32, Float64, Int32, Int64, String

    entity = Entity(name="e", join_keys=["id"], value_type=key_type.to_value_type())
    return FeatureView(
        name="sample",
        entities=[entity],
        ttl=timedelta(hours=1),
        schema=[
            Field(name="id", dtype=key_type),
            Field(name="d", dtype=Float64),
            Field(name="f", dtype=Float32),
            Field(name="i", dtype=Int64),
            Field(name="j", dtype=Int32),
            Field(name="b", dtype=Bool),
            Field(name="s", dtype=String),
        ],
        source=FileSource(path="unused", timestamp_field="ts"),
    )


def _sample_batch(ids: list, seconds_offset: int = 0) -> pa.RecordBatch:
    micros = [1_767_225_600_123_456, 0, -1_500_000, 1_767_225_601_000_000, 999, 2**41]
    n = len(ids)
    return pa.RecordBatch.from_pydict(
        {
            "id": ids,
            "d": [1.5, None, 0.0, -2.25e300, float("nan"), 7.0][:n],
            "f": [0.5, 1.0, None, -3.0, 2.0, 0.0][:n],
            "i": [0, -1, None, 2**62, 300, -(2**63)][:n],
            "j": [1, -7, 2**31 - 1, None, 0, 5][:n],
            "b": [True, False, None, True, False, True][:n],
            "s": ["a", "", None, "é€😀", "x" * 200, "z"][:n],
            "ts": pa.array(
                [m + seconds_offset * 1_000_000 for m in micros[:n]], pa.timestamp("us", tz="UTC")
            ),
        }
    )


@pytest.mark.parametrize("skip_dedup", [False, True])
@pytest.mark.parametrize("ttl", [None, 3600])
@pytest.mark.parametrize("key_type", ["string", "int64"])
def test_the_writer_stores_the_bytes_feasts_own_redis_writer_stores(
    servers, tmp_path, key_type, ttl, skip_dedup
):
    from feast import RepoConfig
    from feast.types import Int64, String

    from feast_stream_backfill.feast_plugin.redis_writer import RedisBatchWriter, supports

    server = servers["b"]
    server.client.flushall()
    view = _sample_view({"string": String, "int64": Int64}[key_type])
    ids = ["k1", "k2", "k3", "k4", "k5", "k6"] if key_type == "string" else [1, -2, 3, 2**40, 0, 9]

    def config(db: int) -> RepoConfig:
        store = {"type": "redis", "connection_string": f"{server.address},db={db}"}
        if ttl:
            store["key_ttl_seconds"] = ttl
        if skip_dedup:  # every row written, older ones too: both writers overwrite
            store["skip_dedup"] = True
        return RepoConfig(
            project="p",
            provider="local",
            registry=str(tmp_path / "registry.db"),
            online_store=store,
            entity_key_serialization_version=3,
        )

    feast_config, ours_config = config(1), config(2)
    assert supports(ours_config, view)
    feast_store = RedisOnlineStore()
    ours = RedisBatchWriter(ours_config, view, "ts")
    value_types = {e.name: e.dtype.to_value_type() for e in view.entity_columns}
    # A first write, a rerun (skipped: same times), newer rows for some keys, older for others.
    for batch in (
        _sample_batch(ids),
        _sample_batch(ids),
        _sample_batch(ids[:3], seconds_offset=60),
        _sample_batch(ids[3:], seconds_offset=-60),
    ):
        data = _convert_arrow_to_proto(batch, view, value_types)
        feast_store.online_write_batch(feast_config, view, data, None)
        ours.write(batch)
    ours.flush()
    ours.close()

    def content(db: int) -> dict:
        client = redis.Redis(host="127.0.0.1", port=server.port, db=db)
        return {k: (client.hgetall(k), client.ttl(k) > 0) for k in sorted(client.keys())}

    expected = content(1)
    assert len(expected) == 6
    assert content(2) == expected
    assert all(has_ttl == bool(ttl) for _, has_ttl in expected.values())


class _OneByteSocket:
    """Hands the writer its replies a byte at a time: every split of a reply is met."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    def recv_into(self, buffer: bytearray) -> int:
        buffer[0], self.data = self.data[0], self.data[1:]
        return 1


def test_replies_split_anywhere_are_read_exactly_and_an_error_is_raised(tmp_path):
    from types import SimpleNamespace

    from feast import RepoConfig
    from feast.types import String
    from redis.exceptions import ResponseError

    from feast_stream_backfill.feast_plugin.redis_writer import RedisBatchWriter

    config = RepoConfig(
        project="p",
        provider="local",
        registry=str(tmp_path / "registry.db"),
        online_store={"type": "redis", "connection_string": "127.0.0.1:1"},
        entity_key_serialization_version=3,
    )
    writer = RedisBatchWriter(config, _sample_view(String), "ts")
    replies = (
        b":1\r\n:0\r\n"  # two HSETs
        + b"*1\r\n$-1\r\n*1\r\n$4\r\n\r\n\x01x\r\n"  # HMGET: none, a value holding CRLF
        + b"*1\r\n$-1\r\n"  # then the next batch's HMGET, already arriving
        + b"-WRONGTYPE Operation against a key holding the wrong kind of value\r\n"
    )
    writer._connection = SimpleNamespace(_sock=_OneByteSocket(replies))
    writer._expected.extend([("counts", 2), ("stamps", 2)])
    writer._consume_counts()
    assert writer._take_stamps(2) == [None, b"\r\n\x01x"]
    assert writer._take_stamps(1) == [None]
    with pytest.raises(ResponseError, match="WRONGTYPE"):
        writer._take_stamps(1)


class _Counter:
    """Stands in for a Spark accumulator when a partition is written in this process."""

    value = 0

    def add(self, n: int) -> None:
        self.value += n


def test_a_partition_writes_all_its_batches_on_one_connection(repo, servers):
    server = servers["b"]
    server.client.flushall()
    store = store_on(repo, server)
    view = store.get_stream_feature_view("bulk_spend")
    stamp = pa.array([1_767_225_600_000_000] * 100, pa.timestamp("us", tz="UTC"))
    batches = [
        pa.RecordBatch.from_pydict(
            {
                "user_id": [f"c{b}-{i}" for i in range(100)],
                "spend": [1.0] * 100,
                "n": [1] * 100,
                "event_time": stamp,
            }
        )
        for b in range(5)
    ]
    before = server.client.info("stats")["total_connections_received"]
    written, partitions = _Counter(), _Counter()
    config, proto = dill.dumps(store.config), view.to_proto().SerializeToString()
    out = list(_write_partition(config, proto, True, 1, written, partitions, None, iter(batches)))
    assert server.client.info("stats")["total_connections_received"] - before == 1
    assert out[0].to_pydict() == {"written": [500], "error": [None]}
    assert (written.value, partitions.value, server.client.dbsize()) == (500, 1, 500)


def test_a_batch_feature_view_materializes_its_latest_row_in_the_range_per_key(repo, servers):
    a = servers["a"]
    a.client.flushall()
    store = store_on(repo, a)
    store.materialize(t("10:00:00"), t("10:10:00"), ["spend_1m", "profile"])
    users = [{"user_id": u} for u in ("u1", "u2", "u3", "u4")]
    got = store.get_online_features(["profile:score", "profile:visits"], users).to_dict()
    assert (got["score"], got["visits"]) == ([2.0, 4.0, None, 6.0], [2, 4, None, 6])
    assert spend(store, ["u1", "u2", "u3", "u4"]) == [4.0, 16.0, 32.0, None]
    (u1,) = [k for k in a.content() if b"u1" in k]
    assert Timestamp.FromString(a.content()[u1][b"_ts:profile"]).ToDatetime() == datetime(
        2026, 1, 1, 10, 5
    ), "stored with its event timestamp"
    first = a.content()
    assert len(first) == 4  # u1..u4: the two views share each user's hash
    store.materialize(t("10:00:00"), t("10:10:00"), ["spend_1m", "profile"])
    assert a.content() == first, "a rerun changes nothing"
