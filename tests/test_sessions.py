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
    ProcessingTimeTrigger,
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
