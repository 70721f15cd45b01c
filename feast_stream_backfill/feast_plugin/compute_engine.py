"""Feast compute engine: ``feast materialize`` leaves Redis as the Flink job would have.

``feature_store.yaml``::

    batch_engine:
      type: feast_stream_backfill.feast_plugin.compute_engine.StreamBackfillComputeEngine

For ``materialize START END`` each key that emitted in ``[START, END]`` gets its last
emission at or before END, stored with its ``emit_time`` as the timestamp. An ordinary batch
``FeatureView`` gets Feast's own rule: per key, its latest source row with event timestamp in
``[START, END]`` (created timestamp breaks ties), stored with that event timestamp. Rows are written
from the Spark executors through Feast's own online store (its Redis key encoding, ``_ts``
field and ttl), one connection per writing task, a task per executor core. Feast's Redis writer
skips a row whose timestamp is not newer than the stored one, so a rerun writes nothing new:
idempotent. Any other online store is written by Feast's own ``online_write_batch``, from the
executors or, for a file such as sqlite, from the driver (:mod:`.online_writer`); a rerun writes
the same rows again.
"""

from __future__ import annotations

import ipaddress
import re
import socket
import uuid
import warnings
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
from feast.repo_config import FeastConfigBaseModel, RepoConfig
from pyspark import TaskContext
from pyspark.accumulators import Accumulator
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from tqdm import tqdm

from feast_stream_backfill.feast_plugin import ALPHA_WARNING
from feast_stream_backfill.feast_plugin.apply_checks import ApplyCheckError, check_views
from feast_stream_backfill.feast_plugin.definitions import check_supported, is_windowed
from feast_stream_backfill.feast_plugin.emission_cleanup import (
    remove_project_logs,
    remove_view_logs,
)
from feast_stream_backfill.feast_plugin.online_writer import (
    LiveCounts,
    Progress,
    RowsReporter,
    Tally,
    driver_batches,
    write_failed,
    write_with_feast,
    writes_from_driver,
)
from feast_stream_backfill.feast_plugin.online_writer import (
    check_online_store as _check_online_store,
)
from feast_stream_backfill.feast_plugin.redis_writer import (
    RedisBatchWriter,
    connection_kwargs,
    supports,
)
from feast_stream_backfill.feast_plugin.view_rows import emissions_for, latest_rows
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


#: Why ``feast apply`` let the views in, said after the problems ``materialize`` found.
APPLY_SKIPPED = (
    "feast apply did not check these views: with provider 'local' and a sqlite online store, "
    "Feast's apply command writes the registry without calling the compute engine, which checks "
    "them. Naming the same provider by its class (provider: "
    "feast.infra.passthrough_provider.PassthroughProvider in feature_store.yaml) makes feast "
    "apply check them and refuse such views."
)


def apply_skips_engine(config: RepoConfig) -> bool:
    """Whether the ``feast apply`` command skips the compute engine: Feast's plan path
    (``FeatureStore._apply_diffs``), taken for the ``local`` provider with a sqlite online
    store, never calls it. ``FeatureStore.apply`` from Python does."""
    store = config.online_store
    return config.provider == "local" and getattr(store, "type", None) == "sqlite"


def _utc(moment: datetime) -> datetime:
    return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)


