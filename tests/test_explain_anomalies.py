"""The anomaly report, hand-computed: a year-9999 record, a record far behind, silences,
duplicates, null keys, and the partition holding the watermark back."""

from __future__ import annotations

import pandas as pd

from feast_stream_backfill import Aggregation, ArchivedTopic, StreamJob, TumblingWindows
from feast_stream_backfill.explain.anomalies import anomalies, holding_back
from feast_stream_backfill.explain.prepared import prepare
from feast_stream_backfill.explain.samples import WatermarkSamples, watermark_samples
from feast_stream_backfill.watermarks import WatermarkStrategy
from tests.conftest import archive

YEAR_9999 = 253_370_764_800_000  # 9999-01-01T00:00:00Z


def test_year_9999_record_far_behind_silences_duplicates_null_keys(spark):
    # Partition 0: 1 s, 2 s, year 9999, 3 s, 4 s. Processing time is the running max of event
    # times, so its records from the year-9999 one on are read in year 9999: until then
    # partition 0 holds the MIN watermark at 1.999 s. Then the watermark jumps to partition 1's
    # 26.999 s: [0, 10) and [10, 20) fire, and partition 0's records at 3 s and 4 s, read after
    # it, are dropped. Without the record (they are then read at 3 s and 4 s) nothing fires,
    # as partition 0 stops at 4 s: 0 dropped and all 11 (record, window) pairs pending,
    # against 2 dropped and 4 pending with it.
    rows = [
        (0, 0, 1_000, "u1", 1.0),
        (0, 1, 2_000, "u1", 1.0),
        (0, 2, YEAR_9999, "u1", 1.0),
        (0, 3, 3_000, "u1", 1.0),
        (0, 4, 4_000, "u1", 1.0),
        (1, 0, 1_500, "u2", 1.0),
        (1, 0, 1_500, "u2", 1.0),  # archived twice
        (1, 1, 2_500, "u2", 1.0),
        (1, 2, 15_000, "u2", 1.0),
        (1, 3, 26_000, "u2", 1.0),
        (1, 4, 3_000, "u2", 1.0),  # 23 s behind both neighbours (26 s is only 11 s ahead)
        (1, 5, 27_000, "u2", 1.0),
        (1, 6, 28_000, None, 1.0),  # a null key
    ]
    job = StreamJob(
        topics=[ArchivedTopic("t", dataframe=archive(spark, rows))],
        keys=["user"],
        window=TumblingWindows(10_000),
        aggregations=[Aggregation("amount", "sum", "sum")],
        watermark=WatermarkStrategy(emission="on_event"),
    )
    prepared = prepare(spark, job)
    found = anomalies(prepared, watermark_samples(prepared, n=20), far_ms=12_000, silence_ms=10_000)
    prepared.release()
    assert found.far_counts == {"ahead": 1, "behind": 1}
    far = found.far.to_dict("records")
    assert [(r["partition"], r["offset"], r["direction"]) for r in far] == [
        ("t/0", 2, "ahead"),
        ("t/1", 4, "behind"),
    ]
    # The 6 pairs that fire, fire in year 9999: after the archive without it ends (at 28 s).
    assert (far[0]["drops_caused"], far[0]["pending_caused"]) == (2, 4 - 11)
    assert far[0]["fired_after_end_caused"] == 6
    assert far[0]["event_time"] == "9999-01-01 00:00:00.000"
    assert pd.isna(far[1]["drops_caused"])
    silent = found.silent.to_dict("records")
    # Partition 0 from 2 s to year 9999; partition 1 from 2.5 s to 15 s and 15 s to 26 s.
    assert [(r["partition"], round(r["hours"] * 3_600_000)) for r in silent] == [
        ("t/0", YEAR_9999 - 2_000),
        ("t/1", 12_500),
        ("t/1", 11_000),
    ]
    assert (found.duplicates, found.null_keys) == (1, 1)


def test_holding_back_durations():
    # Samples every 10 s: p1 is 30 s below p0 at 10, 20 and 40 s (30 s: only 5 s, not more than
    # the 10 s threshold); nothing read yet at 0 s, which holds the watermark too.
    frame = pd.DataFrame(
        {
            "t": [0, 10_000, 20_000, 30_000, 40_000],
            "watermark": [None, 1_000, 2_000, 3_000, 4_000],
            "holder": ["t/0", "t/1", "t/1", "t/1", "t/1"],
            "runner_up": [None, 31_000, 32_000, 8_000, 34_000],
        }
    )
    held = holding_back(WatermarkSamples(frame, 10_000, 0), hold_ms=10_000).to_dict("records")
    assert [(r["partition"], round(r["held_hours"] * 3600)) for r in held] == [
        ("t/1", 30),
        ("t/0", 10),
    ]
    assert (held[0]["longest_from"], held[0]["longest_to"]) == (
        "1970-01-01 00:00:10.000",
        "1970-01-01 00:00:20.000",
    )
    assert round(held[0]["max_behind_next_hours"] * 3600) == 30
