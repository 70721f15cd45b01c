"""The timeline looked up per record and per target (:mod:`watermark_lookup`), by hand.

Buckets of 10 ms, so lookups cross buckets: a change's value is seen from later buckets
through the table of bucket entries, and within its own through the sort.
"""

from __future__ import annotations

from feast_stream_backfill.columns import POSITION, TARGET, WATERMARK
from feast_stream_backfill.processing_order import STRUCT, Position
from feast_stream_backfill.watermark_lookup import timeline_reaches, watermark_before

WIDTH = 10
#: The combined watermark: 10 from the record read at 1000 (on-event), 20 from the tick at
#: 2000, 35 from the tick at 4000, 50 from the record read at 7000.
CHANGES = [
    (Position.record(1000, "t", 0, 5), 10),
    (Position.tick(2000), 20),
    (Position.tick(4000), 35),
    (Position.record(7000, "t", 0, 9), 50),
]


def timeline(spark):
    return spark.createDataFrame(CHANGES, f"{POSITION} {STRUCT.simpleString()}, {WATERMARK} long")


def test_each_record_sees_the_last_change_strictly_before_it(spark):
    records = {
        Position.record(500, "t", 0, 1): None,  # before any change
        Position.record(1000, "t", 0, 5): None,  # the record whose own change it is
        Position.record(1000, "t", 0, 6): 10,
        Position.record(2000, "t", 0, 7): 10,  # records come before the tick of their ms
        Position.record(3500, "t", 0, 8): 20,
        Position.record(6999, "u", 3, 1): 35,  # no change in its bucket: the entry's value
        Position.record(9000, "t", 0, 10): 50,
    }
    rows = timeline(spark).sparkSession.createDataFrame(
        [(p,) for p in records], f"{POSITION} {STRUCT.simpleString()}"
    )
    seen = watermark_before(rows, timeline(spark), WIDTH).collect()
    assert {Position(*r[POSITION]): r[WATERMARK] for r in seen} == records


def test_each_target_is_first_reached_where_the_watermark_first_gets_to_it(spark):
    targets = spark.createDataFrame([(t,) for t in (5, 10, 11, 35, 36, 50, 51)], f"{TARGET} long")
    reached = timeline_reaches(targets, timeline(spark), WIDTH).collect()
    assert {r[TARGET]: Position(*r[POSITION]) for r in reached} == {
        5: CHANGES[0][0],
        10: CHANGES[0][0],
        11: CHANGES[1][0],
        35: CHANGES[2][0],
        36: CHANGES[3][0],
        50: CHANGES[3][0],
    }  # 51: never before the archive ends
