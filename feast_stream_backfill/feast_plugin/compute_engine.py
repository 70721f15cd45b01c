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

import threading
import uuid
from collections.abc import Callable, Iterator
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
from pyspark.accumulators import Accumulator
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from tqdm import tqdm

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
        try:
            if not isinstance(view, StreamFeatureView):
                raise ValueError(f"{view.name!r}: this engine materializes stream feature views")
            _check_online_store(self.repo_config, self.online_store)
            emissions = emissions_for(self.repo_config, view)
            keys = [e.name for e in view.entity_columns]
            state = state_at(emissions, keys, _utc(task.end_time), _utc(task.start_time))
            written = write_online(state, view, self.repo_config, task.tqdm_builder)
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
    config_bytes: bytes,
    view_bytes: bytes,
    written: Accumulator,
    partitions: Accumulator,
    batches: Iterator[pa.RecordBatch],
) -> Iterator[pa.RecordBatch]:
    """Runs on an executor: one Redis connection for the whole Spark partition, Feast's bytes
    (its own ``online_write_batch`` where the batch writer does not cover the store or types)."""
    from feast.protos.feast.core.StreamFeatureView_pb2 import StreamFeatureView as ViewProto

    repo_config = dill.loads(config_bytes)
    fv = StreamFeatureView.from_proto(ViewProto.FromString(view_bytes), skip_udf=True)
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
    view: StreamFeatureView,
    config: RepoConfig,
    tqdm_builder: Callable[[int | None], tqdm] | None = None,
) -> int:
    """Write one row per key through Feast's online store, from the executors; returns rows.

    Progress: a bar per view counting the keys of finished Spark partitions (accumulators are
    merged as tasks end), refreshed twice a second while the write runs.
    """
    keys = [e.name for e in view.entity_columns]
    features = [f.name for f in view.features if f.name not in keys]
    ts_field = view.batch_source.timestamp_field
    rows = state.select(*keys, *features, F.col("emit_time").alias(ts_field))
    config_bytes, view_bytes = dill.dumps(config), view.to_proto().SerializeToString()
    context = rows.sparkSession.sparkContext
    written, partitions = context.accumulator(0), context.accumulator(0)
    writer = partial(_write_partition, config_bytes, view_bytes, written, partitions)
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
