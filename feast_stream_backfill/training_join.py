"""Which value was in the online store at a prediction's instant?

The model: docs/concepts/model.md#training-sets.

For a prediction ``(key, t)`` the value is the last emission with ``emit_time <= t`` (ties by
``emit_sequence``), or null where there is none or it is older than the ttl.

The as-of join is a sort, not a join (:func:`feast_stream_backfill.carry_forward.carry_forward`):
the predictions and the emissions are sorted per key by time (emissions first at equal times, so
``emit_time == t`` is visible; then by ``emit_sequence``) and the last emission is carried
forward. Cost ~ (predictions + emissions) log, whatever the skew. :func:`as_of_join` sends the
prediction rows themselves through that sort (one shuffle); :func:`as_of_values` answers once
per distinct ``(key, t)``, for callers that want the values alone.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from functools import reduce

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from feast_stream_backfill.calibration.visibility import visible_probability_column
from feast_stream_backfill.carry_forward import carry_forward

_T, _SEQ, _VALUE, _EMITTED = "_asof_t", "_asof_seq", "_asof_value", "_asof_emitted"
_NEXT = "_asof_next"


def as_of_values(
    predictions: DataFrame,
    emissions: DataFrame,
    keys: Sequence[str],
    prediction_time: str,
    features: Sequence[str],
    *,
    emission_time: str = "emit_time",
    sequence: str | None = "emit_sequence",
    ttl_seconds: float | None = None,
    output_names: Sequence[str] | None = None,
) -> DataFrame:
    """One row per distinct ``(keys, prediction_time)`` of ``predictions``, with each feature's
    value as of that instant; join it back on keys and time (see :func:`as_of_join`)."""
    names = list(output_names or features)
    points = predictions.select(*keys, F.col(prediction_time).alias(_T)).distinct()
    written = emissions.select(
        *keys,
        F.col(emission_time).alias(_T),
        (F.col(sequence) if sequence else F.lit(0)).alias(_SEQ),
        F.struct(F.col(emission_time).alias(_EMITTED), *[F.col(f) for f in features]).alias(_VALUE),
    )
    carried = carry_forward(points, written, keys, _T, _VALUE, order=[_SEQ])
    if ttl_seconds:
        fresh = F.col(_VALUE)[_EMITTED] >= F.col(_T) - F.make_interval(secs=F.lit(ttl_seconds))
        carried = carried.withColumn(_VALUE, F.when(fresh, F.col(_VALUE)))
    return carried.select(
        *keys,
        F.col(_T).alias(prediction_time),
        *[F.col(_VALUE)[f].alias(n) for f, n in zip(features, names, strict=True)],
    )


def as_of_join(
    predictions: DataFrame,
    emissions: DataFrame,
    keys: Sequence[str],
    prediction_time: str,
    features: Sequence[str],
    *,
    emission_time: str = "emit_time",
    sequence: str | None = "emit_sequence",
    ttl_seconds: float | None = None,
    output_names: Sequence[str] | None = None,
    residual_quantiles: Sequence[float] | None = None,
    probability_name: str = "visible_probability",
) -> DataFrame:
    """``predictions`` with one column per feature: its value as of ``prediction_time``.

    Options are :func:`as_of_values`'s (``output_names`` renames the feature columns: Feast's
    ``full_feature_names``). Rows of ``predictions`` are kept as they are, extra columns and
    duplicates included, and come out as from a left join on keys and time: those columns
    first, then the others, then the features; a null key or time gets nulls. The rows go
    through the sort themselves: no distinct instants and no join back, which cost two more
    shuffles of the predictions.

    With ``residual_quantiles`` (a :class:`~feast_stream_backfill.calibration.Calibration`'s
    ``delays.quantiles``), a last column ``probability_name``: the probability that the live
    job had the row's values visible at its instant
    (:func:`~feast_stream_backfill.calibration.visibility.visible_probability`); null where
    the ttl removed the value. The next emission after each row comes from the same sorted
    pass.
    """
    names = list(output_names or features)
    on = [*keys, prediction_time]
    theirs = [*keys, emission_time]
    # The sort columns are the predictions' own when both sides have the same types, else
    # copies, so that the union's type widening never touches the predictions' values.
    same = all(
        predictions.schema[p].dataType == emissions.schema[e].dataType
        for p, e in zip(on, theirs, strict=True)
    )
    sort_keys = list(keys) if same else [f"_asof_k{i}" for i in range(len(keys))]
    t = prediction_time if same else _T
    rows = (
        predictions
        if same
        else predictions.select(
            "*", *[F.col(c).alias(s) for c, s in zip(on, [*sort_keys, t], strict=True)]
        )
    )
    written = emissions.select(
        *[F.col(e).alias(s) for e, s in zip(theirs, [*sort_keys, t], strict=True)],
        (F.col(sequence) if sequence else F.lit(0)).alias(_SEQ),
        F.struct(F.col(emission_time).alias(_EMITTED), *[F.col(f) for f in features]).alias(_VALUE),
    )
    successor = None
    if residual_quantiles is not None:
        successor = _NEXT
        written = written.withColumn(_NEXT, F.col(_VALUE)[_EMITTED])
    carried = carry_forward(rows, written, sort_keys, t, _VALUE, order=[_SEQ], successor=successor)
    joinable = reduce(operator.and_, [F.col(c).isNotNull() for c in on])  # a join's rule
    found, fresh = joinable, F.lit(True)
    if ttl_seconds:
        fresh = F.col(_VALUE)[_EMITTED] >= F.col(t) - F.make_interval(secs=F.lit(ttl_seconds))
        found &= fresh
    probability = []
    if residual_quantiles is not None:
        chance = visible_probability_column(
            F.unix_millis(t),
            F.unix_millis(F.col(_VALUE)[_EMITTED]),
            F.unix_millis(F.col(_NEXT)),
            residual_quantiles,
        )
        unexpired = F.col(_VALUE)[_EMITTED].isNull() | fresh
        probability = [F.when(joinable & unexpired, chance).alias(probability_name)]
    return carried.select(
        *on,
        *[c for c in predictions.columns if c not in on],
        *[F.when(found, F.col(_VALUE)[f]).alias(n) for f, n in zip(features, names, strict=True)],
        *probability,
    )
