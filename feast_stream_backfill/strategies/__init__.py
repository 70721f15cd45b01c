"""The ways to compute a job's windows and firings, each a named object chosen by
:func:`feast_stream_backfill.planner.plan`.

Every strategy answers the same question (what did each window hold, when did it fire, which
records did it drop) with the model's rules (:mod:`feast_stream_backfill.rules`) and hands
back one :class:`Windowed`; they differ in what they need to know about the records and so in
what they cost:

- :class:`~feast_stream_backfill.strategies.aligned_unsorted.AlignedWithoutSort`: aligned
  event-time windows fired by periodic watermarks, with D1 = 0: never sorts the records;
- :class:`~feast_stream_backfill.strategies.processing_time_unsorted.ProcessingTimeWithoutSort`:
  aligned processing-time windows fired by the clock, with D1 = 0: never sorts them either;
- :class:`~feast_stream_backfill.strategies.aligned_in_order.AlignedInProcessingOrder`:
  windows assigned by time, in either time domain, any trigger: each record's own
  processing time and place in the processing order;
- :class:`~feast_stream_backfill.strategies.merging.MergingWindows`: session windows,
  replayed per key in processing order;
- :class:`~feast_stream_backfill.strategies.over.OverRows`: OVER windows, each key's rows
  replayed in processing order.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from pyspark.sql import DataFrame, SparkSession

if TYPE_CHECKING:
    from feast_stream_backfill.job import StreamJob


@dataclass(frozen=True)
class Condition:
    """One thing a strategy needs of a job, and whether this job has it."""

    needs: str
    holds: bool


class StrategyDeclined(Exception):
    """A strategy found, while running, that it cannot finish this archive; the planner runs
    the next strategy that accepts the job. ``reason`` says why, for the logs and the plan."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass
class Windowed:
    """What a strategy hands the emission log.

    ``fired``: every firing (keys, window, fire position, whether a record fired it, the kind
    of firing, ``record_count`` and the features); ``dropped``: late records dropped per key
    and window (``dropped_count``); ``counts``: ``records_read``, ``duplicates_removed`` and,
    with ``null_keys="drop"``, ``records_null_key``; with ``where``, ``records_filtered``;
    ``records_without_state``: the records an
    inner lookup removed (None: no lookups); ``statuses``:
    (record, window) pairs per status; ``shared``: the fire instants at which a key may fire
    twice (None: any); ``long_sums``: the features summing integer columns (a refused
    overflow names them); ``cached``: what :meth:`release` frees."""

    fired: DataFrame
    dropped: DataFrame
    counts: dict[str, int]
    statuses: dict[str, int]
    shared: DataFrame | None
    records_without_state: int | None = None
    long_sums: list[str] = field(default_factory=list)
    cached: list[DataFrame] = field(default_factory=list, repr=False)

    def release(self) -> None:
        for df in self.cached:
            df.unpersist()


class Strategy(Protocol):
    """A way to compute a job's windows: ``name`` is what the plan, the CLI and the tests
    call it; :meth:`conditions` what it needs of a job (it accepts a job that meets all)."""

    name: str

    def conditions(self, job: StreamJob) -> list[Condition]: ...

    def run(self, spark: SparkSession, job: StreamJob) -> Windowed: ...
