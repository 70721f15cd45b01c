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


# ------------------------------------------------ which keys take the closed form (by hand)

NEVER = -(2**63)  # no watermark yet
ON_TIME_ONLY = EventTimeTrigger()


def classified(spark, rows, trigger=ON_TIME_ONLY, lateness=0):
    """``_classify`` of rows (key, t, processing ms, W seen): per key, whether it is simple,
    and its records' (t, session, dropped) in processing order."""
    from feast_stream_backfill.columns import POSITION, WATERMARK
    from feast_stream_backfill.processing_order import Position
    from feast_stream_backfill.sessions import _DROPPED, _SESSION, _SIMPLE, _TIME, _classify

    df = spark.createDataFrame(
        [(k, t, Position.record(pt, "t", 0, pt), w) for k, t, pt, w in rows],
        f"user string, {_TIME} long, {POSITION} "
        "struct<time: bigint, phase: int, topic: string, partition: int, offset: bigint>, "
        f"{WATERMARK} long",
    )
    out = _classify(df, ["user"], GAP, trigger, lateness).orderBy("user", POSITION).collect()
    return {
        k: (
            {r[_SIMPLE] for r in out if r["user"] == k}.pop(),
            [(r[_TIME], r[_SESSION], r[_DROPPED]) for r in out if r["user"] == k],
        )
        for k in {r["user"] for r in out}
    }


def test_keys_whose_sessions_are_groups_take_the_closed_form(spark):
    # gap 10, rows (key, t, read at, W then).
    # "a": 0; 5 joins [0, 10) (W 0 < maxTs 9); 30 opens (30 > 5 + 10); 25 touches [30, 40)
    # (25 >= 30 - 10), no earlier session (25 > 5 + 10), W 20 < 39: sessions {0, 5}, {30, 25}.
    # "b": 0; 40 opens; 12 touches neither [0, 10) nor [40, 50) and is not closed: a third
    # live session, which only the replay follows.
    # "c": 0; at W = 20, 3 is closed (12 <= 20) and so is every earlier window: dropped for
    # certain; 50 opens.
    # "d": 100; 115 opens; at W = 60, 40 is closed and short of [115, 125), but [100, 110) is
    # not gone (60 < 109): the rule cannot tell that 40 misses it too, so the key is replayed.
    # "e": 100; at W = 200 everything is gone and 50 is closed: dropped; 300 opens.
    rows = [
        ("a", 0, 1, NEVER), ("a", 5, 2, 0), ("a", 30, 3, 4), ("a", 25, 4, 20),
        ("b", 0, 1, NEVER), ("b", 40, 2, 5), ("b", 12, 3, 6),
        ("c", 0, 1, NEVER), ("c", 3, 2, 20), ("c", 50, 3, 20),
        ("d", 100, 1, NEVER), ("d", 115, 2, 50), ("d", 40, 3, 60),
        ("e", 100, 1, NEVER), ("e", 50, 2, 200), ("e", 300, 3, 200),
    ]  # fmt: skip
    assert classified(spark, rows) == {
        "a": (True, [(0, 1, False), (5, 1, False), (30, 2, False), (25, 2, False)]),
        "b": (False, [(0, 1, False), (40, 2, False), (12, 2, False)]),
        "c": (True, [(0, 1, False), (3, 1, True), (50, 2, False)]),
        "d": (False, [(100, 1, False), (115, 2, False), (40, 2, False)]),
        "e": (True, [(100, 1, False), (50, 1, True), (300, 2, False)]),
    }


def test_a_record_short_of_the_open_session_is_dropped_once_earlier_ones_are_gone(spark):
    # gap 10. 100; 200 opens after [100, 110) is gone (W = 150 >= 109, 200 > 100); W = 190:
    # 150 is closed ([150, 160): 159 <= 190), 150 + 10 < 200 and every earlier session is
    # gone: dropped for certain, with the key still simple. 195 joins [200, 210) (W 190 < 209).
    rows = [("k", 100, 1, NEVER), ("k", 200, 2, 150), ("k", 150, 3, 190), ("k", 195, 4, 190)]
    assert classified(spark, rows) == {
        "k": (True, [(100, 1, False), (200, 2, False), (150, 2, True), (195, 2, False)])
    }


def test_a_session_that_fires_twice_sends_the_key_to_the_replay(spark):
    # "late": [0, 10)'s timer fires at W = 9; with L = 20 its state lives on, so 5 joins it
    # and the session fires a second time: not a group's single firing.
    # Without lateness the state is gone at W = 9, and 5 (> 0) opens a session of its own.
    late = classified(spark, [("k", 0, 1, NEVER), ("k", 5, 2, 9)], EventTimeTrigger(20), 20)
    assert late == {"k": (False, [(0, 1, False), (5, 1, False)])}
    fired = classified(spark, [("k", 0, 1, NEVER), ("k", 5, 2, 9)])
    assert fired == {"k": (True, [(0, 1, False), (5, 2, False)])}
