"""The model's rules, each stated once (docs/concepts/model.md).

The strategies take their arithmetic from here, as ``rules.NAME(...)``: substitute a rule
here and they follow it (tests/test_rules_followed.py), in the driver and in Spark's Python
workers alike (:func:`following`). The functions know nothing of Spark: they work on
Python integers and booleans (the session replay, the tests), on numpy arrays (the vectorized
session classifier) and on Spark Columns (the aligned strategies) alike, through arithmetic,
comparisons and :func:`choose`. Each names the Flink class or method it follows. What is not
arithmetic stays with its machinery: the global processing order and the periodic ticks
(:mod:`processing_order`), the window assigners (:mod:`windows`), the triggers' firings
(:mod:`triggers`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from functools import reduce
from inspect import isfunction
from typing import Any, Protocol, TypeVar

T = TypeVar("T")

# ------------------------------------------------------------------ records and processing time


def read_at(highest_event_time: T, min_delay_ms: int) -> T:
    """A record is read ``D2`` after the highest event time its partition has shown up to it
    (itself included), each pushed ``D1`` later per record since:
    ``pt_i = D2 + max over j <= i of (et_j + (i - j) * D1)``; with D1 = 0, ``max(et_j) + D2``
    (docs/concepts/model.md#records-and-processing-time)."""
    return highest_event_time + min_delay_ms


def highest_read_after(time: T, min_delay_ms: int) -> T:
    """With D1 = 0, the lowest highest-event-time of a record read after ``time``: records are
    read after ``time`` from their partition's first with ``et >=`` this on (:func:`read_at`
    inverted)."""
    return time - min_delay_ms + 1


# ------------------------------------------------------------------------------- watermarks


def partition_watermark(highest_event_time: T, bound_ms: int) -> T:
    """``BoundedOutOfOrdernessWatermarks``: the highest event time seen, less ``B``, less 1 ms
    (docs/concepts/model.md#watermarks)."""
    return highest_event_time - bound_ms - 1


def reach_threshold(target: T, bound_ms: int) -> T:
    """The event time at which a partition's watermark first reaches ``target``: its first
    record with ``et >=`` this (:func:`partition_watermark` inverted)."""
    return target + bound_ms + 1


def target_of_threshold(threshold: T, bound_ms: int) -> T:
    """The watermark value a partition reaches at ``threshold`` (:func:`reach_threshold`
    inverted)."""
    return threshold - bound_ms - 1


def reached(watermark: T, time: T) -> Any:
    """The watermark has reached ``time``: ``InternalTimerServiceImpl.advanceWatermark`` fires
    the timers with ``timestamp <= watermark``, and ``WindowOperator.isWindowLate`` and
    ``EventTimeTrigger.onElement`` compare the same way."""
    return watermark >= time


def idle_wait_ms(interval_ms: int, timeout_ms: int) -> int:
    """``WatermarksWithIdleness``: ``IdlenessTimer.checkIfIdle`` runs on the periodic ticks
    only, so a partition goes idle ``(floor(T / I) + 1) * I`` after the tick that starts its
    inactivity clock: the first tick more than ``T`` after it
    (docs/concepts/model.md#idleness)."""
    return (timeout_ms // interval_ms + 1) * interval_ms


def goes_idle_at(quiet_from: T, interval_ms: int, timeout_ms: int) -> T:
    """The tick at which a partition goes idle, its inactivity clock started on the tick
    ``quiet_from``: the first tick that saw nothing new from it (the one after its last
    record's tick; the job's first tick, for a partition without any record yet)."""
    return quiet_from + idle_wait_ms(interval_ms, timeout_ms)


# ---------------------------------------------------------------------- windows and triggers


def max_timestamp(window_end: T) -> T:
    """``TimeWindow.maxTimestamp()``: the last instant of ``[start, end)``, whose watermark
    (event time) or clock (processing time) fires the window."""
    return window_end - 1


def session_end(highest_time: T, gap_ms: int) -> T:
    """A session's end: its latest record's time plus the gap (``EventTimeSessionWindows``
    gives each record its own window ``[t, t + gap)``; touching windows merge)."""
    return highest_time + gap_ms


def intersects(start: T, end: T, other_start: T, other_end: T) -> Any:
    """``TimeWindow.intersects``: windows that merely touch merge, ``start <= other.end`` and
    ``end >= other.start`` (``MergingWindowSet.addWindow``)."""
    return (start <= other_end) & (end >= other_start)


def session_max_timestamp(highest_time: T, gap_ms: int) -> T:
    """:func:`max_timestamp` of the session whose latest record is at ``highest_time``. The
    offset from that record is computed on Python integers and added once: an int64 array of
    times (``LONG_MIN`` where a row has none) takes one addition, whose result alone could
    leave the long's range."""
    return highest_time + max_timestamp(session_end(0, gap_ms))


def cleanup_time(max_ts: T, lateness_ms: int) -> T:
    """``WindowOperator.cleanupTime``: the watermark at which a window's state is gone,
    ``maxTs + L`` (processing-time windows: ``L`` = 0)."""
    return max_ts + lateness_ms


def session_cleanup_time(highest_time: T, gap_ms: int, lateness_ms: int) -> T:
    """:func:`cleanup_time` of the session whose latest record is at ``highest_time``,
    ``highest + (gap - 1 + L)``: the offset added once, as :func:`session_max_timestamp`."""
    return highest_time + cleanup_time(max_timestamp(session_end(0, gap_ms)), lateness_ms)


def state_gone(watermark: T, max_ts: T, lateness_ms: int) -> Any:
    """``WindowOperator.isWindowLate``: the watermark has reached the window's cleanup time, so
    a record for it is dropped."""
    return reached(watermark, cleanup_time(max_ts, lateness_ms))


def past_max_timestamp(watermark: T, max_ts: T) -> Any:
    """The watermark has reached ``maxTs``: ``EventTimeTrigger.onElement`` fires at once (a
    late record), and its timer for ``maxTs`` has fired."""
    return reached(watermark, max_ts)


def clock_fires_at(max_ts: T) -> T:
    """A processing-time timer for ``maxTs`` fires at ``maxTs + 1``: Flink's timer service
    fires a timer once the clock is past it (``ProcessingTimeServiceUtil
    .getProcessingTimeDelay``), before that millisecond's records."""
    return max_ts + 1


def clock_watermark(time: T) -> T:
    """The processing-time clock as a watermark: a record read at ``time`` comes after the
    timers of every ``maxTs`` up to this (:func:`clock_fires_at` inverted)."""
    return time - 1


# ------------------------------------------------------------------------------ OVER windows


def over_start(time: T, preceding_ms: int) -> T:
    """The first instant an OVER window's row at ``time`` aggregates: ``RANGE BETWEEN
    preceding PRECEDING AND CURRENT ROW`` holds the key's rows in ``[time - preceding, time]``
    (``RowTimeRangeBoundedPrecedingFunction.onTimer`` retracts a row once
    ``time - its time > preceding``)."""
    return time - preceding_ms


def over_dropped(time: T, last_emitted: T) -> Any:
    """A bounded frame's ``processElement`` (``RowTimeRangeBoundedPrecedingFunction``,
    ``RowTimeRowsBoundedPrecedingFunction``): a row no later than its key's last timer
    (``lastTriggeringTs``: 0 before any, and again once a ``RANGE`` key's state is cleared) is
    dropped, whatever the watermark; a later one waits for its own timer, even if the
    watermark has passed it (it fires with the watermark's next rise)."""
    return time <= last_emitted


def over_late(time: T, watermark: T) -> Any:
    """An unbounded frame's ``processElement`` (``RowTimeUnboundedPrecedingOverFunctionV2``):
    a row the operator's watermark has reached is dropped; a later one waits for its timer."""
    return reached(watermark, time)


def over_rows_full(held: T, preceding_rows: int) -> Any:
    """``RowTimeRowsBoundedPrecedingFunction.onTimer``: a ``ROWS`` frame holding its
    ``n + 1`` rows (``precedingOffset``) retracts the oldest before it adds a row."""
    return held >= preceding_rows + 1


def over_cleanup_renewed(cleanup: T, time: T, preceding_ms: int) -> Any:
    """``registerCleanupTimer``: a row moves its key's cleanup timer when the one set is
    earlier than ``time + preceding + 1``."""
    return cleanup < time + (preceding_ms + 1)


def over_cleanup_time(time: T, preceding_ms: int) -> T:
    """Where a renewed cleanup timer is set: ``time + (long) (preceding * 1.5) + 1``. Any timer
    of the key at or after it clears the key's state (``onTimer``), rows and
    ``lastTriggeringTs`` alike; an earlier cleanup timer left behind fires as a timer without
    rows, which still moves ``lastTriggeringTs``."""
    return time + (preceding_ms + preceding_ms // 2 + 1)


def over_clears(timer: T, cleanup: T) -> Any:
    """``onTimer``: a timer at or after the key's cleanup time clears its state instead of
    emitting."""
    return timer >= cleanup


def over_clock_timer(time: T) -> T:
    """``ProcTimeRangeBoundedPrecedingFunction.processElement``: the rows a key reads at
    processing time ``time`` wait for a timer set for ``time + 1``, which writes them (fired
    at :func:`clock_fires_at` of it, after the next millisecond's records)."""
    return time + 1


def over_rows_lost(held: T) -> Any:
    """``ProcTimeRowsBoundedPrecedingFunction.processElement``: a retraction that leaves the
    key no rows (``ROWS 0 PRECEDING``) sets its smallest time to ``Long.MAX_VALUE``, where the
    next row finds nothing to retract: that row joins the one before it, and the frame holds
    two rows from then on (each retraction leaves one)."""
    return held == 0


def retention_renewed(cleanup: T, time: T, ttl_ms: int) -> Any:
    """``CleanupState.registerProcessingCleanupTimer``: a row read at ``time`` moves its key's
    cleanup timer when the one set would fire within the state TTL of it (``time + ttl >
    cleanup``); the old timer is deleted."""
    return time + ttl_ms > cleanup


def retention_cleanup_time(time: T, ttl_ms: int) -> T:
    """Where such a timer is set: ``time`` plus the maximum retention,
    ``TableConfigUtils.getMaxIdleStateRetentionTime``: ``ttl * 3 / 2`` in Java's long
    arithmetic. It clears the key's state when it fires (:func:`clock_fires_at`)."""
    return time + ttl_ms * 3 // 2


# ------------------------------------------------------------------------- unchanged updates


def unchanged_value(previous: T, current: T) -> Any:
    """Flink's generated ``RecordEqualiser`` on one field of an aggregation's result row
    (``EqualiserCodeGenerator``, the equaliser ``GroupAggHelper`` compares a key's previous
    and new result with): two nulls are equal, a null and a value are not, and two values of
    a primitive type (``DOUBLE``, ``BIGINT``, ``INT``) compare with Java's ``==``, so a NaN
    equals nothing, itself included, and ``0.0`` equals ``-0.0``. Python's and numpy's
    ``==`` say the same; Spark's ``=`` takes a NaN as equal to a NaN and a null as unknown,
    so a Column compares null-safely and a NaN is never equal."""
    if type(previous).__module__.startswith("pyspark"):
        from pyspark.sql import functions as F

        return previous.eqNullSafe(current) & ~F.isnan(current)  # type: ignore[attr-defined]
    return previous == current


def unchanged_update(previous: Sequence[T], current: Sequence[T], first: Any) -> Any:
    """``GroupAggHelper.processElement`` with state cleaning off (no state TTL): an update
    that is not its key's first (``first``: it is; the first is always written) and whose
    every result equals the previous one's (:func:`unchanged_value`, field by field) is not
    written."""
    equal = [unchanged_value(p, c) for p, c in zip(previous, current, strict=True)]
    return choose(first, False, reduce(lambda held, next_one: held & next_one, equal))


class TriggerRule(Protocol):
    """What :func:`on_element` needs of a trigger: its ``onElement`` before and after the
    watermark passed ``maxTs`` (a firing, or None: wait for the timer)."""

    on_element: tuple[str | None, str | None]


#: What ``WindowOperator.processElement`` does with a record for one window, besides the
#: firings its trigger causes at once (:mod:`triggers` names those and what a wait ends in).
DROPPED, WAITING = "dropped", "waiting"


def choose(condition: Any, then: Any, otherwise: Any) -> Any:
    """``then`` where ``condition`` holds, else ``otherwise``: for a Python bool, a numpy array
    or a Spark Column."""
    if isinstance(condition, bool):
        return then if condition else otherwise
    kind = type(condition).__module__
    if kind.startswith("numpy"):
        import numpy as np

        return np.where(condition, then, otherwise)
    from pyspark.sql import functions as F

    return F.when(condition, then).otherwise(otherwise)


def on_element(trigger: TriggerRule, closed: Any, late: Any, waiting: Any = WAITING) -> Any:
    """``WindowOperator.processElement`` for one record and one window: DROPPED where the
    window's state is gone (``closed``, :func:`state_gone`), else the firing the trigger's
    ``onElement`` causes at once, or ``waiting`` (WAITING, or what the wait ends in where the
    caller knows it). ``late``: the watermark has passed ``maxTs`` (:func:`past_max_timestamp`)
    (docs/concepts/model.md#triggers-and-lateness)."""
    before, after = trigger.on_element
    return choose(closed, DROPPED, choose(late, after or waiting, before or waiting))


# ------------------------------------------------------------------------ rules in every process

#: Every rule as this module states it.
STATED: dict[str, Callable[..., Any]] = {
    name: rule
    for name, rule in dict(globals()).items()
    if isfunction(rule) and rule.__module__ == __name__
}


def substituted() -> dict[str, Callable[..., Any]]:
    """The rules this process applies in place of those stated here: none, unless one is
    varied (the tests vary rules to see every strategy follow)."""
    in_force = globals()
    return {name: in_force[name] for name, rule in STATED.items() if in_force[name] is not rule}


@contextmanager
def following(substitutes: Mapping[str, Callable[..., Any]]) -> Iterator[None]:
    """Apply ``substitutes`` (the driver's :func:`substituted`) here while the block runs.
    Spark's Python workers import this module afresh: a task that applies rules there (the
    session replay) carries the driver's, so that every part of a job follows the same
    rules."""
    before = {name: globals()[name] for name in substitutes}
    globals().update(substitutes)
    try:
        yield
    finally:
        globals().update(before)
