"""Emission logs kept as Delta tables, recomputed only when the job or its archives change.

A backfill is expensive and its result is a pure function of the job definition and the
versions of its archives and state tables, so the log is stored with that fingerprint (Delta's
commit ``userMetadata``). Readers get the stored log while the fingerprint matches; otherwise the
backfill runs again and overwrites it in one Delta transaction: reruns are idempotent.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import replace

from delta.exceptions import (
    ConcurrentAppendException,
    ConcurrentDeleteDeleteException,
    ConcurrentDeleteReadException,
    ConcurrentTransactionException,
    ConcurrentWriteException,
    DeltaConcurrentModificationException,
    MetadataChangedException,
    ProtocolChangedException,
)
from delta.tables import DeltaTable
from pyspark.sql import DataFrame, SparkSession

from feast_stream_backfill.archives import DeltaArchive
from feast_stream_backfill.backfill import StreamJob, backfill

logger = logging.getLogger(__name__)

#: Delta's refusals of a commit because another writer committed to the table first.
_COMMIT_CONFLICTS = (
    DeltaConcurrentModificationException,
    ConcurrentWriteException,
    MetadataChangedException,
    ProtocolChangedException,
    ConcurrentAppendException,
    ConcurrentDeleteReadException,
    ConcurrentDeleteDeleteException,
    ConcurrentTransactionException,
)
_WRITE_ATTEMPTS = 3


def _versions(spark: SparkSession, job: StreamJob) -> list[str | None]:
    """The versions of the job's archives (each layout's own: a Delta version, a file
    listing's digest, ...), then of its state tables; None where one cannot tell (a
    DataFrame)."""
    versions = [topic.source.version(spark) if topic.source else None for topic in job.topics]
    for lookup in job.lookups:
        state = lookup.source.delta_paths()
        versions += [None] if state is None else [DeltaArchive(p).version(spark) for p in state]
    return versions


def _digest(job: StreamJob, versions: list[str | None]) -> str | None:
    if None in versions:
        return None
    return hashlib.sha256(repr((job, versions)).encode()).hexdigest()


def fingerprint(spark: SparkSession, job: StreamJob) -> str | None:
    """The job's definition and the versions of its archives and state tables; None if one
    cannot tell whether it changed (a DataFrame)."""
    return _digest(job, _versions(spark, job))


def pinned(job: StreamJob, versions: list[str | None]) -> StreamJob:
    """The job with each Delta archive read at its version in ``versions`` (time travel), so
    that the backfill reads the versions its fingerprint names however many Spark actions it
    takes, whatever is committed meanwhile. (State tables are read at their latest.)"""
    topics = [
        replace(topic, path=None, archive=topic.source.pinned(version))
        if isinstance(topic.source, DeltaArchive) and version is not None
        else topic
        for topic, version in zip(job.topics, versions, strict=False)
    ]
    return replace(job, topics=topics)


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


def calibration_path(path: str) -> str:
    """Where the calibration of the emission log at ``path`` against the live job is kept:
    beside it (:meth:`feast_stream_backfill.calibration.Calibration.store`)."""
    return path + "_calibration"


def ensure_emission_log(spark: SparkSession, job: StreamJob, path: str) -> DataFrame:
    """The job's emission log at ``path`` (dropped records at :func:`dropped_path`),
    backfilled first unless both stored tables were made from the same job and archives (a
    run stopped between the two commits leaves a new log beside old dropped records)."""
    versions = _versions(spark, job)
    current = _digest(job, versions)
    stored = [stored_metadata(spark, p) for p in (path, dropped_path(path))]
    if current is None or any(m is None or m.get("fingerprint") != current for m in stored):
        result = backfill(spark, pinned(job, versions))
        metadata = json.dumps({"fingerprint": current, "stats": result.stats})
        for attempt in range(1, _WRITE_ATTEMPTS + 1):
            try:
                result.write(path, dropped_path(path), metadata)
                break
            except _COMMIT_CONFLICTS as exc:
                # Two runs of one view at once (two `feast materialize`): Delta refuses the
                # later commit. Writing again is a blind overwrite: the same rows when the
                # job and versions are the same, else this run's, as if run one after the other.
                if attempt == _WRITE_ATTEMPTS:
                    raise
                logger.warning(
                    "emission log %s: another run committed first (%s); writing it again",
                    path,
                    type(exc).__name__,
                )
    return spark.read.format("delta").load(path)
