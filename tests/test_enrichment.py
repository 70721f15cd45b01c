"""Enrichment with external state, every expectation computed by hand.

The model: docs/concepts/model.md#enrichment.

Seed 004's exchange rates (yen per unit), an SCD type II table without ``valid_to``::

    r_time  r_currency  r_rate          transactions (t_id, t_time, t_price, t_currency)
    09:00   YEN           1             1  10:15   2  EUR
    09:20   EUR         140             2  10:35   5  USD
    09:40   USD         150             3  10:55  50  YEN
    10:30   EUR         142             4  11:05   2  EUR
    10:50   USD         148             5  11:15   5  USD

archived in ONE partition in the order 1, 3, 2, 4, 5 (transaction 2 reached Kafka after 3), so
the inferred processing times (running max of event time) are::

    t_id     1      3      2      4      5
    et     10:15  10:55  10:35  11:05  11:15
    pt     10:15  10:55  10:55  11:05  11:15

Event-time temporal join (version at et), seed 004's result t_yen = 280, 750, 50, 284, 740
for t_id 1..5. Processing-time lookup join (version at pt): transaction 2 is looked up at
10:55, after USD changed to 148 at 10:50: 5 x 148 = 740, not 750.
"""

from __future__ import annotations

import time
from datetime import datetime, timezone

import pytest
from delta.tables import DeltaTable
from pyspark.sql import functions as F

from feast_stream_backfill import (
    Aggregation,
    ArchivedTopic,
    StreamJob,
    TumblingWindows,
    WatermarkStrategy,
    backfill,
)
from feast_stream_backfill.emission_store import ensure_emission_log
from feast_stream_backfill.enrichment import (
    CdcLog,
    DeltaHistory,
    Lookup,
    ScdTable,
    enrich,
    expression_columns,
)
from feast_stream_backfill.errors import BadArchiveError, BadStateTableError
from feast_stream_backfill.processing_time import (
    DUPLICATE,
    ProcessingTimeModel,
    with_processing_time,
)
from feast_stream_backfill.records import read_records

DAY = int(datetime(2026, 1, 1, tzinfo=timezone.utc).timestamp() * 1000)
MINUTE = 60_000


def hm(clock: str) -> int:
    """``"10:15"`` on 2026-01-01 as epoch ms."""
    hours, minutes = clock.split(":")
    return DAY + (int(hours) * 60 + int(minutes)) * MINUTE


def ms(t: int) -> datetime:
    """Epoch ms as Spark collects a timestamp: a naive UTC datetime."""
    return datetime.fromtimestamp(t / 1000, tz=timezone.utc).replace(tzinfo=None)


RATES = [
    ("09:00", "YEN", 1.0),
    ("09:20", "EUR", 140.0),
    ("09:40", "USD", 150.0),
    ("10:30", "EUR", 142.0),
    ("10:50", "USD", 148.0),
]
# (offset, t_id, t_time, t_price, t_currency): archive order 1, 3, 2, 4, 5.
TRANSACTIONS = [
    (0, 1, "10:15", 2.0, "EUR"),
    (1, 3, "10:55", 50.0, "YEN"),
    (2, 2, "10:35", 5.0, "USD"),
    (3, 4, "11:05", 2.0, "EUR"),
    (4, 5, "11:15", 5.0, "USD"),
]


def rates_table(spark, rows=RATES) -> ScdTable:
    df = spark.createDataFrame(
        [(hm(t), c, r) for t, c, r in rows], "ms long, r_currency string, r_rate double"
    ).select(F.timestamp_millis("ms").alias("r_time"), "r_currency", "r_rate")
    return ScdTable("exchange_rates", keys=["r_currency"], valid_from="r_time", dataframe=df)


def archive_df(spark, rows=TRANSACTIONS, user: str = "u1"):
    data = [(0, o, hm(t), user, i, p, c) for o, i, t, p, c in rows]
    schema = "partition int, offset long, et long, user string, t_id int, t_price double, "
    schema += "t_currency string"
    df = spark.createDataFrame(data, schema)
    return df.withColumn("event_time", F.timestamp_millis("et")).drop("et")


def rate_lookup(source, **options) -> Lookup:
    return Lookup(source, ["r_rate"], on={"t_currency": "r_currency"}, **options)


YEN = {"t_yen": "t_price * r_rate"}


