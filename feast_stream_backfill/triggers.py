"""When does a window fire? The triggers, and what becomes of a record for a window.

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
  (PER_RECORD); no timer. With ``skip_unchanged``, a firing that repeats its key's previous
  values is not written (Flink SQL's unbounded ``GROUP BY`` without a state TTL).

A trigger states its ``onElement`` as data; :func:`rules.on_element` applies it, with the
cleanup and lateness rules, to Python booleans (the session replay) and to Spark columns
(aligned windows) alike. A WAITING record ends ON_TIME if its window's timer fires before the
archive ends, else PENDING (a live job would still wait).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from feast_stream_backfill.rules import DROPPED

#: The firings (a timer's, a late record's, a record's under ``CountTrigger.of(1)``), and a
#: wait the archive ends before the timer fires.
ON_TIME, LATE, PER_RECORD, PENDING = "on_time", "late", "per_record", "pending"
#: What becomes of a (record, window) pair, as the backfill's stats count them.
STATUSES = (ON_TIME, LATE, PER_RECORD, DROPPED, PENDING)
WATERMARK, CLOCK = "watermark", "clock"  # what a trigger's timer waits for


def _check_lateness(lateness: int) -> None:
    if lateness < 0:
        raise ValueError(f"allowed lateness must be >= 0, got {lateness}")


@dataclass(frozen=True)
class EventTimeTrigger:
    """Flink's ``EventTimeTrigger``, the default for event-time windows, with
    ``allowedLateness(L)``."""

    allowed_lateness_ms: int = 0
    domain: ClassVar[str] = "event"
    skip_unchanged: ClassVar[bool] = False  # every firing is written
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
    skip_unchanged: ClassVar[bool] = False  # every firing is written
    on_element: ClassVar[tuple[str | None, str | None]] = (None, None)
    timer: ClassVar[str | None] = CLOCK


@dataclass(frozen=True)
class PerRecordTrigger:
    """``CountTrigger.of(1)``: every accepted record fires each window it belongs to, at its
    processing time. Event-time windows still close at ``W >= maxTs + L``.

    ``skip_unchanged``: a firing whose every feature equals its key's previous firing's is
    not written (:func:`rules.unchanged_update`; the key's first is), as Flink SQL's
    ``GroupAggFunction`` writes an unbounded ``GROUP BY`` without a state TTL
    (``GroupAggHelper``). It belongs to this trigger because per-record firing is the one
    that writes a key's running result with every record, so the one whose update can repeat
    the previous; a timer's firing writes a window once, and a job cannot ask it of one. The
    record is still processed: counted in ``records_per_record``, and the firings left out
    in ``updates_unchanged`` (``Backfill.stats``)."""

    allowed_lateness_ms: int = 0
    skip_unchanged: bool = False
    domain: ClassVar[str] = "any"
    on_element: ClassVar[tuple[str | None, str | None]] = (PER_RECORD, PER_RECORD)
    timer: ClassVar[str | None] = None

    def __post_init__(self) -> None:
        _check_lateness(self.allowed_lateness_ms)
        if not isinstance(self.skip_unchanged, bool):
            raise ValueError(f"skip_unchanged must be True or False, got {self.skip_unchanged!r}")


Trigger = EventTimeTrigger | ProcessingTimeTrigger | PerRecordTrigger


def fires_by_record(trigger: Trigger, event_time: bool) -> bool:
    """Can a record fire its window at once? (A late record needs allowed lateness, or its
    window is closed.)"""
    before, after = trigger.on_element
    late_accepted = event_time and trigger.allowed_lateness_ms > 0
    return before is not None or (after is not None and late_accepted)
