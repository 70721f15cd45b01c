"""What would the job have written, and when? The emission log.

The model: docs/concepts/model.md#the-emission-log.

One row per firing per key. Per key, rows are totally ordered by ``(emit_time,
emit_sequence)``: at one instant, records are processed before the watermark tick of that
instant; a record fires its own windows (late or per-record firings) from the latest start to
the earliest, as Flink's sliding assigner lists them, before the timers its watermark fires;
timers fire in order of their timestamps (``maxTs``), as in Flink's ``InternalTimerService``.
With a trigger that skips unchanged updates, a key's firing whose every feature equals the
one before it in that order is left out (:func:`rules.unchanged_update`), and the rows written
are numbered.
"""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import DataFrame, Window, WindowSpec
from pyspark.sql import functions as F

from feast_stream_backfill import rules
from feast_stream_backfill.columns import (
    FIRE_ORDER,
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
    skip_unchanged: bool = False,
) -> DataFrame:
    """Firings as the emission log: key column(s), then :data:`EMISSION_COLUMNS`, then one
    column per feature. ``emit_time`` is the firing's processing time plus the operator delay
    D3: when the sink would have written it. ``shared_instants``: the fire times at which a
    key may fire more than once (:func:`window_operator.shared_instants`), None for any; only
    firings at those are shuffled and sorted to be numbered, the others are their key's only
    firing of the instant (``emit_sequence`` 0). ``skip_unchanged``
    (``PerRecordTrigger.skip_unchanged``): a firing is left out where its key's firing before
    it, in the log's order, has every feature equal (:func:`rules.unchanged_update`), and the
    rest are numbered; the key's firings are put in order by Spark's window functions over the
    key, in the shuffle by key that numbers them. Equality holds from one row to the next (a
    NaN equals nothing): comparing with the firing before, written or not, is comparing with
    the last one written."""
    emit_ms = F.col(FIRE_POSITION)["time"] + operator_delay_ms
    # A record fires its own windows latest start first (Flink's assignWindows order), then
    # the timers its watermark triggers fire by timestamp.
    within_position = F.when(F.col(FIRED_BY_RECORD), -F.col(WINDOW_START)).otherwise(
        F.col(WINDOW_END)
    )
    # A replay's firings carry their order where windows do not tell it (an OVER row's
    # window is its own time's: the rows of one time share it).
    replayed_order = [FIRE_ORDER] if FIRE_ORDER in firings.columns else []
    order = [FIRE_POSITION, F.col(FIRED_BY_RECORD).desc(), "_within", *replayed_order]
    at_same_instant = Window.partitionBy(*keys, "_emit_ms").orderBy(*order)
    firings = firings.withColumn("_emit_ms", emit_ms).withColumn("_within", within_position)
    if skip_unchanged:
        in_order = Window.partitionBy(*keys).orderBy("_emit_ms", *order)  # sorted for both
        firings = _changed(firings, keys, features, in_order)
        shared_instants = None  # numbered among the rows written
    numbered = F.row_number().over(at_same_instant) - 1
    if shared_instants is None:
        logged = firings.withColumn("emit_sequence", numbered)
    else:
        shared = F.broadcast(shared_instants)
        at_shared = F.col(FIRE_POSITION)["time"] == F.col(SHARED_INSTANT)
        alone = firings.join(shared, at_shared, "left_anti").withColumn("emit_sequence", F.lit(0))
        crowded = firings.join(shared, at_shared, "left_semi")
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


def _changed(
    firings: DataFrame, keys: Sequence[str], features: Sequence[str], in_order: WindowSpec
) -> DataFrame:
    """The firings :func:`rules.unchanged_update` keeps: each compared with its key's firing
    before it (``in_order``: the key's firings in the log's order)."""
    previous = [F.lag(f).over(in_order) for f in features]
    first = F.lag(F.lit(True)).over(in_order).isNull()
    unchanged = rules.unchanged_update(previous, [F.col(f) for f in features], first)
    marked = firings.withColumn("_unchanged", unchanged)  # a window function cannot filter
    return marked.where(~F.col("_unchanged")).drop("_unchanged")