def enriched(spark, lookups, rows=TRANSACTIONS, derived=YEN, model=None):
    """t_id -> t_yen, through the backfill's own stages: read, infer pt, enrich."""
    model = model or ProcessingTimeModel()
    records = read_records(spark, ArchivedTopic("transactions", dataframe=archive_df(spark, rows)))
    timed = with_processing_time(records, model).where(~F.col(DUPLICATE))
    out = enrich(timed, lookups, derived).select("t_id", "t_yen")
    return {r.t_id: r.t_yen for r in out.collect()}


def test_seed_004_exchange_rates_event_time_temporal_join(spark):
    # The version at each transaction's event time: seed 004's results, whatever the pt.
    lookups = [rate_lookup(rates_table(spark), time="event")]
    assert enriched(spark, lookups) == {1: 280.0, 2: 750.0, 3: 50.0, 4: 284.0, 5: 740.0}


def test_processing_time_lookup_reads_the_version_at_the_inferred_processing_time(spark):
    # Transaction 2 (et 10:35) is read at pt 10:55, after USD's 10:50 change: 5 x 148.
    lookups = [rate_lookup(rates_table(spark), time="processing")]
    assert enriched(spark, lookups) == {1: 280.0, 2: 740.0, 3: 50.0, 4: 284.0, 5: 740.0}


def test_lookup_delay_shifts_the_version_read(spark):
    # Looked up 20 minutes after pt: 1 at 10:35 (EUR 142 since 10:30) -> 284; 2 at 11:15 ->
    # 740; 3 at 11:15 -> 50; 4 at 11:25 -> 284; 5 at 11:35 -> 740.
    lookups = [rate_lookup(rates_table(spark), delay_ms=20 * MINUTE)]
    assert enriched(spark, lookups) == {1: 284.0, 2: 740.0, 3: 50.0, 4: 284.0, 5: 740.0}
    # D2 = 20 minutes moves pt itself: the same versions.
    model = ProcessingTimeModel(min_delay_ms=20 * MINUTE)
    assert enriched(spark, [rate_lookup(rates_table(spark))], model=model) == {
        1: 284.0,
        2: 740.0,
        3: 50.0,
        4: 284.0,
        5: 740.0,
    }


def test_a_version_is_visible_from_its_own_instant(spark):
    # EUR changes at 10:30: a lookup at 10:30:00.000 sees 142, one at 10:29:59.999 still 140.
    rows = [(0, 1, "10:29", 1.0, "EUR"), (1, 2, "10:30", 1.0, "EUR")]
    lookups = [rate_lookup(rates_table(spark), delay_ms=MINUTE - 1)]  # 10:29:59.999, 10:30:59.999
    assert enriched(spark, lookups, rows) == {1: 140.0, 2: 142.0}
    lookups = [rate_lookup(rates_table(spark), time="event")]
    assert enriched(spark, lookups, rows) == {1: 140.0, 2: 142.0}


MISSING = [
    (0, 6, "09:10", 3.0, "EUR"),  # read at 09:10, before EUR's first rate (09:20)
    (1, 1, "10:15", 2.0, "EUR"),
    (2, 7, "10:20", 4.0, "GBP"),  # no GBP rate at all
    (3, 8, "10:25", 5.0, None),  # no currency: a null key matches nothing
]


def test_missing_state_is_null_for_a_left_join_and_removes_the_record_for_an_inner_one(spark):
    left = [rate_lookup(rates_table(spark), how="left")]
    assert enriched(spark, left, MISSING) == {1: 280.0, 6: None, 7: None, 8: None}
    inner = [rate_lookup(rates_table(spark), how="inner")]
    assert enriched(spark, inner, MISSING) == {1: 280.0}


def test_scd_valid_to_ends_a_version(spark):
    # EUR 140 valid [09:20, 10:00), then nothing until 142 from 10:30 (valid_to null).
    df = spark.createDataFrame(
        [("EUR", hm("09:20"), hm("10:00"), 140.0), ("EUR", hm("10:30"), None, 142.0)],
        "r_currency string, valid_from long, valid_to long, r_rate double",
    )
    scd = ScdTable("rates", ["r_currency"], valid_to="valid_to", dataframe=df)
    rows = [
        (0, 1, "09:59", 1.0, "EUR"),  # 140
        (1, 2, "10:00", 1.0, "EUR"),  # valid_to is exclusive: no state
        (2, 3, "10:30", 1.0, "EUR"),  # 142
    ]
    assert enriched(spark, [rate_lookup(scd)], rows) == {1: 140.0, 2: None, 3: 142.0}


