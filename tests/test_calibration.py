"""Calibration against the live job's writes and served requests, hand-computed on the core
API's six records.

The backfill (one partition, 1-minute tumbling windows, B = 5 s, D2 = D3 = 0) emits:
u1 [10:00, 10:01) at 10:01:10 (spend 3, 2 records), u2 [10:01, 10:02) at 10:02:20 (16, 1),
u1 [10:01, 10:02) at 10:02:20 (4, 1); the record at 10:00:30 (amount 8) is dropped.
"""

from datetime import datetime, timedelta

import numpy as np
import pytest

from feast_stream_backfill import (
    Aggregation,
    ArchivedTopic,
    StreamJob,
    TumblingWindows,
    WatermarkStrategy,
    backfill,
)
from feast_stream_backfill.calibration import (
    OVER_TIME,
    REQUESTS,
    Calibration,
    ObservedServes,
    ObservedWrites,
    calibrate,
    load_calibration,
)
from feast_stream_backfill.calibration.fit import median_levels
from feast_stream_backfill.calibration.serves import around, binned, classified, observations
from feast_stream_backfill.calibration.verdict import uncertain_time
from feast_stream_backfill.calibration.visibility import cdf_of_values
from feast_stream_backfill.errors import BadArchiveError

T0 = datetime(2026, 1, 1, 10, 0)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def job(spark):
    records = spark.sql("""
        SELECT partition, offset, to_timestamp(et) AS event_time, user_id, amount FROM VALUES
          (0, 0, '2026-01-01 10:00:10', 'u1', 1.0D),
          (0, 1, '2026-01-01 10:00:50', 'u1', 2.0D),
          (0, 2, '2026-01-01 10:01:10', 'u1', 4.0D),
          (0, 3, '2026-01-01 10:01:20', 'u2', 16.0D),
          (0, 4, '2026-01-01 10:00:30', 'u1', 8.0D),
          (0, 5, '2026-01-01 10:02:20', 'u2', 32.0D)
        AS t(partition, offset, et, user_id, amount)
    """)
    return StreamJob(
        topics=[ArchivedTopic("transactions", dataframe=records)],
        keys=["user_id"],
        window=TumblingWindows(size_ms=60_000),
        aggregations=[
            Aggregation("amount", "sum", "spend_1m"),
            Aggregation("amount", "count", "transactions_1m"),
        ],
        watermark=WatermarkStrategy(out_of_orderness_ms=5_000),
    )


SCHEMA = (
    "user_id string, window_start timestamp, window_end timestamp, spend double, "
    "transactions long, written timestamp, fired timestamp"
)


def writes(spark, rows, **options):
    df = spark.createDataFrame(rows, SCHEMA)
    return ObservedWrites(
        dataframe=df,
        write_time="written",
        features={"spend_1m": "spend", "transactions_1m": "transactions"},
        **options,
    )


@pytest.fixture(scope="module")
def backfilled(spark):
    """The job and its emission log, backfilled once for the module."""
    j = job(spark)
    emissions = backfill(spark, j).emissions.localCheckpoint()
    return j, emissions


def calibrated(spark, backfilled, rows, **options) -> Calibration:
    j, emissions = backfilled
    return calibrate(spark, j, writes(spark, rows, **options), emissions)


def test_writes_pair_with_emissions_and_the_median_delay_is_fitted(spark, backfilled):
    rows = [
        # matched: 1.5 s, 2.5 s and 1.0 s after the backfill's emissions
        ("u1", at(0), at(60), 3.0, 2, at(71.5), None),
        ("u2", at(60), at(120), 16.0, 1, at(142.5), None),
        ("u1", at(60), at(120), 4.0, 1, at(141.0), None),
        # the same value written again: a rewrite, not a second change
        ("u1", at(60), at(120), 4.0, 1, at(1800), None),
        # the live job kept the record the backfill drops: a late firing it never emits
        ("u1", at(0), at(60), 11.0, 3, at(95), None),
    ]
    c = calibrated(spark, backfilled, rows)
    assert (c.counts.writes, c.counts.matched, c.counts.not_emitted) == (5, 3, 1)
    assert (c.counts.value_differs, c.counts.not_written, c.counts.rewrites) == (0, 0, 1)
    assert c.counts.mismatch_rate == pytest.approx(1 / 4)
    assert c.delays.total.median == 1500
    assert c.delays.total.spread == (1000, 2500)
    assert c.delays.read is None and c.delays.sink is None
    assert c.suggested_tags == {"operator_delay": "1500 ms"}
    assert c.restart.count == 1 and c.restart.first_write == int(at(1800).timestamp() * 1000)
    # No requests: the verdict is over time. u1's first value is shown for 70 s; F jumps to 1
    # at 2.5 s (the largest delay), below 0.95 until then: 2.5 s of 70 s uncertain.
    assert c.uncertain.basis == OVER_TIME
    assert c.uncertain.share == pytest.approx(2_500 / 70_000, rel=1e-6)


