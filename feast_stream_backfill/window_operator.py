"""Aligned windows (tumbling, sliding) fired in closed form: Flink's ``WindowOperator``.

An aligned window's extent is known from a record alone, so every (record, window) pair is
judged at once with the model's rules (:func:`rules.on_element`): "has the watermark reached
the window's ``maxTs`` (its cleanup time, :func:`rules.cleanup_time`) before this record?" is
one comparison of the record's position with the first watermark position reaching it
(:func:`watermarks.watermark_reaches`, broadcast: one row per target). One ``groupBy`` per
window and status gives the timers' firings, the dropped records and the status counts at
once; firings caused by records (late, per record) carry a running aggregate per window,
ordered by position.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import reduce

from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from feast_stream_backfill import rules
from feast_stream_backfill.aggregations import Aggregation, Over
from feast_stream_backfill.columns import (
    FIRE_POSITION,
    FIRED_BY_RECORD,
    POSITION,
    SHARED_INSTANT,
    STATUS,
    TARGET,
    WINDOW_END,
    WINDOW_START,
)
from feast_stream_backfill.processing_order import clock_position
from feast_stream_backfill.triggers import (
    DROPPED,
    LATE,
    ON_TIME,
    PENDING,
    PER_RECORD,
    WATERMARK,
    Trigger,
    fires_by_record,
)
from feast_stream_backfill.windows import max_timestamp

_REACHES_MAX_TS, _REACHES_CLEANUP = "_reaches_max_ts", "_reaches_cleanup"


def _tells_late(trigger: Trigger) -> bool:
    """Does the trigger need to know when the watermark passes ``maxTs``?"""
    return trigger.timer == WATERMARK or trigger.on_element[0] != trigger.on_element[1]


def watermark_targets(windowed: DataFrame, trigger: Trigger) -> DataFrame:
    """The watermark values the trigger waits for: each window's cleanup time and, where it
    matters, its ``maxTs``."""
    lateness = trigger.allowed_lateness_ms
    wanted = [rules.cleanup_time(max_timestamp(), lateness)]
    if lateness and _tells_late(trigger):
        wanted.append(max_timestamp())
    return windowed.select(F.explode(F.array(*wanted)).alias(TARGET)).distinct()


def _with_first_watermark(
    windowed: DataFrame, reaches: DataFrame, target: Column, name: str
) -> DataFrame:
    """Add ``name``: the position of the first watermark reaching the window's ``target``
    (null: not before the archive ends); a broadcast join, one row per target."""
    reached = reaches.select(F.col(TARGET).alias("_ts"), F.col(POSITION).alias(name))
    return windowed.join(F.broadcast(reached), target == F.col("_ts"), "left").drop("_ts")


def passed(reached: str) -> Column:
    """Had the watermark at ``reached`` (null: never) passed before the record?"""
    return F.coalesce(F.col(reached) < F.col(POSITION), F.lit(False))


def classify(windowed: DataFrame, trigger: Trigger, reaches: DataFrame | None) -> DataFrame:
    """``_status`` per (record, window): the trigger's outcome, WAITING resolved to ON_TIME
    (its timer fires before the archive ends) or PENDING; ``_fire_pos``: where the timer
    fires. ``reaches`` (event time): :func:`watermarks.watermark_reaches` of the targets."""
    if reaches is None:  # processing time: never late, the clock always fires
        closed: bool | Column = False
        late: bool | Column = False
        timer: Column = clock_position(max_timestamp())
    else:  # rules.state_gone and rules.past_max_timestamp, as positions
        lateness = trigger.allowed_lateness_ms
        cleanup = rules.cleanup_time(max_timestamp(), lateness)
        windowed = _with_first_watermark(windowed, reaches, cleanup, _REACHES_CLEANUP)
        closed, late = passed(_REACHES_CLEANUP), False  # not closed: not late when L = 0
        timer = F.col(_REACHES_CLEANUP)
        if lateness and _tells_late(trigger):
            windowed = _with_first_watermark(windowed, reaches, max_timestamp(), _REACHES_MAX_TS)
            late, timer = passed(_REACHES_MAX_TS), F.col(_REACHES_MAX_TS)
    waiting = F.when(timer.isNull(), PENDING).otherwise(ON_TIME)
    status = F.lit(rules.on_element(trigger, closed, late, waiting))
    return windowed.withColumn(STATUS, status).withColumn(FIRE_POSITION, timer)


def shared_instants(
    spark: SparkSession,
    reaches: DataFrame | None,
    counted: Mapping[str, int],
    fired_by_records: DataFrame | None = None,
) -> DataFrame | None:
    """The fire times (``_shared_instant``, ms) at which a key may fire twice: the only
    instants whose firings the emission log must number. None: any may (a record fired a
    window at once, late or per record, at the record's instant, and ``fired_by_records``,
    the records that did with their ``_fire_pos``, is not given). A timer fires (``counted``,
    the status counts, says whether only timers did): a processing-time timer at its own
    window's ``maxTs + 1``, so no instant is shared; a watermark timer where the watermark
    first reaches the window's target (``reaches``, one row per target), so an instant is
    shared only where one watermark, or two in one millisecond, reach several targets, as
    when a slow partition lets the watermark jump over several window ends. Every instant a
    record fires at is shared with whatever else fires then."""
    by_records = counted.get(LATE) or counted.get(PER_RECORD)
    if by_records and fired_by_records is None:
        return None
    if reaches is None:
        times = spark.createDataFrame([], f"{SHARED_INSTANT} long")
    else:
        per_time = reaches.groupBy(F.col(POSITION)["time"].alias(SHARED_INSTANT)).count()
        times = per_time.where(F.col("count") > 1).select(SHARED_INSTANT)
    if not by_records:
        return times
    at_records = fired_by_records.select(F.col(FIRE_POSITION)["time"].alias(SHARED_INSTANT))
    return times.unionByName(at_records).distinct()


def _values(
    aggregations: Sequence[Aggregation], over: Over = None, only: Column | None = None
) -> list[Column]:
    """``record_count`` and the features, per group (``over`` None) or running; the features
    aggregate only the records ``only`` holds for (None: all)."""
    count = F.count(F.lit(1)) if over is None else F.count(F.lit(1)).over(over)
    features = [
        a.expr(over, None if only is None else F.when(only, F.col(a.column))).alias(a.name)
        for a in aggregations
    ]
    return [count.alias("record_count"), *features]


def by_status(
    classified: DataFrame,
    keys: Sequence[str],
    aggregations: Sequence[Aggregation],
    trigger: Trigger,
) -> DataFrame:
    """One row per window and status: ``record_count``, and the features of the on-time
    records (a timer's firing; null otherwise: no other records are summed, so none can
    overflow). Timer firings, dropped records and status counts are all read from it. A
    trigger without a timer fires on records alone (:func:`firings` sums them): then only
    dropped records are counted per window, the others per status alone (their key and
    window null), so that the aggregate is a few rows, not one per window (16M records:
    the windows' stage 9.8 s before)."""
    window_status = [*keys, WINDOW_START, WINDOW_END, STATUS]
    if trigger.timer is None:
        dropped = F.col(STATUS) == DROPPED
        where_dropped = [F.when(dropped, F.col(c)).alias(c) for c in window_status[:-1]]
        count = F.count(F.lit(1)).alias("record_count")
        return classified.groupBy(*where_dropped, STATUS).agg(count)
    on_time = F.col(STATUS) == ON_TIME
    return classified.groupBy(*window_status, FIRE_POSITION).agg(
        *_values(aggregations, only=on_time)
    )


def dropped_records(per_status: DataFrame, keys: Sequence[str]) -> DataFrame:
    """Dropped records per key and window (``dropped_count``), from :func:`by_status`."""
    return per_status.where(F.col(STATUS) == DROPPED).select(
        *keys, WINDOW_START, WINDOW_END, F.col("record_count").alias("dropped_count")
    )


def status_counts(per_status: DataFrame, **flags: Column) -> DataFrame:
    """``n`` (record, window) pairs per ``_status``, from :func:`by_status`, and per flag
    (a boolean column of its rows, named by the keyword) whether some row of the status
    holds it: checks read on the same pass."""
    held = [F.max(flag).alias(name) for name, flag in flags.items()]
    return per_status.groupBy(STATUS).agg(F.sum("record_count").alias("n"), *held)


def _firing(window: list[str], by_record: bool, aggregations: Sequence[Aggregation]) -> list:
    return [
        *window,
        FIRE_POSITION,
        F.lit(by_record).alias(FIRED_BY_RECORD),
        "firing",
        "record_count",
        *[a.name for a in aggregations],
    ]


def firings(
    classified: DataFrame | None,
    trigger: Trigger,
    keys: Sequence[str],
    aggregations: Sequence[Aggregation],
    event_time: bool,
    per_status: DataFrame | None = None,
) -> DataFrame:
    """Every firing: timers fire each window with its on-time records; a record that fires
    its window at once emits every accepted record up to it (a running aggregate, over the
    windows some record fires only). ``per_status``: :func:`by_status` of ``classified``,
    where the caller keeps it (``classified`` may then be None: the timers' firings alone,
    where no record fires or the caller computes the records' firings).

    Without a timer (per-record firings) the records are shuffled by key, not by window: the
    running aggregates and the emission log's numbering per key and instant then share one
    shuffle (6 s of 38 at 16M records). A hot key's records all go to one task, as in a
    session replay; sorted there, they spill rather than fail."""
    window = [*keys, WINDOW_START, WINDOW_END]
    parts = []
    if per_status is None:
        per_status = by_status(classified, keys, aggregations, trigger)
    if trigger.timer is not None:
        by_timer = per_status.where(F.col(STATUS) == ON_TIME).withColumn("firing", F.lit(ON_TIME))
        parts.append(by_timer.select(*_firing(window, False, aggregations)))
    if classified is not None and fires_by_record(trigger, event_time):
        labels = {label for label in trigger.on_element if label is not None}
        accepted = classified.where(F.col(STATUS) != DROPPED)
        if trigger.on_element[0] is None:  # only late records fire: few windows need a sum
            fired = per_status.where(F.col(STATUS).isin(*labels))
            fired = fired.select(*[F.col(c).alias(f"_fired{c}") for c in window]).distinct()
            same = [F.col(c).eqNullSafe(F.col(f"_fired{c}")) for c in window]  # a key may be null
            accepted = accepted.join(fired, reduce(Column.__and__, same), "left_semi")
        if trigger.timer is None:  # every firing is a record's: shuffled by key alone, the
            # emission log numbers a key's firings of an instant without a second shuffle
            accepted = accepted.repartition(*keys)
        so_far = (
            Window.partitionBy(*window)
            .orderBy(POSITION)
            .rowsBetween(Window.unboundedPreceding, Window.currentRow)
        )
        by_record = (
            accepted.select(*window, POSITION, STATUS, *_values(aggregations, so_far))
            .where(F.col(STATUS).isin(*labels))
            .select(
                *window,
                F.col(POSITION).alias(FIRE_POSITION),
                F.col(STATUS).alias("firing"),
                "record_count",
                *[a.name for a in aggregations],
            )
        )
        parts.append(by_record.select(*_firing(window, True, aggregations)))
    return reduce(DataFrame.unionByName, parts)