def cdc_log(spark, with_snapshot: bool) -> CdcLog:
    changes = [
        ("EUR", "09:50", "upsert", 139.0, 1),  # at/before the snapshot: already in it
        ("EUR", "10:30", "update", 142.0, 2),
        ("USD", "10:40", "delete", None, 3),
        ("USD", "10:50", "insert", 148.0, 4),
        ("EUR", "11:00", "update", 144.0, 6),  # same instant as the next: sequence decides
        ("EUR", "11:00", "update", 143.0, 5),
    ]
    log = spark.createDataFrame(
        [(k, hm(t), op, r, s) for k, t, op, r, s in changes],
        "r_currency string, ms long, op string, r_rate double, lsn long",
    ).select("r_currency", F.timestamp_millis("ms").alias("change_time"), "op", "r_rate", "lsn")
    snapshot = spark.createDataFrame(
        [("EUR", 140.0), ("USD", 150.0)], "r_currency string, r_rate double"
    )
    return CdcLog(
        "rates_cdc",
        ["r_currency"],
        sequence="lsn",
        dataframe=log,
        snapshot_dataframe=snapshot if with_snapshot else None,
        snapshot_time_ms=hm("10:00") if with_snapshot else None,
    )


CDC_POINTS = [
    (0, 1, "09:55", 1.0, "EUR"),  # snapshot: unknown before 10:00 / no snapshot: 139
    (1, 2, "10:00", 1.0, "EUR"),  # snapshot: 140 (its own instant) / log: 139
    (2, 3, "10:35", 1.0, "EUR"),  # 142
    (3, 4, "10:35", 1.0, "USD"),  # snapshot: 150 / log: never inserted before 10:50 -> null
    (4, 5, "10:45", 1.0, "USD"),  # deleted at 10:40: null
    (5, 6, "10:55", 1.0, "USD"),  # 148
    (6, 7, "11:00", 1.0, "EUR"),  # lsn 6 after lsn 5: 144
]


def test_cdc_log_over_a_snapshot_with_an_upsert_and_a_delete(spark):
    lookups = [rate_lookup(cdc_log(spark, with_snapshot=True), time="event")]
    assert enriched(spark, lookups, CDC_POINTS) == {
        1: None,
        2: 140.0,
        3: 142.0,
        4: 150.0,
        5: None,
        6: 148.0,
        7: 144.0,
    }
    inner = [rate_lookup(cdc_log(spark, with_snapshot=True), time="event", how="inner")]
    assert sorted(enriched(spark, inner, CDC_POINTS)) == [2, 3, 4, 6, 7]


def test_cdc_log_without_a_snapshot_is_replayed_from_its_first_change(spark):
    lookups = [rate_lookup(cdc_log(spark, with_snapshot=False), time="event")]
    assert enriched(spark, lookups, CDC_POINTS) == {
        1: 139.0,
        2: 139.0,
        3: 142.0,
        4: None,
        5: None,
        6: 148.0,
        7: 144.0,
    }


