"""What in the archive a person should be told about, with its effect on the job.

- **Records far from their partition's clock.** A record is *ahead* when its event time is more
  than ``far_ms`` above both neighbours' in its partition (offset order), *behind* when more
  than ``far_ms`` below both. The neighbours stand for the partition's clock, not the inferred
  processing time: that is the running maximum of event times, which a broken producer clock
  (year 9999) drags along for every later record of its partition. For the ``top`` records
  furthest ahead, their *effect*: the job against the same archive without the record
  (processing times inferred again, as a broken clock also moved its partition's later
  records; then the core's sweep and classification, not a whole backfill): how many more
  (record, window) pairs are dropped, left pending, and fired after the last processing time
  of the archive without it (in year 9999, say).
- **Partitions holding the watermark back**: at the sampled moments of :mod:`samples`, the
  partition with the MIN watermark while the next lowest is more than ``hold_ms`` (default:
  the window size) above it; how long in all, and its longest stretch.
- **Silent periods**: per partition, gaps of more than ``silence_ms`` between successive
  records' processing times (default: the idle timeout T, else 5 minutes).
- **Duplicates** (same topic, partition and offset: counted once) and **null keys**: the
  backfill refuses records with a null key (Flink's ``keyBy`` fails the job) unless the job
  drops them (``null_keys="drop"``, a filter before ``keyBy``); explained here as dropped, and
  counted so that they are seen.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone

import pandas as pd
from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from feast_stream_backfill.columns import (
    EVENT_TIME,
    FIRE_POSITION,
    OFFSET,
    PARTITION,
    POSITION,
    PROCESSING_TIME,
    STATUS,
    TOPIC,
)
from feast_stream_backfill.explain.prepared import Prepared, without
from feast_stream_backfill.explain.samples import WatermarkSamples
from feast_stream_backfill.strategies.aligned_in_order import AlignedInProcessingOrder
from feast_stream_backfill.triggers import DROPPED, LATE, ON_TIME, PENDING, PER_RECORD

FAR_MS = 10 * 60_000
SILENCE_MS = 5 * 60_000


@dataclass
class Anomalies:
    """Tables (pandas) and counts; times as UTC text, durations in hours."""

    far: pd.DataFrame
    far_counts: dict[str, int]
    holding: pd.DataFrame
    silent: pd.DataFrame
    duplicates: int
    null_keys: int
    notes: list[str] = field(default_factory=list)


def _stamp(ms: Column) -> Column:
    """UTC time as text: pandas' nanosecond timestamps end in 2262, producer clocks do not."""
    return F.date_format(F.timestamp_millis(ms), "yyyy-MM-dd HH:mm:ss.SSS")


