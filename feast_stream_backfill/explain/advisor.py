"""What would another watermark bound B, allowed lateness L or idleness T cost?

For every cell of a grid, the records dropped and pending, the emission delay (``emit_time``
minus the window's end: median, p99, max, in seconds) and, given prediction points, how many
of them an event-time join gets wrong under that setting.

Shared across cells (:mod:`prepared`): processing times, duplicates, enrichment, windows.
Shared across every B and L of one T: a single watermark sweep. The per-partition watermark
under B is the one under B = 0 lowered by B, for MIN and MAX combination and with idleness
alike, so the first watermark ``>= x`` under B is the first ``>= x + B`` under 0: one
:func:`watermarks.watermark_reaches` at B = 0 over the targets ``maxTs + B (+ L)`` of every cell
answers them all. Per cell remains the core's classification (one broadcast join), and the
firings of all cells are computed in one pass, keyed by cell.

"Wrong" compares, per distinct prediction point ``(key, t)``, every feature's value as of ``t``
in the cell's emission log (the training join of docs/concepts/model.md#training-sets) with a
naive event-time join's: each window aggregated over all its records and visible from its
end. Null-safe, NaN equal to NaN, 1e-9 relative tolerance; with the view's ttl on both sides
when given.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import reduce

import pandas as pd
from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from feast_stream_backfill.columns import (
    FIRE_POSITION,
    POSITION,
    STATUS,
    TARGET,
    WINDOW_END,
    WINDOW_START,
)
from feast_stream_backfill.emission_log import emission_log
from feast_stream_backfill.explain.prepared import Prepared, with_settings
from feast_stream_backfill.training_join import as_of_values
from feast_stream_backfill.triggers import DROPPED, PENDING
from feast_stream_backfill.watermarks import watermark_reaches
from feast_stream_backfill.window_operator import classify, firings
from feast_stream_backfill.windows import max_timestamp

CELL = "_cell"
_T = "_advice_t"


@dataclass(frozen=True)
class Cell:
    bound_ms: int
    lateness_ms: int
    idle_timeout_ms: int | None


def grid(
    bounds_ms: Sequence[int],
    lateness_ms: Sequence[int],
    idle_timeouts_ms: Sequence[int | None] = (None,),
) -> list[Cell]:
    """Every combination, in order; values must be >= 0 (idleness > 0 or None)."""
    if not bounds_ms or not lateness_ms or not idle_timeouts_ms:
        raise ValueError("advise: give at least one B, one L and one T (None: no idleness)")
    if min(bounds_ms) < 0 or min(lateness_ms) < 0:
        raise ValueError(f"advise: B and L must be >= 0, got B={bounds_ms} L={lateness_ms}")
    if any(t is not None and t <= 0 for t in idle_timeouts_ms):
        raise ValueError(f"advise: idleness T must be > 0 (or none), got {idle_timeouts_ms}")
    combos = itertools.product(idle_timeouts_ms, bounds_ms, lateness_ms)
    return [Cell(b, lat, t) for t, b, lat in combos]


def _reaches_at_zero(prepared: Prepared, cells: Sequence[Cell], idle: int | None) -> DataFrame:
    """First watermark position ``>= v`` with B = 0, for every ``v = maxTs + B (+ L)``."""
    max_ts = prepared.windowed.select(max_timestamp().alias("_max_ts")).distinct()
    shifts = sorted({c.bound_ms + extra for c in cells for extra in (0, c.lateness_ms)})
    targets = max_ts.select(
        F.explode(F.array(*[F.col("_max_ts") + s for s in shifts])).alias(TARGET)
    ).distinct()
    reaches = watermark_reaches(prepared.distinct, targets, prepared.watermark_with(0, idle))
    return reaches.persist(StorageLevel.MEMORY_AND_DISK)


def _classified(
    prepared: Prepared, cells: Sequence[tuple[int, Cell]], reaches: dict[int | None, DataFrame]
) -> DataFrame:
    """Every (record, window, cell) with the core's status and firing position; ``cells``
    with their index in the grid, ``reaches`` per T (:func:`_reaches_at_zero`)."""
    parts = []
    for index, cell in cells:
        shifted = reaches[cell.idle_timeout_ms].select(
            (F.col(TARGET) - cell.bound_ms).alias(TARGET), POSITION
        )
        trigger = with_settings(
            prepared.job, cell.bound_ms, cell.lateness_ms, cell.idle_timeout_ms
        ).trigger
        judged = classify(prepared.windowed, trigger, shifted)
        kept = [*prepared.windowed.columns, STATUS, FIRE_POSITION]
        parts.append(judged.select(*kept, F.lit(index).alias(CELL)))
    return reduce(DataFrame.unionByName, parts)


def naive_emissions(prepared: Prepared) -> DataFrame:
    """Each window over all its records, visible from its end: what an event-time join uses."""
    job = prepared.job
    return (
        prepared.windowed.groupBy(*job.keys, WINDOW_START, WINDOW_END)
        .agg(*[a.expr(None).alias(a.name) for a in job.aggregations])
        .select(*job.keys, F.timestamp_millis(WINDOW_END).alias("visible_at"), *job.features)
    )


def _same(a: Column, b: Column) -> Column:
    """Equal, or within 1e-9 relative (sums in another order round differently); nulls and
    NaNs equal their own kind (Spark: NaN = NaN)."""
    x, y = a.cast("double"), b.cast("double")
    close = F.abs(x - y) <= F.lit(1e-9) * F.greatest(F.abs(x), F.abs(y)) + F.lit(1e-9)
    return a.eqNullSafe(b) | F.coalesce(close, F.lit(False))


def wrong_points(
    prepared: Prepared,
    emissions: DataFrame,
    predictions: DataFrame,
    prediction_time: str,
    ttl_seconds: float | None,
    groups: DataFrame | None = None,
) -> DataFrame:
    """How many distinct prediction points differ from the naive event-time join: one row,
    or one per row of ``groups`` (e.g. the cells) when ``emissions`` has those columns too."""
    job = prepared.job
    points = predictions.select(*job.keys, F.col(prediction_time).alias(_T)).distinct()
    extra = [] if groups is None else groups.columns
    keys = [*extra, *job.keys]
    if groups is not None:
        points = points.crossJoin(F.broadcast(groups))
    values = as_of_values(points, emissions, keys, _T, job.features, ttl_seconds=ttl_seconds)
    naive = as_of_values(
        points.select(*job.keys, _T).distinct(),
        naive_emissions(prepared),
        job.keys,
        _T,
        job.features,
        emission_time="visible_at",
        sequence=None,
        ttl_seconds=ttl_seconds,
        output_names=[f"_naive_{f}" for f in job.features],
    )
    compared = values.join(naive, [*job.keys, _T])
    agree = reduce(Column.__and__, [_same(F.col(f), F.col(f"_naive_{f}")) for f in job.features])
    return compared.groupBy(*extra).agg(
        F.count(F.lit(1)).alias("points"), F.sum((~agree).cast("long")).alias("wrong")
    )


def delay_stats(emissions: DataFrame, groups: Sequence[str] = ()) -> DataFrame:
    """Emission delay per group, seconds: ``emit_time - window_end`` (exact percentiles)."""
    delay = (F.unix_millis("emit_time") - F.unix_millis("window_end")) / 1000.0
    return emissions.groupBy(*groups).agg(
        F.count(F.lit(1)).alias("emissions"),
        F.median(delay).alias("delay_median_s"),
        F.percentile(delay, 0.99).alias("delay_p99_s"),
        F.max(delay).alias("delay_max_s"),
    )


def _judge(
    prepared: Prepared,
    cells: Sequence[tuple[int, Cell]],
    reaches: dict[int | None, DataFrame],
    table: dict[int, dict],
    predictions: DataFrame | None,
    prediction_time: str,
    ttl_seconds: float | None,
    progress: Callable[[str], None],
) -> None:
    """One pass of :func:`advise` over some ``cells`` (with their grid index): their figures
    into ``table``, by index."""
    job = prepared.job
    classified = _classified(prepared, cells, reaches)
    top = max((c for _, c in cells), key=lambda c: c.lateness_ms)  # fires late records, if any
    trigger = with_settings(job, top.bound_ms, top.lateness_ms, top.idle_timeout_ms).trigger
    # Values only matter for the wrong points; counts and delays need the firings alone.
    aggregations = job.aggregations if predictions is not None else []
    features = [a.name for a in aggregations]
    fired = firings(classified, trigger, [CELL, *job.keys], aggregations, True)
    emissions = emission_log(fired, [CELL, *job.keys], features, job.operator_delay_ms)
    emissions = emissions.persist(StorageLevel.MEMORY_AND_DISK)
    progress("records dropped and pending")
    counted = classified.groupBy(CELL).agg(
        F.sum((F.col(STATUS) == DROPPED).cast("long")).alias("dropped"),
        F.sum((F.col(STATUS) == PENDING).cast("long")).alias("pending"),
    )
    for r in counted.collect():
        table.setdefault(r[CELL], {}).update(r.asDict())
    progress("emission delays")
    for r in delay_stats(emissions, [CELL]).collect():
        table.setdefault(r[CELL], {}).update(r.asDict())
    if predictions is not None:
        progress("prediction points against an event-time join")
        spark = emissions.sparkSession
        ids = spark.createDataFrame([(i,) for i, _ in cells], f"{CELL} int")
        wrong = wrong_points(prepared, emissions, predictions, prediction_time, ttl_seconds, ids)
        for r in wrong.collect():
            table.setdefault(r[CELL], {}).update(r.asDict())
    emissions.unpersist()


def advise(
    prepared: Prepared,
    cells: Sequence[Cell],
    predictions: DataFrame | None = None,
    prediction_time: str = "event_timestamp",
    ttl_seconds: float | None = None,
    progress: Callable[[str], None] = lambda step: None,
    cells_per_pass: int | None = None,
) -> pd.DataFrame:
    """One row per cell: B, L, T (seconds), records dropped and pending (``(record, window)``
    pairs, as ``Backfill.stats``), emissions and their delay, and, with ``predictions``
    (the job's key columns and ``prediction_time``), points and wrong points.

    ``cells_per_pass`` (default: all) judges the grid that many cells at a time: the driver
    holds each pass's query plans, which grow with its cells
    (:func:`~feast_stream_backfill.explain.memory.cells_per_pass` sizes it to the heap); the
    watermark sweep is shared by every pass."""
    progress("watermark sweep and classification")
    reaches = {
        idle: _reaches_at_zero(prepared, [c for c in cells if c.idle_timeout_ms == idle], idle)
        for idle in dict.fromkeys(c.idle_timeout_ms for c in cells)
    }
    indexed = list(enumerate(cells))
    size = cells_per_pass or len(cells)
    passes = [indexed[i : i + size] for i in range(0, len(indexed), size)]
    table: dict[int, dict] = {}
    for some in passes:
        if len(passes) > 1:
            progress(f"cells {some[0][0] + 1}-{some[-1][0] + 1} of {len(cells)}")
        _judge(prepared, some, reaches, table, predictions, prediction_time, ttl_seconds, progress)
    for df in reaches.values():
        df.unpersist()
    rows = []
    for index, cell in enumerate(cells):
        found = table.get(index, {})
        row = {
            "B_s": cell.bound_ms / 1000,
            "L_s": cell.lateness_ms / 1000,
            "T_s": math.nan if cell.idle_timeout_ms is None else cell.idle_timeout_ms / 1000,
            "dropped": found.get("dropped", 0),
            "pending": found.get("pending", 0),
            "emissions": found.get("emissions", 0),
            "delay_median_s": found.get("delay_median_s"),
            "delay_p99_s": found.get("delay_p99_s"),
            "delay_max_s": found.get("delay_max_s"),
        }
        if predictions is not None:
            row["points"] = found.get("points", 0)
            row["wrong"] = found.get("wrong", 0)
        rows.append(row)
    return pd.DataFrame(rows)
