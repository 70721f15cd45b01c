"""What would the job have written, and when? The emission log (SEMANTICS section 4).

One row per firing per key. Per key, rows are totally ordered by ``(emit_time,
emit_sequence)``: at one instant, records are processed before the watermark tick of that
instant; a record fires its own windows (late or per-record firings) from the latest start to
the earliest, as Flink's sliding assigner lists them, before the timers its watermark fires;
timers fire in order of their timestamps (``maxTs``), as in Flink's ``InternalTimerService``.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import reduce

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from feast_stream_backfill.columns import (
    FIRE_POSITION,
    FIRED_BY_RECORD,
    SHARED_INSTANT,
    WINDOW_END,
    WINDOW_START,
)

EMISSION_COLUMNS = (
    "window_start",
    "window_end",
    "emit_time",
    "emit_sequence",
    "firing",
    "record_count",
)


def emission_log(
    firings: DataFrame,
    keys: Sequence[str],
    features: Sequence[str],
    operator_delay_ms: int,
    shared_instants: DataFrame | None = None,
) -> DataFrame:
    """Firings as the emission log: key column(s), then :data:`EMISSION_COLUMNS`, then one
    column per feature. ``emit_time`` is the firing's processing time plus the operator delay
    D3: when the sink would have written it. ``shared_instants``: the fire times at which
    timers may fire a key twice (:func:`window_operator.shared_instants`), None where any
    firing may meet another. Otherwise a key fires twice at an instant only there or where a
    record fires (late): only firings at shared instants, firings by records and the timers'
    firings of the same key at those records' instants are shuffled and sorted to be
    numbered; the others are their key's only firing of the instant (``emit_sequence`` 0)."""
    emit_ms = F.col(FIRE_POSITION)["time"] + operator_delay_ms
    # A record fires its own windows latest start first (Flink's assignWindows order), then
    # the timers its watermark triggers fire by timestamp.
    within_position = F.when(F.col(FIRED_BY_RECORD), -F.col(WINDOW_START)).otherwise(
        F.col(WINDOW_END)
    )
    at_same_instant = Window.partitionBy(*keys, "_emit_ms").orderBy(
        FIRE_POSITION, F.col(FIRED_BY_RECORD).desc(), within_position
    )
    firings = firings.withColumn("_emit_ms", emit_ms)
    numbered = F.row_number().over(at_same_instant) - 1
    if shared_instants is None:
        logged = firings.withColumn("emit_sequence", numbered)
    else:
        by_record = firings.where(F.col(FIRED_BY_RECORD))
        record_instants = by_record.select(
            *[F.col(k).alias(f"_record{k}") for k in keys],
            F.col("_emit_ms").alias("_record_ms"),
            F.lit(True).alias("_meets_record"),
        ).distinct()
        same_instant = [F.col(k).eqNullSafe(F.col(f"_record{k}")) for k in keys]  # null keys
        same_instant.append(F.col("_emit_ms") == F.col("_record_ms"))
        at_shared = F.col(FIRE_POSITION)["time"] == F.col(SHARED_INSTANT)
        timers = (
            firings.where(~F.col(FIRED_BY_RECORD))
            .join(F.broadcast(shared_instants), at_shared, "left")
            .join(record_instants, reduce(Column.__and__, same_instant), "left")
        )
        meets = F.col(SHARED_INSTANT).isNotNull() | F.col("_meets_record").isNotNull()
        alone = timers.where(~meets).select(*firings.columns).withColumn("emit_sequence", F.lit(0))
        crowded = timers.where(meets).select(*firings.columns).unionByName(by_record)
        logged = alone.unionByName(crowded.withColumn("emit_sequence", numbered))
    return logged.select(
        *keys,
        F.timestamp_millis(WINDOW_START).alias("window_start"),
        F.timestamp_millis(WINDOW_END).alias("window_end"),
        F.timestamp_millis("_emit_ms").alias("emit_time"),
        F.col("emit_sequence").cast("int"),
        "firing",
        F.col("record_count").cast("long"),
        *features,
    )
