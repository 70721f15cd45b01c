"""What the online store served, as Feast's feature logging keeps it, and what it says of the delay.

A logged request says which value the store held at the request's instant ``t``: not when it
was written. Writes of a key keep their order, so if the value served is the backfill's
emission ``k`` of the key (emitted at ``e_k``), the live job had written it (its residual
``r_k <= t - e_k``) and had not yet written emission ``k + 1`` (``r_{k+1} > t - e_{k+1}``).
Each request is thus two *current-status* observations of the residual ``r``: at
``x = t - e``, did the write land (``r <= x``) or not. The distribution these pin down is the
nonparametric maximum-likelihood estimate for current-status data: the isotonic regression of
"landed" on ``x`` (Groeneboom and Wellner, 1992), fitted here on the observations binned by
``x`` in Spark (the driver sees at most a few thousand bins, never the requests).

The backfilled emissions around each request come from one sorted pass of requests and
emissions per key (:func:`~feast_stream_backfill.carry_forward.carry_forward`, the as-of rule
of training sets): the emission visible at ``t`` in the backfill, the one before it and the
one after. A served value that is none of the three is a value the backfill does not
reproduce there.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import reduce

import numpy as np
from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from feast_stream_backfill.archives import Archive
from feast_stream_backfill.calibration.fit import LEVELS, Delay
from feast_stream_backfill.calibration.matching import same_value
from feast_stream_backfill.calibration.observed import read_checked, table_of
from feast_stream_backfill.calibration.visibility import (
    UNCERTAIN_BELOW,
    visible_probability_column,
)
from feast_stream_backfill.carry_forward import carry_forward

#: Feast's ``FieldStatus.OUTSIDE_MAX_AGE``: the value had expired (the ttl), so the request
#: says nothing of when it was written.
OUTSIDE_MAX_AGE = 4
#: Bins per unit of ``ln(1 + |x| / 1 ms)``: about 2.5 % of the delay apart, ~1,300 bins from
#: -10 h to +10 h.
BINS_PER_LOG_MS = 40
#: Bootstrap draws for the interval of the fitted median.
BOOTSTRAP = 200

#: Where a request's served value sits among the backfill's emissions of its key.
AS_BACKFILL, EARLIER, LATER, NOTHING_YET, DIFFERS = (
    "as_backfill",
    "earlier",
    "later",
    "nothing_yet",
    "differs",
)
_T, _SEQ, _NOW, _NEXT, _PREV = "_sv_t", "_sv_seq", "_sv_now", "_sv_next", "_sv_prev"
_AT, _KIND, _X, _LANDED = "_sv_at", "_sv_kind", "_sv_x", "_sv_landed"


@dataclass(frozen=True)
class ObservedServes:
    """Requests the online store answered, in Feast's feature-logging shape: a Delta table at
    ``path`` or a ``dataframe`` (parquet as ``write_logged_features`` writes it reads as a
    DataFrame). ``request_time``: when (a TIMESTAMP); the view's join keys by name; each
    feature in ``{view}__{feature}`` (Feast's full feature names; ``features`` maps a feature
    to another column). Requests whose ``{column}__status`` is ``OUTSIDE_MAX_AGE`` are left
    out (the value had expired, which says nothing of its write)."""

    view: str
    path: str | None = None
    dataframe: DataFrame | None = field(default=None, compare=False, repr=False)
    request_time: str = "__log_timestamp"
    features: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        table_of(self.path, self.dataframe, "observed serves")

    @property
    def archive(self) -> Archive:
        return table_of(self.path, self.dataframe, "observed serves")

    @property
    def where(self) -> str:
        return f"observed serves {self.archive.where}"

    def column(self, feature: str) -> str:
        return self.features.get(feature, f"{self.view}__{feature}")

    def read(self, spark: SparkSession, keys: Sequence[str], features: Sequence[str]) -> DataFrame:
        """The requests with the job's key and feature names and a TIMESTAMP :data:`_AT`; a
        missing column or one of the wrong type is refused, named."""
        source = {feature: self.column(feature) for feature in features}
        df = read_checked(
            spark, self.archive, self.where, keys, [self.request_time], list(source.values())
        )
        statuses = [f"{c}__status" for c in source.values() if f"{c}__status" in df.columns]
        fresh = reduce(
            Column.__and__,
            [F.coalesce(F.col(s) != OUTSIDE_MAX_AGE, F.lit(True)) for s in statuses],
            F.col(self.request_time).isNotNull(),
        )
        return df.filter(fresh).select(
            *keys,
            F.col(self.request_time).cast("timestamp").alias(_AT),
            *(F.col(column).alias(feature) for feature, column in source.items()),
        )


@dataclass(frozen=True)
class ServeCounts:
    """Requests read, by where their served value sits: ``as_backfill`` (the backfill's value
    at that instant), ``earlier`` (its previous value: the live job wrote later),
    ``later`` (its next value: the live job wrote sooner), ``nothing_yet`` (nothing served
    before the key's first values), ``differs`` (none of them)."""

    requests: int
    as_backfill: int
    earlier: int
    later: int
    nothing_yet: int
    differs: int

    @property
    def mismatch_rate(self) -> float:
        """The share of requests served a value the backfill has nowhere near their instant."""
        return self.differs / self.requests if self.requests else 0.0


@dataclass(frozen=True)
class ServeFit:
    """What the requests say: their ``counts``, the residual's ``delay`` fitted from them
    (None: no request bore on it), its ``quantiles`` at :data:`~.fit.LEVELS`, and
    ``uncertain``: the share of requests whose backfilled value had probability below
    :data:`~.visibility.UNCERTAIN_BELOW` under the residuals in use (None until computed)."""

    counts: ServeCounts
    delay: Delay | None
    quantiles: list[float]
    uncertain: float | None = None


def around(
    requests: DataFrame, emissions: DataFrame, keys: Sequence[str], features: Sequence[str]
) -> DataFrame:
    """Each request with the backfill's emissions of its key around its instant: the one
    visible (:data:`_NOW`), the one before it (:data:`_PREV`) and the next (:data:`_NEXT`),
    each a struct of epoch-ms ``emitted`` and the features (null: none)."""
    value = F.struct(F.unix_millis("emit_time").alias("emitted"), *[F.col(f) for f in features])
    in_order = Window.partitionBy(*keys).orderBy(_T, _SEQ)
    written = emissions.select(
        *keys,
        F.col("emit_time").alias(_T),
        F.col("emit_sequence").alias(_SEQ),
        value.alias(_NEXT),
    ).withColumn(_PREV, F.lag(_NEXT).over(in_order))
    # The carried value is the emission with the one before it; the successor, the emission.
    written = written.select(
        *keys, _T, _SEQ, F.struct(F.col(_NEXT).alias("now"), _PREV).alias(_NOW), _NEXT
    )
    rows = requests.withColumn(_T, F.col(_AT))
    carried = carry_forward(rows, written, keys, _T, _NOW, order=[_SEQ], successor=_NEXT)
    return carried.select(
        *requests.columns,
        F.col(_NOW)["now"].alias(_NOW),
        F.col(_NOW)[_PREV].alias(_PREV),
        _NEXT,
    )


def _served(emission: str, features: Sequence[str]) -> Column:
    """The request's served values equal ``emission``'s (a struct column; null: none)."""
    return F.col(emission).isNotNull() & reduce(
        Column.__and__, [same_value(F.col(f), F.col(emission)[f]) for f in features]
    )


def classified(placed: DataFrame, features: Sequence[str]) -> DataFrame:
    """:func:`around`'s rows with :data:`_KIND`: which emission the served value is."""
    nothing = reduce(Column.__and__, [F.col(f).isNull() for f in features])
    kind = (
        F.when(nothing & F.col(_NOW).isNull(), NOTHING_YET)
        .when(nothing & F.col(_PREV).isNull(), EARLIER)
        .when(_served(_NOW, features), AS_BACKFILL)
        .when(_served(_PREV, features), EARLIER)
        .when(_served(_NEXT, features), LATER)
        .otherwise(DIFFERS)
    )
    return placed.withColumn(_KIND, kind)


def observations(placed: DataFrame) -> DataFrame:
    """Current-status observations of the residual, two per request: ``x`` (ms), whether the
    emission had landed by then. The emission served had (``x = t - e``); the one after it
    had not."""
    t = F.unix_millis(_AT)

    def seen(emission: str, landed: bool) -> Column:
        return F.when(
            F.col(emission).isNotNull(),
            F.struct((t - F.col(emission)["emitted"]).alias(_X), F.lit(landed).alias(_LANDED)),
        )

    pairs = {
        AS_BACKFILL: [seen(_NOW, True), seen(_NEXT, False)],
        EARLIER: [seen(_PREV, True), seen(_NOW, False)],
        LATER: [seen(_NEXT, True)],
        NOTHING_YET: [seen(_NEXT, False)],
    }
    chosen = F.lit(None)
    for kind, seens in pairs.items():
        chosen = F.when(F.col(_KIND) == kind, F.array(*seens)).otherwise(chosen)
    exploded = placed.select(F.explode(chosen).alias("o")).where(F.col("o").isNotNull())
    return exploded.select("o.*")


def log_bin(x: Column) -> Column:
    """The bin of a delay ``x`` (ms): :data:`BINS_PER_LOG_MS` bins per unit of
    ``ln(1 + |x|)``, signed, so that bins are narrow where delays are small."""
    return F.signum(x) * F.round(F.log1p(F.abs(x)) * BINS_PER_LOG_MS)


@dataclass(frozen=True)
class Bins:
    """Binned current-status observations, sorted by ``x``: mean delay, count, share landed."""

    x: np.ndarray
    n: np.ndarray
    landed: np.ndarray


def binned(observed: DataFrame) -> Bins:
    rows = (
        observed.groupBy(log_bin(F.col(_X)).alias("bin"))
        .agg(
            F.avg(_X).alias("x"),
            F.count("*").alias("n"),
            F.avg(F.col(_LANDED).cast("double")).alias("landed"),
        )
        .orderBy("x")
        .collect()
    )
    return Bins(
        np.array([r["x"] for r in rows], dtype=float),
        np.array([r["n"] for r in rows], dtype=float),
        np.array([r["landed"] for r in rows], dtype=float),
    )


def cdf_estimate(bins: Bins, landed: np.ndarray | None = None) -> np.ndarray:
    """The residual's CDF at each bin's delay: the weighted isotonic regression of the share
    landed on the delay, which is the current-status NPMLE on the bins."""
    from scipy.optimize import isotonic_regression

    y = bins.landed if landed is None else landed
    return isotonic_regression(y, weights=bins.n, increasing=True).x


def quantiles_of(x: np.ndarray, cdf: np.ndarray, levels: Sequence[float] = LEVELS) -> list[float]:
    """The delays at ``levels`` of a CDF known at sorted delays ``x``: linear between them,
    the first delay below its value there and the last above."""
    out = []
    for level in levels:
        above = np.flatnonzero(cdf >= level)
        if len(above) == 0:
            out.append(float(x[-1]))
            continue
        i = above[0]
        if i == 0 or cdf[i] == cdf[i - 1]:
            out.append(float(x[i]))
            continue
        share = (level - cdf[i - 1]) / (cdf[i] - cdf[i - 1])
        out.append(float(x[i - 1] + share * (x[i] - x[i - 1])))
    return list(np.maximum.accumulate(out))


def fitted_from(bins: Bins, seed: int = 0) -> tuple[Delay, list[float]]:
    """The residual's median with a 95 % interval, its 5-95 % spread and its quantiles.

    The interval is a bootstrap over the bins (counts redrawn from the multinomial, shares
    landed from the binomial, the fit redone): the current-status NPMLE converges at the cube
    root of n with a non-normal limit, so no closed-form interval applies."""
    quantiles = quantiles_of(bins.x, cdf_estimate(bins))
    rng = np.random.default_rng(seed)
    total = int(bins.n.sum())
    medians = []
    for _ in range(BOOTSTRAP):
        n = rng.multinomial(total, bins.n / total).astype(float)
        landed = np.divide(
            rng.binomial(n.astype(int), bins.landed), n, out=np.zeros_like(n), where=n > 0
        )
        kept = n > 0
        drawn = Bins(bins.x[kept], n[kept], landed[kept])
        medians.append(quantiles_of(drawn.x, cdf_estimate(drawn), [0.5])[0])
    low, high = np.percentile(medians, [2.5, 97.5])
    median = quantiles[LEVELS.index(0.5)]
    spread = (quantiles[LEVELS.index(0.05)], quantiles[LEVELS.index(0.95)])
    return Delay(median, float(low), float(high), spread), quantiles


def count_kinds(placed: DataFrame) -> ServeCounts:
    by = {r[_KIND]: r["count"] for r in placed.groupBy(_KIND).count().collect()}
    kinds = (AS_BACKFILL, EARLIER, LATER, NOTHING_YET, DIFFERS)
    return ServeCounts(sum(by.values()), *(by.get(k, 0) for k in kinds))


def uncertain_share(placed: DataFrame, quantiles: Sequence[float]) -> float | None:
    """The share of requests whose backfilled value (the one a training row at the request's
    instant gets) had probability below :data:`~.visibility.UNCERTAIN_BELOW`."""
    chance = visible_probability_column(
        F.unix_millis(_AT),
        F.col(_NOW)["emitted"],
        F.col(_NEXT)["emitted"],
        quantiles,
    )
    row = placed.select(F.avg((chance < UNCERTAIN_BELOW).cast("double")).alias("u")).first()
    return None if row["u"] is None else float(row["u"])


def fit_serves(
    spark: SparkSession,
    serves: ObservedServes,
    emissions: DataFrame,
    keys: Sequence[str],
    features: Sequence[str],
) -> tuple[ServeFit, DataFrame]:
    """The requests placed among the backfill's emissions, counted and fitted; also the placed
    requests (persisted: unpersist when done) for :func:`uncertain_share`."""
    requests = serves.read(spark, keys, features)
    placed = classified(around(requests, emissions, keys, features), features).persist()
    counts = count_kinds(placed)
    bins = binned(observations(placed))
    if len(bins.x) == 0:
        return ServeFit(counts, None, []), placed
    delay, quantiles = fitted_from(bins)
    return ServeFit(counts, delay, quantiles), placed
