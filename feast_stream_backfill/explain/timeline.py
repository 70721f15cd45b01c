"""Pictures (matplotlib, Agg): one key's timeline, and the job's watermark lag.

A key's timeline has processing time across. Above, its records at their event time
(binned when there are more than :data:`DENSE` of them), the job's combined watermark, each
window's span (event time) from its first record to its last firing, every firing as a vertical
bar over its window (on time, late, per record) and the dropped records. Below, the value the
online store holds over time (the emission log as an upsert sink keeps it) and the value a
naive event-time join would use (every record of a window, visible from the window's end);
given the view's calibrated residual distribution, shaded where the live job showed the
backfill's value with a probability below
:data:`~feast_stream_backfill.calibration.visibility.UNCERTAIN_BELOW`. Firings, records and
watermark are the core's own, for this key: the windows are judged by the strategy in
processing order (:meth:`AlignedInProcessingOrder.judge`) against the watermark of every
record, so the picture and the emission log agree.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

import matplotlib

matplotlib.use("Agg")

import matplotlib.dates as mdates  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.collections import PolyCollection  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from pyspark.sql import DataFrame  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402

from feast_stream_backfill.calibration.visibility import UNCERTAIN_BELOW  # noqa: E402
from feast_stream_backfill.calibration.visibility import (  # noqa: E402
    uncertain_spans as visibility_spans,
)
from feast_stream_backfill.columns import (  # noqa: E402
    EVENT_TIME,
    POSITION,
    PROCESSING_TIME,
    STATUS,
    WATERMARK,
    WINDOW_END,
    WINDOW_START,
)
from feast_stream_backfill.emission_log import emission_log  # noqa: E402
from feast_stream_backfill.explain.prepared import Prepared  # noqa: E402
from feast_stream_backfill.explain.samples import WatermarkSamples, span  # noqa: E402
from feast_stream_backfill.strategies.aligned_in_order import (  # noqa: E402
    AlignedInProcessingOrder,
)
from feast_stream_backfill.triggers import DROPPED, LATE, ON_TIME, PENDING, PER_RECORD  # noqa: E402
from feast_stream_backfill.watermarks import watermark_timeline  # noqa: E402
from feast_stream_backfill.window_operator import firings  # noqa: E402

#: Above this many records a key's records are drawn as a 2-D histogram.
DENSE = 2_000
#: At most this many watermark points are drawn (the highest per time bucket).
WATERMARK_POINTS = 2_000
#: (colour, legend label, line width): late firings narrower, so that an on-time firing of the
#: same window at the same instant shows around them.
FIRING_STYLE = {
    ON_TIME: ("tab:green", "on-time firing", 4.0),
    LATE: ("tab:orange", "late firing", 1.5),
    PER_RECORD: ("tab:purple", "per-record firing", 1.5),
}


@dataclass
class KeyTimeline:
    """One key's part of the job, small enough for the driver: ``records`` (``pt, et,
    status``; or ``pt, et, n`` bins when ``binned``), ``dropped`` (``pt, et``), ``pending``
    count, ``windows`` (``start, end, first_pt, last_emit``), ``emissions`` (the emission
    log's rows), ``naive`` (``visible_at`` and the features), ``watermark`` (``t, w``),
    ``feature`` drawn, and the span ``lo, hi`` (ms)."""

    key: Mapping[str, object]
    feature: str
    records: pd.DataFrame
    binned: bool
    dropped: pd.DataFrame
    windows: pd.DataFrame
    emissions: pd.DataFrame
    naive: pd.DataFrame
    watermark: pd.DataFrame
    lo: int
    hi: int


def _ms(value: datetime | None) -> int | None:
    return None if value is None else int(value.timestamp() * 1000)


def key_timeline(
    prepared: Prepared,
    key: Mapping[str, object],
    feature: str | None = None,
    start: datetime | None = None,
    end: datetime | None = None,
) -> KeyTimeline:
    """Compute ``key``'s timeline; ``start``/``end`` bound it in processing time. The key's
    (record, window) pairs are judged by the strategy in processing order, the one the
    backfill's own aligned windows take when they need every record's position."""
    job = prepared.job
    feature = feature or job.features[0]
    mine = _key_windows(prepared, key, feature)
    judged = AlignedInProcessingOrder().judge(job, prepared.distinct, mine)
    classified = judged.classified.cache()
    fired = firings(classified, job.trigger, job.keys, job.aggregations, True)
    logged = emission_log(fired, job.keys, job.features, job.operator_delay_ms)
    emissions = logged.select(
        *[F.unix_millis(c).alias(c) for c in ("window_start", "window_end", "emit_time")],
        "emit_sequence",
        "firing",
        *job.features,
    ).toPandas()
    first, last, _ = span(classified)
    lo = _ms(start) or first
    hi = _ms(end) or last + 2 * job.window.size_ms
    shown = classified.where(F.col(PROCESSING_TIME).between(lo, hi))
    records, binned = _records(shown, lo, hi)
    dropped = (
        shown.where(F.col(STATUS) == DROPPED)
        .select(F.col(PROCESSING_TIME).alias("pt"), F.col(EVENT_TIME).alias("et"))
        .limit(DENSE)
        .toPandas()
    )
    windows = (
        classified.groupBy(WINDOW_START, WINDOW_END)
        .agg(
            F.min(PROCESSING_TIME).alias("first_pt"),
            F.max(F.col(STATUS) == PENDING).alias("pending"),
        )
        .toPandas()
        .rename(columns={WINDOW_START: "start", WINDOW_END: "end"})
    )
    naive = _naive(mine, job)
    classified.unpersist()
    watermark = _watermark(prepared, lo, hi)
    parts = (records, binned, dropped, windows, emissions, naive, watermark)
    return KeyTimeline(dict(key), feature, *parts, lo, hi)


def _key_windows(prepared: Prepared, key: Mapping[str, object], feature: str) -> DataFrame:
    """The key's (record, window) pairs; the key and the feature checked."""
    job = prepared.job
    missing = set(job.keys) - set(key)
    if missing:
        raise ValueError(f"timeline: give a value for every key column, missing {sorted(missing)}")
    if feature not in job.features:
        raise ValueError(f"timeline: {feature!r} is not a feature of the job: {job.features}")
    condition = F.lit(True)
    for name in job.keys:
        condition = condition & (F.col(name) == F.lit(key[name]))
    mine = prepared.windowed.where(condition)
    if not mine.limit(1).count():
        raise ValueError(f"timeline: no record has key {dict(key)}")
    return mine


def _naive(mine: DataFrame, job) -> pd.DataFrame:
    """Each window over all its records, visible from its end (an event-time join's view)."""
    return (
        mine.groupBy(WINDOW_START, WINDOW_END)
        .agg(*[a.expr(None).alias(a.name) for a in job.aggregations])
        .select(F.col(WINDOW_END).alias("visible_at"), *job.features)
        .orderBy("visible_at")
        .toPandas()
    )


def _records(shown: DataFrame, lo: int, hi: int) -> tuple[pd.DataFrame, bool]:
    records = (
        shown.where(F.col(STATUS) != DROPPED)
        .select(F.col(PROCESSING_TIME).alias("pt"), F.col(EVENT_TIME).alias("et"), F.col(STATUS))
        .dropDuplicates(["pt", "et"])
    )
    if records.limit(DENSE + 1).count() <= DENSE:
        return records.toPandas(), False
    bins = 120
    et_lo, et_hi = records.agg(F.min("et"), F.max("et")).first()
    x = F.floor((F.col("pt") - lo) / F.lit(max(1, (hi - lo) / bins)))
    y = F.floor((F.col("et") - et_lo) / F.lit(max(1, (et_hi - et_lo) / bins)))
    return (
        records.groupBy(x.alias("_x"), y.alias("_y"))
        .agg(F.avg("pt").alias("pt"), F.avg("et").alias("et"), F.count(F.lit(1)).alias("n"))
        .toPandas(),
        True,
    )


def _watermark(prepared: Prepared, lo: int, hi: int) -> pd.DataFrame:
    changes = (
        watermark_timeline(prepared.distinct, prepared.job.watermark)
        .select(F.col(POSITION)["time"].alias("t"), F.col(WATERMARK).alias("w"))
        .where(F.col("t").between(lo, hi) & (F.col("w") > F.lit(-(1 << 62))))
    )
    bucket = F.floor((F.col("t") - lo) / F.lit(max(1, (hi - lo) / WATERMARK_POINTS)))
    return (
        changes.groupBy(bucket.alias("_b"))
        .agg(F.max("t").alias("t"), F.max("w").alias("w"))
        .orderBy("t")
        .select("t", "w")
        .toPandas()
    )


def _dates(ms: pd.Series | np.ndarray | list) -> np.ndarray:
    return np.asarray(ms, dtype="int64").astype("datetime64[ms]")


def uncertain_spans(timeline: KeyTimeline, quantiles: Sequence[float]) -> pd.DataFrame:
    """Where in ``lo, hi`` the key's backfilled value was uncertain in the live job
    (:func:`~feast_stream_backfill.calibration.visibility.uncertain_spans`): ``start, end``
    (ms), in order, disjoint."""
    emitted = timeline.emissions["emit_time"].to_numpy(dtype=float)
    spans = visibility_spans(emitted, float(timeline.lo), float(timeline.hi), quantiles)
    return pd.DataFrame(spans, columns=["start", "end"])


def draw_key_timeline(timeline: KeyTimeline, quantiles: Sequence[float] | None = None) -> Figure:
    """The picture: records, watermark, windows and firings above; values below, shaded
    where the live job was uncertain when ``quantiles`` (the view's calibrated residual
    distribution, :attr:`~feast_stream_backfill.calibration.fit.Delays.quantiles`) are given."""
    fig = Figure(figsize=(12, 7.5), layout="constrained")
    top, bottom = fig.subplots(2, 1, sharex=True, height_ratios=[3, 1.3])
    key = ", ".join(f"{k}={v}" for k, v in timeline.key.items())
    top.set_title(f"{key}: records, watermark and firings")
    records = timeline.records
    if timeline.binned:
        top.scatter(
            _dates(records["pt"]),
            _dates(records["et"]),
            s=4 + 30 * np.log10(records["n"]),
            c="tab:blue",
            alpha=0.5,
            label=f"records ({int(records['n'].sum()):,}, binned)",
        )
    else:
        for status, color in (
            (ON_TIME, "tab:blue"),
            (LATE, "tab:orange"),
            (PER_RECORD, "tab:purple"),
            (PENDING, "tab:gray"),
        ):
            some = records[records[STATUS] == status]
            if len(some):
                top.scatter(
                    _dates(some["pt"]),
                    _dates(some["et"]),
                    s=14,
                    color=color,
                    label=f"records {status.replace('_', ' ')} ({len(some):,})",
                )
    if len(timeline.dropped):
        top.scatter(
            _dates(timeline.dropped["pt"]),
            _dates(timeline.dropped["et"]),
            marker="x",
            s=40,
            color="tab:red",
            label=f"dropped ({len(timeline.dropped):,})",
        )
    if len(timeline.watermark):
        top.step(
            _dates([*timeline.watermark["t"], timeline.hi]),
            _dates([*timeline.watermark["w"], timeline.watermark["w"].iloc[-1]]),
            where="post",
            color="black",
            linewidth=1,
            label="watermark (all partitions)",
        )
    _windows(top, timeline)
    _firings(top, timeline.emissions)
    top.set_ylabel("event time")
    top.legend(loc="upper left", fontsize=8)
    _values(bottom, timeline, quantiles)
    bottom.set_xlabel("processing time")
    bottom.set_xlim(_dates([timeline.lo, timeline.hi]))
    return fig


def _windows(ax, timeline: KeyTimeline) -> None:
    last_emit = timeline.emissions.groupby("window_start")["emit_time"].max()
    spans = []
    for w in timeline.windows.itertuples():
        # To its last firing; a pending window to the edge; one whose records were all
        # dropped has no state to keep (Flink never created it): a sliver.
        x1 = last_emit.get(w.start, timeline.hi if w.pending else w.first_pt)
        x0, x1 = mdates.date2num(_dates([w.first_pt, max(x1, w.first_pt + 1)]))
        y0, y1 = mdates.date2num(_dates([w.start, w.end]))
        spans.append([(x0, y0), (x1, y0), (x1, y1), (x0, y1)])
    collection = PolyCollection(
        spans,
        facecolor="tab:gray",
        alpha=0.12,
        edgecolor="none",
        label=f"window span ({len(spans):,})",
    )
    ax.add_collection(collection)


def _firings(ax, emissions: pd.DataFrame) -> None:
    for kind, (color, label, width) in FIRING_STYLE.items():
        some = emissions[emissions["firing"] == kind]
        if len(some):
            ax.vlines(
                _dates(some["emit_time"]),
                _dates(some["window_start"]),
                _dates(some["window_end"]),
                color=color,
                linewidth=width,
                label=f"{label}s ({len(some):,})",
            )


def _uncertain(ax, spans: pd.DataFrame) -> None:
    """The spans shaded the panel's full height (x in data, y in axes coordinates)."""
    x0 = mdates.date2num(_dates(spans["start"].round()))
    x1 = mdates.date2num(_dates(spans["end"].round()))
    collection = PolyCollection(
        [[(a, 0), (b, 0), (b, 1), (a, 1)] for a, b in zip(x0, x1, strict=True)],
        transform=ax.get_xaxis_transform(),
        facecolor="gold",
        alpha=0.35,
        edgecolor="none",
        zorder=0,
        label=f"live job uncertain (P < {UNCERTAIN_BELOW:g})",
    )
    ax.add_collection(collection, autolim=False)


def _values(ax, timeline: KeyTimeline, quantiles: Sequence[float] | None) -> None:
    feature = timeline.feature
    emitted = timeline.emissions.sort_values(["emit_time", "emit_sequence"])
    if len(emitted):
        ax.step(
            _dates([*emitted["emit_time"], timeline.hi]),
            [*emitted[feature], emitted[feature].iloc[-1]],
            where="post",
            color="tab:green",
            label=f"{feature} in the online store",
        )
    naive = timeline.naive
    if len(naive):
        ax.step(
            _dates([*naive["visible_at"], timeline.hi]),
            [*naive[feature], naive[feature].iloc[-1]],
            where="post",
            color="tab:red",
            linestyle="--",
            label=f"{feature}, naive event-time join",
        )
    if quantiles is not None:
        _uncertain(ax, uncertain_spans(timeline, quantiles))
    ax.set_ylabel(feature)
    ax.legend(loc="upper left", fontsize=8)


def draw_job_watermark(samples: WatermarkSamples, title: str = "") -> Figure:
    """Watermark lag behind processing time, coloured by the partition holding the MIN."""
    frame = samples.frame.dropna(subset=["watermark"])
    fig = Figure(figsize=(12, 4.5), layout="constrained")
    ax = fig.subplots()
    lag_h = (frame["t"] - frame["watermark"]) / 3_600_000
    holders = sorted(frame["holder"].unique())
    colors = matplotlib.colormaps["tab10"]
    for i, holder in enumerate(holders):
        held = frame["holder"] == holder
        ax.scatter(
            _dates(frame["t"][held]),
            lag_h[held],
            s=6,
            color=colors(i % 10),
            label=f"MIN held by {holder} ({held.mean():.0%} of the time)",
        )
    ax.plot(_dates(frame["t"]), lag_h, color="black", linewidth=0.6, alpha=0.5)
    ax.set_ylabel("watermark lag (hours)")
    ax.set_xlabel("processing time")
    note = f"; {samples.beyond:,} records read after the axis ends" if samples.beyond else ""
    ax.set_title(f"{title} watermark lag behind processing time{note}".strip())
    ax.legend(loc="upper left", fontsize=8)
    return fig
