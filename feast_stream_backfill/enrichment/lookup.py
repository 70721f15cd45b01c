"""The lookup: each record joined to the state version valid at its lookup time; then the
derived columns.

**Lookup at time t** (``t = _pt + delay_ms`` for ``time="processing"``, ``t = _et`` for
``time="event"``): the version of the key with the largest ``(_vt, _seq)`` such that
``_vt <= t`` (a version written at t is visible at t); if it is a tombstone, or ``t >=
_valid_to``, there is no state. No state: null attributes (``how="left"``, Flink's ``LEFT
JOIN``) or the record is removed (``how="inner"``). A null record key never matches.

**Sort-based, never a join of all versions per key**
(:func:`feast_stream_backfill.carry_forward.carry_forward`): records and versions are sorted
per key by ``(t, versions first, _seq)`` and the last version is carried forward to each
record. Cost ~ (records + versions) log, whatever the number of versions per key: state tables
far larger than the archive are fine. Each record is carried whole, so no second join brings
the version back to it (the training join, with many predictions per instant, does the
opposite). A key's records and versions meet in one task, so a very hot lookup key (a handful
of currencies, say) limits parallelism.

**Derived columns** (``StreamJob.derived``, e.g. ``{"amount_usd": "amount * rate"}``) are
Spark SQL expressions evaluated after every lookup, over the record and its enrichment (not
over each other); an aggregation can then aggregate them. They may use ``_et`` and ``_pt``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from pyspark.errors import AnalysisException
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from feast_stream_backfill.carry_forward import carry_forward
from feast_stream_backfill.columns import (
    DELETED,
    EVENT_TIME,
    PROCESSING_TIME,
    SEQUENCE,
    VALID_TO,
    VERSION_TIME,
)
from feast_stream_backfill.enrichment.sql_columns import expression_columns
from feast_stream_backfill.enrichment.state import StateSource

_AT, _SEQ, _TIE, _STATE = "_lk_at", "_lk_seq", "_lk_tie", "_lk_state"


@dataclass(frozen=True)
class Lookup:
    """Enrich each record with ``attributes`` of ``source`` (named ``prefix + attribute``).

    ``on`` maps record column(s) to the source's key column(s) (default: same names).
    ``time="processing"``: Flink's lookup join ``FOR SYSTEM_TIME AS OF proc_time``, the
    version valid at the record's processing time plus ``delay_ms``; ``time="event"``: an
    event-time temporal join, the latest version at or before the event time. ``how``:
    ``"left"`` keeps a record without state (null attributes), ``"inner"`` removes it.
    """

    source: StateSource
    attributes: Sequence[str]
    on: Mapping[str, str] | None = None
    time: Literal["processing", "event"] = "processing"
    delay_ms: int = 0
    how: Literal["left", "inner"] = "left"
    prefix: str = ""

    def __post_init__(self) -> None:
        where = f"lookup in {self.source.where}"
        on = dict(self.on) if self.on is not None else {k: k for k in self.source.keys}
        object.__setattr__(self, "on", on)
        if isinstance(self.attributes, str) or not self.attributes:
            raise ValueError(f"{where}: name the attribute column(s) to add")
        object.__setattr__(self, "attributes", tuple(self.attributes))
        if sorted(on.values()) != sorted(self.source.keys):
            raise ValueError(
                f"{where}: `on` must map record columns to each key column {list(self.source.keys)}"
                f" once, got {on}"
            )
        if self.time not in ("processing", "event"):
            raise ValueError(f"{where}: time must be 'processing' or 'event', got {self.time!r}")
        if self.how not in ("left", "inner"):
            raise ValueError(f"{where}: how must be 'left' or 'inner', got {self.how!r}")
        if self.time == "event" and self.delay_ms:
            raise ValueError(f"{where}: a lookup delay applies to processing-time lookups only")
        if len(set(self.outputs)) != len(self.outputs):
            raise ValueError(f"{where}: attributes must be unique, got {self.attributes}")

    @property
    def inputs(self) -> list[str]:
        """The record columns it reads."""
        return list(self.on)

    @property
    def outputs(self) -> list[str]:
        """The columns it adds to the record."""
        return [self.prefix + a for a in self.attributes]

    def lookup_time(self) -> Column:
        """The instant whose state the record reads, epoch ms."""
        if self.time == "event":
            return F.col(EVENT_TIME)
        return F.col(PROCESSING_TIME) + F.lit(self.delay_ms).cast("long")

    def join(self, records: DataFrame) -> DataFrame:
        """``records`` (with ``_pt`` and ``_et``) with the attributes as of the lookup time."""
        spark = records.sparkSession
        where = f"lookup in {self.source.where}"
        missing = [c for c in self.inputs if c not in records.columns]
        if missing:
            raise ValueError(f"{where}: the records have no column(s) {missing}")
        clashes = [c for c in self.outputs if c in records.columns]
        if clashes:
            raise ValueError(f"{where}: the records already have column(s) {clashes}; set prefix")
        versions = self.source.versions(spark, self.attributes)
        state = F.struct(F.col(DELETED), F.col(VALID_TO), *[F.col(a) for a in self.attributes])
        values = versions.where(_all_not_null(self.on.values())).select(
            *[F.col(s).cast(records.schema[r].dataType).alias(r) for r, s in self.on.items()],
            F.col(VERSION_TIME).alias(_AT),
            F.col(SEQUENCE).alias(_SEQ),
            F.xxhash64(state).alias(_TIE),  # equal (_vt, _seq): a fixed winner, run after run
            state.alias(_STATE),
        )
        at = records.select("*", self.lookup_time().alias(_AT))
        carried = carry_forward(at, values, list(self.on), _AT, _STATE, order=[_SEQ, _TIE])
        found = (
            F.col(_STATE).isNotNull()
            & ~F.col(_STATE)[DELETED]
            & (F.col(_STATE)[VALID_TO].isNull() | (F.col(_AT) < F.col(_STATE)[VALID_TO]))
        )
        if self.how == "inner":
            carried = carried.where(found)
        return carried.select(
            *records.columns,
            *[
                F.when(found, F.col(_STATE)[a]).alias(out)
                for a, out in zip(self.attributes, self.outputs, strict=True)
            ],
        )


def _all_not_null(columns: Iterable[str]) -> Column:
    condition = F.lit(True)
    for c in columns:
        condition = condition & F.col(c).isNotNull()
    return condition


def with_derived(records: DataFrame, derived: Mapping[str, str]) -> DataFrame:
    """Add each ``name: expression`` (Spark SQL, over the record and its enrichment)."""
    clashes = [n for n in derived if n in records.columns]
    if clashes:
        raise ValueError(f"derived column(s) {clashes} already exist in the enriched records")
    for name, expression in derived.items():
        try:
            records.select(F.expr(expression))
        except (AnalysisException, ValueError) as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else repr(exc)
            raise ValueError(
                f"derived column {name!r} = {expression!r}: {first}; the enriched records have "
                f"{[c for c in records.columns if not c.startswith('_')]} (and _et, _pt)"
            ) from exc
    return records.select("*", *[F.expr(e).alias(n) for n, e in derived.items()])


def enrich(
    records: DataFrame, lookups: Sequence[Lookup], derived: Mapping[str, str] | None = None
) -> DataFrame:
    """The records of :func:`feast_stream_backfill.backfill.backfill` (``_pt``, ``_et``,
    payload) enriched by each lookup in turn (a lookup may use the attributes of an earlier
    one), then the derived columns; records an inner lookup finds no state for are removed."""
    for lookup in lookups:
        records = lookup.join(records)
    if derived:
        records = with_derived(records, derived)
    return records


def enrichment_outputs(lookups: Sequence[Lookup], derived: Mapping[str, str]) -> list[str]:
    """The columns enrichment adds: the lookups' attributes, then the derived columns."""
    return [*(c for lookup in lookups for c in lookup.outputs), *derived]


def enrichment_inputs(lookups: Sequence[Lookup], derived: Mapping[str, str]) -> list[str]:
    """The record columns enrichment reads (some may be outputs of an earlier lookup)."""
    read = [*(c for lookup in lookups for c in lookup.inputs)]
    read += [c for expression in derived.values() for c in expression_columns(expression)]
    return list(dict.fromkeys(read))