def iso(ms: float) -> str:
    """As :func:`_stamp`, in Python."""
    return datetime.fromtimestamp(ms / 1000, timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def far_records(prepared: Prepared, far_ms: int) -> DataFrame:
    by_offset = Window.partitionBy(TOPIC, PARTITION).orderBy(OFFSET)
    before, after = F.lag(EVENT_TIME).over(by_offset), F.lead(EVENT_TIME).over(by_offset)
    neighbours = prepared.distinct.select(
        TOPIC,
        PARTITION,
        OFFSET,
        EVENT_TIME,
        PROCESSING_TIME,
        F.greatest(before, after).alias("_high"),
        F.least(before, after).alias("_low"),
    )
    ahead = F.col(EVENT_TIME) - F.col("_high")
    behind = F.col("_low") - F.col(EVENT_TIME)
    return neighbours.select(
        "*",
        F.when(ahead > far_ms, F.lit("ahead"))
        .when(behind > far_ms, F.lit("behind"))
        .alias("direction"),
        F.greatest(ahead, behind).alias("_by"),
    ).where(F.col("direction").isNotNull())


def _judged_counts(prepared: Prepared, end_ms: int) -> tuple[int, int, int]:
    """Dropped and pending (record, window) pairs under the job's own settings, and the pairs
    fired (on time, late or per record) after ``end_ms``."""
    judged = AlignedInProcessingOrder().judge(prepared.job, prepared.distinct, prepared.windowed)
    status = F.col(STATUS)
    fired_at = F.when(status == ON_TIME, F.col(FIRE_POSITION)["time"]).when(
        status.isin(LATE, PER_RECORD), F.col(POSITION)["time"]
    )
    row = judged.classified.agg(
        F.sum((status == DROPPED).cast("long")).alias("dropped"),
        F.sum((status == PENDING).cast("long")).alias("pending"),
        F.sum(F.coalesce(fired_at > end_ms, F.lit(False)).cast("long")).alias("after"),
    ).first()
    return row["dropped"] or 0, row["pending"] or 0, row["after"] or 0


def _record(topic: str, partition: int, offset: int) -> Column:
    return (F.col(TOPIC) == topic) & (F.col(PARTITION) == partition) & (F.col(OFFSET) == offset)


def holding_back(samples: WatermarkSamples, hold_ms: int) -> pd.DataFrame:
    """Per partition: how long it held the MIN more than ``hold_ms`` below the next lowest;
    partitions that did so for less than ``hold_ms`` in all are left out (noise)."""
    frame = samples.frame
    held = frame["watermark"].isna() | (frame["runner_up"] - frame["watermark"] > hold_ms)
    held &= frame["runner_up"].notna() | frame["watermark"].isna()
    rows = []
    for holder, moments in frame[held].groupby("holder"):
        if len(moments) * samples.step_ms < hold_ms:
            continue
        index = moments.index.to_numpy()
        stretches = (pd.Series(index).diff() != 1).cumsum()
        longest = moments.groupby(stretches.to_numpy())["t"].agg(["min", "max", "count"])
        best = longest.sort_values("count").iloc[-1]
        behind = (moments["runner_up"] - moments["watermark"]).max()
        rows.append(
            {
                "partition": holder,
                "held_hours": len(moments) * samples.step_ms / 3_600_000,
                "longest_from": iso(best["min"]),
                "longest_to": iso(best["max"]),
                "max_behind_next_hours": None if pd.isna(behind) else behind / 3_600_000,
            }
        )
    columns = ["partition", "held_hours", "longest_from", "longest_to", "max_behind_next_hours"]
    result = pd.DataFrame(rows, columns=columns)
    return result.sort_values("held_hours", ascending=False).reset_index(drop=True)


def silent_periods(prepared: Prepared, silence_ms: int, top: int = 20) -> pd.DataFrame:
    by_offset = Window.partitionBy(TOPIC, PARTITION).orderBy(OFFSET)
    gaps = prepared.distinct.select(
        TOPIC,
        PARTITION,
        F.lag(PROCESSING_TIME).over(by_offset).alias("_silent_since"),
        F.col(PROCESSING_TIME).alias("_silent_until"),
    ).where(F.col("_silent_until") - F.col("_silent_since") > silence_ms)
    return (
        gaps.orderBy(F.desc(F.col("_silent_until") - F.col("_silent_since")))
        .limit(top)
        .select(
            F.concat_ws("/", TOPIC, F.col(PARTITION).cast("string")).alias("partition"),
            _stamp(F.col("_silent_since")).alias("silent_from"),
            _stamp(F.col("_silent_until")).alias("silent_to"),
            ((F.col("_silent_until") - F.col("_silent_since")) / 3_600_000).alias("hours"),
        )
        .toPandas()
    )


def anomalies(
    prepared: Prepared,
    samples: WatermarkSamples,
    *,
    far_ms: int = FAR_MS,
    hold_ms: int | None = None,
    silence_ms: int | None = None,
    top: int = 5,
) -> Anomalies:
    """The report's tables; ``samples`` from :func:`samples.watermark_samples`."""
    job = prepared.job
    far = far_records(prepared, far_ms).cache()
    counts = {r["direction"]: r["count"] for r in far.groupBy("direction").count().collect()}
    listed = far.orderBy(F.desc("_by")).limit(20).toPandas()
    far.unpersist()
    caused: list[tuple[int, int, int] | tuple[None, None, None]] = []
    for rank, r in enumerate(listed.to_dict("records")):
        if r["direction"] != "ahead" or rank >= top:
            caused.append((None, None, None))
            continue
        other = without(prepared, _record(r[TOPIC], r[PARTITION], r[OFFSET]))
        end = other.distinct.agg(F.max(PROCESSING_TIME)).first()[0]
        with_it, without_it = _judged_counts(prepared, end), _judged_counts(other, end)
        caused.append(tuple(w - o for w, o in zip(with_it, without_it, strict=True)))
    table = pd.DataFrame(
        {
            "partition": [
                f"{t}/{p}" for t, p in zip(listed[TOPIC], listed[PARTITION], strict=True)
            ],
            "offset": listed[OFFSET],
            "direction": listed["direction"],
            "event_time": [iso(ms) for ms in listed[EVENT_TIME]],
            "neighbours_hours": listed["_by"] / 3_600_000,
            "drops_caused": [c[0] for c in caused],
            "pending_caused": [c[1] for c in caused],
            "fired_after_end_caused": [c[2] for c in caused],
        }
    )
    key_null = F.lit(False)
    for key in job.keys:
        key_null = key_null | F.col(key).isNull()
    null_keys = prepared.distinct.where(key_null).count()
    size = getattr(job.window, "size_ms", 60_000)
    silence = silence_ms or job.watermark.idle_timeout_ms or SILENCE_MS
    return Anomalies(
        far=table,
        far_counts={"ahead": counts.get("ahead", 0), "behind": counts.get("behind", 0)},
        holding=holding_back(samples, hold_ms if hold_ms is not None else size),
        silent=silent_periods(prepared, silence),
        duplicates=prepared.counts["duplicates_removed"],
        null_keys=null_keys,
        notes=[
            f"far: event time more than {far_ms / 60_000:g} min from both neighbours'",
            f"holding back: the MIN more than {(hold_ms or size) / 60_000:g} min below the "
            f"next partition, sampled every {samples.step_ms / 1000:g} s",
            f"silent: more than {silence / 60_000:g} min between two records of a partition",
        ],
    )
