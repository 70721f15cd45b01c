"""Sessions whose merges are simple: stretches of keys at a time in numpy, no loop per record.

:class:`~merging_window_set.MergingWindowSet` replays every record because a session's
extent depends on the order its records merged in. Most records never exercise that. A key
splits into stretches that begin with no state (:func:`stretches`); per stretch in processing
order, every record

- is dropped for certain: its own window ``[t, t + gap)`` is closed (``W >= maxTs + L``) and
  it touches no live session: every earlier record's window is closed too, or it falls short
  of the open session's accepted records by more than the gap and the earlier ones are gone;
- or opens a session: its own window is not late (per record: not closed), and it lies beyond
  every earlier accepted record's window (``t > highest + gap``), or all their sessions are
  gone (``W >= highest + gap - 1 + L``) and ``t > highest``;
- or joins the open session: it touches it (``t >= its lowest - gap``), touches no earlier
  live session (``t > highest when it opened + gap``), and the open session's timer has not
  fired (per record: its state is not gone): ``W < highest + gap - 1``.

Then no record is late or merges two sessions, and a dropped one changes nothing: each
session is a group of consecutive accepted records that fires once with all of them when
the watermark (or clock) reaches its ``maxTs``, or, per record, with the records so far. This
module finds such stretches (:func:`classify`) and computes their firings with segmented
numpy operations; :mod:`sessions` replays the others. Rows are one chunk of whole keys,
sorted by key and processing order; ``W`` is the watermark each record sees. The arithmetic
of every comparison above is the model's (:mod:`rules`: a session's end, ``maxTs`` and
cleanup time from its latest record's time).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import pyarrow as pa

from feast_stream_backfill import rules
from feast_stream_backfill.processing_order import LONG_MIN

LONG_MAX = (1 << 63) - 1
#: Integer sums beyond this leave a float's exact range: the replay computes them (and raises
#: where a sum leaves the long, as Spark does).
EXACT = float(1 << 53)
#: A record behind the open session is dropped if the session's accepted records are more than
#: a gap ahead; which are accepted depends on the drops before it, found a pass at a time (each
#: pass sound; a chain of drops longer than this goes to the replay).
MAX_PASSES = 8
#: Runs this short are aggregated a row at a time across all of them (a numpy step per row);
#: each longer run by its own ``accumulate`` (sessions are mostly short, a hot key's long).
SHORT_RUN = 64


@dataclass(frozen=True)
class Classified:
    """Per row: ``simple`` (its stretch's sessions are groups), ``dropped`` and ``session`` (the
    group of consecutive records it belongs to, numbered across the chunk)."""

    simple: np.ndarray
    dropped: np.ndarray
    session: np.ndarray


def _first_of_segment(starts: np.ndarray) -> np.ndarray:
    """Per row, the index of its segment's first row."""
    return np.maximum.accumulate(np.where(starts, np.arange(len(starts)), 0))


def running(kind: str, values: np.ndarray, segment: np.ndarray) -> np.ndarray:
    """Inclusive running ``cummax``/``cummin``/``cumsum`` within each segment (a run of equal
    ``segment``: callers number consecutive rows), in row order. A float sum adds one term at
    a time, as the replay (and Java) does: numpy's pairwise and pandas' Kahan sums round
    differently. A float maximum or minimum keeps the earlier value on a tie (``-0.0``
    against ``0.0``), as pandas does; numpy's ``maximum`` takes the later one."""
    if kind == "cumsum" and values.dtype.kind != "f":  # a difference of prefix sums: exact
        so_far = np.cumsum(values)
        starts, lengths = _runs(segment)
        return so_far - np.repeat(so_far[starts] - values[starts], lengths)
    if kind != "cumsum" and values.dtype.kind == "f":
        return getattr(pd.Series(values).groupby(segment, sort=False), kind)().to_numpy()
    return _in_order(_UFUNCS[kind], values, segment)


_UFUNCS = {"cumsum": np.add, "cummax": np.maximum, "cummin": np.minimum}


