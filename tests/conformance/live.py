"""A live job's logs made by real Flink, with known parameters: ground truth for calibration.

The plugin backfills what a Flink job would have written at its *minimal* processing times. A
live job reads later than that (consumer lag, a slow partition) and fails and restores now and
then; ``calibrate`` has to see through that. This module makes such a live job's logs:

1. **archive**: a synthetic topic, keys fixed to partitions (Kafka's default partitioner:
   murmur2 of the key), offsets in produce order, event time = produce time minus a producer
   delay (exponential, so event times go backwards within a partition), a share of records
   late by seconds to minutes, one ``amount`` per record;
2. **true processing times**: per partition in offset order
   ``pt_i = max(pt_{i-1}, et_i + D2 + lag_i)``, ``lag_i`` exponential; the slow partition gets
   ``extra`` more lag while ``et_i + D2 + lag_i`` falls in its stretch; a restart fails the job
   at R, restores the checkpoint taken at C = R - back and, from R' = R + downtime, re-reads
   every record read after C (at most ``catchup`` records a second per partition);
3. **writes**: the job run by ``FlinkReplay`` (Flink's sources, watermark valve and
   WindowOperator in its operator test harness), snapshotted at C and restored at R' from that
   snapshot with fresh watermark generators; every firing is a row of the output topic, stamped
   with its processing time, written at ``processing_time + D3 + jitter``. Re-fired windows are
   written again, as a real output topic holds them;
4. **served**: requests per key (a Poisson process) answered from Redis as Feast keeps it (a
   write lands only if its timestamp is newer than the stored one), in Feast's feature-logging
   columns for a feature service over the view.

``python -m tests.conformance.live OUT_DIR [options]`` writes ``archive`` and ``writes`` (Delta),
``served`` (parquet) and ``truth.json``; :func:`live_log` returns the same in memory, with times
as ms since the epoch.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import tempfile
import time
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from tests.conformance.harness import Scenario, _feed, build
from tests.reference_simulator import Job, Record

TOPIC = "transactions"
VIEW = "user_spend_5m"
#: The live job's features (the demo view's four, and the smallest amount), from its firings.
FEATURES = {
    "spend_5m": "sum",
    "transactions_5m": "count",
    "mean_amount_5m": "mean",
    "max_amount_5m": "max",
    "min_amount_5m": "min",
}
#: Feast's FieldStatus values in its feature logs.
PRESENT, NOT_FOUND, OUTSIDE_MAX_AGE = 1, 3, 4
START = "2026-01-01T00:00:00Z"

# Independent random streams: changing one part of the truth leaves the others' draws alone.
_ARCHIVE, _LAG, _JITTER, _REQUESTS = range(4)


@dataclass(frozen=True)
class LiveParams:
    """Every parameter of the archive, the job and the live run (times in ms unless named)."""

    records: int = 200_000
    keys: int = 5_000
    partitions: int = 8
    hours: float = 3.0
    seed: int = 1
    start: str = START
    # Producer side: delay of the append after the event, and the late share.
    producer_delay_mean_ms: float = 300.0
    producer_delay_max_ms: int = 3_000
    late_fraction: float = 0.002
    late_min_ms: int = 5_000
    late_max_ms: int = 600_000
    # The job (Flink): tumbling event-time windows, periodic bounded-out-of-orderness watermarks.
    window_ms: int = 300_000
    bound_ms: int = 5_000
    interval_ms: int = 200
    lateness_ms: int = 0
    trigger: str = "default"  # or "per_record" (CountTrigger.of(1): every record fires)
    # Its timing: D2 (event to earliest read), consumer lag, D3 (firing to sink), sink jitter.
    d2_ms: int = 1_000
    lag_mean_ms: float = 500.0
    d3_ms: int = 50
    jitter_mean_ms: float = 20.0
    # The slow partition: extra lag while its records' reads fall in the stretch.
    slow_partition: int | None = None
    slow_from_s: float = 3_600.0  # after the start
    slow_hours: float = 1.0
    slow_extra_ms: int = 30_000
    # The restart: failure at R (seconds after the start), checkpoint at R - back, downtime.
    restart_at_s: float | None = None
    restart_back_ms: int = 60_000
    downtime_ms: int = 30_000
    catchup_per_s: float = 1_000.0  # re-read rate per partition; 0: unlimited
    # Serving: requests per key and hour, the view's ttl.
    requests_per_key_hour: float = 4.0
    ttl_s: float = 3_600.0

    @property
    def start_ms(self) -> int:
        return int(datetime.fromisoformat(self.start).timestamp() * 1000)

    def job(self) -> Job:
        return Job(
            size=self.window_ms,
            bound=self.bound_ms,
            interval=self.interval_ms,
            lateness=self.lateness_ms,
            trigger=self.trigger,
            min_delay=self.d2_ms,
            operator_delay=self.d3_ms,
        )


@dataclass
class LiveLog:
    """A live run in memory. Times are int64 ms since the epoch; ``firings`` are Flink's
    ``(incarnation, cause, time, key, start, end, watermark, count, sum, min, max)`` in output
    order (incarnation 1: after the restore), one per ``writes`` row."""

    params: LiveParams
    archive: pd.DataFrame  # partition, offset, event_time, user_id, amount
    writes: (
        pd.DataFrame
    )  # user_id, window_start, window_end, <features>, processing_time, write_time
    served: pd.DataFrame  # Feast's feature-logging columns (times in ms)
    truth: dict
    reads: pd.DataFrame  # partition, offset, incarnation, pt: every read of every record
    firings: list[tuple] = field(default_factory=list)


def murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2`` (a signed 32-bit int), which its default partitioner hashes
    record keys with."""
    m, h = 0x5BD1E995, 0x9747B28C ^ len(data)
    end = len(data) & ~3
    for i in range(0, end, 4):
        k = (int.from_bytes(data[i : i + 4], "little") * m) & 0xFFFFFFFF
        k = ((k ^ (k >> 24)) * m) & 0xFFFFFFFF
        h = ((h * m) & 0xFFFFFFFF) ^ k
    rest = data[end:]
    if len(rest) >= 3:
        h ^= rest[2] << 16
    if len(rest) >= 2:
        h ^= rest[1] << 8
    if rest:
        h = ((h ^ rest[0]) * m) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * m) & 0xFFFFFFFF
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def kafka_partition(key: str, partitions: int) -> int:
    """Kafka's default partitioner for a keyed record: ``toPositive(murmur2(key)) % n``."""
    return (murmur2(key.encode()) & 0x7FFFFFFF) % partitions


