"""Hostile input: each case refused with a message naming the table, the column and
a sample place (partition and offset), or given a documented faithful result; nothing written
half-way. The first bad-input list (missing columns, null Kafka columns, naive timestamps,
conflicting copies) is ``tests/test_bad_input.py``, whose helpers these tests share.

Rows are ``(partition, offset, event time ms, user, amount)``; jobs are 1-second tumbling
windows, B = 0, the 200 ms periodic watermark, one partition unless said.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
import redis
from delta.tables import DeltaTable
from feast import Entity, FeatureStore, FeatureView, Field, FileSource, RepoConfig, ValueType
from feast.infra.online_stores.redis import RedisOnlineStore
from feast.protos.feast.types.EntityKey_pb2 import EntityKey as EntityKeyProto
from feast.protos.feast.types.Value_pb2 import Value as ValueProto
from feast.types import Float64, String
from pyspark.sql import functions as F

from feast_stream_backfill import (
    ArchivedTopic,
    BadArchiveError,
    SessionWindows,
    SlidingWindows,
    TumblingWindows,
    backfill,
)
from feast_stream_backfill.columns import EVENT_TIME, WINDOW_START
from feast_stream_backfill.emission_store import dropped_path, ensure_emission_log, fingerprint
from feast_stream_backfill.feast_plugin import backfill_tags
from feast_stream_backfill.feast_plugin.compute_engine import write_online
from feast_stream_backfill.feast_plugin.definitions import stream_job
from feast_stream_backfill.online_state import state_at
from tests.reference_simulator import simulate
from tests.test_bad_input import GOOD, job_on, refused
from tests.test_differential import (
    TABLE,
    as_logged,
    check,
    expected_stats,
    normalized,
    options_of,
    shifted,
    spark_backfill_with_stats,
)
from tests.test_online_stores import USERS, objects, small_archive, t
from tests.test_online_stores import config as stores_config

ms = F.unix_millis


def _base_zero_case(kind: str) -> tuple[list, object]:
    """The all-pairs table's first case of a window kind with event times near 0."""
    return next(
        (records, job)
        for records, job in TABLE
        if options_of(records, job)["kind"] == kind and options_of(records, job)["base"] == 0
    )


# ------------------------------------------------------------------------------- null keys

WITH_NULL_KEYS = [
    (0, 0, 1000, "a", 1.0),
    (0, 1, 1500, None, 100.0),
    (0, 2, 2500, "a", 2.0),
    (0, 3, 3200, None, 100.0),
    (1, 7, 3300, None, 100.0),
]


def test_null_keys_are_refused_with_their_count_and_first_place(spark, make_archive):
    # Flink's keyBy fails the job on a null key: the default refuses, naming the first one.
    refused(
        spark,
        make_archive(WITH_NULL_KEYS),
        r"archived topic 'payments' \(DataFrame\): 3 null value\(s\) in key column 'user' "
        r"\(Flink's keyBy fails the job on a null key; null_keys='drop' drops such records, as "
        r"a filter before keyBy would\) \(of 5 records\), e\.g\. partition 0 offset 1",
    )


def test_null_keys_dropped_on_request_still_move_the_watermark_and_are_counted(spark, make_archive):
    """As ``source -> filter(key != null) -> keyBy``: the source's watermark saw them.

    Partition 0: et 1000 (a, 1), 1500 (null), 2500 (a, 2), 3200 (null); partition 1: 3300
    (null); pt = et. The MIN watermark passes 1999 ([1000, 2000)'s maxTs) and 2999 when both
    partitions have seen et >= 2000 and >= 3000: partition 0 at 3200, partition 1 at 3300, so
    on the tick at 3400. Both windows fire then, in maxTs order: a = 1 (the null key's 100
    left out) and a = 2. Without the null-key records neither would have fired.
    """
    topic = ArchivedTopic("payments", dataframe=make_archive(WITH_NULL_KEYS))
    result = backfill(spark, replace(job_on(topic), null_keys="drop"))
    emissions = result.emissions.select(
        "user", ms("window_start"), ms("emit_time"), "emit_sequence", "record_count", "amount_sum"
    ).collect()
    assert sorted(tuple(r) for r in emissions) == [
        ("a", 1000, 3400, 0, 1, 1.0),
        ("a", 2000, 3400, 1, 1, 2.0),
    ]
    assert result.stats == {
        "records_read": 5,
        "duplicates_removed": 0,
        "records_null_key": 3,
        "records_on_time": 2,
        "records_late": 0,
        "records_per_record": 0,
        "records_dropped": 0,
        "records_pending": 0,
    }
    result.release()


