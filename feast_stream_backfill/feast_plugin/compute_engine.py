"""Feast compute engine: ``feast materialize`` leaves Redis as the Flink job would have.

``feature_store.yaml``::

    batch_engine:
      type: feast_stream_backfill.feast_plugin.compute_engine.StreamBackfillComputeEngine

For ``materialize START END`` each key that emitted in ``[START, END]`` gets its last
emission at or before END, stored with its ``emit_time`` as the timestamp. An ordinary batch
``FeatureView`` gets Feast's own rule: per key, its latest source row with event timestamp in
``[START, END]`` (created timestamp breaks ties), stored with that event timestamp. Rows are written
from the Spark executors through Feast's own online store (its Redis key encoding, ``_ts``
field and ttl), one connection per Spark partition. Feast's Redis writer skips a row whose
timestamp is not newer than the stored one, so a rerun writes nothing new: idempotent.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from functools import partial
from typing import Any, Literal

import dill
import pyarrow as pa
from feast import FeatureView, StreamFeatureView
from feast.infra.common.materialization_job import (
    MaterializationJob,
    MaterializationJobStatus,
    MaterializationTask,
)
from feast.infra.compute_engines.base import ComputeEngine
from feast.infra.passthrough_provider import PassthroughProvider
from feast.repo_config import FeastConfigBaseModel, RepoConfig
from feast.utils import _convert_arrow_to_proto, _get_column_names
from pyspark.accumulators import Accumulator
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from tqdm import tqdm

from feast_stream_backfill.feast_plugin.definitions import refuse_transformations
from feast_stream_backfill.feast_plugin.offline_store import emissions_for
from feast_stream_backfill.feast_plugin.redis_writer import RedisBatchWriter, supports
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
        start, end = _utc(task.start_time), _utc(task.end_time)
        try:
            _check_online_store(self.repo_config, self.online_store)
            if isinstance(view, StreamFeatureView):
                emissions = emissions_for(self.repo_config, view)
                keys = [e.name for e in view.entity_columns]
                state, timestamp = state_at(emissions, keys, end, start), "emit_time"
            else:
                refuse_transformations(view)
                state = self._latest_rows(registry, task.project, view, start, end)
                timestamp = view.batch_source.timestamp_field
            written = write_online(state, view, self.repo_config, task.tqdm_builder, timestamp)
        except Exception as exc:  # Feast raises job.error() for an ERROR job
            return StreamBackfillMaterializationJob(MaterializationJobStatus.ERROR, exc)
        return StreamBackfillMaterializationJob(
            MaterializationJobStatus.SUCCEEDED, keys_written=written
        )

    def _latest_rows(
        self, registry: Any, project: str, view: FeatureView, start: datetime, end: datetime
    ) -> DataFrame:
        """A batch view's latest row per key in ``[start, end]``, by the offline store's
        ``pull_latest_from_table_or_query``, renamed by the source's ``field_mapping``.

        Only the view's own entities are passed to ``_get_column_names`` (it takes every
        entity's join key it is given)."""
        entities = [registry.get_entity(name, project) for name in view.entities]
        keys, features, timestamp, created = _get_column_names(view, entities)
        job = self.offline_store.pull_latest_from_table_or_query(
            self.repo_config, view.batch_source, keys, features, timestamp, created, start, end
        )
        rows = job.to_spark_df()
        mapping = view.batch_source.field_mapping or {}
        return rows.toDF(*[mapping.get(c, c) for c in rows.columns])


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


def _view_from_proto(view_bytes: bytes, stream: bool) -> FeatureView:
    """The view rebuilt on an executor from its own proto class."""
    if stream:
        from feast.protos.feast.core.StreamFeatureView_pb2 import StreamFeatureView as StreamProto

        return StreamFeatureView.from_proto(StreamProto.FromString(view_bytes), skip_udf=True)
    from feast.protos.feast.core.FeatureView_pb2 import FeatureView as ViewProto

    return FeatureView.from_proto(ViewProto.FromString(view_bytes), skip_udf=True)