def synthetic_archive(p: LiveParams) -> pd.DataFrame:
    """The topic: ``partition, offset, event_time (ms), user_id, amount``, in offset order."""
    rng = np.random.default_rng([p.seed, _ARCHIVE])
    n = p.records
    produced = p.start_ms + np.sort(rng.uniform(0, p.hours * 3_600_000, n)).astype(np.int64)
    # Zipf-like keys, as the demo's generator: P(k) = log((k + 2) / (k + 1)) / log(keys).
    index = np.clip(np.floor(p.keys ** rng.random(n)).astype(np.int64) - 1, 0, p.keys - 1)
    width = max(6, len(str(p.keys - 1)))
    names = np.array([f"u{k:0{width}d}" for k in range(p.keys)])
    partition_of = np.array([kafka_partition(k, p.partitions) for k in names], dtype=np.int32)
    delay = np.minimum(rng.exponential(p.producer_delay_mean_ms, n), p.producer_delay_max_ms)
    late = rng.random(n) < p.late_fraction
    delay = np.where(late, rng.uniform(p.late_min_ms, p.late_max_ms, n), delay)
    amount = np.maximum(np.round(30.0 * np.exp(rng.standard_normal(n)), 2), 0.01)
    frame = pd.DataFrame(
        {
            "partition": partition_of[index],
            "produced": produced,
            "event_time": produced - delay.astype(np.int64),
            "user_id": names[index],
            "amount": amount,
        }
    )
    frame = frame.sort_values(["partition", "produced"], kind="stable", ignore_index=True)
    frame.insert(1, "offset", frame.groupby("partition").cumcount().astype(np.int64))
    return frame.drop(columns="produced")


def _cummax_by_partition(frame: pd.DataFrame, column: str) -> np.ndarray:
    return frame.groupby("partition")[column].cummax().to_numpy()


