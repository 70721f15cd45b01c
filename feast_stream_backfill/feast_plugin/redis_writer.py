"""Feast's Redis rows, encoded a whole Arrow batch at a time and pipelined on one connection.

``RedisOnlineStore.online_write_batch`` builds a protobuf per value and a redis-py command per
row: about 80k keys/s per process. This writer produces the same bytes (Feast's entity-key
serialization v3 + project as the key, ``_ts:<view>`` holding a protobuf ``Timestamp``,
``mmh3("<view>:<feature>")`` fields holding serialized ``Value`` protos, ``EXPIRE`` when
``key_ttl_seconds`` is set) with vectorized Arrow/numpy code, and sends each batch as one
buffer of RESP commands, whose replies are checked while the next batch is encoded. Feast's
rule is kept: unless ``skip_dedup`` is set, a row is written only when its timestamp is newer
than the stored one (one pipelined ``HMGET`` first, answered while the batch before is
written).

Covers plain Redis with scalar join keys (string, int32, int64, bytes) and scalar features
(double, float, int32, int64, bool, string); :func:`supports` says when, and the caller falls
back to Feast's own ``online_write_batch`` otherwise (cluster, sentinel, lists, ...).
"""

from __future__ import annotations

import struct
from collections import deque

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from feast import FeatureView
from feast.infra.online_stores.helpers import _mmh3
from feast.infra.online_stores.redis import RedisType, _versioned_fv_name
from feast.repo_config import RepoConfig
from feast.value_type import ValueType
from google.protobuf.timestamp_pb2 import Timestamp
from redis import Redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError

from feast_stream_backfill.feast_plugin.online_writer import without_credentials

#: Feast value type -> (Value proto field number, wire type) for the supported features.
_FEATURE_FIELDS = {
    ValueType.STRING: (2, 2),
    ValueType.INT32: (3, 0),
    ValueType.INT64: (4, 0),
    ValueType.DOUBLE: (5, 1),
    ValueType.FLOAT: (6, 5),
    ValueType.BOOL: (7, 0),
}
_KEY_TYPES = {ValueType.STRING, ValueType.INT32, ValueType.INT64, ValueType.BYTES}
_EMPTY = pa.scalar(b"", pa.binary())
_NO_TIMESTAMP = b"*1\r\n$-1\r\n"  # HMGET's reply for a key without ``_ts``
_COUNTS, _STAMPS = "counts", "stamps"  # replies of HSET/EXPIRE, of HMGET


def supports(config: RepoConfig, view: FeatureView) -> bool:
    """Whether this writer reproduces Feast's bytes for ``view`` on ``config``'s store."""
    store = config.online_store
    return (
        getattr(store, "type", None) == "redis"
        and store.redis_type == RedisType.redis
        and config.entity_key_serialization_version >= 3
        and all(e.dtype.to_value_type() in _KEY_TYPES for e in view.entity_columns)
        and all(f.dtype.to_value_type() in _FEATURE_FIELDS for f in view.features)
    )


def _fixed(matrix: np.ndarray) -> pa.Array:
    """Rows of a 2-d uint8 matrix as a binary array (one value per row)."""
    n, width = matrix.shape
    data = pa.py_buffer(np.ascontiguousarray(matrix, dtype=np.uint8).tobytes())
    return pa.Array.from_buffers(pa.binary(width), n, [None, data]).cast(pa.binary())


