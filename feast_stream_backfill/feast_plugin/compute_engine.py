"""Feast compute engine: ``feast materialize`` leaves Redis as the Flink job would have.

``feature_store.yaml``::

    batch_engine:
      type: feast_stream_backfill.feast_plugin.compute_engine.StreamBackfillComputeEngine

For ``materialize START END`` each key that emitted in ``[START, END]`` gets its last
emission at or before END, stored with its ``emit_time`` as the timestamp. Rows are written
from the Spark executors through Feast's own online store (its Redis key encoding, ``_ts``
field and ttl), one connection per Spark partition. Feast's Redis writer skips a row whose
timestamp is not newer than the stored one, so a rerun writes nothing new: idempotent.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import datetime, timezone
from functools import partial
from typing import Any, Literal

import dill
import pyarrow as pa
from feast import StreamFeatureView
from feast.infra.common.materialization_job import (
    MaterializationJob,
    MaterializationJobStatus,
    MaterializationTask,
)
from feast.infra.compute_engines.base import ComputeEngine
from feast.infra.passthrough_provider import PassthroughProvider
from feast.repo_config import FeastConfigBaseModel, RepoConfig
from feast.utils import _convert_arrow_to_proto
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from feast_stream_backfill.feast_plugin.offline_store import emissions_for
from feast_stream_backfill.online_state import state_at


class StreamBackfillComputeEngineConfig(FeastConfigBaseModel):
    type: Literal[
        "feast_stream_backfill.feast_plugin.compute_engine.StreamBackfillComputeEngine"
    ] = "feast_stream_backfill.feast_plugin.compute_engine.StreamBackfillComputeEngine"


class StreamBackfillMaterializationJob(MaterializationJob):
    def __init__(
        self,
        status: MaterializationJobStatus,
        error: BaseException | None = None,
        keys_written: int = 0,
    ) -> None:
        self._id = str(uuid.uuid4())
        self._status, self._error, self.keys_written = status, error, keys_written

    def status(self) -> MaterializationJobStatus:
        return self._status

    def error(self) -> BaseException | None:
        return self._error

    def should_be_retried(self) -> bool:
        return False

    def job_id(self) -> str:
        return self._id

    def url(self) -> str | None:
        return None


class OnlineStoreWriteError(RuntimeError):
    """The online store could not be written; nothing was reported as materialized."""


def _utc(moment: datetime) -> datetime:
    return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)


class StreamBackfillComputeEngine(ComputeEngine):
    def __init__(
        self, *, repo_config: RepoConfig, offline_store: Any, online_store: Any, **kwargs: Any
    ) -> None:
        super().__init__(
            repo_config=repo_config, offline_store=offline_store, online_store=online_store
        )

    def update(
        self,
        project: str,
        views_to_delete: Any,
        views_to_keep: Any,
        entities_to_delete: Any,
        entities_to_keep: Any,
    ) -> None:
        """Nothing to provision: emission logs are made on first use."""

    def teardown_infra(self, project: str, fvs: Any, entities: Any) -> None:
        """Nothing to tear down beyond what the online store owns."""

    def _materialize_one(
        self, registry: Any, task: MaterializationTask, **kwargs: Any
    ) -> MaterializationJob:
        view = task.feature_view
        try:
            if not isinstance(view, StreamFeatureView):
                raise ValueError(f"{view.name!r}: this engine materializes stream feature views")
            _check_online_store(self.repo_config, self.online_store)
            emissions = emissions_for(self.repo_config, view)
            keys = [e.name for e in view.entity_columns]
            state = state_at(emissions, keys, _utc(task.end_time), _utc(task.start_time))
            written = write_online(state, view, self.repo_config)
        except Exception as exc:  # Feast raises job.error() for an ERROR job
            return StreamBackfillMaterializationJob(MaterializationJobStatus.ERROR, exc)
        return StreamBackfillMaterializationJob(
            MaterializationJobStatus.SUCCEEDED, keys_written=written
        )


def _check_online_store(config: RepoConfig, online_store: Any) -> None:
    """Fail before any Spark work, with the address, when Redis is not there."""
    get_client = getattr(online_store, "_get_client", None)
    if get_client is None:
        return
    try:
        get_client(config.online_store).ping()
    except Exception as exc:
        raise OnlineStoreWriteError(
            f"cannot reach the online store at {config.online_store.connection_string!r}: {exc}"
        ) from exc


def _write_partition(
    config_bytes: bytes, view_bytes: bytes, batches: Iterator[pa.RecordBatch]
) -> Iterator[pa.RecordBatch]:
    """Runs on an executor: one online-store client for the whole Spark partition."""
    from feast.protos.feast.core.StreamFeatureView_pb2 import StreamFeatureView as ViewProto

    repo_config = dill.loads(config_bytes)
    fv = StreamFeatureView.from_proto(ViewProto.FromString(view_bytes), skip_udf=True)
    online_store = PassthroughProvider(repo_config).online_store
    value_types = {e.name: e.dtype.to_value_type() for e in fv.entity_columns}
    written = 0
    for batch in batches:
        if batch.num_rows:
            data = _convert_arrow_to_proto(batch, fv, value_types)
            online_store.online_write_batch(repo_config, fv, data, None)
            written += batch.num_rows
    yield pa.RecordBatch.from_pydict({"written": [written]})


def write_online(state: DataFrame, view: StreamFeatureView, config: RepoConfig) -> int:
    """Write one row per key through Feast's online store, from the executors; returns rows."""
    keys = [e.name for e in view.entity_columns]
    features = [f.name for f in view.features if f.name not in keys]
    ts_field = view.batch_source.timestamp_field
    rows = state.select(*keys, *features, F.col("emit_time").alias(ts_field))
    config_bytes, view_bytes = dill.dumps(config), view.to_proto().SerializeToString()

    try:
        total = (
            rows.mapInArrow(partial(_write_partition, config_bytes, view_bytes), "written long")
            .agg(F.sum("written"))
            .first()[0]
        )
    except Exception as exc:
        raise OnlineStoreWriteError(
            f"writing {view.name!r} to the online store failed part-way; rerun materialize "
            f"once it is back (rewrites are idempotent): {_cause(exc)}"
        ) from exc
    return int(total or 0)


def _cause(exc: BaseException) -> str:
    """The worker's own error line, not Spark's wrapping of it."""
    lines = [line for line in str(exc).splitlines() if line.strip() and "SQLSTATE" not in line]
    return (lines[-1] if lines else repr(exc))[:500]
