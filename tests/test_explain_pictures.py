"""Pictures, checked through matplotlib's objects: firings drawn, legend entries, binning,
the live job's uncertainty shaded."""

from __future__ import annotations

import matplotlib.dates as mdates
import numpy as np
import pytest
from matplotlib.collections import LineCollection, PolyCollection

from feast_stream_backfill import Aggregation, ArchivedTopic, StreamJob, TumblingWindows
from feast_stream_backfill.calibration.fit import LEVELS
from feast_stream_backfill.explain.prepared import prepare
from feast_stream_backfill.explain.samples import watermark_samples
from feast_stream_backfill.explain.timeline import (
    DENSE,
    draw_job_watermark,
    draw_key_timeline,
    key_timeline,
)
from feast_stream_backfill.triggers import EventTimeTrigger
from feast_stream_backfill.watermarks import WatermarkStrategy
from tests.conftest import archive


def job_of(df, lateness=0) -> StreamJob:
    return StreamJob(
        topics=[ArchivedTopic("t", dataframe=df)],
        keys=["user"],
        window=TumblingWindows(10_000),
        aggregations=[Aggregation("amount", "sum", "sum")],
        trigger=EventTimeTrigger(lateness),
        watermark=WatermarkStrategy(emission="on_event"),
    )


def legend(ax) -> list[str]:
    return [t.get_text() for t in ax.get_legend().get_texts()]


def firings_drawn(ax) -> dict[str, int]:
    return {
        c.get_label(): len(c.get_segments())
        for c in ax.collections
        if isinstance(c, LineCollection)
    }


def shaded(ax) -> list[tuple[int, int]]:
    """The spans shaded across the panel, in ms."""
    epoch = mdates.date2num(np.datetime64(0, "ms"))
    spans = []
    for collection in ax.collections:
        for path in collection.get_paths():
            x = (path.vertices[:, 0] - epoch) * 86_400_000
            spans.append((round(x.min()), round(x.max())))
    return spans


@pytest.fixture(scope="module")
def late_firing(spark):
    """As the advisor's hand-computed case: with L = 5 s, [0, 10) fires on time at 12 s and
    late at 12 s (the record at 5 s), [10, 20) at 25 s; [20, 30) is pending."""
    rows = [
        (0, 0, 1_000, "u1", 1.0),
        (0, 1, 12_000, "u1", 2.0),
        (0, 2, 5_000, "u1", 4.0),
        (0, 3, 25_000, "u1", 8.0),
    ]
    prepared = prepare(spark, job_of(archive(spark, rows), lateness=5_000))
    yield key_timeline(prepared, {"user": "u1"})
    prepared.release()


def test_key_timeline_draws_each_firing(late_firing, tmp_path):
    fig = draw_key_timeline(late_firing)
    top, bottom = fig.axes
    assert firings_drawn(top) == {"on-time firings (2)": 2, "late firings (1)": 1}
    assert legend(top) == [
        "records on time (2)",
        "records late (1)",
        "records pending (1)",
        "watermark (all partitions)",
        "window span (3)",
        "on-time firings (2)",
        "late firings (1)",
    ]
    spans = [c for c in top.collections if isinstance(c, PolyCollection)]
    assert len(spans[0].get_paths()) == 3
    assert legend(bottom) == ["sum in the online store", "sum, naive event-time join"]
    # The online value steps 1.0 (12 s), 5.0 (12 s, the late firing), 2.0 (25 s), held to the
    # right edge.
    assert list(bottom.get_lines()[0].get_ydata()) == [1.0, 5.0, 2.0, 2.0]
    assert list(bottom.get_lines()[1].get_ydata()) == [5.0, 2.0, 8.0, 8.0]
    assert shaded(bottom) == []  # no residual distribution given: nothing shaded
    fig.savefig(tmp_path / "u1.png")
    assert (tmp_path / "u1.png").stat().st_size > 10_000


@pytest.mark.parametrize(
    "low, high, expected",
    [
        # F(x) = x / 10 s on [0, 10 s]. From 12 s the value of the late firing shows with
        # P = F(t - 12 s) (25 s is too far off to matter): below 0.95 until 21.5 s; from 25 s,
        # F(t - 25 s): until 34.5 s.
        (0, 10_000, [(12_000, 21_500), (25_000, 34_500)]),
        # F(x) = 0.5 + x / 10 s on [-5 s, 5 s]: the live job may write before the backfill
        # emits. Before 12 s nothing shows with P = 1 - F(t - 12 s): below 0.95 from 7.5 s.
        # From 12 s, P = F(t - 12 s) - F(t - 25 s) = 0.5 + (t - 12 s) / 10 s until 16.5 s, 1
        # from 17 s to 20 s, then 1 - (t - 20 s) / 10 s, below 0.95 from 20.5 s; from 25 s,
        # F(t - 25 s): until 29.5 s.
        (-5_000, 5_000, [(7_500, 16_500), (20_500, 29_500)]),
    ],
)
def test_the_live_jobs_uncertainty_is_shaded(late_firing, low, high, expected):
    uniform = [low + level * (high - low) for level in LEVELS]
    bottom = draw_key_timeline(late_firing, uniform).axes[1]
    assert shaded(bottom) == expected
    assert legend(bottom)[-1] == "live job uncertain (P < 0.95)"


def test_dropped_records_are_marked(spark):
    rows = [(0, 0, 1_000, "u1", 1.0), (0, 1, 12_000, "u1", 2.0), (0, 2, 5_000, "u1", 4.0)]
    prepared = prepare(spark, job_of(archive(spark, rows)))
    top = draw_key_timeline(key_timeline(prepared, {"user": "u1"})).axes[0]
    assert "dropped (1)" in legend(top)
    assert firings_drawn(top) == {"on-time firings (1)": 1}
    with pytest.raises(ValueError, match="no record has key"):
        key_timeline(prepared, {"user": "nobody"})
    prepared.release()


def test_dense_keys_are_binned_and_the_job_picture_names_the_holder(spark):
    # Partition 1 stops at 2 s while partition 0 goes on: partition 1 holds the MIN.
    n = DENSE + 500
    rows = [(0, i, 1_000 + i * 40, "u1", 1.0) for i in range(n)]
    rows += [(1, i, 1_000 + i * 100, "u2", 1.0) for i in range(10)]
    prepared = prepare(spark, job_of(archive(spark, rows)))
    top = draw_key_timeline(key_timeline(prepared, {"user": "u1"})).axes[0]
    assert legend(top)[0] == f"records ({n:,}, binned)"
    samples = watermark_samples(prepared, n=50)
    fig = draw_job_watermark(samples, "t")
    # The first sample is a tie (both at 1 s; ties go to the first partition), 49 of 50 are p1.
    assert legend(fig.axes[0]) == [
        "MIN held by t/0 (2% of the time)",
        "MIN held by t/1 (98% of the time)",
    ]
    assert samples.frame["holder"].iloc[-1] == "t/1"
    # Partition 1's last event time is 1.9 s: the watermark stays at 1.899 s from then on.
    assert samples.frame["watermark"].iloc[-1] == 1_899
    prepared.release()
