"""Any Feast online store: which process writes it, and how it is named in errors.

Redis gets the plugin's pipelined writer from the executors (:mod:`.redis_writer`); every other
store gets Feast's own ``online_write_batch``. A network service (Postgres, DynamoDB, ...) is
written from the executors, one store client per writing task. A store that is a file on the
driver's machine (sqlite, or any store configured with a local ``path``: Milvus Lite, Qdrant's
local mode) is written from the driver: executors on a cluster cannot see that file, and sqlite
takes one writer at a time. Its rows reach the driver as Arrow batches (at most
``spark.sql.execution.arrow.maxRecordsPerBatch`` rows each) through ``toLocalIterator``, one
Spark partition at a time, never collected whole; each batch is one ``online_write_batch`` call
(one sqlite transaction).
"""

from __future__ import annotations

import re
import secrets
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pyarrow as pa
from feast import FeatureView
from feast.infra.passthrough_provider import PassthroughProvider
from feast.repo_config import RepoConfig
from feast.utils import _convert_arrow_to_proto
from pyspark import TaskContext
from pyspark.accumulators import Accumulator
from pyspark.sql import DataFrame, SparkSession
from tqdm import tqdm

#: Configuration fields that say where a store is, most telling first.
_ADDRESS_FIELDS = ("connection_string", "hosts", "host", "url", "uri", "endpoint", "path", "region")
#: ``key=value`` parts of a connection string that must not be printed.
_SECRET = re.compile(r"\s*(password|passwd|secret|token|api_key|username|user)\s*=", re.I)


class OnlineStoreWriteError(RuntimeError):
    """The online store could not be written; nothing was reported as materialized."""


def writes_from_driver(config: RepoConfig) -> bool:
    """Whether the online store is a local file (a ``path`` that is not a URL)."""
    path = getattr(config.online_store, "path", None)
    return bool(path) and "://" not in str(path)


def store_address(config: RepoConfig) -> str:
    """Where the online store is: its file (as Feast resolves it: relative to the repo), or
    its host / connection string without credentials."""
    store = config.online_store
    if writes_from_driver(config):
        path = Path(store.path)
        return str(path if path.is_absolute() or not config.repo_path else config.repo_path / path)
    for field in _ADDRESS_FIELDS:
        value = getattr(store, field, None)
        if value:
            text = ",".join(map(str, value)) if isinstance(value, list) else str(value)
            if field == "host" and getattr(store, "port", None):
                text = f"{text}:{store.port}"
            return without_credentials(text)
    return "(no address configured)"


def store_kind(config: RepoConfig) -> str:
    return f"{config.online_store.type} online store"


def without_credentials(text: str) -> str:
    """``user:password@`` of a URL and ``password=...``-like parts of a connection string
    removed."""
    text = re.sub(r"//[^/@]*@", "//", text)
    return ",".join(part for part in text.split(",") if not _SECRET.match(part))


def check_online_store(config: RepoConfig, online_store: object) -> None:
    """Fail before any Spark work, naming the store, when it cannot be reached (Redis: PING)
    or opened (a file store: Feast opens its connection, creating the file)."""
    get_client = getattr(online_store, "_get_client", None)
    get_conn = getattr(online_store, "_get_conn", None)
    try:
        if get_client is not None:
            get_client(config.online_store).ping()
        elif get_conn is not None and writes_from_driver(config):
            get_conn(config)
    except Exception as exc:
        verb = "open" if writes_from_driver(config) else "reach"
        raise OnlineStoreWriteError(
            f"cannot {verb} the online store at {store_address(config)!r} "
            f"({store_kind(config)}): {exc}"
        ) from exc


def write_failed(view: str, config: RepoConfig, written: int, exc: BaseException) -> Exception:
    return OnlineStoreWriteError(
        f"writing {view!r} to the online store at {store_address(config)!r} failed part-way "
        f"({store_kind(config)}; at least {written:,} keys were written or already up to "
        f"date); the interval is not recorded as materialized: rerun materialize once the "
        f"store is back (rewrites are idempotent). Cause: {_cause(exc)}"
    )


def _cause(exc: BaseException) -> str:
    """The worker's own error line, not Spark's wrapping of it."""
    lines = [line for line in str(exc).splitlines() if line.strip() and "SQLSTATE" not in line]
    return (lines[-1] if lines else repr(exc))[:500]


def write_with_feast(
    config: RepoConfig, view: FeatureView, batches: Iterator[pa.RecordBatch]
) -> Iterator[int]:
    """Feast's own ``online_write_batch``, one call per Arrow batch; yields each batch's rows."""
    online_store = PassthroughProvider(config).online_store
    value_types = {e.name: e.dtype.to_value_type() for e in view.entity_columns}
    for batch in batches:
        if batch.num_rows:
            data = _convert_arrow_to_proto(batch, view, value_types)
            online_store.online_write_batch(config, view, data, None)
            yield batch.num_rows


