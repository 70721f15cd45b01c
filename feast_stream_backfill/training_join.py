"""Which value was in the online store at a prediction's instant? (SEMANTICS section 6)

For a prediction ``(key, t)`` the value is the last emission with ``emit_time <= t`` (ties by
``emit_sequence``), or null where there is none or it is older than the ttl.

The as-of join is a sort, not a join (:func:`feast_stream_backfill.carry_forward.carry_forward`):
the distinct prediction instants and the emissions are sorted per key by time (emissions first at
equal times, so ``emit_time == t`` is visible; then by ``emit_sequence``) and the last emission is
carried forward. Cost ~ (predictions + emissions) log, whatever the skew. The values come back
once per distinct ``(key, t)`` and are joined to the predictions on key *and* time: an equi-join
with at most one match per row.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from feast_stream_backfill.carry_forward import carry_forward

_T, _SEQ, _VALUE, _EMITTED = "_asof_t", "_asof_seq", "_asof_value", "_asof_emitted"


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
    **options: Any,
) -> DataFrame:
    """``predictions`` with one column per feature: its value as of ``prediction_time``.

    ``options`` are :func:`as_of_values`'s (``output_names`` renames the feature columns:
    Feast's ``full_feature_names``). Rows of ``predictions`` are kept as they are, extra columns
    and duplicates included.
    """
    values = as_of_values(predictions, emissions, keys, prediction_time, features, **options)
    return predictions.join(values, on=[*keys, prediction_time], how="left")
