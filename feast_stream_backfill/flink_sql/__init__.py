"""Backfill the job as the team wrote it, in Flink SQL: the script read with Flink's own
parser and mapped onto :class:`~feast_stream_backfill.job.StreamJob` where the mapping is
exact (docs/guides/flink-sql.md)."""

from feast_stream_backfill.flink_sql.mapping import job_from_sql, lookup_keys

__all__ = ["job_from_sql", "lookup_keys"]
