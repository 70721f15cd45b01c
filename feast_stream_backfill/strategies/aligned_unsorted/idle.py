"""The partitions' idle periods (:func:`idleness.idle_periods`) without sorting the records.

A partition's records are read at ``D2 +`` its running max of event time. Where that jumps
from ``m`` to ``m'``, the partition goes idle at ``ceil_I(D2 + m) + I + wait``
(:func:`rules.idle_wait_ms`) if that comes before ``D2 + m'``, when the record at ``m'``
wakes it: never where ``m' - m <= I + wait``. A jump is at most the rise of the running max
over the block of 64 offsets it falls in, so only the blocks rising more can hold one: their
records alone are read again, in offset order from the running max before the block. Before a
partition's first record and after its last, the closed forms hold.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import astuple, dataclass

from pyspark.sql import Column, DataFrame, Row, SparkSession, Window
from pyspark.sql import functions as F

from feast_stream_backfill import rules
from feast_stream_backfill.columns import (
    EVENT_TIME,
    IDLE_FROM,
    IDLE_UNTIL,
    OFFSET,
    PARTITION,
    PROCESSING_TIME,
    TOPIC,
    WAKES_AT,
)
from feast_stream_backfill.processing_order import next_tick, record_position
from feast_stream_backfill.strategies import StrategyDeclined
from feast_stream_backfill.strategies.aligned_unsorted.offsets import (
    BLOCK,
    HIGHEST,
    HIGHEST_BEFORE,
    highest_by_block,
)
from feast_stream_backfill.strategies.aligned_unsorted.thresholds import (
    MAX_PUSHED_RANGES,
    lowest_offset,
    merged_ranges,
)

#: Blocks of 64 offsets that :func:`idle_periods` reads again, at most: beyond, the strategy
#: declines and a job with idleness takes the sorted path.
MAX_BLOCKS_READ_AGAIN = 1 << 14

_RISEN, _LAST_BLOCK = "_risen", "_last_block"


@dataclass(frozen=True)
class _Idling:
    """When a partition goes idle (:func:`rules.goes_idle_at`), for the job's ticks every
    ``interval_ms``, its idle timeout and D2."""

    interval_ms: int
    timeout_ms: int
    delay_ms: int

    def tick(self, time: int) -> int:
        """The first tick at or after ``time``."""
        return -(-time // self.interval_ms) * self.interval_ms

    def read_at(self, highest_event_time: int) -> int:
        return rules.read_at(highest_event_time, self.delay_ms)

    def idle_from(self, quiet_from: int) -> int:
        """Where a partition goes idle, its inactivity clock started on the tick
        ``quiet_from``."""
        return rules.goes_idle_at(quiet_from, self.interval_ms, self.timeout_ms)

    def idle_after(self, read_at: int) -> int:
        """Where a partition goes idle after a record read at ``read_at``, if none follows:
        its clock starts on the tick after the record's."""
        return self.idle_from(self.tick(read_at) + self.interval_ms)


@dataclass(frozen=True)
class _AtAnEnd:
    """An idle period before a partition's first record (which wakes it: ``offset``, read at
    ``wakes_at``) or after its last (to the archive's end: both null)."""

    topic: str
    partition: int
    offset: int | None
    wakes_at: int | None
    idle_from: int


def idle_periods(
    grouped: DataFrame,
    records: DataFrame,
    partitions: Sequence[tuple[str, int]],
    interval_ms: int,
    timeout_ms: int,
    delay_ms: int,
) -> DataFrame:
    """:func:`idleness.idle_periods` with D1 = 0, without sorting the records. ``grouped``:
    :func:`offsets.group_records` with ``highest``. Raises :class:`StrategyDeclined` where
    more than :data:`MAX_BLOCKS_READ_AGAIN` blocks would be read again."""
    wait = rules.idle_wait_ms(interval_ms, timeout_ms)
    idling = _Idling(interval_ms, timeout_ms, delay_ms)
    blocks = _blocks_rising(grouped, interval_ms + wait, len(partitions))
    at_ends = _at_the_ends(records.sparkSession, blocks, idling)
    rising = [
        (block[TOPIC], block[PARTITION], block[BLOCK], block[HIGHEST_BEFORE])
        for block in blocks
        if block[_RISEN]
    ]
    if not rising:  # no block to read again: no record is read
        return at_ends
    return _within_blocks(records, rising, idling).unionByName(at_ends)


def _at_the_ends(spark: SparkSession, blocks: Sequence[Row], idling: _Idling) -> DataFrame:
    """The idle periods before each partition's first record and after its last, in closed
    form from its first and last blocks (:func:`_blocks_rising`)."""
    firsts = [block for block in blocks if block[HIGHEST_BEFORE] is None]
    lasts = {  # a partition's highest event time, where its last block leaves the running max
        (block[TOPIC], block[PARTITION]): max(
            v for v in (block[HIGHEST], block[HIGHEST_BEFORE]) if v is not None
        )
        for block in blocks
        if block[_LAST_BLOCK]
    }
    start = idling.tick(idling.read_at(min(block[EVENT_TIME] for block in firsts)))
    end = idling.tick(idling.read_at(max(lasts.values())))
    from_start = idling.idle_from(start)  # idle from the job's start
    periods = [  # idle before its first record, which wakes it
        _AtAnEnd(b[TOPIC], b[PARTITION], b[OFFSET], idling.read_at(b[EVENT_TIME]), from_start)
        for b in firsts
        if from_start < idling.read_at(b[EVENT_TIME])
    ]
    periods += [  # idle after its last record, to the end
        _AtAnEnd(topic, partition, None, None, idling.idle_after(idling.read_at(last)))
        for (topic, partition), last in lasts.items()
        if idling.idle_after(idling.read_at(last)) <= end
    ]
    schema = f"{TOPIC} string, {PARTITION} int, {OFFSET} long, {PROCESSING_TIME} long"
    woken = F.when(F.col(OFFSET).isNotNull(), record_position())
    rows = [astuple(period) for period in periods]
    return spark.createDataFrame(rows, f"{schema}, {IDLE_FROM} long").select(
        TOPIC, PARTITION, IDLE_FROM, woken.alias(IDLE_UNTIL), F.col(PROCESSING_TIME).alias(WAKES_AT)
    )


