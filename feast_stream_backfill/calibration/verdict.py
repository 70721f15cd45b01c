"""The verdict a user reads first: what share of training rows is uncertain.

A training row is uncertain where the value it gets had probability below
:data:`~.visibility.UNCERTAIN_BELOW` of being the one the live job showed. Which rows a user
will join is theirs to say; where the online store's logged requests are at hand their
instants stand for them (:func:`~.serves.uncertain_share`). Otherwise the share is over time:
a prediction instant drawn uniformly between a key's first and last emission, that is the
share of those spans during which the backfilled value was uncertain.

The uncertain stretch of a value depends only on how long it was shown: a value emitted at
``e`` and superseded at ``e + g`` is the training value at ``t = e + s`` for ``s`` in
``[0, g)``, with probability ``F(s) - F(s - g)``. So the emissions are binned by ``g`` in
Spark and the stretch computed per bin on the driver.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from feast_stream_backfill.calibration.serves import log_bin
from feast_stream_backfill.calibration.visibility import (
    UNCERTAIN_BELOW,
    cdf_of_values,
    visible_probability,
)


def uncertain_time(shown_ms: float, cdf: Callable, knots: Sequence[float]) -> float:
    """How long (ms) of a value shown for ``shown_ms`` its probability is below
    :data:`UNCERTAIN_BELOW`: exact for ``F`` linear between ``knots`` (as
    :func:`~.visibility.cdf_of_values` makes it), whose probability is linear between the
    knots and the knots shifted by ``shown_ms``."""
    g = float(shown_ms)
    if g <= 0:
        return 0.0
    k = np.asarray(knots, dtype=float)
    points = np.unique(np.concatenate(([0.0, g], k, k + g)))
    points = points[(points >= 0) & (points <= g)]
    # P between two points is linear; at a knot where F jumps (quantiles that tie) the end of
    # a segment takes P's value just before the knot.
    a = visible_probability(points[:-1], 0.0, g, cdf)
    b = visible_probability(points[1:] - 1e-6, 0.0, g, cdf)
    width = np.diff(points)
    low = (a < UNCERTAIN_BELOW) & (b < UNCERTAIN_BELOW)
    crossing = (a < UNCERTAIN_BELOW) != (b < UNCERTAIN_BELOW)
    below_from_a = np.where(a < UNCERTAIN_BELOW, 1.0, 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        where = np.clip((UNCERTAIN_BELOW - a) / (b - a), 0.0, 1.0)
    part = np.where(below_from_a == 1.0, where, 1.0 - where)
    return float(np.sum(width * np.where(low, 1.0, np.where(crossing, part, 0.0))))


def uncertain_time_share(
    emissions: DataFrame, keys: Sequence[str], quantiles: Sequence[float]
) -> float | None:
    """The share of the time between each key's first and last emission during which the
    backfilled value was uncertain under the residual ``quantiles`` (None: no key emitted
    twice)."""
    in_order = Window.partitionBy(*keys).orderBy("emit_time", "emit_sequence")
    emitted = F.unix_millis("emit_time")
    shown = emissions.select((F.lead(emitted).over(in_order) - emitted).alias("g")).where(
        F.col("g").isNotNull()
    )
    bins = (
        shown.groupBy(log_bin(F.col("g")).alias("bin"))
        .agg(F.avg("g").alias("g"), F.count("*").alias("n"), F.sum("g").alias("total"))
        .collect()
    )
    total = sum(float(r["total"]) for r in bins)
    if not total:
        return None
    cdf = cdf_of_values(quantiles)
    uncertain = sum(r["n"] * uncertain_time(r["g"], cdf, quantiles) for r in bins)
    return min(1.0, uncertain / total)
