"""When does a window fire? Each trigger's rule, stated once.

The model: docs/concepts/model.md#triggers-and-lateness.

As Flink's ``WindowOperator.processElement`` handles one record for one window: if the
window's state is already gone (event time: ``W >= maxTs + L``, allowed lateness ``L``), the
record is DROPPED; otherwise it is added and the trigger's ``onElement`` either fires the
window at once (with everything it holds) or leaves the record WAITING for the trigger's
timer (``onEventTime``/``onProcessingTime``), which fires the window later:

- :class:`EventTimeTrigger`: waits for the watermark to reach ``maxTs`` (ON_TIME); once it
  has, each record fires at once (LATE).
- :class:`ProcessingTimeTrigger`: waits for the clock to pass ``maxTs`` (fired at ``maxTs +
  1``, Flink's timer delay); never late.
- :class:`PerRecordTrigger` (``CountTrigger.of(1)``): every accepted record fires at once
  (PER_RECORD); no timer.

:func:`on_element` applies a trigger's rule to Python booleans (the session replay) or to
Spark columns (aligned windows): the rule exists once. A WAITING record ends ON_TIME if its
window's timer fires before the archive ends, else PENDING (a live job would still wait).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, TypeVar

from pyspark.sql import Column
from pyspark.sql import functions as F

ON_TIME, LATE, PER_RECORD, DROPPED, PENDING = "on_time", "late", "per_record", "dropped", "pending"
STATUSES = (ON_TIME, LATE, PER_RECORD, DROPPED, PENDING)
WAITING = "waiting"  # until the trigger's timer: ends ON_TIME or PENDING
WATERMARK, CLOCK = "watermark", "clock"  # what a trigger's timer waits for

Outcome = TypeVar("Outcome", str, Column)


def _check_lateness(lateness: int) -> None:
    if lateness < 0:
        raise ValueError(f"allowed lateness must be >= 0, got {lateness}")


@dataclass(frozen=True)
class EventTimeTrigger:
    """Flink's ``EventTimeTrigger``, the default for event-time windows, with
    ``allowedLateness(L)``."""

    allowed_lateness_ms: int = 0
    domain: ClassVar[str] = "event"
    #: ``onElement`` before and after the watermark passed ``maxTs``: a firing, or None (wait).
    on_element: ClassVar[tuple[str | None, str | None]] = (None, LATE)
    timer: ClassVar[str | None] = WATERMARK

    def __post_init__(self) -> None:
        _check_lateness(self.allowed_lateness_ms)


@dataclass(frozen=True)
class ProcessingTimeTrigger:
    """Flink's ``ProcessingTimeTrigger``, the default for processing-time windows: fires when
    the clock passes ``maxTs``, at ``maxTs + 1 = end`` (Flink's timer
    service delay). Empty windows have no timer: no firing."""

    allowed_lateness_ms: ClassVar[int] = 0
    domain: ClassVar[str] = "processing"
    on_element: ClassVar[tuple[str | None, str | None]] = (None, None)
    timer: ClassVar[str | None] = CLOCK


@dataclass(frozen=True)
class PerRecordTrigger:
    """``CountTrigger.of(1)``: every accepted record fires each window it belongs to, at its
    processing time. Event-time windows still close at ``W >= maxTs + L``."""

    allowed_lateness_ms: int = 0
    domain: ClassVar[str] = "any"
    on_element: ClassVar[tuple[str | None, str | None]] = (PER_RECORD, PER_RECORD)
    timer: ClassVar[str | None] = None

    def __post_init__(self) -> None:
        _check_lateness(self.allowed_lateness_ms)


Trigger = EventTimeTrigger | ProcessingTimeTrigger | PerRecordTrigger


def _if(condition: bool | Column, then: Outcome, otherwise: Outcome) -> Outcome:
    if isinstance(condition, Column):
        return F.when(condition, then).otherwise(otherwise)
    return then if condition else otherwise


def on_element(
    trigger: Trigger, closed: bool | Column, late: bool | Column, waiting: Outcome = WAITING
) -> Outcome:
    """What one record does to one window: DROPPED (``closed``: the window's state is gone),
    the firing it causes at once, or ``waiting`` (WAITING, or what the wait ends in where the
    caller knows it). ``late``: the watermark has passed ``maxTs``."""
    before, after = trigger.on_element
    return _if(closed, DROPPED, _if(late, after or waiting, before or waiting))


def fires_by_record(trigger: Trigger, event_time: bool) -> bool:
    """Can a record fire its window at once? (A late record needs allowed lateness, or its
    window is closed.)"""
    before, after = trigger.on_element
    late_accepted = event_time and trigger.allowed_lateness_ms > 0
    return before is not None or (after is not None and late_accepted)