@pytest.mark.parametrize("kind", ["sliding", "session"])
def test_dropped_null_keys_agree_with_the_simulator(spark, kind):
    """The simulator's key None is exactly such a record: its source's watermark sees it, no
    window does. A third of a table case's records get a null key."""
    records, job = _base_zero_case(kind)
    nulled = [replace(r, key=None) if r.offset % 3 == 1 else r for r in records]
    counts: dict[str, int] = {}
    emissions, dropped = simulate(nulled, job, counts)
    actual, actual_dropped, stats = spark_backfill_with_stats(spark, nulled, job, null_keys="drop")
    assert normalized(actual) == normalized(as_logged(job, emissions))
    assert actual_dropped == dropped
    null_keys = len({(r.topic, r.partition, r.offset) for r in nulled if r.key is None})
    assert null_keys > 0
    assert stats == {**expected_stats(nulled, counts), "records_null_key": null_keys}


# --------------------------------------------------------------------------- record filters

#: WITH_NULL_KEYS with the null keys as "b" and a record filter that leaves them out.
WITH_FILTERED = [(p, o, et, user or "b", amount) for p, o, et, user, amount in WITH_NULL_KEYS]


def test_filtered_records_still_move_the_watermark_and_are_counted(spark, make_archive):
    """``where`` is a ``filter`` before ``keyBy``, as ``null_keys="drop"`` is: the three b
    records over 50 are left out of their windows, but the source's watermark saw them, so the
    windows fire at 3400 exactly as in the null-key case above."""
    topic = ArchivedTopic("payments", dataframe=make_archive(WITH_FILTERED))
    result = backfill(spark, replace(job_on(topic), where="amount < 50"))
    emissions = result.emissions.select(
        "user", ms("window_start"), ms("emit_time"), "emit_sequence", "record_count", "amount_sum"
    ).collect()
    assert sorted(tuple(r) for r in emissions) == [
        ("a", 1000, 3400, 0, 1, 1.0),
        ("a", 2000, 3400, 1, 1, 2.0),
    ]
    assert result.stats["records_filtered"] == 3
    assert result.stats["records_on_time"] == 2
    assert result.ran == "aligned-in-order"  # the strategy without a sort takes no filter
    result.release()


@pytest.mark.parametrize("kind", ["sliding", "session"])
def test_filtered_records_agree_with_the_simulator(spark, kind):
    """A filtered record is the simulator's record without a key. ``amount > 4`` in Spark SQL:
    a NaN amount is above every number there, so it stays."""
    records, job = _base_zero_case(kind)
    kept = [r if r.value != r.value or r.value > 4 else replace(r, key=None) for r in records]
    counts: dict[str, int] = {}
    emissions, dropped = simulate(kept, job, counts)
    actual, actual_dropped, stats = spark_backfill_with_stats(
        spark, records, job, where="amount > 4"
    )
    assert normalized(actual) == normalized(as_logged(job, emissions))
    assert actual_dropped == dropped
    filtered = len({(r.topic, r.partition, r.offset) for r in kept if r.key is None})
    assert filtered > 0
    assert stats == {**expected_stats(records, counts), "records_filtered": filtered}


