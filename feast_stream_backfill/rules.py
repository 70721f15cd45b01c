"""The model's rules, each stated once (docs/concepts/model.md).

Every strategy takes its arithmetic from here. The functions know nothing of Spark: they work
on Python integers and booleans (the session replay, the tests), on numpy arrays (the
vectorized session classifier) and on Spark Columns (the aligned strategies) alike, through
arithmetic, comparisons and :func:`choose`.
"""

from __future__ import annotations

from typing import Any, Protocol, TypeVar

T = TypeVar("T")

# ------------------------------------------------------------------ records and processing time


def read_at(highest_event_time: T, min_delay_ms: int) -> T:
    """With D1 = 0 a record is read ``D2`` after the highest event time its partition has
    shown up to it (itself included): ``pt = max(et_j, j <= i) + D2``
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


# ---------------------------------------------------------------------- windows and triggers


def max_timestamp(window_end: T) -> T:
    """``TimeWindow.maxTimestamp()``: the last instant of ``[start, end)``, whose watermark
    (event time) or clock (processing time) fires the window."""
    return window_end - 1


def session_end(highest_time: T, gap_ms: int) -> T:
    """A session's end: its latest record's time plus the gap (each record's own window is
    ``[t, t + gap)``; touching windows merge)."""
    return highest_time + gap_ms


def cleanup_time(max_ts: T, lateness_ms: int) -> T:
    """``WindowOperator.cleanupTime``: the watermark at which a window's state is gone,
    ``maxTs + L`` (processing-time windows: ``L`` = 0)."""
    return max_ts + lateness_ms


def state_gone(watermark: T, max_ts: T, lateness_ms: int) -> Any:
    """``WindowOperator.isWindowLate``: the watermark has reached the window's cleanup time, so
    a record for it is dropped."""
    return watermark >= cleanup_time(max_ts, lateness_ms)


def past_max_timestamp(watermark: T, max_ts: T) -> Any:
    """The watermark has reached ``maxTs``: ``EventTimeTrigger.onElement`` fires at once (a
    late record), and its timer for ``maxTs`` has fired."""
    return watermark >= max_ts


def clock_fires_at(max_ts: T) -> T:
    """A processing-time timer for ``maxTs`` fires at ``maxTs + 1``: Flink's timer service
    fires a timer once the clock is past it."""
    return max_ts + 1


class TriggerRule(Protocol):
    """What :func:`on_element` needs of a trigger: its ``onElement`` before and after the
    watermark passed ``maxTs`` (a firing, or None: wait for the timer)."""

    on_element: tuple[str | None, str | None]


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
