"""From paired writes and emissions to the delays the live job shows, and where it strays.

The backfill assumes the earliest processing times the archive admits, plus the declared D2
and D3; the live job read later, by a delay that varies. What a training set needs is the
distribution of *write time minus backfilled emit time* over the paired writes (the
residual): its quantiles are stored with the view. The fitted delays are medians, robust to
the few writes a pause or a restart delays by minutes, with the order-statistics interval of
the median (95 %), and each delay's spread (5th to 95th percentile).

Only the sum of D2 and D3 moves a write when the job's firings are timed by the watermark or by
records alike: both shift every emission. A sink that also writes the firing's processing
time splits them: stamp minus backfilled firing time is how much later the job read than the
backfill assumes (D2's share), write time minus stamp the delay from firing to write (D3).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from feast_stream_backfill.calibration.matching import (
    EMIT_MS,
    MATCHED,
    NOT_EMITTED,
    NOT_WRITTEN,
    STATUS,
    VALUE_DIFFERS,
)
from feast_stream_backfill.calibration.observed import STAMP_MS, WRITE_MS

#: Levels of the stored residual distribution (0.5 % apart).
LEVELS = tuple(i / 200 for i in range(201))
#: percentile_approx's accuracy: rank error at most 1/ACCURACY of the rows.
ACCURACY = 100_000
_Z95 = 1.959964


@dataclass(frozen=True)
class Delay:
    """A fitted delay in ms: ``median`` with its 95 % interval (``low``, ``high``), and the
    ``spread`` of the delays themselves (5th, 95th percentile)."""

    median: float
    low: float
    high: float
    spread: tuple[float, float]

    def __str__(self) -> str:
        return (
            f"{_seconds(self.median)} (95% interval {_seconds(self.low)} to "
            f"{_seconds(self.high)}; 90% of writes between {_seconds(self.spread[0])} "
            f"and {_seconds(self.spread[1])})"
        )


def _seconds(ms: float) -> str:
    return f"{ms / 1000:+.3f} s"


def median_levels(n: int) -> tuple[float, float]:
    """Quantile levels bounding the median with 95 % confidence among ``n`` values: the
    order statistics ``n/2 -+ 1.96 sqrt(n)/2`` (the normal approximation to the binomial)."""
    half = _Z95 * math.sqrt(n) / 2
    return max(0.0, (n / 2 - half) / n), min(1.0, (n / 2 + half + 1) / n)


def fitted_delay(pairs: DataFrame, delay: Column, n: int) -> Delay | None:
    """``delay`` over the matched pairs where it is not null; None where there are none."""
    if n == 0:
        return None
    low, high = median_levels(n)
    levels = [0.5, low, high, 0.05, 0.95]
    row = (
        pairs.filter(F.col(STATUS) == MATCHED)
        .select(F.percentile_approx(delay, levels, ACCURACY).alias("q"))
        .first()
    )
    q = [float(v) for v in row["q"]]
    return Delay(q[0], q[1], q[2], (q[3], q[4]))


@dataclass(frozen=True)
class Counts:
    """Writes read, paired and not: ``matched`` (same values), ``value_differs``,
    ``not_emitted`` (a write the backfill has no emission for), ``not_written`` (an emission
    the live job never wrote), ``rewrites`` (writes repeating their window's value)."""

    writes: int
    matched: int
    value_differs: int
    not_emitted: int
    not_written: int
    rewrites: int

    @property
    def mismatch_rate(self) -> float:
        """The share of the live job's changes of value the backfill does not reproduce."""
        changes = self.matched + self.value_differs + self.not_emitted
        return (self.value_differs + self.not_emitted) / changes if changes else 0.0


def counts(pairs: DataFrame, rewrites: int) -> Counts:
    by = {row[STATUS]: row["count"] for row in pairs.groupBy(STATUS).count().collect()}
    written = sum(by.get(s, 0) for s in (MATCHED, VALUE_DIFFERS, NOT_EMITTED)) + rewrites
    return Counts(
        written,
        by.get(MATCHED, 0),
        by.get(VALUE_DIFFERS, 0),
        by.get(NOT_EMITTED, 0),
        by.get(NOT_WRITTEN, 0),
        rewrites,
    )


@dataclass(frozen=True)
class Delays:
    """``total``: write time minus backfilled emit time; with the job's stamp, ``read``: stamp
    minus backfilled firing time (add it to D2) and ``sink``: write time minus stamp (D3);
    ``quantiles``: the total's quantiles at :data:`LEVELS` (the stored distribution)."""

    total: Delay
    read: Delay | None
    sink: Delay | None
    quantiles: list[float] = field(default_factory=list)


def delays(pairs: DataFrame, matched: int, operator_delay_ms: int) -> Delays | None:
    """The delays over the matched pairs (None where none matched)."""
    residual = F.col(WRITE_MS) - F.col(EMIT_MS)
    total = fitted_delay(pairs, residual, matched)
    if total is None:
        return None
    stamped = pairs.filter((F.col(STATUS) == MATCHED) & F.col(STAMP_MS).isNotNull()).count()
    read = sink = None
    if stamped:
        firing = F.col(EMIT_MS) - operator_delay_ms
        read = fitted_delay(
            pairs.filter(F.col(STAMP_MS).isNotNull()), F.col(STAMP_MS) - firing, stamped
        )
        sink = fitted_delay(
            pairs.filter(F.col(STAMP_MS).isNotNull()), F.col(WRITE_MS) - F.col(STAMP_MS), stamped
        )
    row = (
        pairs.filter(F.col(STATUS) == MATCHED)
        .select(F.percentile_approx(residual, list(LEVELS), ACCURACY).alias("q"))
        .first()
    )
    return Delays(total, read, sink, [float(v) for v in row["q"]])


def suggested_tags(delays: Delays, min_delay_ms: int, operator_delay_ms: int) -> dict[str, str]:
    """The view's tags that move the backfill onto the live job's medians: D2 and D3 where the
    stamp tells them apart; otherwise the whole shift as D3, which moves emit times alone
    (D2 also moves which records a window holds, which the writes cannot tell here)."""
    if delays.read is not None and delays.sink is not None:
        d2 = max(0, round(min_delay_ms + delays.read.median))
        d3 = max(0, round(delays.sink.median))
        return {"min_delay": f"{d2} ms", "operator_delay": f"{d3} ms"}
    return {"operator_delay": f"{max(0, round(operator_delay_ms + delays.total.median))} ms"}
