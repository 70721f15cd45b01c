"""Where does a record go? Window assigners (docs/concepts/model.md#windows).

Windows are ``[start, end)`` with epoch-aligned starts (shifted by ``offset``), as Flink's
``TimeWindow.getWindowStartWithOffset``; ``maxTs = end - 1 ms`` is the instant whose
watermark (event time) or clock (processing time) fires the window. ``domain`` says which
time places a record: its event time, or its inferred processing time. ``assigned``: a
record's windows follow from its time alone (``assign``); sessions merge as records arrive,
and an OVER window is each row's own.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar, Literal

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from feast_stream_backfill import rules
from feast_stream_backfill.columns import EVENT_TIME, PROCESSING_TIME, WINDOW_END, WINDOW_START

Domain = Literal["event", "processing"]


def max_timestamp() -> Column:
    """The window's ``maxTs`` (:func:`rules.max_timestamp`), from its ``_window_end``."""
    return rules.max_timestamp(F.col(WINDOW_END))


def pane_start(
    window: TumblingWindows | SlidingWindows | CumulativeWindows, time: Column | None = None
) -> Column:
    """The start of the record's pane (of ``time``, if given): the windows hold whole panes, so
    a record's windows are its pane's (Flink's old aligned-window panes)."""
    time = _time(window.domain) if time is None else time
    return time - F.pmod(time - window.offset_ms, F.lit(window.pane_ms))


def check_window(domain: str, **positive: int) -> None:
    if domain not in ("event", "processing"):
        raise ValueError(f"window domain must be 'event' or 'processing', got {domain!r}")
    for name, value in positive.items():
        if value <= 0:
            raise ValueError(f"window {name} must be > 0 ms, got {value}")


def _time(domain: str) -> Column:
    return F.col(EVENT_TIME if domain == "event" else PROCESSING_TIME)


@dataclass(frozen=True)
class TumblingWindows:
    """Flink's ``Tumbling{EventTime,ProcessingTime}Windows.of(size, offset)``."""

    size_ms: int
    offset_ms: int = 0
    domain: Domain = "event"
    merges: ClassVar[bool] = False
    assigned: ClassVar[bool] = True

    def __post_init__(self) -> None:
        check_window(self.domain, size=self.size_ms)

    @property
    def pane_ms(self) -> int:
        return self.size_ms

    @property
    def most_windows(self) -> int:
        """The most windows a record belongs to."""
        return 1

    def assign(self, records: DataFrame) -> DataFrame:
        """Add ``_window_start`` and ``_window_end`` (epoch ms)."""
        time = _time(self.domain)
        start = time - F.pmod(time - self.offset_ms, F.lit(self.size_ms))
        return records.withColumn(WINDOW_START, start).withColumn(
            WINDOW_END, F.col(WINDOW_START) + self.size_ms
        )