def _varint_bytes(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Protobuf varints of int64 values (two's complement, as protobuf encodes int64): a
    (rows, groups) byte matrix, and which of each row's bytes its varint has."""
    v = values.astype(np.int64, copy=False).view(np.uint64)
    width = max(1, -(-int(v.max(initial=0)).bit_length() // 7))  # groups the largest needs
    rest = v[:, None] >> (np.arange(width, dtype=np.uint64) * np.uint64(7))
    more = rest[:, 1:] != 0
    data = (rest & np.uint64(0x7F)).astype(np.uint8)
    data[:, :-1] |= more.view(np.uint8) << 7
    has = np.ones(data.shape, dtype=bool)
    has[:, 1:] = more
    return data, has


def _fields(n: int, *parts: tuple[np.ndarray, np.ndarray | None]) -> pa.Array:
    """Per row, the bytes of each (rows, width) part its mask keeps (all without a mask), in
    order: a binary array built by one copy, not one pass per part."""
    data = np.hstack([part for part, _ in parts])
    if all(has is None for _, has in parts):
        width = data.shape[1]
        offsets, flat = np.arange(0, (n + 1) * width, width, dtype=np.int32), data.reshape(-1)
    else:
        has = np.hstack([np.ones(p.shape, bool) if h is None else h for p, h in parts])
        offsets = np.zeros(n + 1, dtype=np.int32)
        np.cumsum(has.sum(axis=1), out=offsets[1:])
        flat = data[has]
    return pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(offsets), pa.py_buffer(flat)])


def _varints(values: np.ndarray) -> pa.Array:
    """Protobuf varints of int64 values, one binary value each."""
    return _fields(len(values), _varint_bytes(values))


def _tag(n: int, number: int, wire: int) -> np.ndarray:
    return np.full((n, 1), number << 3 | wire, dtype=np.uint8)


def _le(values: np.ndarray, dtype: str) -> pa.Array:
    """Fixed-width little-endian bytes of each value."""
    array = np.ascontiguousarray(values, dtype=dtype)
    return _fixed(array.view(np.uint8).reshape(len(array), array.dtype.itemsize))


def _join(*parts: pa.Array | bytes) -> pa.Array:
    """Element-wise concatenation, one copy; ``bytes`` parts are the same in every row."""
    merged: list[pa.Array | bytes] = []
    for part in parts:
        if isinstance(part, bytes) and merged and isinstance(merged[-1], bytes):
            merged[-1] += part
        else:
            merged.append(part)
    args = [pa.scalar(p, pa.binary()) if isinstance(p, bytes) else p for p in merged]
    return pc.binary_join_element_wise(*args, _EMPTY)


def _decimal(lengths: pa.Array) -> pa.Array:
    return pc.cast(lengths, pa.string()).cast(pa.binary())


def _bulk(values: pa.Array) -> list[pa.Array | bytes]:
    """The parts of RESP bulk strings ``$<len>\\r\\n<bytes>\\r\\n``, for :func:`_join`. The
    length is one constant when every value has the same (fixed-width keys, doubles): no number
    formatted per row."""
    lengths = pc.binary_length(values)
    shortest, longest = pc.min_max(lengths).values()
    if shortest == longest:
        return [b"$%d\r\n" % shortest.as_py(), values, b"\r\n"]
    return [b"$", _decimal(lengths), b"\r\n", values, b"\r\n"]


def _const_bulk(value: bytes) -> bytes:
    return b"$%d\r\n%s\r\n" % (len(value), value)


def _value_proto(column: pa.Array, value_type: ValueType) -> pa.Array:
    """Serialized ``Value`` protos of a column; a null (or NaN) is an empty ``Value`` (no
    bytes)."""
    n = len(column)
    number, wire = _FEATURE_FIELDS[value_type]
    if value_type == ValueType.STRING:
        text = pc.fill_null(column.cast(pa.string()), "").cast(pa.binary())
        encoded = _join(
            bytes([number << 3 | wire]), _varints(pc.binary_length(text).to_numpy()), text
        )
        return pc.if_else(pc.is_valid(column), encoded, _EMPTY)
    valid = pc.is_valid(column).to_numpy(zero_copy_only=False)
    if value_type in (ValueType.DOUBLE, ValueType.FLOAT):
        dtype = "<f8" if value_type == ValueType.DOUBLE else "<f4"
        numbers = np.ascontiguousarray(
            column.cast(pa.float64()).to_numpy(zero_copy_only=False), dtype
        )
        valid = valid & ~np.isnan(numbers)
        value = numbers.view(np.uint8).reshape(n, numbers.itemsize), None
    else:  # int32, int64, bool: varints
        value = _varint_bytes(pc.fill_null(column.cast(pa.int64()), 0).to_numpy())
    if valid.all():
        return _fields(n, (_tag(n, number, wire), None), value)
    data, has = value
    has = valid[:, None] if has is None else has & valid[:, None]
    return _fields(
        n, (_tag(n, number, wire), valid[:, None]), (data, np.broadcast_to(has, data.shape))
    )


def _timestamps(column: pa.Array) -> tuple[pa.Array, np.ndarray]:
    """Serialized protobuf ``Timestamp`` of each (microsecond) time, and its nanoseconds."""
    micros = column.cast(pa.timestamp("us", tz="UTC")).cast(pa.int64()).to_numpy()
    seconds, fraction = np.divmod(micros, 1_000_000)
    nanos = fraction * 1000
    n, parts = len(micros), []
    for number, values in ((1, seconds), (2, nanos)):  # proto3: a zero field is not written
        data, has = _varint_bytes(values)
        present = (values != 0)[:, None]
        parts += [(_tag(n, number, 0), present), (data, has & present)]
    return _fields(n, *parts), seconds * 1_000_000_000 + nanos


class RedisBatchWriter:
    """Writes a feature view's rows to one Redis connection, an Arrow batch at a time."""

    def __init__(self, config: RepoConfig, view: FeatureView, timestamp_field: str) -> None:
        store = config.online_store
        name = _versioned_fv_name(view, config)
        self._ts_field = f"_ts:{name}".encode()
        self._timestamp_field = timestamp_field
        self._features = [(f.name, f.dtype.to_value_type()) for f in view.features]
        self._field_keys = [_mmh3(f"{name}:{f}") for f, _ in self._features]
        # Feast serializes join keys sorted by name: count, then (type, length, name) per key.
        self._keys = sorted((e.name, e.dtype.to_value_type()) for e in view.entity_columns)
        prefix = [struct.pack("<I", len(self._keys))]
        for key, _ in self._keys:
            prefix.append(struct.pack("<II", ValueType.STRING.value, len(key.encode())))
            prefix.append(key.encode())
        self._key_prefix = b"".join(prefix)
        self._project = config.project.encode()
        self._dedup = not store.skip_dedup
        self._ttl = store.key_ttl_seconds
        self.address = without_credentials(store.connection_string)
        self._client = Redis(**connection_kwargs(store.connection_string))
        self._connection = None
        self._chunk, self._buffer = bytearray(1 << 20), bytearray()
        self._expected: deque[tuple[str, int]] = deque()  # reply groups owed, in send order
        self._pending: tuple | None = None  # a batch whose HMGET replies are not read yet
        self._replies_per_row = 2 if self._ttl else 1  # HSET (and EXPIRE)
        #: Rows settled: written (Redis acknowledged the ``HSET``) or skipped (stored as new).
        self.rows_done = 0

    def _redis_keys(self, batch: pa.RecordBatch) -> pa.Array:
        if any(batch.column(k).null_count for k, _ in self._keys):
            raise ValueError(f"a null join key in {[k for k, _ in self._keys]}")
        parts: list[pa.Array | bytes] = [self._key_prefix]
        for key, value_type in self._keys:
            column = batch.column(key)
            if value_type == ValueType.STRING:
                raw = column.cast(pa.string()).cast(pa.binary())
            elif value_type == ValueType.BYTES:
                raw = column.cast(pa.binary())
            else:
                dtype = "<i8" if value_type == ValueType.INT64 else "<i4"
                raw = _le(column.to_numpy(zero_copy_only=False), dtype)
            length = pc.binary_length(raw).cast(pa.uint32()).to_numpy()
            parts += [struct.pack("<I", value_type.value), _le(length, "<u4"), raw]
        return _join(*parts, self._project)

    def write(self, batch: pa.RecordBatch) -> None:
        """Write one batch (distinct keys). Under Feast's rule the batch's ``HMGET`` is sent now
        and its rows are written at the next call (or :meth:`flush`): Redis answers one batch's
        reads while the previous batch is decided and written."""
        if not batch.num_rows:
            return
        keys = self._redis_keys(batch)
        stamps, nanos = _timestamps(batch.column(self._timestamp_field))
        if not self._dedup:
            self._hset(batch, keys, stamps)
            self._consume_counts(leave=1)  # the batch before's, read while Redis runs this one
            return
        self._send(_join(b"*3\r\n$5\r\nHMGET\r\n", *_bulk(keys), _const_bulk(self._ts_field)))
        self._expected.append((_STAMPS, batch.num_rows))
        previous, self._pending = self._pending, (batch, keys, stamps, nanos)
        if previous:
            self._write_newer(*previous)

    def _write_newer(
        self, batch: pa.RecordBatch, keys: pa.Array, stamps: pa.Array, nanos: np.ndarray
    ) -> None:
        """Feast's rule: write the rows unless a stored timestamp is at least as new."""
        self._consume_counts()  # the writes sent before this batch's HMGET answer first
        kind, n = self._expected.popleft()
        assert kind == _STAMPS, "replies out of step with the commands sent"
        newer = np.ones(n, dtype=bool)
        for i, stored in enumerate(self._take_stamps(n)):
            if stored is not None:
                previous = Timestamp.FromString(stored)
                previous_nanos = previous.seconds * 1_000_000_000 + previous.nanos
                newer[i] = not (previous_nanos and nanos[i] <= previous_nanos)
        self.rows_done += n - int(newer.sum())
        if not newer.all():
            mask = pa.array(newer)
            batch, keys, stamps = batch.filter(mask), keys.filter(mask), stamps.filter(mask)
        if batch.num_rows:
            self._hset(batch, keys, stamps)

    def _hset(self, batch: pa.RecordBatch, keys: pa.Array, stamps: pa.Array) -> None:
        fields = 1 + len(self._features)
        parts: list[pa.Array | bytes] = [
            b"*%d\r\n$4\r\nHSET\r\n" % (2 + 2 * fields),
            *_bulk(keys),
            _const_bulk(self._ts_field),
            *_bulk(stamps),
        ]
        for (name, value_type), field in zip(self._features, self._field_keys, strict=True):
            values = _value_proto(batch.column(name), value_type)
            parts += [_const_bulk(field), *_bulk(values)]
        if self._ttl:
            parts += [b"*3\r\n$6\r\nEXPIRE\r\n", *_bulk(keys), _const_bulk(b"%d" % self._ttl)]
        # Not waited for here: Redis runs these while the next batch is encoded.
        self._send(_join(*parts))
        self._expected.append((_COUNTS, batch.num_rows * self._replies_per_row))

    def _send(self, commands: pa.Array) -> None:
        """Send the commands as one buffer (the Arrow array's data, no copy)."""
        if commands.null_count:  # a missing part would desynchronize the protocol
            raise ValueError("a Redis command could not be encoded")
        offsets = np.frombuffer(
            commands.buffers()[1], np.int32, len(commands) + 1, 4 * commands.offset
        )
        payload = memoryview(commands.buffers()[2])[int(offsets[0]) : int(offsets[-1])]
        if self._connection is None:
            self._connection = self._client.connection_pool.make_connection()
            self._connection.connect()  # redis-py does AUTH, SELECT db, TLS
        try:
            self._connection._sock.sendall(payload)
        except OSError as exc:
            raise RedisConnectionError(f"Redis at {self.address}: {exc}") from exc

    def _receive(self) -> None:
        try:
            received = self._connection._sock.recv_into(self._chunk)
        except OSError as exc:
            raise RedisConnectionError(f"Redis at {self.address}: {exc}") from exc
        if not received:
            raise RedisConnectionError(f"Redis at {self.address} closed the connection")
        self._buffer += memoryview(self._chunk)[:received]

    def flush(self) -> None:
        """Write the batch still waiting for its reads and consume every reply owed."""
        if self._pending:
            pending, self._pending = self._pending, None
            self._write_newer(*pending)
        self._consume_counts()

    def _consume_counts(self, leave: int = 0) -> None:
        """Consume the integer replies (``:n``) of the writes at the head of the replies
        expected but the last ``leave`` batches', counted with numpy, not parsed one by one;
        any other line is an error. Read a batch behind (``leave=1`` under ``skip_dedup``), Redis
        holds about a batch of replies for the connection, not a whole partition's.

        Replies arrive in order, so once the buffer holds as many lines as are owed, the first
        that many are these replies (or an error in their place). Rows whose ``HSET`` succeeded
        count in :attr:`rows_done`, also when another failed (Redis full: ``OOM``)."""
        owed = 0
        while len(self._expected) > leave and self._expected[0][0] == _COUNTS:
            owed += self._expected.popleft()[1]
        if not owed:
            return
        while self._buffer.count(b"\n") < owed:
            self._receive()
        data = np.frombuffer(bytes(self._buffer), np.uint8)
        ends = np.flatnonzero(data == 10)[:owed]
        starts = np.concatenate([[0], ends[:-1] + 1])
        ok = data[starts] == ord(":")
        self.rows_done += int(ok[:: self._replies_per_row].sum())  # each row's HSET reply
        if not ok.all():
            first = np.flatnonzero(~ok)[0]
            line = bytes(self._buffer[starts[first] : ends[first]])
            raise ResponseError(line.removeprefix(b"-").decode(errors="replace").strip())
        del self._buffer[: ends[-1] + 1]

    def _line_end(self, start: int) -> int:
        """Where the reply line starting at ``start`` ends (its ``\\r\\n``), read as needed."""
        while (end := self._buffer.find(b"\r\n", start)) < 0:
            self._receive()
        return end

    def _take_stamps(self, n: int) -> list[bytes | None]:
        """The next ``n`` replies, each ``HMGET``'s one ``_ts`` value or None, consumed from the
        buffer and no further (later replies may already be there). All ``[nil]`` (no key
        stored yet: the common first materialization) is checked on the bytes at once."""
        nothing = _NO_TIMESTAMP * n
        while len(self._buffer) < len(nothing) and nothing.startswith(self._buffer):
            self._receive()
        if self._buffer.startswith(nothing):
            del self._buffer[: len(nothing)]
            return [None] * n
        stamps: list[bytes | None] = []
        buffer, at = self._buffer, 0
        while len(stamps) < n:
            end = self._line_end(at)
            header, at = bytes(buffer[at:end]), end + 2
            if header == b"*1":  # an array of one bulk string: "$<length>" or "$-1"
                end = self._line_end(at)
                header, at = bytes(buffer[at:end]), end + 2
            if not header.startswith(b"$"):
                raise ResponseError(header.decode(errors="replace"))
            length = int(header[1:])
            if length < 0:
                stamps.append(None)
                continue
            while len(buffer) < at + length + 2:
                self._receive()
            stamps.append(bytes(buffer[at : at + length]))
            at += length + 2
        del buffer[:at]
        return stamps

    def close(self) -> None:
        if self._connection is not None:
            self._connection.disconnect()
            self._connection = None


def connection_kwargs(connection_string: str) -> dict:
    """``host:port,param=value,...`` as Feast's ``RedisOnlineStore`` parses it."""
    from feast.infra.online_stores.redis import RedisOnlineStore

    nodes, params = RedisOnlineStore._parse_connection_string(connection_string)
    return {**params, "host": nodes[0]["host"], "port": int(nodes[0]["port"])}