def test_a_written_value_the_backfill_does_not_have_differs(spark, backfilled):
    rows = [
        ("u1", at(0), at(60), 3.0, 2, at(71), None),
        ("u2", at(60), at(120), 16.5, 1, at(141), None),  # not the backfill's 16
        ("u1", at(60), at(120), 4.0, 1, at(141), None),
    ]
    c = calibrated(spark, backfilled, rows)
    assert (c.counts.matched, c.counts.value_differs, c.counts.not_written) == (2, 1, 0)


def test_an_emission_never_written_is_counted(spark, backfilled):
    rows = [("u1", at(0), at(60), 3.0, 2, at(71), None)]
    c = calibrated(spark, backfilled, rows)
    assert (c.counts.matched, c.counts.not_written) == (1, 2)


def test_the_firing_stamp_tells_d2_from_d3(spark, backfilled):
    # The job fired 0.4 s after the backfill's firing, and wrote 0.25 s after firing.
    fired = [(0, 60, 3.0, 2, 70), (60, 120, 16.0, 1, 140), (60, 120, 4.0, 1, 140)]
    users = ["u1", "u2", "u1"]
    rows = [
        (u, at(s), at(e), v, n, at(f + 0.65), at(f + 0.4))
        for u, (s, e, v, n, f) in zip(users, fired, strict=True)
    ]
    c = calibrated(spark, backfilled, rows, processing_time="fired")
    assert (c.delays.read.median, c.delays.sink.median, c.delays.total.median) == (400, 250, 650)
    assert c.suggested_tags == {"min_delay": "400 ms", "operator_delay": "250 ms"}


def test_the_calibration_is_stored_and_read_back(spark, backfilled, tmp_path):
    rows = [("u1", at(0), at(60), 3.0, 2, at(71.5), None)]
    c = calibrated(spark, backfilled, rows)
    path = str(tmp_path / "calibration")
    c.store(spark, path)
    c.store(spark, path)  # idempotent
    back = load_calibration(spark, path)
    assert back.counts == c.counts and back.delays == c.delays
    assert back.suggested_tags == c.suggested_tags
    assert load_calibration(spark, str(tmp_path / "none")) is None


def test_a_missing_column_is_named(spark, backfilled):
    j, emissions = backfilled
    df = spark.createDataFrame(
        [("u1", at(0), 3.0)], "user_id string, window_start timestamp, x double"
    )
    with pytest.raises(BadArchiveError, match="no column 'spend_1m'"):
        calibrate(
            spark, j, ObservedWrites(dataframe=df, window_end=None), backfill(spark, j).emissions
        )


def test_a_null_write_time_is_refused(spark, backfilled):
    rows = [("u1", at(0), at(60), 3.0, 2, None, None)]
    with pytest.raises(BadArchiveError, match="1 write\\(s\\) with a null 'written'"):
        calibrated(spark, backfilled, rows)


def test_median_interval_levels_bracket_the_median():
    low, high = median_levels(10_000)
    # 1.96 * sqrt(10000) / 2 = 98 ranks either side of 5000
    assert low == pytest.approx(0.4902) and high == pytest.approx(0.5099)


SERVES = (
    "user_id string, __log_timestamp timestamp, v__spend_1m double, v__transactions_1m long, "
    "v__spend_1m__status int"
)
#: Requests against the backfill above (u1 emits (3, 2) at 10:01:10 and (4, 1) at 10:02:20;
#: u2 (16, 1) at 10:02:20), each with what it says of the residual r (landed: r <= x).
REQUESTS_SERVED = [
    ("u1", at(60), None, None, 3),  # nothing yet: (70 s) not landed at x = -10 s
    ("u1", at(72), 3.0, 2, 1),  # as the backfill: landed at 2 s; (140 s) not at -68 s
    ("u1", at(141), 3.0, 2, 1),  # the previous value: (70 s) landed at 71 s, (140 s) not at 1 s
    ("u1", at(139), 4.0, 1, 1),  # the next value: (140 s) landed at -1 s
    ("u1", at(150), 4.0, 1, 1),  # as the backfill: landed at 10 s
    ("u2", at(150), 99.0, 1, 1),  # a value the backfill never has
    ("u2", at(130), None, None, 3),  # nothing yet: (140 s) not landed at -10 s
    ("u1", at(145), 3.0, 2, 4),  # expired (OUTSIDE_MAX_AGE): left out
]