@dataclass(frozen=True)
class SlidingWindows:
    """Flink's ``Sliding{EventTime,ProcessingTime}Windows.of(size, slide, offset)``: a record
    belongs to every window whose ``[start, start + size)`` holds its time."""

    size_ms: int
    slide_ms: int
    offset_ms: int = 0
    domain: Domain = "event"
    merges: ClassVar[bool] = False
    assigned: ClassVar[bool] = True

    def __post_init__(self) -> None:
        check_window(self.domain, size=self.size_ms, slide=self.slide_ms)

    @property
    def pane_ms(self) -> int:
        """The widest grid every window starts and ends on."""
        return math.gcd(self.size_ms, self.slide_ms)

    @property
    def most_windows(self) -> int:
        """The most windows a record belongs to: a window starts every slide."""
        return -(-self.size_ms // self.slide_ms)

    def assign(self, records: DataFrame) -> DataFrame:
        """One row per (record, window), from the latest start to the earliest, as Flink's
        ``assignWindows`` lists them."""
        time = _time(self.domain)
        last_start = time - F.pmod(time - self.offset_ms, F.lit(self.slide_ms))
        first_start = time - self.size_ms + 1
        starts = F.when(  # slide > size leaves gaps: a record there is in no window
            last_start >= first_start, F.sequence(last_start, first_start, F.lit(-self.slide_ms))
        ).otherwise(F.array().cast("array<bigint>"))
        return records.withColumn(WINDOW_START, F.explode(starts)).withColumn(
            WINDOW_END, F.col(WINDOW_START) + self.size_ms
        )


@dataclass(frozen=True)
class CumulativeWindows:
    """Flink SQL's ``CUMULATE(TABLE t, DESCRIPTOR(ts), step, size)``: windows
    ``[start, start + k * step)`` for ``k = 1 .. size / step``, ``start`` epoch-aligned to
    ``size``, so a window fires at every step with all records since its start. A record belongs
    to every one that holds its time: those ending after it.

    Flink has cumulative windows in SQL only, which gives them no allowed lateness and no other
    trigger than its domain's (:class:`~feast_stream_backfill.job.StreamJob` refuses the
    others). In event time a late record joins the windows that have not fired, as Flink's
    shared first slice does (``SliceAssigners.CumulativeSliceAssigner``); in processing time
    (``CUMULATE`` over a ``PROCTIME()`` column) nothing is late.
    """

    size_ms: int
    step_ms: int
    offset_ms: int = 0
    domain: Domain = "event"
    merges: ClassVar[bool] = False
    assigned: ClassVar[bool] = True

    def __post_init__(self) -> None:
        check_window(self.domain, size=self.size_ms, step=self.step_ms)
        if self.size_ms % self.step_ms:
            raise ValueError(
                f"a cumulative window's size ({self.size_ms} ms) must be a multiple of its step "
                f"({self.step_ms} ms), as Flink requires"
            )

    @property
    def pane_ms(self) -> int:
        return self.step_ms

    @property
    def most_windows(self) -> int:
        """The most windows a record belongs to: one per step."""
        return self.size_ms // self.step_ms

    def assign(self, records: DataFrame) -> DataFrame:
        """One row per (record, window), earliest end first, as Flink fires them."""
        time = _time(self.domain)
        start = time - F.pmod(time - self.offset_ms, F.lit(self.size_ms))
        first_end = time - F.pmod(time - self.offset_ms, F.lit(self.step_ms)) + self.step_ms
        ends = F.sequence(first_end, start + self.size_ms, F.lit(self.step_ms))
        return records.withColumn(WINDOW_START, start).withColumn(WINDOW_END, F.explode(ends))


@dataclass(frozen=True)
class SessionWindows:
    """Flink's ``{EventTime,ProcessingTime}SessionWindows.withGap(gap)``: a record opens
    ``[t, t + gap)``; windows that touch merge
    (:mod:`feast_stream_backfill.merging_window_set`), so there is no closed-form assignment."""

    gap_ms: int
    domain: Domain = "event"
    merges: ClassVar[bool] = True
    assigned: ClassVar[bool] = False

    def __post_init__(self) -> None:
        check_window(self.domain, gap=self.gap_ms)

    def time(self) -> Column:
        """The time that places a record: its event or processing time."""
        return _time(self.domain)


@dataclass(frozen=True)
class OverWindows:
    """Flink SQL's ``OVER (PARTITION BY keys ORDER BY time <frame>)``: every row of a key is
    written out with the aggregate of its frame, the key's rows up to and including it
    (:mod:`feast_stream_backfill.over_replay`). Ordered by event time (``domain="event"``), a
    row waits for the watermark to reach its time; there is no other trigger and no lateness.
    The frames, as Flink runs them:

    - ``RANGE BETWEEN INTERVAL p PRECEDING AND CURRENT ROW`` (``preceding_ms=p``): the rows
      within ``p`` ms before its time, the window ``[t - p, t + 1)``; a row no later than the
      last time its key emitted is dropped, and a key's state is cleared ``1.5 p`` after its
      latest row (``RowTimeRangeBoundedPrecedingFunction``).
    - ``ROWS BETWEEN n PRECEDING AND CURRENT ROW`` (``frame="rows", preceding_rows=n``): the
      row and the ``n`` kept before it, in time and then arrival order; the same drop, no
      cleanup (``RowTimeRowsBoundedPrecedingFunction``).
    - ``RANGE`` or ``ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW`` (no bound; the frame
      when none is written is ``RANGE``'s): every row of the key so far; a row the watermark
      has reached is dropped (``RowTimeUnboundedPrecedingOverFunctionV2``).

    ``RANGE`` writes the rows of one time together, each with all of them; ``ROWS`` one by
    one, each with the rows before it.

    Ordered by processing time (``domain="processing"``, a ``PROCTIME()`` column), the bounded
    frames place a row at the time it is read, drop nothing and read no watermark:

    - ``RANGE`` ``p``: the rows of a millisecond ``t`` wait for a timer at ``t + 1`` and are
      written together, each with the key's rows read in ``[t - p, t]``; the same cleanup
      (``ProcTimeRangeBoundedPrecedingFunction``).
    - ``ROWS`` ``n``: each row written as it is read, with the ``n`` read before it; with
      ``state_ttl_ms`` (``table.exec.state.ttl``) a key's state is cleared on a timer ``1.5
      ttl`` after the row that last moved it (``ProcTimeRowsBoundedPrecedingFunction``).

    A processing-time ``OVER`` from ``UNBOUNDED PRECEDING`` is not one of these: it writes each
    record's running aggregate at once, the per-record processing-time session that
    ``job_from_sql`` maps it to.
    """

    preceding_ms: int | None = None
    domain: Domain = "event"
    frame: Literal["range", "rows"] = "range"
    preceding_rows: int | None = None
    state_ttl_ms: int | None = None
    merges: ClassVar[bool] = False
    assigned: ClassVar[bool] = False

    def __post_init__(self) -> None:
        check_window(self.domain)
        if self.domain == "processing" and self.preceding is None:
            raise ValueError(
                "a processing-time OVER window needs a bounded frame (preceding_ms or "
                "preceding_rows): from UNBOUNDED PRECEDING it is SessionWindows(ttl, "
                "'processing') with PerRecordTrigger()"
            )
        if self.state_ttl_ms is not None and (self.domain, self.frame, self.state_ttl_ms > 0) != (
            "processing",
            "rows",
            True,
        ):
            raise ValueError(
                "state_ttl_ms (> 0) clears the state of a processing-time ROWS frame only, got "
                f"{self}"
            )
        if self.frame not in ("range", "rows"):
            raise ValueError(f"an OVER window's frame is 'range' or 'rows', got {self.frame!r}")
        bound, other = ("preceding_ms", "preceding_rows")[:: 1 if self.frame == "range" else -1]
        if getattr(self, other) is not None:
            raise ValueError(
                f"a {self.frame.upper()} frame is bounded by {bound}, not {other} "
                f"(got {other}={getattr(self, other)})"
            )
        if self.preceding is not None and self.preceding < 0:
            raise ValueError(f"an OVER window's {bound} must be >= 0, got {self.preceding}")

    @property
    def preceding(self) -> int | None:
        """The frame's bound before the current row, in its unit (ms or rows); None:
        ``UNBOUNDED PRECEDING``."""
        return self.preceding_ms if self.frame == "range" else self.preceding_rows

    @property
    def unbounded(self) -> bool:
        return self.preceding is None

    def time(self) -> Column:
        """The time that places a row: its event or processing time."""
        return _time(self.domain)