def _check_ranges(tasks: list[MaterializationTask]) -> None:
    """Feast refuses ``materialize`` with START after END, but ``materialize_incremental``
    starts where the last materialization ended, so an earlier END inverts the range: nothing
    in it is what the online store should hold at END. Refused, every view named."""
    inverted = [
        f"feature view {task.feature_view.name!r}: START {_utc(task.start_time)} is after END "
        f"{_utc(task.end_time)}"
        for task in tasks
        if _utc(task.start_time) > _utc(task.end_time)
    ]
    if inverted:
        raise ValueError(
            "; ".join(inverted) + " (materialize_incremental starts where the last "
            "materialization ended); nothing was written: give an END after START"
        )


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
        """``feast apply``: check every stream view (every problem in one error, before the
        registry is committed: :mod:`.apply_checks`), then remove the emission logs of deleted
        stream views. Emission logs are made on first use."""
        check_views(self.repo_config, views_to_keep)
        deleted = [view.name for view in views_to_delete if isinstance(view, StreamFeatureView)]
        remove_view_logs(self.repo_config, project, deleted)

    def teardown_infra(self, project: str, fvs: Any, entities: Any) -> None:
        """``feast teardown``: the project's emission logs, all of them (Feast passes its batch
        views only; the online store's tables are the online store's)."""
        remove_project_logs(self.repo_config, project)

    @property
    def supports_batch(self) -> bool:
        """Feast hands every view of one ``feast materialize`` to :meth:`materialize` at once."""
        return True

    def materialize(
        self,
        registry: Any,
        tasks: MaterializationTask | list[MaterializationTask],
        **kwargs: Any,
    ) -> list[MaterializationJob]:
        """Every view is checked before any is computed or written: one error names each view
        this plugin cannot serve (:func:`.definitions.check_supported`), then one lists every
        problem of the stream views, as ``feast apply`` would have (:mod:`.apply_checks`; the
        command skips the engine with a sqlite online store, :func:`apply_skips_engine`, and
        the error says so), then every inverted range."""
        listed = [tasks] if isinstance(tasks, MaterializationTask) else tasks
        views = [task.feature_view for task in listed]
        check_supported(views)
        try:
            check_views(self.repo_config, views)
        except ApplyCheckError as exc:
            if not apply_skips_engine(self.repo_config):
                raise
            raise ApplyCheckError(f"{exc}\n{APPLY_SKIPPED}") from None
        _check_ranges(listed)
        return super().materialize(registry, tasks, **kwargs)

    def _materialize_one(
        self, registry: Any, task: MaterializationTask, **kwargs: Any
    ) -> MaterializationJob:
        view = task.feature_view
        start, end = _utc(task.start_time), _utc(task.end_time)
        try:
            _check_online_store(self.repo_config, self.online_store)
            if is_windowed(view):
                emissions = emissions_for(self.repo_config, view)
                keys = [e.name for e in view.entity_columns]
                state, timestamp = state_at(emissions, keys, end, start), "emit_time"
            else:
                state = self._latest_rows(view, start, end)
                timestamp = view.batch_source.timestamp_field
            written = write_online(state, view, self.repo_config, task.tqdm_builder, timestamp)
        except Exception as exc:  # Feast raises job.error() for an ERROR job
            return StreamBackfillMaterializationJob(MaterializationJobStatus.ERROR, exc)
        return StreamBackfillMaterializationJob(
            MaterializationJobStatus.SUCCEEDED, keys_written=written
        )

    def _latest_rows(self, view: FeatureView, start: datetime, end: datetime) -> DataFrame:
        """Feast's rule for a view that is not windowed (a batch view, a stream view without
        aggregations, a push source's table): per key, its latest row in ``[start, end]``,
        renamed by ``field_mapping``, a stream view's udf applied (:func:`.latest_rows`)."""
        return latest_rows(self.repo_config, view, start, end)


def _view_from_proto(view_bytes: bytes, stream: bool) -> FeatureView:
    """The view rebuilt on an executor from its own proto class."""
    if stream:
        from feast.protos.feast.core.StreamFeatureView_pb2 import StreamFeatureView as StreamProto

        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", ALPHA_WARNING, RuntimeWarning)
            return StreamFeatureView.from_proto(StreamProto.FromString(view_bytes), skip_udf=True)
    from feast.protos.feast.core.FeatureView_pb2 import FeatureView as ViewProto

    return FeatureView.from_proto(ViewProto.FromString(view_bytes), skip_udf=True)


#: What each Spark partition's writer reports: its rows written (or already up to date) and,
#: when it failed on its last attempt, the error.
_REPORT = pa.schema([("written", pa.int64()), ("error", pa.string())])
_REPORT_DDL = "written long, error string"


def _task_attempts(spark: SparkSession) -> int:
    """How many times Spark runs a failing task: once in local mode (``local[N, F]``: F),
    else ``spark.task.maxFailures``."""
    master = spark.sparkContext.master
    retries = re.fullmatch(r"local\[[^,\]]+,\s*(\d+)\]", master)
    if retries:
        return int(retries[1])
    if master == "local" or master.startswith("local["):
        return 1
    return int(spark.conf.get("spark.task.maxFailures", "4"))


def _write_partition(
    config_bytes: bytes,
    view_bytes: bytes,
    stream: bool,
    attempts: int,
    written: Accumulator,
    partitions: Accumulator,
    live: tuple[tuple[str, int], str] | None,
    batches: Iterator[pa.RecordBatch],
) -> Iterator[pa.RecordBatch]:
    """Runs on an executor: one Redis connection for the whole Spark partition, Feast's bytes
    (its own ``online_write_batch`` where the batch writer does not cover the store or types:
    any network store). ``live``: where to report the rows as they are settled
    (:class:`.LiveCounts`' address and token).

    A failure raises while Spark will run the task again; on the last attempt it is reported
    with the rows written so far instead, so that the driver can say how many keys the store
    got (a failed task's accumulators are dropped)."""
    repo_config = dill.loads(config_bytes)
    fv = _view_from_proto(view_bytes, stream)
    rows, error = 0, None
    report = RowsReporter(*live) if live else lambda rows, last=False: None
    try:
        if supports(repo_config, fv):
            writer = RedisBatchWriter(repo_config, fv, fv.batch_source.timestamp_field)
            try:
                for batch in batches:
                    writer.write(batch)
                    report(writer.rows_done)
                writer.flush()
            finally:
                rows = writer.rows_done
                writer.close()
        else:
            for n in write_with_feast(repo_config, fv, batches):
                rows += n
                report(rows)
    except Exception as exc:
        task = TaskContext.get()
        if task is not None and task.attemptNumber() + 1 < attempts:
            raise
        error = f"{type(exc).__name__}: {exc}"
    report(rows, last=True)
    written.add(rows)
    partitions.add(1)
    yield pa.RecordBatch.from_pydict({"written": [rows], "error": [error]}, schema=_REPORT)


