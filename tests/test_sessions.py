"""Session windows, every expectation computed by hand, by Spark and by the simulator alike.

One partition, B = 0, on-event watermarks (W = maxEt - 1 after each record), gap 10 ms, so
``pt`` is the running max of ``et``. Amounts are powers of two: a sum names its records.
"""

from __future__ import annotations

from pyspark.sql import functions as F

from feast_stream_backfill import (
    Aggregation,
    ArchivedTopic,
    EventTimeTrigger,
    Lookup,
    ProcessingTimeTrigger,
    ScdTable,
    SessionWindows,
    StreamJob,
    WatermarkStrategy,
    backfill,
)
from tests.reference_simulator import Job, Record, simulate

GAP = 10


def logs(make_archive, rows, lateness=0, domain="event"):
    """(Spark's log, the simulator's log, Spark's dropped): rows of (key, start, end,
    emit_time, emit_sequence, firing, count, sum)."""
    job = StreamJob(
        topics=[ArchivedTopic("t", dataframe=make_archive(rows))],
        keys=["user"],
        window=SessionWindows(GAP, domain),
        aggregations=[Aggregation("amount", "sum", "sum")],
        trigger=EventTimeTrigger(lateness) if domain == "event" else ProcessingTimeTrigger(),
        watermark=WatermarkStrategy(interval_ms=0, emission="on_event"),
    )
    result = backfill(make_archive([]).sparkSession, job)
    ms = F.unix_millis
    spark = sorted(
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
        ).collect()
    )
    dropped = sorted(
        tuple(r)
        for r in result.dropped.select(
            "user", ms("window_start"), ms("window_end"), "dropped_count"
        ).collect()
    )
    records = [Record("t", p, o, et, k, v) for p, o, et, k, v in rows]
    sim = Job(size=0, gap=GAP, domain=domain, lateness=lateness, interval=0, emission="on_event")
    simulated = sorted(e[:8] for e in simulate(records, sim)[0])
    return spark, simulated, dropped, result.stats


def test_sessions_merge_when_they_touch(make_archive):
    # et 0 and 10 are exactly the gap apart: [0, 10) and [10, 20) touch (TimeWindow.intersects)
    # and merge; 25 opens [25, 35). W reaches 19 at the record et 25 (W = 24): [0, 20) fires
    # there; et 100 fires [25, 35). b's [100, 110) is still open at the end.
    rows = [(0, 0, 0, "a", 1.0), (0, 1, 10, "a", 2.0), (0, 2, 25, "a", 4.0), (0, 3, 100, "b", 8.0)]
    spark, simulated, dropped, stats = logs(make_archive, rows)
    expected = [
        ("a", 0, 20, 25, 0, "on_time", 2, 3.0),
        ("a", 25, 35, 100, 0, "on_time", 1, 4.0),
    ]
    assert spark == simulated == expected
    assert dropped == [] and stats["records_pending"] == 1 and stats["records_on_time"] == 3


def test_a_late_record_joins_a_live_session(make_archive):
    # W = 19 after et 20. et 5 alone ([5, 15), maxTs 14 <= 19) touches nothing: dropped.
    # et 12 alone would be late too, but [12, 22) touches the live [20, 30): merged [12, 30)
    # (maxTs 29 > 19) is not late (Flink merges before the lateness test). et 40 fires it.
    rows = [(0, 0, 20, "a", 1.0), (0, 1, 5, "a", 2.0), (0, 2, 12, "a", 4.0), (0, 3, 40, "b", 8.0)]
    spark, simulated, dropped, stats = logs(make_archive, rows)
    assert spark == simulated == [("a", 12, 30, 40, 0, "on_time", 2, 5.0)]
    assert dropped == [("a", 5, 15, 1)] and stats["records_dropped"] == 1


def test_allowed_lateness_late_firings_and_a_session_extended_after_firing(make_archive):
    # L = 20. pt 15 (b's et 15, W = 14): a's [0, 10) fires on time; et 3 merges into it,
    # [0, 13) (maxTs 12 <= 14): a late firing at once; et 8 extends it to [0, 18) (maxTs 17 >
    # 14): buffered again, fires on time when b's et 40 makes W = 39, when its state is also
    # cleaned (17 + 20 <= 39). So et 30 opens a new [30, 40), maxTs 39 <= 39 but 39 + 20 > 39:
    # a late firing of its own.
    rows = [
        (0, 0, 0, "a", 1.0),
        (0, 1, 15, "b", 16.0),
        (0, 2, 3, "a", 2.0),
        (0, 3, 8, "a", 4.0),
        (0, 4, 40, "b", 32.0),
        (0, 5, 30, "a", 8.0),
    ]
    spark, simulated, dropped, stats = logs(make_archive, rows, lateness=20)
    expected = [
        ("a", 0, 10, 15, 0, "on_time", 1, 1.0),
        ("a", 0, 13, 15, 1, "late", 2, 3.0),
        ("a", 0, 18, 40, 0, "on_time", 3, 7.0),
        ("a", 30, 40, 40, 1, "late", 1, 8.0),
        ("b", 15, 25, 40, 0, "on_time", 1, 16.0),
    ]
    assert spark == simulated == expected
    assert dropped == [] and stats["records_late"] == 2 and stats["records_pending"] == 1


