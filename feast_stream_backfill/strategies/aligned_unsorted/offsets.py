"""The archive read once: its records grouped by block of 64 offsets, bucket and pane; the
offsets counted from the blocks' bits; the copies (offsets archived more than once) found from
them, and each record counted once."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql.types import DecimalType

from feast_stream_backfill.aggregations import Aggregation
from feast_stream_backfill.columns import EVENT_TIME, OFFSET, PARTITION, TOPIC
from feast_stream_backfill.errors import conflicting_copies
from feast_stream_backfill.strategies.aligned_unsorted.thresholds import (
    THRESHOLD,
    BucketStarts,
    lowest_offset,
)
from feast_stream_backfill.windows import pane_start

BLOCK = "_block"  # a record's block of 64 offsets: its offset // 64
PANE = "_pane"  # the start of a record's pane
HIGHEST = "_highest"  # the highest event time of a group of records
COPY_BITS = "_copy_bits"  # a block's offsets archived more than once, as bits (-1: unknown)
COPIED = "_copied"  # a record at an offset archived twice: it counts at half weight
HIGHEST_BEFORE = "_highest_before"  # the highest event time of the blocks before a block
NO_TIME = "_no_time"  # some record of the group has no event time

_OFFSET_BITS, _ODD_BITS, _BLOCK_RECORDS = "_offset_bits", "_odd_bits", "_block_records"


def group_records(records: DataFrame, starts: BucketStarts, *, highest: bool = False) -> DataFrame:
    """Every record read once, in one hash aggregate per (topic, partition, block ``_block``,
    bucket ``_threshold``, pane ``_pane``), kept: the offset bits (for :func:`offset_blocks`),
    the lowest offset and its event time (for :func:`thresholds.bucket_minima`). A record's
    bucket starts where :class:`~thresholds.BucketStarts` says; its pane places it in its
    windows (:func:`window_aggregates.pane_windows`).

    A block's 64 offsets are read within moments, so they usually share one or two buckets:
    about a row per block, and each record is aggregated once (listing it once per block and
    once per bucket would aggregate twice as many rows). Records with a null or negative
    partition or offset, or a null event time, are grouped too, under their nulls:
    :func:`offset_blocks` sees them. ``highest``: each group's highest event time too
    (``_highest``, for :func:`idle.idle_periods`)."""
    return (
        records.groupBy(
            TOPIC,
            PARTITION,
            F.shiftright(OFFSET, 6).alias(BLOCK),
            starts.record_bucket().alias(THRESHOLD),
            pane_start(starts.window).alias(PANE),
        )
        .agg(
            *_offset_bits(),
            *lowest_offset(),
            *([F.max(EVENT_TIME).alias(HIGHEST)] if highest else []),
        )
        .withColumn(NO_TIME, F.col(THRESHOLD).isNull())  # a record's bucket is its event time's
        .persist(StorageLevel.MEMORY_AND_DISK_DESER)
    )


def group_by_pane(records: DataFrame, pane: Column) -> DataFrame:
    """:func:`group_records` by (topic, partition, block) and ``pane`` (``_pane``, null for a
    record without an event time), with each group's highest event time (``_highest``) and
    lowest offset, kept: for a job whose windows need no buckets of event time."""
    return (
        records.groupBy(TOPIC, PARTITION, F.shiftright(OFFSET, 6).alias(BLOCK), pane.alias(PANE))
        .agg(*_offset_bits(), F.max(EVENT_TIME).alias(HIGHEST), F.min(OFFSET).alias(OFFSET))
        .withColumn(NO_TIME, F.col(PANE).isNull())
        .persist(StorageLevel.MEMORY_AND_DISK_DESER)
    )


def _offset_bits() -> list[Column]:
    """The aggregates :func:`offset_blocks` counts offsets and copies from."""
    bit = F.expr(f"shiftleft(1L, int({OFFSET} & 63))")
    return [
        F.bit_or(bit).alias(_OFFSET_BITS),
        F.bit_xor(bit).alias(_ODD_BITS),
        F.count(F.lit(1)).alias(_BLOCK_RECORDS),
    ]


def highest_by_block(grouped: DataFrame, *also: Column) -> DataFrame:
    """Per (topic, partition, block) of a grouped read (with ``_highest``): its highest event
    time and ``_highest_before``, the highest of the blocks before it in its partition (null
    for the first), from which its records' processing times start (:func:`rules.read_at`);
    ``also``: more aggregates of the block's groups. One row per block: a running max over
    them, not over the records."""
    per_block = grouped.groupBy(TOPIC, PARTITION, BLOCK).agg(F.max(HIGHEST).alias(HIGHEST), *also)
    earlier = (
        Window.partitionBy(TOPIC, PARTITION)
        .orderBy(BLOCK)
        .rowsBetween(Window.unboundedPreceding, -1)
    )
    return per_block.withColumn(HIGHEST_BEFORE, F.max(HIGHEST).over(earlier))


@dataclass(frozen=True)
class OffsetBlocks:
    """:func:`offset_blocks`' answer. ``paired``: every copied offset is archived exactly twice
    (no block's ``_copy_bits`` is -1). ``suspect``: some record has a null or negative
    partition or offset, or a null event time (the value checks' problems this pass can see:
    :meth:`records.RecordChecks.refuse_problems` counts and names them)."""

    blocks: DataFrame
    counts: dict[str, int]
    partitions: list[tuple[str, int]]
    paired: bool
    suspect: bool


def offset_blocks(grouped: DataFrame) -> OffsetBlocks:
    """Offsets counted as set bits of the blocks of 64 offsets (of :func:`group_records`); the
    counts ``records_read`` and ``duplicates_removed``; the (topic, partition) pairs read."""
    blocks = _with_copy_bits(
        grouped.groupBy(TOPIC, PARTITION, BLOCK).agg(
            F.bit_or(_OFFSET_BITS).alias(_OFFSET_BITS),
            F.bit_xor(_ODD_BITS).alias(_ODD_BITS),
            F.sum(_BLOCK_RECORDS).alias(_BLOCK_RECORDS),
            F.max(NO_TIME).alias(NO_TIME),
        )
    )
    partition, block = F.col(PARTITION), F.col(BLOCK)
    bad = partition.isNull() | block.isNull() | (partition < 0) | (block < 0) | F.col(NO_TIME)
    pair = F.when(partition.isNotNull(), F.struct(TOPIC, PARTITION))
    totals = blocks.agg(
        F.coalesce(F.sum(_BLOCK_RECORDS), F.lit(0)).alias("records_read"),
        F.coalesce(F.sum(F.bit_count(_OFFSET_BITS)), F.lit(0)).alias("distinct"),
        F.collect_set(pair).alias("partitions"),
        F.count_if(F.col(COPY_BITS) == -1).alias("unpaired"),
        F.count_if(bad).alias("bad"),
    ).first()
    read = totals["records_read"]
    return OffsetBlocks(
        blocks=blocks,
        counts={"records_read": read, "duplicates_removed": read - totals["distinct"]},
        partitions=sorted(tuple(pair) for pair in totals["partitions"]),
        paired=totals["unpaired"] == 0,
        suspect=totals["bad"] > 0,
    )


def _with_copy_bits(blocks: DataFrame) -> DataFrame:
    """A block's ``_copy_bits`` are the offsets archived more than once. An offset held twice
    leaves its bit set in the OR and clear in the XOR (set in OR ^ XOR); when that accounts
    for every extra record, those are exactly the copied offsets. Otherwise (three copies of
    one offset) every offset of the block counts as copied (-1)."""
    twice = F.col(_OFFSET_BITS).bitwiseXOR(F.col(_ODD_BITS))
    extra = F.col(_BLOCK_RECORDS) - F.bit_count(_OFFSET_BITS)
    copy_bits = (
        F.when(extra == 0, F.lit(0)).when(extra == F.bit_count(twice), twice).otherwise(F.lit(-1))
    )
    return blocks.select(
        TOPIC,
        PARTITION,
        BLOCK,
        _OFFSET_BITS,
        _BLOCK_RECORDS,
        copy_bits.alias(COPY_BITS),
        NO_TIME,
    )


def _copies(blocks: DataFrame) -> DataFrame:
    """The copied bits of the blocks that have some, by a long per block (``_key``); blocks
    colliding on it share their copied bits, so that a record at a copied offset is always
    marked (others marked too are harmless: see the callers). Kept: the windows read the
    records through it."""
    copied = blocks.where(F.col(COPY_BITS) != 0)
    return (
        copied.groupBy(F.xxhash64(TOPIC, PARTITION, BLOCK).alias("_key"))
        .agg(F.bit_or(COPY_BITS).alias(COPY_BITS))
        .persist(StorageLevel.MEMORY_AND_DISK_DESER)
    )


def _marked(records: DataFrame, with_copies: DataFrame) -> tuple[DataFrame, Column]:
    """``records`` joined to :func:`_copies`, and whether each is at a copied offset."""
    key = F.xxhash64(TOPIC, PARTITION, F.shiftright(OFFSET, 6)).alias("_key")
    marked = records.select("*", key).join(F.broadcast(with_copies), "_key", "left")
    is_copied = F.coalesce(F.expr(f"({COPY_BITS} >> int({OFFSET} & 63)) & 1 = 1"), F.lit(False))
    return marked, is_copied


def weighs_copies(records: DataFrame, aggregations: Sequence[Aggregation]) -> bool:
    """Can the windows weigh copies (:func:`marked_copies`)? Not for a mean of a decimal
    column: Spark's ``avg`` of it is a decimal, the halved partials are doubles."""
    return not any(
        a.function == "mean" and isinstance(records.schema[a.column].dataType, DecimalType)
        for a in aggregations
    )


def marked_copies(records: DataFrame, blocks: DataFrame) -> tuple[DataFrame, list[DataFrame]]:
    """The records with ``_copied``: at an offset archived twice (``_copy_bits`` of
    :func:`offset_blocks`, where no block is -1), for the windows to count each copy at half
    weight instead of grouping them by offset (which shuffles every record). A copy marked
    wrongly (a block colliding on :func:`_copies`' key) or differing from its twin leaves its
    window's copies unpaired: :func:`window_aggregates.per_status` flags the window."""
    with_copies = _copies(blocks)
    marked, is_copied = _marked(records, with_copies)
    return marked.select(*records.columns, is_copied.alias(COPIED)), [with_copies]


def distinct_records(records: DataFrame, blocks: DataFrame) -> tuple[DataFrame, list[DataFrame]]:
    """Each record once, and what is kept for it, where some offset is archived twice
    (``duplicates_removed`` of :func:`offset_blocks`): only the records at copied offsets are
    grouped by offset. Copies whose event time or payload differ are refused, naming one."""
    with_copies = _copies(blocks)
    marked, is_copied = _marked(records, with_copies)
    single = marked.where(~is_copied).select(*records.columns)
    payload = [c for c in records.columns if not c.startswith("_")]
    version = F.xxhash64(EVENT_TIME, *payload)
    same_offset = Window.partitionBy(TOPIC, PARTITION, OFFSET)
    copies = (
        marked.where(is_copied)
        .select(
            *records.columns,
            (F.min(version).over(same_offset) != F.max(version).over(same_offset)).alias("_differ"),
            F.row_number().over(same_offset.orderBy(version)).alias("_copy"),
        )
        .where(F.col("_copy") == 1)
        .persist(StorageLevel.MEMORY_AND_DISK_DESER)
    )  # a window, not a group by: the payload's strings would make it a sort aggregate
    conflicts = copies.where("_differ")
    found = conflicts.count()
    if found:
        example = conflicts.select(TOPIC, PARTITION, OFFSET).first()
        copies.unpersist()
        with_copies.unpersist()
        raise conflicting_copies(example[TOPIC], found, example[PARTITION], example[OFFSET])
    return single.unionByName(copies.select(*records.columns)), [copies, with_copies]