def test_a_filter_on_enriched_columns_is_refused():
    topic = ArchivedTopic("payments", dataframe=None, path="unused")
    with pytest.raises(ValueError, match=r"reads enriched or derived columns \['fee'\]"):
        replace(job_on(topic), derived={"fee": "amount * 0.01"}, where="fee > 1")


def test_null_keys_option_is_checked():
    topic = ArchivedTopic("payments", dataframe=None, path="unused")
    with pytest.raises(ValueError, match=r"null_keys must be 'refuse' or 'drop', got 'skip'"):
        replace(job_on(topic), null_keys="skip")


def test_null_keys_is_a_feast_tag():
    view = objects(Path("unused"))[1]
    assert stream_job(view).null_keys == "refuse"
    view.tags.update(backfill_tags(null_keys="drop"))
    assert stream_job(view).null_keys == "drop"
    view.tags.update(backfill_tags(null_keys="skip"))
    with pytest.raises(ValueError, match=r"null_keys must be 'refuse' or 'drop', got 'skip'"):
        stream_job(view)


# ----------------------------------------------------------------- partitions and offsets


@pytest.mark.parametrize(
    "row, message",
    [
        (
            (0, -1, 3000, "a", 4.0),
            r"1 negative value\(s\) in column 'offset' \(of 3 records\), e\.g\. partition 0 "
            r"offset -1",
        ),
        (
            (-2, 5, 3000, "a", 4.0),
            r"1 negative value\(s\) in column 'partition' \(of 3 records\), e\.g\. partition -2 "
            r"offset 5",
        ),
    ],
)
def test_negative_partitions_and_offsets_are_refused_at_their_place(
    spark, make_archive, row, message
):
    refused(spark, make_archive([*GOOD, row]), r"archived topic 'payments' .*" + message)


@pytest.mark.parametrize(
    "column, kind, message",
    [
        ("offset", "double", r"column 'offset' has type double, .* e\.g\. 0\.5 at partition 0"),
        ("offset", "string", r"column 'offset' has type string, .* e\.g\. '0\.5' at partition 0"),
        ("partition", "string", r"column 'partition' has type string, .* e\.g\. 'p0' at offset"),
    ],
)
def test_partitions_and_offsets_that_are_not_integers_are_refused_with_a_sample(
    spark, make_archive, column, kind, message
):
    sample = "p0" if column == "partition" else "0.5"
    df = make_archive(GOOD).withColumn(column, F.lit(sample).cast(kind))
    refused(spark, df, r"archived topic 'payments' \(DataFrame\): " + message)


def test_a_bigint_partition_beyond_kafkas_range_is_refused_not_truncated(spark, make_archive):
    df = make_archive(GOOD).withColumn(
        "partition", F.when(F.col("offset") == 1, F.lit(2**32)).otherwise(0)
    )
    refused(
        spark,
        df,
        r"1 value\(s\) in column 'partition' beyond Kafka's largest partition number "
        r"\(2147483647\) \(of 2 records\), e\.g\. partition 4294967296 offset 1",
    )


def test_a_summed_column_that_is_not_a_number_is_refused(spark, make_archive):
    df = make_archive(GOOD).withColumn("amount", F.col("amount").cast("string"))
    refused(spark, df, r"column 'amount' has type string, but it is summed or averaged")


# ------------------------------------------------------------------------- schema drift