def test_processing_time_sessions_fire_by_the_clock(make_archive):
    # pt 0 and 5: [0, 10) and [5, 15) merge, fire when the clock passes 14, at 15 (Flink's
    # timer delay); pt 30: [30, 40) at 40 (a live job's clock goes on after the archive).
    rows = [(0, 0, 0, "a", 1.0), (0, 1, 5, "a", 2.0), (0, 2, 30, "a", 4.0)]
    spark, simulated, _, _ = logs(make_archive, rows, domain="processing")
    expected = [("a", 0, 15, 15, 0, "on_time", 2, 3.0), ("a", 30, 40, 40, 0, "on_time", 1, 4.0)]
    assert spark == simulated == expected


# Regressions found by an independent check against real Flink: realistic epoch times, and a
# watermark raised by a record that an inner lookup removes. Both lost the firing's emit time.
BASE = 1767571200000  # 2026-01-05T00:00:00Z, a multiple of every tick interval used here


def _firings(result) -> list[tuple]:
    ms = F.unix_millis
    columns = ("user", ms("window_start"), ms("window_end"), ms("emit_time"), "firing", "s")
    return sorted(tuple(r) for r in result.emissions.select(*columns).collect())


def test_periodic_sessions_at_realistic_times_carry_their_emit_time(make_archive):
    # gap 60 s, B = 0, I = 200 ms. a: et 0 and 10 s -> [0, 70 s); b: 200 s -> [200, 260 s), and
    # 400 s opens [400, 460 s) (400 > 260: no merge). The record at 200 s lifts W to 200 s - 1
    # ms >= maxTs 70 s - 1 ms: a fires at the tick of 200 s (a record before a tick of its ms);
    # 400 s lifts W past 260 s - 1 ms: b's first session fires at the tick of 400 s; its second
    # waits (pending). On-event: the same instants, at the records themselves.
    rows = [(0, 1, 0, "a", 1.0), (0, 2, 10_000, "a", 2.0), (0, 3, 200_000, "b", 3.0)]
    rows += [(0, 4, 400_000, "b", 4.0)]
    archive = make_archive([(p, o, BASE + t, k, v) for p, o, t, k, v in rows])
    expected = [
        ("a", BASE, BASE + 70_000, BASE + 200_000, "on_time", 3.0),
        ("b", BASE + 200_000, BASE + 260_000, BASE + 400_000, "on_time", 3.0),
    ]
    for emission in ("periodic", "on_event"):
        job = StreamJob(
            topics=[ArchivedTopic("t", dataframe=archive)],
            keys=["user"],
            window=SessionWindows(60_000),
            aggregations=[Aggregation("amount", "sum", "s")],
            watermark=WatermarkStrategy(0, 200, emission),
        )
        result = backfill(archive.sparkSession, job)
        assert _firings(result) == expected, emission
        assert (result.stats["records_on_time"], result.stats["records_pending"]) == (3, 1)


def test_a_session_fired_by_a_record_an_inner_lookup_removed(make_archive):
    # On-event, I = 0, B = 0, gap 10 ms; rates hold EUR only. a's EUR record at 0 opens
    # [0, 10); b's XXX record at 25 has no rate: the inner lookup removes it, but it passed
    # the watermark generator first: W = 24 >= maxTs 9, so a's session fires at 25, with
    # 1 * 2. b's record never reaches the window operator.
    spark = make_archive([]).sparkSession
    archive = make_archive([(0, 1, 0, "a", 1.0), (0, 2, 25, "b", 2.0)]).withColumn(
        "cur", F.when(F.col("user") == "a", "EUR").otherwise("XXX")
    )
    rates = spark.createDataFrame([("EUR", 0, 2.0)], "cur string, valid_from long, rate double")
    job = StreamJob(
        topics=[ArchivedTopic("t", dataframe=archive)],
        keys=["user"],
        window=SessionWindows(10),
        aggregations=[Aggregation("value", "sum", "s")],
        watermark=WatermarkStrategy(0, 0, "on_event"),
        lookups=[
            Lookup(ScdTable("rates", ["cur"], dataframe=rates), ["rate"], time="event", how="inner")
        ],
        derived={"value": "amount * rate"},
    )
    result = backfill(spark, job)
    assert _firings(result) == [("a", 0, 10, 25, "on_time", 2.0)]
    assert result.stats["records_without_state"] == 1


def test_a_session_counts_its_key_column(make_archive):
    """Flink SQL's ``COUNT(*)`` is a count of the key column: the session replay reads the key
    once as the key and once as a value."""
    rows = [(0, 0, 0, "a", 1.0), (0, 1, 5, "a", 2.0), (0, 2, 30, "b", 4.0)]
    job = StreamJob(
        topics=[ArchivedTopic("t", dataframe=make_archive(rows))],
        keys=["user"],
        window=SessionWindows(GAP),
        aggregations=[Aggregation("user", "count", "n"), Aggregation("amount", "sum", "sum")],
        watermark=WatermarkStrategy(interval_ms=0, emission="on_event"),
    )
    result = backfill(make_archive([]).sparkSession, job)
    fired = result.emissions.select("user", F.unix_millis("window_end"), "n", "sum").collect()
    assert [tuple(r) for r in fired] == [("a", 15, 2, 3.0)]  # fired by b's et 30 (W = 29)
