"""Inferred processing time, hand-computed, ranged against unranged.

The model: docs/concepts/model.md#records-and-processing-time.
"""

from functools import reduce

import pytest
from hypothesis import Phase, given, settings
from hypothesis import strategies as st
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

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


COLUMNS = ["_partition", "_offset", "_duplicate", "_conflict", "_rises", "_pt"]


def timed(spark, rows, model: ProcessingTimeModel, ranges: list[int]) -> dict[int, list[tuple]]:
    """Per offsets_per_range, each row's ``(partition, offset, duplicate, conflict, rises,
    pt)``, sorted; one Spark job for all of them."""
    records = read_records(spark, ArchivedTopic("t", dataframe=archive(spark, rows)))
    results = [
        with_processing_time(records, model, n).select(F.lit(n).alias("n"), *COLUMNS)
        for n in ranges
    ]
    out = {n: [] for n in ranges}
    for r in reduce(DataFrame.unionAll, results).collect():
        out[r["n"]].append(tuple(r[c] for c in COLUMNS))
    return {n: sorted(got) for n, got in out.items()}


def test_ranges_of_two_offsets_with_a_copy_and_gaps(spark):
    # Offsets 0, 1, 1 (copy, other payload), 4, 5, 9 in ranges {0, 1}, {4, 5}, {9} (2 and 3
    # empty); D1 = 1, D2 = 2 as in the seed example: pt = 10+2=12; max(13, 9)=13 (the copy
    # too); max(14, 13)=14; max(15, 14)=15; max(16, 17)=17. Rises: 10, 11, 12, 15.
    et = {0: 10, 1: 7, 4: 11, 5: 12, 9: 15}
    rows = [(0, o, e, "u", 1.0) for o, e in et.items()] + [(0, 1, 7, "u", 2.0)]
    model = ProcessingTimeModel(min_gap_ms=1, min_delay_ms=2)
    assert timed(spark, rows, model, [2])[2] == [
        (0, 0, False, False, True, 12),
        (0, 1, False, False, False, 13),
        (0, 1, True, True, False, 13),
        (0, 4, False, False, True, 14),
        (0, 5, False, False, True, 15),
        (0, 9, False, False, True, 17),
    ]


def recurrence(rows, model: ProcessingTimeModel) -> list[tuple]:
    """The processing-time rule step by step, ``pt_i = max(pt_{i-1} + D1, et_i + D2)``, over
    distinct offsets; a copy repeats its record's rank and time, and conflicts if its payload
    differs (the generator gives copies the same event time)."""
    out = []
    for partition in sorted({r[0] for r in rows}):
        pt, highest = None, None
        for offset in sorted({r[1] for r in rows if r[0] == partition}):
            first, *copies = [r for r in rows if r[:2] == (partition, offset)]
            et = first[2]
            earliest = et + model.min_delay_ms
            pt = earliest if pt is None else max(pt + model.min_gap_ms, earliest)
            rises = highest is None or et > highest
            out.append((partition, offset, False, False, rises, pt))
            out += [(partition, offset, True, c != first, False, pt) for c in copies]
            highest = et if highest is None else max(highest, et)
    return sorted(out)


@st.composite
def archives(draw) -> list[tuple]:
    """Two to eight partitions of a few records, with offset gaps (some across 64-offset words)
    and copies (faithful, or with another payload: same event time, so that which copy sorts
    first cannot matter)."""
    rows = []
    for partition in range(draw(st.integers(2, 8))):
        offset = draw(st.integers(0, 3))
        for _ in range(draw(st.integers(1, 8))):
            et = draw(st.integers(0, 20))
            rows.append((partition, offset, et, "u", 1.0))
            copy = draw(st.sampled_from([None, 1.0, 2.0]))
            if copy is not None:
                rows.append((partition, offset, et, "u", copy))
            offset += draw(st.sampled_from([1, 1, 2, 3, 64]))
    return rows


@pytest.mark.parametrize("min_gap_ms", [0, 5])
# No shrinking: each step is a Spark job; a failure is reported as drawn.
@settings(max_examples=3, deadline=None, derandomize=True, phases=[Phase.generate])
@given(rows=archives(), min_delay_ms=st.sampled_from([0, 3]))
def test_ranges_give_the_partition_wide_scan(spark, min_gap_ms, rows, min_delay_ms):
    # Ranges of 1, 2 and 3 offsets split every partition; 2**40 leaves each whole.
    model = ProcessingTimeModel(min_gap_ms, min_delay_ms)
    ranges = [1, 2, 3, 2**40]
    assert timed(spark, rows, model, ranges) == dict.fromkeys(ranges, recurrence(rows, model))
