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

from collections.abc import Sequence

import numpy as np
from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from feast_stream_backfill.calibration.serves import log_bin
from feast_stream_backfill.calibration.visibility import uncertain_spans


def uncertain_time(shown_ms: float, quantiles: Sequence[float]) -> float:
    """How long (ms) of a value shown for ``shown_ms`` its probability is below
    :data:`~.visibility.UNCERTAIN_BELOW` (:func:`~.visibility.uncertain_spans` of a key
    emitting at 0 and ``shown_ms``, between the two)."""
    if shown_ms <= 0:
        return 0.0
    spans = uncertain_spans(np.array([0.0, shown_ms]), 0.0, float(shown_ms), quantiles)
    return float(np.sum(spans[:, 1] - spans[:, 0]))


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
    uncertain = sum(r["n"] * uncertain_time(r["g"], quantiles) for r in bins)
    return min(1.0, uncertain / total)
