"""SEMANTICS section 1: inferred processing time, hand-computed."""

from feast_stream_backfill.processing_time import ProcessingTimeModel, with_processing_time
from feast_stream_backfill.records import ArchivedTopic, read_records
from tests.conftest import archive

SEED_ET = [10, 7, 11, 12, 15, 9]


def processing_times(spark, rows, model: ProcessingTimeModel | None = None):
    model = model or ProcessingTimeModel()
    topic = ArchivedTopic("t", dataframe=archive(spark, rows))
    timed = with_processing_time(read_records(spark, topic), model)
    return [
        (r["_partition"], r["_offset"], r["_pt"], r["_duplicate"])
        for r in timed.orderBy("_partition", "_offset", "_duplicate").collect()
    ]


def test_seed_example_is_the_running_max_of_event_time(spark):
    rows = [(0, i, et, "u", 1.0) for i, et in enumerate(SEED_ET)]
    assert [pt for _, _, pt, _ in processing_times(spark, rows)] == [10, 10, 11, 12, 15, 15]


def test_seed_example_with_min_gap_and_min_delay(spark):
    # pt_i = max(pt_{i-1} + D1, et_i + D2) with D1 = 1, D2 = 2, step by step:
    # 10+2=12; max(13, 9)=13; max(14, 13)=14; max(15, 14)=15; max(16, 17)=17; max(18, 11)=18
    rows = [(0, i, et, "u", 1.0) for i, et in enumerate(SEED_ET)]
    model = ProcessingTimeModel(min_gap_ms=1, min_delay_ms=2)
    assert [pt for _, _, pt, _ in processing_times(spark, rows, model)] == [12, 13, 14, 15, 17, 18]


def test_ranks_not_offsets_and_partitions_are_independent(spark):
    # Offset gaps (compaction) do not add D1 gaps; partition 1 has its own sequence.
    rows = [(0, 0, 100, "u", 1.0), (0, 50, 100, "u", 1.0), (1, 7, 5, "v", 1.0)]
    model = ProcessingTimeModel(min_gap_ms=10)
    assert processing_times(spark, rows, model) == [
        (0, 0, 100, False),
        (0, 50, 110, False),
        (1, 7, 5, False),
    ]


def test_duplicate_offsets_count_once(spark):
    rows = [(0, 0, 10, "u", 1.0), (0, 1, 20, "u", 1.0), (0, 1, 20, "u", 1.0), (0, 2, 5, "u", 1.0)]
    model = ProcessingTimeModel(min_gap_ms=1)
    # Ranks 0, 1, (copy), 2: pt = 10, max(11, 20)=20, -, max(21, 5)=21
    result = processing_times(spark, rows, model)
    assert [(o, pt) for _, o, pt, dup in result if not dup] == [(0, 10), (1, 20), (2, 21)]
    assert sum(dup for *_, dup in result) == 1