@pytest.mark.parametrize("change_data_feed", [True, False])
def test_delta_table_updated_in_three_commits_is_joined_by_commit_time(
    spark, tmp_path, change_data_feed
):
    # v0 writes EUR 140 and USD 150, v1 updates EUR to 142, v2 deletes USD. Each version is
    # the state from its commit timestamp (Delta's history) on.
    path = str(tmp_path / "rates")
    writer = spark.createDataFrame(
        [("EUR", 140.0), ("USD", 150.0)], "r_currency string, r_rate double"
    ).write.format("delta")
    if change_data_feed:
        writer = writer.option("delta.enableChangeDataFeed", "true")
    writer.save(path)
    table = DeltaTable.forPath(spark, path)
    time.sleep(0.05)
    table.update("r_currency = 'EUR'", {"r_rate": F.lit(142.0)})
    time.sleep(0.05)
    table.delete("r_currency = 'USD'")
    source = DeltaHistory("rates", ["r_currency"], path)
    assert source.uses_change_data_feed(spark) is change_data_feed  # detected from the table
    commits = source.commits(spark)
    assert [v for v, _ in commits] == [0, 1, 2]
    c0, c1, c2 = (t for _, t in commits)
    assert c0 < c1 < c2

    points = [  # (t_id, lookup time, currency) -> expected rate
        (1, c0 - 1, "EUR", None),  # before the table existed
        (2, c0, "EUR", 140.0),
        (3, c0, "USD", 150.0),
        (4, c1 - 1, "EUR", 140.0),
        (5, c1, "EUR", 142.0),
        (6, c2 - 1, "USD", 150.0),
        (7, c2, "USD", None),  # deleted
        (8, c2 + 60_000, "EUR", 142.0),
    ]
    records = spark.createDataFrame(
        [(i, t, t, c) for i, t, c, _ in points], "t_id int, _pt long, _et long, t_currency string"
    )
    lookup = Lookup(source, ["r_rate"], on={"t_currency": "r_currency"})
    got = {r.t_id: r.r_rate for r in enrich(records, [lookup]).collect()}
    assert got == {i: rate for i, _, _, rate in points}


def test_windows_aggregate_enriched_values_and_inner_removed_records_still_move_the_watermark(
    spark,
):
    # One partition, 30-minute windows, B = 0, ticks every minute. t_yen at pt (see above):
    #   [10:00, 10:30): 1 (280)          fires when et >= 10:30 is read: pt 10:55 -> 10:55
    #   [10:30, 11:00): 3 (50), 2 (740)  fires at 11:05 (transaction 4)
    #   [11:00, 11:30): 4 (284), 5 (740) fires when et >= 11:30 is read: only the GBP record
    #                                    at 12:01, which an inner join removes, and which
    #                                    still advanced the source's watermark.
    rows = TRANSACTIONS + [(5, 9, "12:01", 1.0, "GBP")]

    def run(how: str):
        job = StreamJob(
            topics=[ArchivedTopic("transactions", dataframe=archive_df(spark, rows))],
            keys=["user"],
            window=TumblingWindows(30 * MINUTE),
            aggregations=[Aggregation("t_yen", "sum", "yen_30m")],
            watermark=WatermarkStrategy(interval_ms=MINUTE),
            lookups=[rate_lookup(rates_table(spark), how=how)],
            derived=YEN,
        )
        assert job.payload_columns == ["user", "t_currency", "t_price"]
        result = backfill(spark, job)
        emissions = [
            (r.window_start, r.emit_time, r.record_count, r.yen_30m)
            for r in result.emissions.orderBy("emit_time", "emit_sequence").collect()
        ]
        return emissions, result.stats

    emissions, stats = run("inner")
    assert emissions == [
        (ms(hm("10:00")), ms(hm("10:55")), 1, 280.0),
        (ms(hm("10:30")), ms(hm("11:05")), 2, 790.0),  # an event-time join would give 800
        (ms(hm("11:00")), ms(hm("12:01")), 2, 1024.0),
    ]
    assert stats["records_on_time"] == 5 and stats["records_pending"] == 0
    assert stats["records_without_state"] == 1
    # Left join: the GBP record is kept (t_yen null), its window [12:00, 12:30) is pending.
    emissions, stats = run("left")
    assert emissions[-1] == (ms(hm("11:00")), ms(hm("12:01")), 2, 1024.0)
    assert stats["records_pending"] == 1 and stats["records_without_state"] == 0


def test_a_state_table_change_recomputes_the_stored_emission_log(spark, tmp_path):
    archive, rates, log = (str(tmp_path / n) for n in ("archive", "rates", "log"))
    archive_df(spark).write.format("delta").save(archive)
    rates_table(spark).dataframe.write.format("delta").save(rates)
    job = StreamJob(
        topics=[ArchivedTopic("transactions", path=archive)],
        keys=["user"],
        window=TumblingWindows(30 * MINUTE),
        aggregations=[Aggregation("t_yen", "sum", "yen_30m")],
        lookups=[rate_lookup(ScdTable("exchange_rates", ["r_currency"], rates, "r_time"))],
        derived=YEN,
    )
    first = ensure_emission_log(spark, job, log).orderBy("window_start").first()
    assert first.yen_30m == 280.0
    # A new EUR rate from 10:00 (141) is a new version of the state table: recomputed, and
    # transaction 1 (10:15) is now 2 x 141.
    spark.createDataFrame(
        [(ms(hm("10:00")), "EUR", 141.0)], "r_time timestamp, r_currency string, r_rate double"
    ).write.format("delta").mode("append").save(rates)
    again = ensure_emission_log(spark, job, log).orderBy("window_start").first()
    assert again.yen_30m == 282.0