def _runs(segment: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Where each run of equal ``segment`` starts, and its length."""
    if not len(segment):
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    starts = np.flatnonzero(np.r_[True, segment[1:] != segment[:-1]])
    return starts, np.diff(np.r_[starts, len(segment)])


def _in_order(ufunc: np.ufunc, values: np.ndarray, segment: np.ndarray) -> np.ndarray:
    """``ufunc`` applied along each run of ``segment`` one row at a time, from its first
    value. Runs up to :data:`SHORT_RUN` rows advance together, a row a step; each longer one
    is one ``ufunc.accumulate`` (sequential)."""
    out = np.empty_like(values)
    starts, lengths = _runs(segment)
    short = lengths <= SHORT_RUN
    at, left = starts[short], lengths[short]
    so_far = values[at]
    out[at] = so_far
    for step in range(1, int(left.max(initial=0))):
        going = left > step
        at, left, so_far = at[going], left[going], so_far[going]
        so_far = ufunc(so_far, values[at + step])
        out[at + step] = so_far
    for start, length in zip(starts[~short].tolist(), lengths[~short].tolist(), strict=True):
        ufunc.accumulate(values[start : start + length], out=out[start : start + length])
    return out


def _before(kind: str, values: np.ndarray, segment: np.ndarray, starts: np.ndarray, empty):
    """The running aggregate of the rows *before* each row in its segment (``empty``: none)."""
    so_far = running(kind, values, segment)
    out = np.empty_like(so_far)
    out[1:] = so_far[:-1]
    out[starts] = empty
    return out


def stretches(
    key_starts: np.ndarray, time: np.ndarray, watermark: np.ndarray, gap: int, lateness: int
) -> np.ndarray:
    """Per row: does it start a stretch of its key that begins with no state? That is when
    every earlier record's own window, and so every session it was in, is gone (the watermark
    has reached :func:`rules.session_cleanup_time` of their highest time): what follows is
    computed as if the key were new, so one record that needs the replay takes only its
    stretch there, not a skewed key's history."""
    key = np.cumsum(key_starts) - 1
    highest = _before("cummax", time, key, key_starts, LONG_MIN)
    return key_starts | rules.reached(watermark, rules.session_cleanup_time(highest, gap, lateness))


def classify(
    starts: np.ndarray,
    time: np.ndarray,
    watermark: np.ndarray,
    gap: int,
    lateness: int,
    timer: bool,
) -> Classified:
    """The module's rules, row by row, in stretches beginning at ``starts``. ``timer``: the
    trigger's timer fires a session when the watermark reaches its ``maxTs``, and it takes no
    joiner after; without a timer (per record) a session takes joiners until its state is
    gone."""
    t, w = time, watermark
    stretch = np.cumsum(starts) - 1

    def gone(highest: np.ndarray) -> np.ndarray:  # the state of highest's window is gone
        return rules.reached(w, rules.session_cleanup_time(highest, gap, lateness))

    def taking(highest: np.ndarray) -> np.ndarray:  # highest's session still takes joiners
        if timer:
            return ~rules.reached(w, rules.session_max_timestamp(highest, gap))
        return ~gone(highest)

    closed = gone(t)
    highest_any = _before("cummax", t, stretch, starts, LONG_MIN)
    dropped = closed & (starts | gone(highest_any))
    highest = _before("cummax", np.where(dropped, LONG_MIN, t), stretch, starts, LONG_MIN)
    none = highest == LONG_MIN
    beyond = t > rules.session_end(highest, gap)  # touches no earlier accepted record's window
    opens = ~dropped & (none | beyond | ((t > highest) & gone(highest)))
    new_session = opens | starts
    session = np.cumsum(new_session) - 1
    first = _first_of_segment(new_session)
    has_floor = ~none & ~gone(highest)
    floor = np.where(has_floor, rules.session_end(highest, gap), 0)[first]
    floor_null = ~has_floor[first]
    floor_gone = rules.state_gone(w, rules.max_timestamp(floor), lateness)
    behind = ~opens & closed & ~new_session & (floor_null | floor_gone)
    ends = rules.session_end(t, gap)
    for _ in range(MAX_PASSES):
        # dropped for certain only so far: the open session's lowest counts too many records
        lowest = _before("cummin", np.where(dropped, LONG_MAX, t), session, new_session, LONG_MAX)
        more = dropped | (behind & (ends < lowest))
        if (more == dropped).all():
            break
        dropped = more
    else:
        lowest = _before("cummin", np.where(dropped, LONG_MAX, t), session, new_session, LONG_MAX)
    joins = (ends >= lowest) & (floor_null | (t > floor)) & taking(highest)
    ok = dropped | np.where(opens, taking(t), joins)
    simple = np.logical_and.reduceat(ok, np.flatnonzero(starts))[stretch]
    return Classified(simple, dropped, session)