def _writing_tasks(spark: SparkSession, config: RepoConfig) -> int:
    """One writing task per executor core, less one in local mode when Redis is on this
    machine's loopback: Redis runs commands on one thread, and with a writer on every core
    the OS makes that thread, which every writer waits for, take turns with them. A writer
    outruns Redis on its own (2M keys, 2 cores: one writer 86-89% of redis-benchmark's rate
    for the same rows, two 81-85%; ``bench.materialize_bench``)."""
    cores = spark.sparkContext.defaultParallelism
    store = config.online_store
    if cores < 2 or not spark.sparkContext.master.startswith("local"):
        return cores
    if getattr(store, "type", None) != "redis":
        return cores
    try:
        host = connection_kwargs(store.connection_string)["host"]
        on_loopback = ipaddress.ip_address(socket.gethostbyname(host)).is_loopback
    except (OSError, ValueError, IndexError, KeyError):
        return cores
    return cores - 1 if on_loopback else cores


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

    A store that is a local file (sqlite) is written from the driver, in Arrow batches streamed
    a partition at a time (:mod:`.online_writer`); any other store from the executors, at most
    one writing task per executor core (:func:`_writing_tasks`): the write is one wave. Each
    task costs a connection, its closure and the pipeline's ramp, and tasks of the same wave
    restart together, leaving Redis idle: a 2M-key state cached in 200 partitions wrote at 34%
    of what Redis takes, in 8 partitions at 70-75%, in one wave at 83-92% (2 cores,
    ``bench.materialize_bench``). Partitions are merged (``coalesce``), not shuffled.

    Progress: a bar per view counting the keys each writing task reports as it goes
    (:class:`.LiveCounts`) and those of finished tasks (accumulators, merged as tasks end:
    the exact count), or, from the driver, of written batches; refreshed twice a second.
    """
    keys = [e.name for e in view.entity_columns]
    features = [f.name for f in view.features if f.name not in keys]
    ts_field = view.batch_source.timestamp_field
    created = view.batch_source.created_timestamp_column
    extra = [created] if created and created in state.columns and created != ts_field else []
    rows = state.select(*keys, *features, F.col(timestamp).alias(ts_field), *extra)
    if writes_from_driver(config):
        return _write_from_driver(rows, view, config, tqdm_builder)
    config_bytes, view_bytes = dill.dumps(config), view.to_proto().SerializeToString()
    context = rows.sparkSession.sparkContext
    written, partitions = context.accumulator(0), context.accumulator(0)
    stream = isinstance(view, StreamFeatureView)
    attempts = _task_attempts(rows.sparkSession)
    live = LiveCounts.for_session(rows.sparkSession)
    writer = partial(
        _write_partition,
        config_bytes,
        view_bytes,
        stream,
        attempts,
        written,
        partitions,
        (live.address, live.token) if live else None,
    )
    try:
        with Progress(view.name, written, partitions, tqdm_builder, live=live):
            # a row per task: summed here, not by a Spark aggregate (a stage more)
            reports = (
                rows.coalesce(_writing_tasks(rows.sparkSession, config))
                .mapInArrow(writer, _REPORT_DDL)
                .collect()
            )
    except Exception as exc:
        raise write_failed(view.name, config, written.value, exc) from exc
    finally:
        if live:
            live.close()
    total = sum(report["written"] for report in reports)
    error = next((report["error"] for report in reports if report["error"] is not None), None)
    if error is not None:
        raise write_failed(view.name, config, total, RuntimeError(error))
    return total


def _write_from_driver(
    rows: DataFrame,
    view: FeatureView,
    config: RepoConfig,
    tqdm_builder: Callable[[int | None], tqdm] | None,
) -> int:
    written, batches = Tally(), Tally()
    with Progress(view.name, written, batches, tqdm_builder, "batches written"):
        try:
            for n in write_with_feast(config, view, driver_batches(rows)):
                written.add(n)
                batches.add(1)
        except Exception as exc:
            raise write_failed(view.name, config, written.value, exc) from exc
    return written.value