def _within_blocks(
    records: DataFrame, rising: Sequence[tuple[str, int, int, int]], idling: _Idling
) -> DataFrame:
    """The idle periods inside the ``rising`` blocks (topic, partition, block, running max
    before it): their records read again, in offset order."""
    schema = f"{TOPIC} string, {PARTITION} int, {BLOCK} long, {HIGHEST_BEFORE} long"
    rising_blocks = records.sparkSession.createDataFrame(rising, schema)
    again = (
        records.where(_offsets_within(rising))
        .withColumn(BLOCK, F.shiftright(OFFSET, 6))
        .join(F.broadcast(rising_blocks), [TOPIC, PARTITION, BLOCK])
    )
    by_offset = Window.partitionBy(TOPIC, PARTITION, BLOCK).orderBy(OFFSET)
    so_far = F.max(EVENT_TIME).over(by_offset.rowsBetween(Window.unboundedPreceding, -1))
    highest = F.greatest(so_far, F.col(HIGHEST_BEFORE))  # null before a partition's first record
    interval = idling.interval_ms
    went_idle = idling.idle_from(
        next_tick(rules.read_at(highest, idling.delay_ms), interval) + interval
    )
    # where it raises the running max, a record is read at its own event time + D2; where it
    # does not, it wakes nothing (went_idle is later than that)
    timed = again.withColumn(PROCESSING_TIME, rules.read_at(F.col(EVENT_TIME), idling.delay_ms))
    return timed.select(
        TOPIC,
        PARTITION,
        went_idle.alias(IDLE_FROM),
        record_position().alias(IDLE_UNTIL),
        F.col(PROCESSING_TIME).alias(WAKES_AT),
    ).where(F.col(IDLE_FROM) < F.col(WAKES_AT))


def _blocks_rising(grouped: DataFrame, most: int, partitions: int) -> list[Row]:
    """Of each partition's blocks (of :func:`offsets.group_records`, with ``highest``), in
    one job: those over which the running max of event time rises by more than ``most``
    (``_risen``; from the first record's event time in the partition's first block), and the
    first and last (``_last_block``), with ``_before``, the running max before the block (null
    in the first), their highest event time, lowest offset and its event time. Declines where
    more than :data:`MAX_BLOCKS_READ_AGAIN` rise."""
    most_rows = MAX_BLOCKS_READ_AGAIN + 2 * partitions
    blocks = _rising_first_and_last(grouped, most).limit(most_rows + 1).collect()
    if len(blocks) > most_rows or sum(block[_RISEN] for block in blocks) > MAX_BLOCKS_READ_AGAIN:
        raise StrategyDeclined(
            f"more than {MAX_BLOCKS_READ_AGAIN} blocks of 64 offsets would be read again to "
            "find the partitions' idle periods"
        )
    return blocks


def _rising_first_and_last(grouped: DataFrame, most: int) -> DataFrame:
    """The blocks :func:`_blocks_rising` keeps, as a query."""
    per_block = highest_by_block(grouped, *lowest_offset())
    risen = F.col(HIGHEST) - F.coalesce(HIGHEST_BEFORE, EVENT_TIME) > most
    last = F.lead(BLOCK).over(Window.partitionBy(TOPIC, PARTITION).orderBy(BLOCK)).isNull()
    return (
        per_block.select("*", last.alias(_LAST_BLOCK))
        .select("*", risen.alias(_RISEN))
        .where(F.col(_RISEN) | F.col(HIGHEST_BEFORE).isNull() | F.col(_LAST_BLOCK))
    )


def _offsets_within(blocks: Sequence[tuple[str, int, int, int]]) -> Column:
    """The records of ``blocks`` (topic, partition, block, ...), or more, as a filter on
    offsets that the archive's reader applies (Parquet row groups and Delta files whose
    offsets lie outside are skipped): a few merged ranges per partition, none (every record)
    where the partitions are many."""
    ranges: dict[tuple[str, int], list[tuple[int, int]]] = {}
    for topic, partition, block, *_ in blocks:
        ranges.setdefault((topic, partition), []).append((block << 6, (block + 1) << 6))
    if len(ranges) > MAX_PUSHED_RANGES:
        return F.lit(True)
    within = F.lit(False)
    for (topic, partition), pairs in ranges.items():
        for lo, hi in merged_ranges(sorted(pairs), MAX_PUSHED_RANGES // len(ranges)):
            span = (F.col(OFFSET) >= lo) & (F.col(OFFSET) < hi)
            within = within | ((F.col(TOPIC) == topic) & (F.col(PARTITION) == partition) & span)
    return within