@pytest.mark.parametrize(
    "drop, column",
    [("r_currency", "r_currency"), ("r_time", "r_time"), ("r_rate", "r_rate")],
)
def test_a_state_table_without_a_key_time_or_attribute_column_is_named(spark, drop, column):
    scd = rates_table(spark)
    broken = ScdTable(
        "exchange_rates", ["r_currency"], valid_from="r_time", dataframe=scd.dataframe.drop(drop)
    )
    with pytest.raises(
        BadStateTableError,
        match=rf"state table 'exchange_rates' \(DataFrame\): missing column\(s\) \['{column}'\]",
    ):
        enriched(spark, [rate_lookup(broken)])


def test_bad_state_tables_are_refused_with_table_and_column(spark, tmp_path):
    rates = rates_table(spark).dataframe
    naive = ScdTable(
        "rates",
        ["r_currency"],
        valid_from="r_time",
        dataframe=rates.withColumn("r_time", F.col("r_time").cast("timestamp_ntz")),
    )
    with pytest.raises(BadStateTableError, match="'r_time' is a naive TIMESTAMP_NTZ"):
        enriched(spark, [rate_lookup(naive)])
    nulls = ScdTable(
        "rates",
        ["r_currency"],
        valid_from="r_time",
        dataframe=rates.withColumn("r_time", F.when(F.col("r_currency") != "YEN", F.col("r_time"))),
    )
    with pytest.raises(BadStateTableError, match=r"1 null value\(s\) in column 'r_time'"):
        enriched(spark, [rate_lookup(nulls)])
    nowhere = ScdTable("rates", ["r_currency"], str(tmp_path / "none"), "r_time")
    with pytest.raises(BadArchiveError, match=r"state table 'rates' \(.*none\): cannot read it"):
        enriched(spark, [rate_lookup(nowhere)])
    log = CdcLog("rates_cdc", ["r_currency"], dataframe=rates)  # no change_time, no op
    with pytest.raises(BadStateTableError, match=r"missing column\(s\) \['change_time', 'op'\]"):
        enriched(spark, [rate_lookup(log)])


def test_lookup_declarations_are_checked(spark):
    scd = ScdTable("rates", ["r_currency"], "data/rates")
    with pytest.raises(ValueError, match="`on` must map record columns to each key column"):
        Lookup(scd, ["r_rate"], on={"t_currency": "currency"})
    with pytest.raises(ValueError, match="a lookup delay applies to processing-time lookups"):
        Lookup(scd, ["r_rate"], time="event", delay_ms=5)
    with pytest.raises(ValueError, match="how must be 'left' or 'inner'"):
        Lookup(scd, ["r_rate"], how="right")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="snapshot needs its snapshot_time_ms"):
        CdcLog("log", ["k"], "data/log", snapshot_path="data/snapshot")
    records = archive_df(spark)
    with pytest.raises(ValueError, match=r"derived column 'x' = 'no_such \* 2'"):
        enrich(records, [], {"x": "no_such * 2"})


def test_expression_columns_are_the_names_an_expression_reads():
    assert expression_columns("amount * rate") == ["amount", "rate"]
    assert expression_columns("round(amount * coalesce(rate, 1.0D), 2)") == ["amount", "rate"]
    assert expression_columns("CASE WHEN tier = 'gold' THEN amount * 0.9 ELSE amount END") == [
        "tier",
        "amount",
    ]
    assert expression_columns("cast(amount AS DECIMAL(10, 2)) + `odd name`") == [
        "amount",
        "odd name",
    ]
    assert expression_columns("fx.rate * amount::double") == ["fx", "amount"]
    assert expression_columns("aggregate(xs, 0D, (acc, x) -> acc + x * k)") == ["xs", "k"]
    assert expression_columns("DATE '2026-01-01' < d AND _et > 5 AND note = \"a b\"") == [
        "d",
        "note",
    ]