def driver_batches(rows: DataFrame) -> Iterator[pa.RecordBatch]:
    """``rows`` streamed to the driver as Arrow batches, one Spark partition at a time (the
    next one fetched while this one is written)."""

    def as_ipc(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """Each Arrow batch as one row holding its IPC stream, so Arrow's types reach the driver
        as they are. Nested, so Spark ships it by value: the workers import pyarrow, not Feast."""
        for batch in batches:
            sink = pa.BufferOutputStream()
            with pa.ipc.new_stream(sink, batch.schema) as stream:
                stream.write_batch(batch)
            yield pa.RecordBatch.from_pydict({"batch": [sink.getvalue().to_pybytes()]})

    for row in rows.mapInArrow(as_ipc, "batch binary").toLocalIterator(prefetchPartitions=True):
        yield from pa.ipc.open_stream(row["batch"])


class Tally:
    """A count kept on the driver, read like a Spark accumulator (``value``, ``add``)."""

    def __init__(self) -> None:
        self.value = 0

    def add(self, n: int) -> None:
        self.value += n


class LiveCounts:
    """The rows each running writing task has settled so far, as the tasks send them: UDP
    datagrams ``<token> <partition> <attempt> <rows>`` to ``address`` on the driver. Spark
    merges a task's accumulators only when it ends, and the writes run one task per core
    (:func:`.compute_engine.write_online`), so without these a bar would move only at the end.
    Fire and forget: a lost datagram holds the bar back until the task's accumulator arrives;
    one without this write's token is ignored; a retried partition counts its latest attempt."""

    def __init__(self, host: str) -> None:
        self.token = secrets.token_hex(8)
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self._socket.bind((host, 0))
        self._socket.settimeout(0.2)
        self.address: tuple[str, int] = (host, self._socket.getsockname()[1])
        self._latest: dict[int, tuple[int, int]] = {}  # partition -> (attempt, rows)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._receive, daemon=True)
        self._thread.start()

    @classmethod
    def for_session(cls, spark: SparkSession) -> LiveCounts | None:
        """Listening where the executors can send: the loopback in local mode, else the
        driver's host (``spark.driver.host``); None where that cannot be bound."""
        try:
            if spark.sparkContext.master.startswith("local"):
                return cls("127.0.0.1")
            return cls(socket.gethostbyname(spark.conf.get("spark.driver.host")))
        except OSError:
            return None

    @property
    def value(self) -> int:
        return sum(rows for _, rows in list(self._latest.values()))

    def _receive(self) -> None:
        while not self._stop.is_set():
            try:
                fields = self._socket.recv(128).split()
            except OSError:  # the timeout: look at the stop flag again
                continue
            if len(fields) != 4 or fields[0] != self.token.encode():
                continue
            try:
                partition, attempt, rows = map(int, fields[1:])
            except ValueError:
                continue
            if (attempt, rows) > self._latest.get(partition, (-1, -1)):
                self._latest[partition] = (attempt, rows)

    def close(self) -> None:
        """Stop listening now: a datagram of its own wakes the thread from its wait."""
        self._stop.set()
        try:
            self._socket.sendto(b"", self.address)
        except OSError:  # the thread still stops at its next timeout
            pass
        self._thread.join()
        self._socket.close()


class RowsReporter:
    """A writing task's side of :class:`LiveCounts`: its rows settled, at most twice a
    second (and when it ends)."""

    def __init__(self, address: tuple[str, int], token: str) -> None:
        task = TaskContext.get()
        self._prefix = f"{token} {task.partitionId()} {task.attemptNumber()} " if task else ""
        self._address, self._sent_at = address, 0.0
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)

    def __call__(self, rows: int, last: bool = False) -> None:
        now = time.monotonic()
        if self._prefix and (last or now - self._sent_at >= 0.5):
            self._sent_at = now
            try:
                self._socket.sendto(f"{self._prefix}{rows}".encode(), self._address)
            except OSError:  # progress only: the accumulator still counts the task
                pass
        if last:
            self._socket.close()


class Progress:
    """A tqdm bar of keys written, fed from counters (Spark accumulators or :class:`Tally`) by
    a daemon thread; ``parts`` counts finished partitions or batches, named by ``parts_name``.
    With ``live`` (:class:`LiveCounts`) the bar also moves while tasks run; at the end it shows
    ``written``, the exact count."""

    def __init__(
        self,
        name: str,
        written: Tally | Accumulator,
        parts: Tally | Accumulator,
        tqdm_builder: Callable[[int | None], tqdm] | None,
        parts_name: str = "partitions done",
        live: LiveCounts | None = None,
    ) -> None:
        self._written, self._parts, self._parts_name = written, parts, parts_name
        self._live = live
        self._bar = (tqdm_builder or (lambda total: tqdm(total=total, ncols=100)))(None)
        self._bar.set_description_str(name, refresh=False)
        self._bar.unit = " keys"
        self._shown: tuple[int, int] = (0, 0)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def _refresh(self, final: bool = False) -> None:
        """Redraw when the keys or the parts changed; the final state is drawn by ``close``
        alone, so that a bar ends with one line (in a log every draw is a line, and on a
        terminal narrower than the bar each draw leaves its wrapped part behind)."""
        count = self._written.value
        if self._live is not None and not final:
            count = max(count, self._live.value)
        shown = (count, self._parts.value)
        if shown == self._shown:
            return
        self._shown = shown
        self._bar.n = count
        self._bar.set_postfix_str(f"{shown[1]} {self._parts_name}", refresh=False)
        if not final:
            self._bar.refresh()

    def _poll(self) -> None:
        while not self._stop.wait(0.5):
            self._refresh()

    def __enter__(self) -> Progress:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._refresh(final=True)
        self._bar.close()