def true_reads(archive: pd.DataFrame, p: LiveParams) -> tuple[pd.DataFrame, dict]:
    """Every read of every record, ``partition, offset, incarnation, pt``, and the restart's
    times and checkpointed offsets (empty without a restart). ``archive`` in offset order."""
    rng = np.random.default_rng([p.seed, _LAG])
    lag = np.floor(rng.exponential(p.lag_mean_ms, len(archive))) if p.lag_mean_ms else 0
    ready = archive["event_time"].to_numpy() + p.d2_ms + np.asarray(lag, dtype=np.int64)
    if p.slow_partition is not None:
        since = p.start_ms + int(p.slow_from_s * 1000)
        until = since + int(p.slow_hours * 3_600_000)
        slow = (archive["partition"].to_numpy() == p.slow_partition) & (ready >= since)
        ready = ready + np.where(slow & (ready < until), p.slow_extra_ms, 0)
    first = archive[["partition", "offset"]].assign(incarnation=0, ready=ready)
    first["pt"] = _cummax_by_partition(first, "ready")
    if p.restart_at_s is None:
        return first.drop(columns="ready"), {}
    if p.restart_back_ms <= 0 or p.downtime_ms < 0:
        raise ValueError("the checkpoint comes before the failure, the restore after it")
    failed = p.start_ms + int(p.restart_at_s * 1000)
    checkpoint, restored = failed - p.restart_back_ms, failed + p.downtime_ms
    done = first[first["pt"] <= checkpoint].groupby("partition")["offset"].max()
    committed = first["partition"].map(done).fillna(-1).astype(np.int64)
    again = first[first["offset"] > committed].copy()
    behind = again["offset"] - committed[again.index]  # 1 for the first record re-read
    pace = (behind - 1) * 1000 / p.catchup_per_s if p.catchup_per_s else 0 * behind
    again["ready"] = np.maximum(again["ready"], restored + np.floor(pace).astype(np.int64))
    again["pt"] = _cummax_by_partition(again, "ready")
    again["incarnation"] = 1
    reads = pd.concat([first[first["pt"] < failed], again], ignore_index=True)
    restart = {
        "failed_at_ms": failed,
        "checkpoint_at_ms": checkpoint,
        "restored_at_ms": restored,
        "checkpoint_offsets": {int(k): int(v) for k, v in done.items()},
        "records_read_again": len(again) - int((first["pt"] >= failed).sum()),
    }
    return reads.drop(columns="ready"), restart


