"""How sure a training value is: the probability that the live job had it visible.

A key's value emitted at ``e`` (backfilled) and superseded by the key's next emission at
``e'`` was written by the live job at ``e + r`` and overwritten at ``e' + r'``, with ``r`` and
``r'`` drawn from the residual distribution ``F`` of write time minus emit time that
:func:`~feast_stream_backfill.calibration.calibrate` fitted. Writes of one key keep their
order (one sink task per key), so the next write never lands before the value's own and, at a
prediction's instant ``t``, the value was visible with probability::

    P = F(t - e) - F(t - e')        (F(t - e') = 0 where no emission follows)

and, before a key's first emission ``e'``, nothing was visible with probability
``1 - F(t - e')``. :func:`visible_probability` states the rule once, on numbers and numpy
arrays; :func:`visible_probability_column` applies it to Spark Columns.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import pandas as pd
from pyspark.sql import Column
from pyspark.sql import functions as F

from feast_stream_backfill.calibration.fit import LEVELS

#: A value visible with a probability below this is *uncertain*: the live job may well have
#: shown another.
UNCERTAIN_BELOW = 0.95


def visible_probability(t, emitted, superseded, cdf: Callable):
    """The probability that the value emitted at ``emitted`` and superseded at ``superseded``
    (None or NaN: never) was the one visible at ``t``; with ``emitted`` None or NaN, that
    nothing was. Times in ms, as numbers or numpy arrays; ``cdf`` is ``F``."""
    shown = _unless_missing(emitted, lambda e: cdf(t - e), 1.0)
    gone = _unless_missing(superseded, lambda e: cdf(t - e), 0.0)
    return shown - gone


def _unless_missing(x, f: Callable, default: float):
    """``f(x)``, or ``default`` where ``x`` is None or NaN."""
    if x is None:
        return default
    x = np.asarray(x, dtype=float)
    return np.where(np.isnan(x), default, f(np.nan_to_num(x)))[()]


def cdf_of_values(quantiles: Sequence[float]) -> Callable:
    """``F`` from the residual's quantiles at :data:`~.fit.LEVELS`: 0 below the first, 1 from
    the last, linear from each level to the next; where quantiles tie (a delay many writes
    share), ``F`` jumps at that delay to the highest level they share (a CDF is
    right-continuous). Takes numbers or numpy arrays (NaN gives NaN)."""
    q = np.asarray(quantiles, dtype=float)
    levels = np.asarray(LEVELS, dtype=float)
    runs = np.flatnonzero(np.append(True, q[1:] != q[:-1]))  # first index of each value
    knots, ends = q[runs], np.append(runs[1:], len(q)) - 1
    highest, lowest = levels[ends], levels[runs]

    def cdf(x):
        x = np.asarray(x, dtype=float)
        i = np.searchsorted(knots, x, side="right") - 1
        inner = np.clip(i, 0, max(len(knots) - 2, 0))
        nxt = np.minimum(inner + 1, len(knots) - 1)
        width = np.where(nxt > inner, knots[nxt] - knots[inner], 1.0)
        ramp = highest[inner] + (x - knots[inner]) / width * (lowest[nxt] - highest[inner])
        value = np.where(i < 0, 0.0, np.where(i >= len(knots) - 1, 1.0, ramp))
        return np.where(np.isnan(x), np.nan, value)[()]

    return cdf


def visible_probability_column(
    t: Column, emitted: Column, superseded: Column, quantiles: Sequence[float]
) -> Column:
    """:func:`visible_probability` over Spark Columns of epoch ms (null: none), with ``F``
    from ``quantiles``: numpy over Arrow batches, one pass (as a SQL expression, a search over
    201 quantiles outgrows the 64 KB method that Spark's code generation compiles)."""
    cdf = cdf_of_values(quantiles)

    def numbers(column: pd.Series):
        return column.to_numpy(dtype=float, na_value=np.nan)

    @F.pandas_udf("double")
    def probability(at: pd.Series, shown: pd.Series, gone: pd.Series) -> pd.Series:
        p = visible_probability(numbers(at), numbers(shown), numbers(gone), cdf)
        return pd.Series(p, index=at.index)

    return probability(*(c.cast("double") for c in (t, emitted, superseded)))


#: :func:`uncertain_spans` solves this many emissions per pass (memory: a few values per
#: quantile and emission of a pass).
EMISSIONS_PER_PASS = 2_000


def uncertain_spans(
    emitted: np.ndarray, lo: float, hi: float, quantiles: Sequence[float]
) -> np.ndarray:
    """Where in ``[lo, hi]`` a key whose emissions are at ``emitted`` (ms) showed a value (its
    latest emission; none before the first) with a probability below
    :data:`UNCERTAIN_BELOW`, under the residual distribution of ``quantiles``: rows
    ``start, end`` (ms), in order, disjoint.

    Solved exactly rather than sampled on a grid, so that a band of a second over hours is
    neither lost between samples nor widened to one: ``F`` is linear between its quantiles, so
    the probability is linear between the instants where an emission, or an emission plus a
    quantile, falls, and each such piece crosses the threshold at most once. Solved in passes
    of :data:`EMISSIONS_PER_PASS` emissions, each with the emissions shown in it and the one
    after, whatever the key's count."""
    cdf = cdf_of_values(quantiles)
    knots = np.unique(np.asarray(quantiles, dtype=float))
    emitted = np.sort(np.asarray(emitted, dtype=float))
    # The emission shown at t and the one after it (NaN: none), by the count emitted by t.
    around = np.concatenate([[np.nan], emitted, [np.nan]])

    def probability(t: np.ndarray) -> np.ndarray:
        shown = np.searchsorted(emitted, t, side="right")
        return visible_probability(t, around[shown], around[shown + 1], cdf)

    cuts = np.unique(np.clip([lo, *emitted[::EMISSIONS_PER_PASS], hi], lo, hi))
    found = [np.empty((0, 2))]
    for c0, c1 in zip(cuts[:-1], cuts[1:], strict=True):
        first = max(np.searchsorted(emitted, c0, side="right") - 1, 0)
        near = emitted[first : np.searchsorted(emitted, c1) + 1]
        edges = np.unique(np.concatenate([[c0, c1], near, (near[:, None] + knots).ravel()]))
        edges = edges[(edges >= c0) & (edges <= c1)]
        a, b = edges[:-1], edges[1:]
        p_a = probability(a)
        p_b = 2 * probability((a + b) / 2) - p_a  # the limit at b from the left: linear
        with np.errstate(divide="ignore", invalid="ignore"):  # used where one end is below
            crossing = a + (UNCERTAIN_BELOW - p_a) / (p_b - p_a) * (b - a)
        start = np.where(p_a < UNCERTAIN_BELOW, a, crossing)
        end = np.where(p_b < UNCERTAIN_BELOW, b, crossing)
        found.append(_joined(start[end > start], end[end > start]))
    return _joined(*np.concatenate(found).T)


def _joined(start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Spans in order, each continuing the one before joined to it: rows ``start, end``."""
    continued = np.flatnonzero(start[1:] == end[:-1])
    return np.column_stack([np.delete(start, continued + 1), np.delete(end, continued)])