def _identity(function: str, values: np.ndarray):
    if function in ("sum", "mean"):
        return 0
    big = np.inf if values.dtype.kind == "f" else np.iinfo(values.dtype).max
    return big if function == "min" else -big


_CUMULATIVE = {"sum": "cumsum", "mean": "cumsum", "min": "cummin", "max": "cummax"}


@dataclass(frozen=True)
class Column:
    """An aggregated column of the chunk: ``values`` (nulls anywhere), ``valid``."""

    values: np.ndarray
    valid: np.ndarray

    @classmethod
    def from_arrow(cls, array: pa.Array) -> Column:
        valid = array.is_valid().to_numpy(zero_copy_only=False)
        if pa.types.is_integer(array.type):
            return cls(array.fill_null(0).to_numpy().astype(np.int64), valid)
        if pa.types.is_floating(array.type):
            return cls(array.fill_null(0).to_numpy().astype(np.float64), valid)
        return cls(np.zeros(len(array)), valid)  # counted only (see :func:`vectorisable`)


def vectorisable(function: str, column_type: pa.DataType) -> bool:
    """Numbers are aggregated here; anything else (decimals, strings, ...) by the replay."""
    numeric = pa.types.is_integer(column_type) or pa.types.is_floating(column_type)
    return function == "count" or numeric


def inexact(columns: list[tuple[str, Column]], rows: np.ndarray, session: np.ndarray):
    """Per row of ``rows``: does its session sum integers beyond a float's exact range?
    (The replay takes such stretches: it sums exactly and raises on a long's overflow.)"""
    risky = np.zeros(len(rows), dtype=bool)
    for function, column in columns:
        if function in ("sum", "mean") and column.values.dtype.kind == "i":
            magnitude = np.abs(column.values[rows].astype(np.float64))
            risky |= running("cumsum", magnitude, session[rows]) >= EXACT
    return risky


def aggregate(
    function: str, column: Column, rows: np.ndarray, session: np.ndarray, cumulative: bool
):
    """``function`` over each session's ``rows`` (consecutive, in processing order): per row
    the value of the rows so far (``cumulative``), or one value per session, the last. Returns
    (values, null), with the replay's rules (:mod:`aggregations`): nulls skipped, NaN
    propagating, values added one at a time in processing order (a pairwise float sum would
    round differently) and, on a tie, the first value kept (``-0.0`` against ``0.0``)."""
    valid = column.valid[rows]
    groups = session[rows]
    count = running("cumsum", valid.astype(np.int64), groups)
    if function == "count":
        result = count
    else:
        values = column.values[rows]
        values = np.where(valid, values, _identity(function, values))
        if values.dtype.kind == "f" and function in ("sum", "mean"):
            result = running("cumsum", values, groups)
            if function == "mean":  # its sum starts from 0: never -0.0
                result = result + 0.0
        else:
            result = running(_CUMULATIVE[function], values, groups)
        if values.dtype.kind == "f":  # pandas skips NaN; Java's arithmetic keeps it
            nan = running("cummax", np.isnan(values).astype(np.int8), groups) > 0
            result = np.where(nan, np.nan, result)
            if function == "sum":  # pandas adds to 0.0; the replay's first term is the sum
                signed = valid & ~((values == 0) & np.signbit(values))
                negative_zero = (running("cumsum", signed.astype(np.int64), groups) == 0) & (
                    count > 0
                )
                result = np.where(negative_zero, -0.0, result)
        if function == "mean":
            result = result / np.maximum(count, 1)
    if not cumulative:
        last = np.flatnonzero(np.r_[groups[1:] != groups[:-1], True])
        result, count = result[last], count[last]
    return result, (count == 0) & (function != "count")
