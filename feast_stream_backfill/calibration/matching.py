"""Each observed write beside the backfilled emission it should be.

Per key and window, the writes and the emissions are each taken in time order, a value equal
to the one before it in the same window left out (a restart that re-reads records writes
again what it fired before; an emission that changes nothing leaves the online store as it
was), and the k-th write is paired with the k-th emission. So a key's windows pair up in one
equi-join, without comparing every write with every emission of a key; a window where one
side holds a firing the other does not pairs its later firings wrongly, and every one of
them counts as a mismatch: the report names where, which is what a user needs to look at.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import reduce

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from feast_stream_backfill.calibration.observed import END_MS, STAMP_MS, START_MS, WRITE_MS

#: Pairing statuses: the write is the emission (times aside); their values differ; a write the
#: backfill has no emission for; an emission the live job never wrote.
MATCHED, VALUE_DIFFERS, NOT_EMITTED, NOT_WRITTEN = (
    "matched",
    "value_differs",
    "not_emitted",
    "not_written",
)
#: Columns of :func:`pair`: the pairing, the emission's time in epoch ms, the change's place
#: in its window, and whether a row repeats the value before it.
STATUS, EMIT_MS, RANK, REPEATS = "status", "_backfill_emit_ms", "_rank", "_repeats"

#: Relative tolerance of equal values: the live job and the backfill sum in different orders.
RELATIVE_TOLERANCE = 1e-9


def same_value(a: Column, b: Column) -> Column:
    """Equal within :data:`RELATIVE_TOLERANCE`, or both null."""
    scale = F.greatest(F.lit(1.0), F.abs(a), F.abs(b))
    return a.eqNullSafe(b) | (F.abs(a - b) <= scale * RELATIVE_TOLERANCE)


def ranked(df: DataFrame, keys: Sequence[str], features: Sequence[str], time: Column) -> DataFrame:
    """Each row with :data:`RANK`, its window's count of changes of value so far (in ``time``
    order), and :data:`REPEATS`, whether it repeats the value before it in its window."""
    window = Window.partitionBy(*keys, START_MS).orderBy(time)
    unchanged = reduce(
        lambda acc, f: acc & same_value(F.col(f), F.lag(f).over(window)),
        features,
        F.lag(START_MS).over(window).isNotNull(),
    )
    flagged = df.withColumn(REPEATS, F.coalesce(unchanged, F.lit(False)))
    return flagged.withColumn(RANK, F.sum(F.when(F.col(REPEATS), 0).otherwise(1)).over(window))


@dataclass(frozen=True)
class Paired:
    """``pairs``: keys, window start, :data:`RANK`, :data:`STATUS`, the write's times (null
    where not written), :data:`EMIT_MS` (null where not emitted) and the written values;
    ``rewrites``: the writes that repeat the value before them in their window (keys, window
    start, write times), which a restart leaves."""

    pairs: DataFrame
    rewrites: DataFrame
    cached: DataFrame = field(repr=False)

    def release(self) -> None:
        self.cached.unpersist()


def pair(
    writes: DataFrame, emissions: DataFrame, keys: Sequence[str], features: Sequence[str]
) -> Paired:
    """Writes (:meth:`ObservedWrites.read`) and the emission log paired, per key and window,
    in order of their changes of value."""
    emitted = emissions.select(
        *keys,
        F.unix_millis("window_start").alias(START_MS),
        F.unix_millis("window_end").alias("_emit_end_ms"),
        F.unix_millis("emit_time").alias(EMIT_MS),
        "emit_sequence",
        *features,
    )
    emitted = ranked(emitted, keys, features, F.struct(EMIT_MS, "emit_sequence"))
    emitted = emitted.filter(~F.col(REPEATS)).select(
        *keys,
        START_MS,
        RANK,
        "_emit_end_ms",
        EMIT_MS,
        *[F.col(f).alias(f"_e_{f}") for f in features],
    )
    written = ranked(writes, keys, features, F.struct(WRITE_MS, STAMP_MS)).persist()
    changes = written.filter(~F.col(REPEATS)).drop(REPEATS)
    joined = changes.join(emitted, [*keys, START_MS, RANK], "full")
    values_equal = reduce(
        lambda acc, f: acc & same_value(F.col(f), F.col(f"_e_{f}")),
        features,
        F.coalesce(F.col(END_MS) == F.col("_emit_end_ms"), F.lit(True)),
    )
    status = (
        F.when(F.col(EMIT_MS).isNull(), NOT_EMITTED)
        .when(F.col(WRITE_MS).isNull(), NOT_WRITTEN)
        .when(values_equal, MATCHED)
        .otherwise(VALUE_DIFFERS)
    )
    pairs = joined.select(
        *keys, START_MS, RANK, status.alias(STATUS), WRITE_MS, STAMP_MS, EMIT_MS, *features
    )
    rewrites = written.filter(F.col(REPEATS)).select(*keys, START_MS, WRITE_MS, STAMP_MS)
    return Paired(pairs, rewrites, written)
