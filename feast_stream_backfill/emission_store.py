"""Emission logs kept as Delta tables, recomputed only when the job or its archives change.

A backfill is expensive and its result is a pure function of the job definition and the
versions of its archives and state tables, so the log is stored with that fingerprint (Delta's
commit ``userMetadata``). Readers get the stored log while the fingerprint matches; otherwise the
backfill runs again and overwrites it in one Delta transaction: reruns are idempotent.
"""

from __future__ import annotations

import hashlib
import json

from delta.tables import DeltaTable
from pyspark.sql import DataFrame, SparkSession

from feast_stream_backfill.archives import DeltaArchive
from feast_stream_backfill.backfill import StreamJob, backfill


def fingerprint(spark: SparkSession, job: StreamJob) -> str | None:
    """The job's definition and the versions of its archives (each layout's own: a Delta
    version, a file listing's digest, ...) and state tables; None if one cannot tell whether
    it changed (a DataFrame)."""
    versions = [topic.source.version(spark) if topic.source else None for topic in job.topics]
    for lookup in job.lookups:
        state = lookup.source.delta_paths()
        versions += [None] if state is None else [DeltaArchive(p).version(spark) for p in state]
    if None in versions:
        return None
    return hashlib.sha256(repr((job, versions)).encode()).hexdigest()


def stored_metadata(spark: SparkSession, path: str) -> dict | None:
    """What the last backfill wrote with the log (fingerprint and stats), if any."""
    if not DeltaTable.isDeltaTable(spark, path):
        return None
    last = DeltaTable.forPath(spark, path).history(1).first()
    try:
        return json.loads(last["userMetadata"] or "")
    except ValueError:
        return None


def dropped_path(path: str) -> str:
    """Where the dropped records of the emission log at ``path`` are kept: beside it."""
    return path + "_dropped"


def ensure_emission_log(spark: SparkSession, job: StreamJob, path: str) -> DataFrame:
    """The job's emission log at ``path`` (dropped records at :func:`dropped_path`),
    backfilled first unless the stored one was made from the same job and archives."""
    current = fingerprint(spark, job)
    stored = stored_metadata(spark, path)
    if current is None or stored is None or stored.get("fingerprint") != current:
        result = backfill(spark, job)
        metadata = json.dumps({"fingerprint": current, "stats": result.stats})
        result.write(path, dropped_path(path), metadata)
    return spark.read.format("delta").load(path)