def _replay(p: LiveParams, archive: pd.DataFrame, reads: pd.DataFrame, restart: dict) -> list:
    """Run the reads through FlinkReplay; Flink's firings with their incarnation."""
    records = [
        Record(
            TOPIC, int(r.partition), int(r.offset), int(r.event_time), r.user_id, float(r.amount)
        )
        for r in archive.itertuples(index=False)
    ]
    by_place = {(r.partition, r.offset): r for r in records}
    reads = reads.sort_values(["incarnation", "pt", "partition", "offset"], kind="stable")
    timed = [
        (int(pt), by_place[(part, off)])
        for part, off, pt in zip(reads["partition"], reads["offset"], reads["pt"], strict=True)
    ]
    lines = _feed(Scenario("live", records, p.job()), timed).splitlines()
    header = len(lines) - len(timed)
    if restart:
        # Between the records around them: the checkpoint after every read at or before C,
        # the failure and the restore after the first incarnation's last read.
        first = reads["incarnation"].to_numpy() == 0
        pts = reads["pt"].to_numpy()
        before = int((first & (pts <= restart["checkpoint_at_ms"])).sum())
        lines.insert(
            header + int(first.sum()),
            f"restore {restart['failed_at_ms']} {restart['restored_at_ms']}",
        )
        lines.insert(header + before, f"checkpoint {restart['checkpoint_at_ms']}")
    classpath = build()
    with tempfile.TemporaryDirectory(prefix="flink-live-") as tmp:
        feed, out = Path(tmp) / "live.in", Path(tmp) / "live.out"
        feed.write_text("\n".join(lines) + "\n")
        done = subprocess.run(
            ["java", "-XX:+UseSerialGC", "-cp", classpath, "FlinkReplay", str(feed), str(out)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        if done.returncode:
            raise RuntimeError(f"the Flink replay failed:\n{done.stderr[-4000:]}")
        text = out.read_text()
    firings, incarnation = [], 0
    for line in text.splitlines():
        kind, *f = line.split(" ")
        if kind == "restore":
            incarnation += 1
        elif kind == "fire":
            cause, at, key, start, end, wm, count, total, low, high = f
            firings.append(
                (incarnation, cause, int(at), key, int(start), int(end), int(wm), int(count),
                 float(total), float(low), float(high))
            )  # fmt: skip
    return firings


def _writes(p: LiveParams, firings: list[tuple]) -> pd.DataFrame:
    columns = ["incarnation", "cause", "processing_time", "user_id", "window_start"]
    columns += ["window_end", "watermark", "transactions_5m", "spend_5m"]
    columns += ["min_amount_5m", "max_amount_5m"]
    frame = pd.DataFrame(firings, columns=columns)
    frame = frame.astype({"processing_time": "int64", "transactions_5m": "int64"})
    frame["mean_amount_5m"] = frame["spend_5m"] / frame["transactions_5m"]
    rng = np.random.default_rng([p.seed, _JITTER])
    jitter = np.floor(rng.exponential(p.jitter_mean_ms, len(frame))) if p.jitter_mean_ms else 0
    frame["write_time"] = frame["processing_time"] + p.d3_ms + np.asarray(jitter, dtype=np.int64)
    keep = ["user_id", "window_start", "window_end", *FEATURES, "processing_time", "write_time"]
    return frame[keep]


def redis_history(writes: pd.DataFrame) -> pd.DataFrame:
    """The writes that land, by arrival: Feast's Redis store keeps a key's stored row unless
    the new row's timestamp (the firing's processing time) is newer."""
    order = writes.rename_axis("sequence").reset_index()
    order = order.sort_values(["user_id", "write_time", "sequence"], kind="stable")
    newest_before = order.groupby("user_id")["processing_time"].cummax()
    newest_before = newest_before.groupby(order["user_id"]).shift(fill_value=-1)
    return order[order["processing_time"] > newest_before].drop(columns="sequence")


def _served(p: LiveParams, archive: pd.DataFrame, writes: pd.DataFrame) -> pd.DataFrame:
    rng = np.random.default_rng([p.seed, _REQUESTS])
    keys = np.sort(archive["user_id"].unique())
    span = p.hours * 3_600_000
    per_key = rng.poisson(p.requests_per_key_hour * p.hours, len(keys))
    requests = pd.DataFrame(
        {
            "user_id": np.repeat(keys, per_key),
            "at": p.start_ms + np.floor(rng.uniform(0, span, per_key.sum())).astype(np.int64),
        }
    )
    requests["__request_id"] = [
        f"{a:016x}{b:016x}" for a, b in rng.integers(0, 2**63, (len(requests), 2))
    ]
    requests = requests.sort_values(["at", "user_id"], kind="stable", ignore_index=True)
    landed = redis_history(writes).sort_values("write_time", kind="stable")
    found = pd.merge_asof(
        requests, landed, left_on="at", right_on="write_time", by="user_id", direction="backward"
    )
    present = found["write_time"].notna().to_numpy()
    age_ok = (found["at"] - found["processing_time"]).to_numpy() <= p.ttl_s * 1000
    status = np.where(present, np.where(age_ok, PRESENT, OUTSIDE_MAX_AGE), NOT_FOUND)
    served = pd.DataFrame({"user_id": found["user_id"]})
    for name in FEATURES:
        served[f"{VIEW}__{name}"] = found[name]
        served[f"{VIEW}__{name}__timestamp"] = found["processing_time"].astype("Int64")
        served[f"{VIEW}__{name}__status"] = status.astype(np.int32)
    served["__log_timestamp"] = found["at"]
    served["__request_id"] = found["__request_id"]
    if not served.empty:
        served[f"{VIEW}__transactions_5m"] = served[f"{VIEW}__transactions_5m"].astype("Int64")
    return served


def live_log(p: LiveParams, archive: pd.DataFrame | None = None) -> LiveLog:
    """The live run in memory: ``archive`` (offset order per partition; synthetic if None)."""
    started = time.monotonic()
    if archive is None:
        archive = synthetic_archive(p)
    archive = archive.sort_values(["partition", "offset"], ignore_index=True)
    reads, restart = true_reads(archive, p)
    firings = _replay(p, archive, reads, restart)
    writes = _writes(p, firings)
    served = _served(p, archive, writes)
    truth = {
        "parameters": asdict(p),
        "job": {
            "window": "tumbling event time",
            "window_size_ms": p.window_ms,
            "bound_ms": p.bound_ms,
            "watermark_interval_ms": p.interval_ms,
            "watermark_emission": "periodic",
            "watermark_combine": "min",
            "allowed_lateness_ms": p.lateness_ms,
            "trigger": p.trigger,
            "flink": "2.3 (FlinkReplay: sources, valve, WindowOperator in its test harness)",
        },
        "timing": {
            "d1_ms": 0,
            "d2_ms": p.d2_ms,
            "d3_ms": p.d3_ms,
            "processing_time": "per partition in offset order: "
            "pt_i = max(pt_{i-1}, event_time_i + d2 + lag_i (+ slow extra))",
            "lag": {"distribution": "exponential, floored to ms", "mean_ms": p.lag_mean_ms},
            "sink_jitter": {
                "distribution": "exponential, floored to ms",
                "mean_ms": p.jitter_mean_ms,
            },
            "write_time": "processing_time + d3 + jitter",
        },
        "slow_partition": None
        if p.slow_partition is None
        else {
            "partition": p.slow_partition,
            "from_ms": p.start_ms + int(p.slow_from_s * 1000),
            "until_ms": p.start_ms + int(p.slow_from_s * 1000) + int(p.slow_hours * 3_600_000),
            "extra_ms": p.slow_extra_ms,
            "applies_to": "records whose event_time + d2 + lag falls in [from, until)",
        },
        "restart": restart or None,
        "archive": {
            "topic": TOPIC,
            "records": len(archive),
            "keys": int(archive["user_id"].nunique()),
            "partitions": p.partitions,
            "start_ms": p.start_ms,
            "key_to_partition": "Kafka's default partitioner: murmur2(user_id) % partitions",
        },
        "writes": {
            "rows": len(writes),
            "rows_after_restore": sum(f[0] for f in firings),
            "features": FEATURES,
        },
        "served": {
            "rows": len(served),
            "view": VIEW,
            "requests": "Poisson per key over the archive's span",
            "rule": "a write lands unless its timestamp (processing_time) is not newer than "
            "the stored one (Feast's Redis store); served: the last landed write with "
            "write_time <= request time; status OUTSIDE_MAX_AGE beyond the ttl",
            "feature_timestamp": "processing_time",
        },
        "generated_in_seconds": round(time.monotonic() - started, 1),
    }
    return LiveLog(p, archive, writes, served, truth, reads, firings)


def _served_table(served: pd.DataFrame) -> pa.Table:
    """Feast's feature-logging schema: ``<view>__<feature>`` with its ``__timestamp`` (s) and
    ``__status`` (int32), then ``__log_timestamp`` (us), ``__log_date``, ``__request_id``."""
    seconds = pa.timestamp("s", tz="UTC")
    columns, fields = {"user_id": pa.array(served["user_id"], pa.string())}, []
    for name in FEATURES:
        base = f"{VIEW}__{name}"
        kind = pa.int64() if FEATURES[name] == "count" else pa.float64()
        columns[base] = pa.array(served[base], kind, from_pandas=True)
        stamp = served[f"{base}__timestamp"].floordiv(1000)
        columns[f"{base}__timestamp"] = pa.array(stamp, pa.int64(), from_pandas=True).cast(seconds)
        columns[f"{base}__status"] = pa.array(served[f"{base}__status"], pa.int32())
    at = pa.array(served["__log_timestamp"] * 1000, pa.int64()).cast(pa.timestamp("us", tz="UTC"))
    columns["__log_timestamp"] = at
    columns["__log_date"] = pa.array(served["__log_timestamp"] // 86_400_000, pa.int32()).cast(
        pa.date32()
    )
    columns["__request_id"] = pa.array(served["__request_id"], pa.string())
    fields = [pa.field(name, array.type) for name, array in columns.items()]
    return pa.Table.from_arrays(list(columns.values()), schema=pa.schema(fields))


def write_live_log(log: LiveLog, out_dir: str | Path, spark=None) -> None:
    """``archive`` and ``writes`` as Delta tables (timestamps), ``served`` as parquet, and
    ``truth.json``, under ``out_dir``."""
    from pyspark.sql import functions as F

    from feast_stream_backfill.spark import get_spark

    spark = spark or get_spark()
    out = Path(out_dir).resolve()
    out.mkdir(parents=True, exist_ok=True)
    stamps = {
        "archive": ["event_time"],
        "writes": ["window_start", "window_end", "processing_time", "write_time"],
    }
    with tempfile.TemporaryDirectory(prefix="live-log-") as tmp:
        for name, frame in (("archive", log.archive), ("writes", log.writes)):
            staged = f"{tmp}/{name}.parquet"
            pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), staged)
            df = spark.read.parquet(staged)
            df = df.select(
                *(
                    F.timestamp_millis(c).alias(c) if c in stamps[name] else F.col(c)
                    for c in frame.columns
                )
            )
            if name == "archive":
                df = df.withColumn("partition", F.col("partition").cast("int"))
            df.write.format("delta").mode("overwrite").option("overwriteSchema", "true").save(
                str(out / name)
            )
    (out / "served").mkdir(exist_ok=True)
    for old in (out / "served").glob("*.parquet"):
        old.unlink()
    pq.write_table(_served_table(log.served), out / "served" / "part-00000.parquet")
    (out / "truth.json").write_text(json.dumps(log.truth, indent=2) + "\n")


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, timezone.utc).isoformat()


