"""The job a backfill models: a keyed, windowed Flink job over archived topics."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import reduce
from typing import Literal

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import IntegralType

from feast_stream_backfill.aggregations import LONG_OVERFLOW, Aggregation
from feast_stream_backfill.enrichment import (
    Lookup,
    enrichment_inputs,
    enrichment_outputs,
    expression_columns,
)
from feast_stream_backfill.errors import BadArchiveError
from feast_stream_backfill.processing_time import ProcessingTimeModel
from feast_stream_backfill.records import ArchivedTopic
from feast_stream_backfill.triggers import EventTimeTrigger, PerRecordTrigger, ProcessingTimeTrigger
from feast_stream_backfill.watermarks import WatermarkStrategy
from feast_stream_backfill.windows import (
    CumulativeWindows,
    OverWindows,
    SessionWindows,
    SlidingWindows,
    TumblingWindows,
)


@dataclass(frozen=True)
class StreamJob:
    """A keyed, windowed Flink job over archived topics: what, where, when and how.

    ``operator_delay_ms`` is D3: from a firing to the sink's write. ``lookups`` enrich each
    record with external state before windowing, then the ``derived`` Spark SQL expressions
    are added (``{"amount_usd": "amount * rate"}``): aggregations may use both
    (:mod:`feast_stream_backfill.enrichment`). ``null_keys``: Flink's ``keyBy`` fails the job
    on a record whose key is null, so the backfill refuses such an archive ("refuse"); "drop"
    leaves those records out as a ``filter`` before ``keyBy`` would, after the source: they
    still take processing time and move the watermark (``stats["records_null_key"]``).
    ``where``: a Spark SQL predicate over archive columns (a ``filter`` before ``keyBy``, Flink
    SQL's ``WHERE``): a record for which it is not true is left out the same way
    (``stats["records_filtered"]``), before its key is looked at.
    """

    topics: Sequence[ArchivedTopic]
    keys: Sequence[str]
    window: TumblingWindows | SlidingWindows | CumulativeWindows | SessionWindows | OverWindows
    aggregations: Sequence[Aggregation]
    trigger: EventTimeTrigger | ProcessingTimeTrigger | PerRecordTrigger = field(
        default_factory=EventTimeTrigger
    )
    watermark: WatermarkStrategy = field(default_factory=WatermarkStrategy)
    processing_time: ProcessingTimeModel = field(default_factory=ProcessingTimeModel)
    operator_delay_ms: int = 0
    lookups: Sequence[Lookup] = ()
    derived: Mapping[str, str] = field(default_factory=dict)
    null_keys: Literal["refuse", "drop"] = "refuse"
    where: str | None = None

    def __post_init__(self) -> None:
        if self.null_keys not in ("refuse", "drop"):
            raise ValueError(f"null_keys must be 'refuse' or 'drop', got {self.null_keys!r}")
        if not self.topics or not self.keys or not self.aggregations:
            raise ValueError("a StreamJob needs at least one topic, one key and one aggregation")
        if self.trigger.domain not in ("any", self.window.domain):
            raise ValueError(
                f"{type(self.trigger).__name__} fires {self.trigger.domain}-time windows, "
                f"not {self.window.domain}-time ones"
            )
        sql_only = isinstance(self.window, CumulativeWindows | OverWindows)
        if sql_only and self.window.domain == "processing":
            if not isinstance(self.trigger, ProcessingTimeTrigger):
                what = "OVER windows (Flink SQL's OVER ordered by PROCTIME())"
                if isinstance(self.window, CumulativeWindows):
                    what = "cumulative windows (Flink SQL's CUMULATE over PROCTIME())"
                raise ValueError(
                    f"processing-time {what} fire by the clock: ProcessingTimeTrigger(), "
                    f"not {self.trigger!r}"
                )
        elif sql_only and not (
            isinstance(self.trigger, EventTimeTrigger) and self.trigger.allowed_lateness_ms == 0
        ):
            what = "cumulative windows (Flink SQL's CUMULATE)"
            if isinstance(self.window, OverWindows):
                what = "OVER windows (Flink SQL's OVER)"
            raise ValueError(
                f"{what} fire by the watermark, without allowed lateness: "
                f"EventTimeTrigger(0), not {self.trigger!r}"
            )
        names = [a.name for a in self.aggregations]
        if len(set(names)) != len(names):
            raise ValueError(f"feature names must be unique, got {names}")
        object.__setattr__(self, "lookups", tuple(self.lookups))  # equal however given
        object.__setattr__(self, "derived", dict(self.derived))
        added = enrichment_outputs(self.lookups, self.derived)
        if len(set(added)) != len(added):
            raise ValueError(f"enriched and derived column names must be unique, got {added}")
        if self.where is not None and set(expression_columns(self.where)) & set(added):
            raise ValueError(
                f"where={self.where!r} reads enriched or derived columns {sorted(added)}: it "
                "filters the records as read, before enrichment"
            )

    @property
    def features(self) -> list[str]:
        return [a.name for a in self.aggregations]

    @property
    def bounds(self) -> dict[str, int]:
        """The topics with their own out-of-orderness bound B (Flink: one watermark strategy
        per source); the others use the job's."""
        return {
            t.name: t.out_of_orderness_ms for t in self.topics if t.out_of_orderness_ms is not None
        }

    def out_of_orderness(self, topic: str) -> int:
        """The topic's out-of-orderness bound B: its own, or the job's."""
        return self.bounds.get(topic, self.watermark.out_of_orderness_ms)

    @property
    def payload_columns(self) -> list[str]:
        """The archive columns the job reads: keys, aggregated and enrichment inputs, less
        the columns enrichment adds."""
        read = [*self.keys, *(a.column for a in self.aggregations)]
        read += enrichment_inputs(self.lookups, self.derived)
        read += expression_columns(self.where) if self.where is not None else []
        added = set(enrichment_outputs(self.lookups, self.derived))
        return [c for c in dict.fromkeys(read) if c not in added]

    @property
    def archive_keys(self) -> list[str]:
        """The key columns read from the archive (not added by enrichment)."""
        return [k for k in self.keys if k in self.payload_columns]

    def filtered_out(self) -> Column:
        """True for a record ``where`` does not hold for (false or null, as SQL's WHERE)."""
        if self.where is None:
            return F.lit(False)
        return ~F.coalesce(F.expr(self.where), F.lit(False))

    def null_key(self) -> Column:
        """True for a record whose archived key has a null column."""
        return reduce(Column.__or__, [F.col(k).isNull() for k in self.archive_keys], F.lit(False))


def long_sums(job: StreamJob, records: DataFrame) -> list[str]:
    """The features that sum an integer column of ``records`` (:func:`refusing_overflow`)."""
    topics = ", ".join(t.where for t in job.topics)
    return [
        f"{topics}: feature {a.name!r} sums integer column {a.column!r}"
        for a in job.aggregations
        if a.function == "sum" and isinstance(records.schema[a.column].dataType, IntegralType)
    ]


@contextmanager
def refusing_overflow(long_sums: Sequence[str]) -> Iterator[None]:
    """Spark's overflow error of a sum of integers (ANSI mode), or the session replay's, as a
    :class:`BadArchiveError` naming ``long_sums``: the features that sum integer columns."""
    try:
        yield
    except Exception as exc:
        if long_sums and LONG_OVERFLOW in str(exc):
            raise BadArchiveError(
                f"{'; '.join(long_sums)}: a window's sum overflows a 64-bit long (Flink's "
                "Java long sum would wrap around silently; the backfill refuses rather than "
                "write a wrapped value): cast the column to decimal or double"
            ) from exc
        raise