def test_a_column_changing_type_between_archive_versions(spark, make_archive, tmp_path):
    """The backfill reads one Delta version (the latest, a snapshot); the fingerprint holds
    it, so a new version recomputes the stored log, overwritten in one transaction (never a
    mix of versions); a version the job cannot read is refused and the stored log stays.

    Version 0: amount double, 1.0 at et 1000 and 2.0 at 2000: [1000, 2000) fires at the tick
    2000 with 1.0. Version 1 (amount bigint): 5 and 7: 5, a bigint. Version 2: a string."""
    archive, log = str(tmp_path / "payments"), str(tmp_path / "log")
    job = job_on(ArchivedTopic("payments", path=archive))

    def write(df, **options) -> None:
        df.write.format("delta").mode("overwrite").options(**options).save(archive)

    write(make_archive(GOOD))
    first = fingerprint(spark, job)
    assert ensure_emission_log(spark, job, log).select("amount_sum").collect() == [(1.0,)]

    as_long = make_archive([(0, 0, 1000, "a", 5.0), (0, 1, 2000, "a", 7.0)])
    write(as_long.withColumn("amount", F.col("amount").cast("long")), overwriteSchema="true")
    assert fingerprint(spark, job) != first
    stored = ensure_emission_log(spark, job, log)
    assert dict(stored.dtypes)["amount_sum"] == "bigint"
    assert stored.select("amount_sum").collect() == [(5,)]
    versions = DeltaTable.forPath(spark, log).history().count()

    write(make_archive(GOOD).withColumn("amount", F.lit("x")), overwriteSchema="true")
    with pytest.raises(BadArchiveError, match=r"column 'amount' has type string"):
        ensure_emission_log(spark, job, log)
    assert DeltaTable.forPath(spark, log).history().count() == versions, "nothing written"


# ---------------------------------------------------------- event times far from today

#: 1938-04-24T22:13:20Z (negative epoch ms) and 9999-12-28T03:06:40Z (5 days before the end
#: of Spark's and Feast's timestamp range).
BEFORE_1970 = -1_000_000_000_000
YEAR_9999 = 253_401_900_000_000


@pytest.mark.parametrize(
    "kind, base",
    [("tumbling", BEFORE_1970), ("sliding", YEAR_9999), ("session", BEFORE_1970)],
    ids=["tumbling-1938", "sliding-9999", "session-1938"],
)
def test_event_times_before_1970_and_in_year_9999_agree_with_the_simulator(spark, kind, base):
    """Watermarks, ticks and timers are plain epoch-ms arithmetic: an archive shifted far into
    the past or future gives the simulator's log, drops and counts."""
    records, job = _base_zero_case(kind)
    check(spark, shifted(records, base), job)


def test_windows_of_negative_and_year_9999_times_are_flinks(spark):
    """Flink's ``TimeWindow.getWindowStartWithOffset``: ``remainder = (t - offset) % size``,
    plus ``size`` when negative (Java's ``%`` keeps the sign), so -1 is in [-1000, 0) and
    -1000 starts its own window; sliding windows listed latest start first. The last
    millisecond of 9999 (253402300799999) is in a window that ends in year 10000: an epoch-ms
    long in the log (Spark's timestamps reach year 294247; Python's datetime stops at 9999)."""
    last = 253_402_300_799_999
    records = spark.createDataFrame([(-1501,), (-1000,), (-1,), (last,)], "_et long")
    tumbling = TumblingWindows(1000).assign(records)
    assert [tuple(r) for r in tumbling.select(EVENT_TIME, WINDOW_START).collect()] == [
        (-1501, -2000),
        (-1000, -1000),
        (-1, -1000),
        (last, last - 999),
    ]
    sliding = SlidingWindows(1000, 500, offset_ms=100).assign(records.limit(3))
    assert [tuple(r) for r in sliding.select(EVENT_TIME, WINDOW_START).collect()] == [
        (-1501, -1900),
        (-1501, -2400),
        (-1000, -1400),
        (-1000, -1900),
        (-1, -400),
        (-1, -900),
    ]


# ------------------------------------------------------------------ long sum overflow


