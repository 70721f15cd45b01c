"""What does the online store hold at time T?

The model: docs/concepts/model.md#the-online-store.

Per key, the last emission with ``emit_time <= T`` in ``(emit_time, emit_sequence)`` order:
a late firing of an older window overwrites a newer window's value, as an upsert sink does.
One aggregation per key, no sort.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from pyspark.sql import DataFrame
from pyspark.sql import functions as F


def state_at(
    emissions: DataFrame,
    keys: Sequence[str],
    end: datetime,
    start: datetime | None = None,
    *,
    time: str = "emit_time",
    sequence: str | None = "emit_sequence",
) -> DataFrame:
    """The online state at ``end`` of the keys that emitted in ``[start, end]`` (all keys with
    an emission at or before ``end`` when ``start`` is None): one emission-log row per key.

    ``time``/``sequence`` name other columns for other tables: a batch source's timestamp and
    created timestamp (Feast's ``pull_latest_from_table_or_query``; a null sequence loses)."""
    emitted = emissions.where(F.col(time) <= F.lit(end))
    if start is not None:
        emitted = emitted.where(F.col(time) >= F.lit(start))
    others = [c for c in emissions.columns if c not in keys]
    order = F.struct(time, sequence) if sequence else F.struct(time)
    latest = F.max_by(F.struct(*others), order)
    return emitted.groupBy(*keys).agg(latest.alias("_last")).select(*keys, "_last.*")
