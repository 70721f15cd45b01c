"""A reference for enrichment: one record at a time, the obvious way.

The model: docs/concepts/model.md#enrichment.

For each distinct record, in processing order, the state table is replayed up to the lookup
time (``pt + delay`` or ``et``) and the record's key looked up in the resulting dictionary.
The enriched records then go through :func:`tests.reference_simulator.simulate`, which also
infers their processing times, and the job's windows (tumbling, sliding or sessions, in either
domain); a record an inner lookup removes is given the key None: it still moves the
watermark (the source saw it), but no window holds it and no status counts it.

State here is an exchange rate per currency, and a record's value is ``amount x rate``
(``amount x`` :data:`NO_RATE` when a left lookup finds no state).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tests.reference_simulator import Job, Record, processing_times, simulate

NO_RATE = 100.0


@dataclass(frozen=True)
class Transaction:
    topic: str
    partition: int
    offset: int
    et: int
    key: str
    currency: str | None
    amount: float


@dataclass(frozen=True)
class ScdRow:
    currency: str
    valid_from: int
    valid_to: int | None
    rate: float


@dataclass(frozen=True)
class Change:
    currency: str
    time: int
    sequence: int
    op: str  # "upsert" | "delete"
    rate: float | None


@dataclass(frozen=True)
class Scd:
    rows: tuple[ScdRow, ...]

    def state_at(self, t: int) -> dict[str, float]:
        """Per currency, its row with the latest valid_from <= t, unless its valid_to <= t."""
        state: dict[str, float] = {}
        for currency in {r.currency for r in self.rows}:
            started = [r for r in self.rows if r.currency == currency and r.valid_from <= t]
            if started:
                row = max(started, key=lambda r: r.valid_from)
                if row.valid_to is None or t < row.valid_to:
                    state[currency] = row.rate
        return state


@dataclass(frozen=True)
class Cdc:
    changes: tuple[Change, ...]
    snapshot: tuple[tuple[str, float], ...] = ()
    snapshot_time: int | None = None

    def state_at(self, t: int) -> dict[str, float]:
        """Start from the snapshot (unknown before it: empty), apply the later changes up to t
        in (time, sequence) order."""
        if self.snapshot_time is not None and t < self.snapshot_time:
            return {}
        state = dict(self.snapshot)
        after = -math.inf if self.snapshot_time is None else self.snapshot_time
        for change in sorted(self.changes, key=lambda c: (c.time, c.sequence)):
            if after < change.time <= t:
                if change.op == "delete":
                    state.pop(change.currency, None)
                else:
                    state[change.currency] = change.rate
        return state


@dataclass(frozen=True)
class RateLookup:
    source: Scd | Cdc
    time: str = "processing"  # or "event"
    delay: int = 0
    how: str = "left"  # or "inner"


def enrich(transactions: list[Transaction], lookup: RateLookup, job: Job) -> list[Record]:
    """One enriched Record per distinct transaction, value = amount x rate at lookup time."""
    by_offset = {}
    for tx in transactions:
        by_offset.setdefault((tx.topic, tx.partition, tx.offset), tx)
    plain = [Record(t.topic, t.partition, t.offset, t.et, t.key, t.amount) for t in transactions]
    enriched = []
    for pt, record in processing_times(plain, job):
        tx = by_offset[(record.topic, record.partition, record.offset)]
        at = pt + lookup.delay if lookup.time == "processing" else tx.et
        rate = lookup.source.state_at(at).get(tx.currency) if tx.currency is not None else None
        key = None if rate is None and lookup.how == "inner" else tx.key
        value = tx.amount * (NO_RATE if rate is None else rate)
        enriched.append(Record(tx.topic, tx.partition, tx.offset, tx.et, key, value))
    return enriched


def simulate_enriched(
    transactions: list[Transaction],
    lookup: RateLookup,
    job: Job,
    counts: dict[str, int] | None = None,
) -> tuple[list[tuple], dict[tuple, int]]:
    """:func:`simulate` on the enriched records (``counts`` as there; with
    ``records_without_state`` added: the distinct records an inner lookup removed)."""
    enriched = enrich(transactions, lookup, job)
    if counts is not None:
        counts["records_without_state"] = sum(r.key is None for r in enriched)
    return simulate(enriched, job, counts)