def main(argv: list[str] | None = None) -> None:
    defaults = LiveParams()
    parser = argparse.ArgumentParser(
        prog="python -m tests.conformance.live",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("out_dir")
    options = {  # flag: (field, type); times after the start in seconds, durations in ms
        "records": ("records", int),
        "keys": ("keys", int),
        "partitions": ("partitions", int),
        "hours": ("hours", float),
        "seed": ("seed", int),
        "start": ("start", str),
        "d2-ms": ("d2_ms", int),
        "d3-ms": ("d3_ms", int),
        "lag-mean-ms": ("lag_mean_ms", float),
        "jitter-mean-ms": ("jitter_mean_ms", float),
        "window-ms": ("window_ms", int),
        "bound-ms": ("bound_ms", int),
        "interval-ms": ("interval_ms", int),
        "lateness-ms": ("lateness_ms", int),
        "trigger": ("trigger", str),
        "slow-partition": ("slow_partition", int),
        "slow-from": ("slow_from_s", float),
        "slow-hours": ("slow_hours", float),
        "slow-extra-ms": ("slow_extra_ms", int),
        "restart-at": ("restart_at_s", float),
        "restart-back-ms": ("restart_back_ms", int),
        "downtime-ms": ("downtime_ms", int),
        "catchup-per-s": ("catchup_per_s", float),
        "requests-per-key-hour": ("requests_per_key_hour", float),
        "ttl-s": ("ttl_s", float),
    }
    notes = {
        "slow-partition": "the slow partition (default: none)",
        "slow-from": "seconds after --start its stretch begins",
        "restart-at": "seconds after --start the job fails (default: no restart)",
        "restart-back-ms": "how long before the failure its last checkpoint was",
        "catchup-per-s": "records re-read per second and partition after the restore (0: at once)",
    }
    for flag, (name, kind) in options.items():
        default = getattr(defaults, name)
        note = notes.get(flag, f"default {default}")
        if flag in notes and default is not None:
            note += f", default {default}"
        parser.add_argument(f"--{flag}", dest=name, type=kind, default=default, help=note)
    args = vars(parser.parse_args(argv))
    out_dir = args.pop("out_dir")
    params = replace(defaults, **{k: v for k, v in args.items() if v is not None})
    started = time.monotonic()
    log = live_log(params)
    write_live_log(log, out_dir)
    restart = log.truth["restart"]
    print(
        f"{len(log.archive)} records, {len(log.writes)} writes "
        f"({log.truth['writes']['rows_after_restore']} after the restore), "
        f"{len(log.served)} served rows -> {out_dir} in {time.monotonic() - started:.1f} s"
        + (
            f"; restart: checkpoint {_iso(restart['checkpoint_at_ms'])}, failure "
            f"{_iso(restart['failed_at_ms'])}, restore {_iso(restart['restored_at_ms'])}"
            if restart
            else ""
        )
    )


if __name__ == "__main__":
    main()