@pytest.mark.parametrize(
    "window", [TumblingWindows(1000), SessionWindows(500)], ids=["tumbling", "session"]
)
def test_a_long_sum_that_overflows_is_refused_naming_the_column(
    spark, make_archive, tmp_path, window
):
    """Three records of 2^62 at et 1000-1002 sum to 3 * 2^62 > 2^63 - 1 in [1000, 2000) (the
    session [1000, 1502)), fired by et 2000. Flink's Java long would wrap to -2^62; Spark's
    ANSI sum raises deep in a stage, the session replay's sum likewise: the write is refused
    with the feature and column named, and neither the log nor its dropped records written."""
    rows = [(0, i, 1000 + i, "a", 0.0) for i in range(3)] + [(0, 3, 2000, "a", 0.0)]
    df = make_archive(rows).withColumn(
        "amount", F.when(F.col("offset") < 3, F.lit(2**62)).otherwise(F.lit(0))
    )
    job = replace(job_on(ArchivedTopic("payments", dataframe=df)), window=window)
    log = str(tmp_path / "log")
    with pytest.raises(
        BadArchiveError,
        match=r"archived topic 'payments' \(DataFrame\): feature 'amount_sum' sums integer "
        r"column 'amount': a window's sum overflows a 64-bit long .* cast the column to "
        r"decimal or double",
    ):
        backfill(spark, job).write(log, dropped_path(log))
    assert not DeltaTable.isDeltaTable(spark, log)
    assert not DeltaTable.isDeltaTable(spark, dropped_path(log))


# ---------------------------------------------------- unicode and 10 kB keys, into Redis


def test_unicode_and_10_kb_keys_go_through_the_log_into_redis(
    spark, make_archive, redis_server, tmp_path
):
    """Keys are strings to Spark, Delta and Feast alike: the log keeps them byte for byte and
    Redis is written under Feast's own key encoding (read back by Feast's ``online_read``).
    [1000, 2000) fires at the tick 2000 (et 2000 reached): 1.0, 2.0 and 3.0 at 00:00:02."""
    keys = ["ü-ключ-鍵-🙂", "k" * 10_240, "\u0000nul and\nnewline"]
    rows = [(0, i, 1000 + i, k, float(i + 1)) for i, k in enumerate(keys)]
    topic = ArchivedTopic("payments", dataframe=make_archive([*rows, (0, 3, 2000, "z", 9.0)]))
    result = backfill(spark, job_on(topic))
    log = str(tmp_path / "log")
    result.write(log)
    emissions = spark.read.format("delta").load(log)
    assert sorted(r[0] for r in emissions.select("user").collect()) == sorted(keys)

    view = FeatureView(
        name="spend",
        entities=[Entity(name="user", join_keys=["user"], value_type=ValueType.STRING)],
        ttl=timedelta(0),
        schema=[Field(name="user", dtype=String), Field(name="amount_sum", dtype=Float64)],
        source=FileSource(path="unused", timestamp_field="event_time"),
    )
    config = RepoConfig(
        project="hostile_keys",
        provider="local",
        registry=str(tmp_path / "registry.db"),
        online_store={"type": "redis", "connection_string": f"{redis_server},db=5"},
        entity_key_serialization_version=3,
    )
    state = state_at(emissions, ["user"], datetime(1970, 1, 1, 0, 0, 3, tzinfo=timezone.utc))
    assert write_online(state, view, config) == 3
    read = RedisOnlineStore().online_read(
        config,
        view,
        [
            EntityKeyProto(join_keys=["user"], entity_values=[ValueProto(string_val=k)])
            for k in keys
        ],
    )
    assert [(stamp.timestamp(), values["amount_sum"].double_val) for stamp, values in read] == [
        (2.0, 1.0),
        (2.0, 2.0),
        (2.0, 3.0),
    ]


# ------------------------------------------------------- time ranges: empty, START > END


@pytest.fixture(scope="module")
def store(tmp_path_factory, spark, redis_server):
    """``spend_1m`` of ``tests/test_online_stores.py`` on Redis database 6: emissions at
    10:01:30 (u1 = 1, u3 = 32), 10:02:30, 10:02:31, 10:02:32 and 10:09:00."""
    root = tmp_path_factory.mktemp("hostile_ranges")
    archive = root / "small"
    small_archive(spark).write.format("delta").save(str(archive))
    online = {"type": "redis", "connection_string": f"{redis_server},db=6"}
    made = FeatureStore(config=stores_config(root / "repo", online))
    made.apply(objects(archive))
    return made


