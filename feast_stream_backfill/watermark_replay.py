"""The combined watermark, replayed as Flink's source combines its partitions.

``CombinedWatermarkStatus`` (Flink 2.3) keeps one partial watermark per partition (split):
the combined watermark is the MIN over the active ones, the MAX over all of them when every
one is idle, and never goes down. Where idleness or session windows make the closed forms of
:mod:`watermarks` insufficient, this replays that rule over a compressed stream of events,
in order, in one task: a partition's watermark rising (``REACH``, to ``_value``), going idle
(``IDLE``) and coming back (``ACTIVE``). Events sharing a group (a tick, in periodic mode)
are applied together before combining, as ``onPeriodicEmit`` does. The stream has one row
per rise of a partition's watermark, not per record, and the result one row per change.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator, Sequence

import pandas as pd
from pyspark.sql import DataFrame

from feast_stream_backfill.columns import (
    EVENT_AT,
    EVENT_KIND,
    EVENT_VALUE,
    PARTITION,
    RISE_FROM,
    RISE_TO,
    TOPIC,
)
from feast_stream_backfill.processing_order import FIELDS, fields

REACH, IDLE, ACTIVE = 0, 1, 2


def replay(
    events: DataFrame,
    partitions: Sequence[tuple[str, int]],
    initial: int,
    combine: str = "min",
) -> DataFrame:
    """``events``: ``_at`` (a position: events at one position are applied together),
    ``_topic``, ``_partition``, ``_kind`` and ``_value``. Returns one row per rise of the
    combined watermark: the position's fields (``time``, ``phase``, ...), ``_from`` and
    ``_to``. Every partition starts at ``initial``, active. ``combine="max"``: the seed's MAX
    over partitions (no idleness)."""
    names = [name for name, _ in FIELDS]
    index = {p: i for i, p in enumerate(partitions)}
    width = len(names)

    def run(batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        value = [initial] * len(index)
        idle = [False] * len(index)
        active = [(initial, i) for i in range(len(index))]  # a heap; stale entries skipped
        combined = highest = initial
        here: tuple | None = None
        out: list[tuple] = []

        def update() -> None:
            nonlocal combined
            while active and (idle[active[0][1]] or value[active[0][1]] != active[0][0]):
                heapq.heappop(active)
            candidate = active[0][0] if active and combine == "min" else highest
            if candidate > combined:
                out.append((*here, combined, candidate))
                combined = candidate

        for batch in batches:
            for row in batch.itertuples(index=False):
                at = tuple(row[:width])
                if here is not None and at != here:
                    update()
                here = at
                p = index[(row[width], row[width + 1])]
                kind = row[width + 2]
                if kind == IDLE:
                    idle[p] = True
                    continue
                if kind == REACH:
                    value[p] = max(value[p], row[width + 3])
                    highest = max(highest, value[p])
                else:
                    idle[p] = False
                if not idle[p]:
                    heapq.heappush(active, (value[p], p))
            if out:
                yield pd.DataFrame(out, columns=[*names, RISE_FROM, RISE_TO])
                out = []
        if here is not None:
            update()
        if out:
            yield pd.DataFrame(out, columns=[*names, RISE_FROM, RISE_TO])

    schema = ", ".join(f"{n} {t}" for n, t in FIELDS) + f", {RISE_FROM} long, {RISE_TO} long"
    return (
        events.select(*fields(EVENT_AT), TOPIC, PARTITION, EVENT_KIND, EVENT_VALUE)
        .repartition(1)
        .sortWithinPartitions(*names)
        .mapInPandas(run, schema)
    )
