"""What does the online store hold at time T? (SEMANTICS section 5)

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
    emissions: DataFrame, keys: Sequence[str], end: datetime, start: datetime | None = None
) -> DataFrame:
    """The online state at ``end`` of the keys that emitted in ``[start, end]`` (all keys with
    an emission at or before ``end`` when ``start`` is None): one emission-log row per key."""
    emitted = emissions.where(F.col("emit_time") <= F.lit(end))
    if start is not None:
        emitted = emitted.where(F.col("emit_time") >= F.lit(start))
    others = [c for c in emissions.columns if c not in keys]
    latest = F.max_by(F.struct(*others), F.struct("emit_time", "emit_sequence"))
    return emitted.groupBy(*keys).agg(latest.alias("_last")).select(*keys, "_last.*")