def _write_partition(
    config_bytes: bytes,
    view_bytes: bytes,
    stream: bool,
    written: Accumulator,
    partitions: Accumulator,
    batches: Iterator[pa.RecordBatch],
) -> Iterator[pa.RecordBatch]:
    """Runs on an executor: one Redis connection for the whole Spark partition, Feast's bytes
    (its own ``online_write_batch`` where the batch writer does not cover the store or types)."""
    repo_config = dill.loads(config_bytes)
    fv = _view_from_proto(view_bytes, stream)
    rows = 0
    if supports(repo_config, fv):
        writer = RedisBatchWriter(repo_config, fv, fv.batch_source.timestamp_field)
        try:
            for batch in batches:
                writer.write(batch)
                rows += batch.num_rows
            writer.flush()
        finally:
            writer.close()
    else:
        online_store = PassthroughProvider(repo_config).online_store
        value_types = {e.name: e.dtype.to_value_type() for e in fv.entity_columns}
        for batch in batches:
            if batch.num_rows:
                data = _convert_arrow_to_proto(batch, fv, value_types)
                online_store.online_write_batch(repo_config, fv, data, None)
                rows += batch.num_rows
    written.add(rows)
    partitions.add(1)
    yield pa.RecordBatch.from_pydict({"written": [rows]})


def write_online(
    state: DataFrame,
    view: FeatureView,
    config: RepoConfig,
    tqdm_builder: Callable[[int | None], tqdm] | None = None,
    timestamp: str = "emit_time",
) -> int:
    """Write one row per key through Feast's online store, from the executors; returns rows.

    ``timestamp`` names the column stored as Feast's event timestamp (``emit_time`` for an
    emission log); it is written under the view's ``batch_source.timestamp_field``, and the
    source's created-timestamp column goes along when ``state`` has it (Feast's own writer
    reads it).

    Progress: a bar per view counting the keys of finished Spark partitions (accumulators are
    merged as tasks end), refreshed twice a second while the write runs.
    """
    keys = [e.name for e in view.entity_columns]
    features = [f.name for f in view.features if f.name not in keys]
    ts_field = view.batch_source.timestamp_field
    created = view.batch_source.created_timestamp_column
    extra = [created] if created and created in state.columns and created != ts_field else []
    rows = state.select(*keys, *features, F.col(timestamp).alias(ts_field), *extra)
    config_bytes, view_bytes = dill.dumps(config), view.to_proto().SerializeToString()
    context = rows.sparkSession.sparkContext
    written, partitions = context.accumulator(0), context.accumulator(0)
    stream = isinstance(view, StreamFeatureView)
    writer = partial(_write_partition, config_bytes, view_bytes, stream, written, partitions)
    address = config.online_store.connection_string
    with _Progress(view.name, written, partitions, tqdm_builder):
        try:
            total = rows.mapInArrow(writer, "written long").agg(F.sum("written")).first()[0]
        except Exception as exc:
            raise OnlineStoreWriteError(
                f"writing {view.name!r} to the online store at {address!r} failed part-way "
                f"({written.value:,} keys written by the partitions that finished); the interval "
                f"is not recorded as materialized: rerun materialize once the store is back "
                f"(rewrites are idempotent). Cause: {_cause(exc)}"
            ) from exc
    return int(total or 0)


class _Progress:
    """A tqdm bar of keys written, fed from accumulators by a daemon thread."""

    def __init__(
        self,
        name: str,
        written: Accumulator,
        partitions: Accumulator,
        tqdm_builder: Callable[[int | None], tqdm] | None,
    ) -> None:
        self._written, self._partitions = written, partitions
        self._bar = (tqdm_builder or (lambda total: tqdm(total=total, ncols=100)))(None)
        self._bar.set_description_str(name)
        self._bar.unit = " keys"
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def _refresh(self) -> None:
        if self._written.value != self._bar.n:
            self._bar.update(self._written.value - self._bar.n)
            self._bar.set_postfix_str(f"{self._partitions.value} partitions done")

    def _poll(self) -> None:
        while not self._stop.wait(0.5):
            self._refresh()

    def __enter__(self) -> _Progress:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._refresh()
        self._bar.close()


def _cause(exc: BaseException) -> str:
    """The worker's own error line, not Spark's wrapping of it."""
    lines = [line for line in str(exc).splitlines() if line.strip() and "SQLSTATE" not in line]
    return (lines[-1] if lines else repr(exc))[:500]