def database(store: FeatureStore) -> redis.Redis:
    host, port = store.config.online_store.connection_string.split(",")[0].split(":")
    return redis.Redis(host=host, port=int(port), db=6)


def redis_content(store: FeatureStore) -> dict:
    client = database(store)
    return {k: client.hgetall(k) for k in sorted(client.keys())}


def flushed(store: FeatureStore) -> FeatureStore:
    database(store).flushdb()
    return store


def spend(store: FeatureStore) -> list:
    rows = [{"user_id": u} for u in USERS]
    return store.get_online_features(["spend_1m:spend"], rows).to_dict()["spend"]


def test_materialize_with_start_after_end_is_refused_by_feast_and_writes_nothing(store):
    flushed(store)
    with pytest.raises(ValueError, match=r"start_date .* is greater than the given end_date"):
        store.materialize(t("10:05:00"), t("10:00:00"), ["spend_1m"])
    assert redis_content(store) == {}


def test_an_empty_range_writes_exactly_the_emissions_at_that_instant(store):
    """[START, END] is closed: START = END = 10:01:30 is the instant [10:00, 10:01) fired."""
    flushed(store).materialize(t("10:01:30"), t("10:01:30"), ["spend_1m"])
    assert spend(store) == [1.0, None, 32.0, None]
    store.materialize(t("10:05:00"), t("10:06:00"), ["spend_1m"])  # nothing emitted there
    assert spend(store) == [1.0, None, 32.0, None]


def test_materialize_incremental_to_an_end_before_the_last_one_is_refused(store):
    """Feast starts an incremental run where the last one ended; an END before that START
    would write nothing that belongs there: refused, naming both, before anything is written."""
    flushed(store).materialize(t("10:00:00"), t("10:03:00"), ["spend_1m"])
    before = redis_content(store)
    assert len(before) == 3
    with pytest.raises(
        ValueError, match=r"feature view 'spend_1m': START .* after END 2026-01-01 10:02"
    ):
        store.materialize_incremental(t("10:02:00"), ["spend_1m"])
    assert redis_content(store) == before


def test_training_over_an_inverted_range_is_refused_and_an_instant_gives_its_emissions(store):
    with pytest.raises(ValueError, match=r"start_date 2026-01-01 10:05:00\+00:00 is after"):
        store.get_historical_features(
            features=["spend_1m:spend"], start_date=t("10:05:00"), end_date=t("10:00:00")
        )
    instant = store.get_historical_features(
        features=["spend_1m:spend"], start_date=t("10:01:30"), end_date=t("10:01:30")
    ).to_df()
    assert sorted(zip(instant["user_id"], instant["spend"], strict=True)) == [
        ("u1", 1.0),
        ("u3", 32.0),
    ]


def test_a_refused_archive_leaves_redis_untouched(spark, store):
    """A new archive version with a null key: the materialization is refused before a key is
    written (the archive is restored afterwards)."""
    flushed(store).materialize(t("10:00:00"), t("10:03:00"), ["spend_1m"])
    before = redis_content(store)
    path = store.get_stream_feature_view("spend_1m").batch_source.path
    table = DeltaTable.forPath(spark, path)
    version = table.history(1).first()["version"]
    small_archive(spark, [(7, "10:09:30", None, 1.0)]).write.format("delta").mode("append").save(
        path
    )
    try:
        with pytest.raises(
            BadArchiveError,
            match=r"1 null value\(s\) in key column 'user_id' .* e\.g\. partition 0 offset 7",
        ):
            store.materialize(t("10:00:00"), t("10:10:00"), ["spend_1m"])
        assert redis_content(store) == before
    finally:
        table.restoreToVersion(version)