def served(spark) -> ObservedServes:
    return ObservedServes(view="v", dataframe=spark.createDataFrame(REQUESTS_SERVED, SERVES))


def test_requests_are_placed_among_the_emissions_and_bound_the_delay(spark, backfilled):
    j, emissions = backfilled
    keys, features = ["user_id"], ["spend_1m", "transactions_1m"]
    requests = served(spark).read(spark, keys, features)
    placed = classified(around(requests, emissions, keys, features), features)
    bins = binned(observations(placed))
    assert bins.x.tolist() == [-68_000, -10_000, -1_000, 1_000, 2_000, 10_000, 71_000]
    assert bins.n.tolist() == [1, 2, 1, 1, 1, 1, 1]
    assert bins.landed.tolist() == [0, 0, 1, 0, 1, 1, 1]

    c = calibrate(spark, j, None, emissions, serves=served(spark))
    s = c.serves.counts
    assert (s.requests, s.as_backfill, s.earlier, s.later, s.nothing_yet, s.differs) == (
        7,
        2,
        1,
        1,
        2,
        1,
    )
    # Isotonic: (landed at -1 s, not at 1 s) pool to 0.5, so F = 0, 0, .5, .5, 1, 1, 1; the
    # median is where F reaches 0.5 (-1 s); 5 %: a tenth of the way from -10 s to -1 s;
    # 95 %: nine tenths of the way from 1 s to 2 s.
    assert c.delays.total.median == pytest.approx(-1_000)
    assert c.delays.total.spread == pytest.approx((-9_100, 1_900))
    assert c.delays_from == REQUESTS and c.counts is None
    assert c.uncertain.basis == REQUESTS
    # The verdict: the share of the 7 requests whose backfilled value (u1: 70 s -> 140 s;
    # u2: nothing until 140 s) had probability below 0.95 under the fitted residual.
    cdf = cdf_of_values(c.delays.quantiles)
    now = [None, 70, 140, 70, 140, 140, None]
    after = [70, 140, None, 140, None, None, 140]
    t = [60, 72, 141, 139, 150, 150, 130]
    p = [
        (cdf(1000 * (x - e)) if e is not None else 1.0) - (cdf(1000 * (x - n)) if n else 0.0)
        for x, e, n in zip(t, now, after, strict=True)
    ]
    assert c.uncertain.share == pytest.approx(np.mean(np.array(p) < 0.95))
    assert Calibration.from_json(c.to_json()).serves == c.serves


def test_calibration_needs_writes_or_requests(spark, backfilled):
    j, emissions = backfilled
    with pytest.raises(ValueError, match="writes, its served requests or both"):
        calibrate(spark, j, None, emissions)


def test_a_request_without_its_columns_is_refused_named(spark, backfilled):
    j, emissions = backfilled
    df = spark.createDataFrame(REQUESTS_SERVED, SERVES).drop("v__transactions_1m")
    with pytest.raises(BadArchiveError, match="no column 'v__transactions_1m'"):
        calibrate(spark, j, None, emissions, serves=ObservedServes(view="v", dataframe=df))


def test_uncertain_time_of_a_value_by_hand():
    # F uniform on [0, 10 s]: shown for 60 s, P(s) = s / 10 s until 10 s, then 1: below 0.95
    # for the first 9.5 s. Shown for 5 s, P(s) = s / 10 s never reaches 0.5: all 5 s.
    quantiles = np.linspace(0, 10_000, 201)
    assert uncertain_time(60_000, quantiles) == pytest.approx(9_500)
    assert uncertain_time(5_000, quantiles) == pytest.approx(5_000)
    # Shown for 12 s: P rises as s / 10 s to 0.95 at 9.5 s, is 1 from 10 s to 12 s... except
    # that from 10 s the next value may land: P(s) = 1 - (s - 12 s) / 10 s < 1 only past 12 s.
    assert uncertain_time(12_000, quantiles) == pytest.approx(9_500)
