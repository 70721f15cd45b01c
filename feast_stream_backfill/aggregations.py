"""What does a window compute? The aggregations Feast's ``Aggregation`` names.

Each function is stated once: its Spark aggregate (for windows computed by a ``groupBy`` or a
running window) and its accumulator, Flink's ``AggregateFunction`` shape (zero, add, merge,
result: for the session replay, which merges windows as they merge). Both follow the same
rules: nulls are skipped (SQL), ``count`` counts non-null values (Flink SQL's
``COUNT(col)``), and NaN propagates through ``sum``, ``mean``, ``min`` and ``max`` as Java's
``+``, ``Math.min`` and ``Math.max`` do in a Flink job (Spark's own ``min`` would skip NaN,
which it orders above every number). All are order-independent: a firing's value depends only
on which records the window holds.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pyspark.sql import Column, WindowSpec
from pyspark.sql import functions as F
from pyspark.sql.types import (
    DataType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegralType,
    LongType,
)

Over = WindowSpec | None


def _over(aggregate: Column, over: Over) -> Column:
    return aggregate if over is None else aggregate.over(over)


def _is_nan(value: Any) -> bool:
    return isinstance(value, float) and math.isnan(value)


def _extreme(pick: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    """``Math.min``/``Math.max``: NaN if either side is NaN; None is "no value yet"."""

    def combine(a: Any, b: Any) -> Any:
        if a is None or b is None:
            return b if a is None else a
        return math.nan if _is_nan(a) or _is_nan(b) else pick(a, b)

    return combine


#: Java's long: Spark's sum of an integer column overflows out of it (ANSI mode: an error).
_LONG = range(-(2**63), 2**63)
LONG_OVERFLOW = "ARITHMETIC_OVERFLOW"


def _plus(a: Any, b: Any) -> Any:
    """``+``, and Spark's error where a sum of integers leaves the long (Python's ints never
    overflow; Flink's Java long would wrap around)."""
    total = b if a is None else a if b is None else a + b
    if type(total) is int and total not in _LONG:
        raise ArithmeticError(f"[{LONG_OVERFLOW}] long overflow: {a} + {b}")
    return total


def _summed(c: Column, over: Over) -> Column:
    return _over(F.sum(c), over)


def _spark_min(c: Column, over: Over) -> Column:
    highest = _over(F.max(c), over)  # Spark orders NaN above every number
    return F.when(F.isnan(highest), highest).otherwise(_over(F.min(c), over))


def _same(column_type: DataType) -> DataType:
    return column_type


def _fractional(column_type: DataType) -> bool:
    return isinstance(column_type, (DoubleType, FloatType))


def _sum_type(column_type: DataType) -> DataType:
    return DoubleType() if _fractional(column_type) else LongType()


def _weight(values: Column, copied: Column) -> Column:
    """Twice per value, once per copy's (each of a copied record's two copies): halved once
    summed, the count of the values with each record once, exactly."""
    return F.when(values.isNull(), 0).when(copied, 1).otherwise(2)


def _halved(twice: Column, column_type: DataType) -> Column:
    """A sum of a ``column_type`` column that holds each copied record twice, halved: exact
    (an even integer or decimal, or a double halved)."""
    if isinstance(column_type, IntegralType):
        return F.shiftright(twice, 1)
    return twice / 2 if isinstance(column_type, DecimalType) else twice * 0.5


def _plus_copies(once: Column, twice: Column, column_type: DataType) -> Column:
    """The records' sum from their own (``once``) and their copies' (``twice``, halved): null
    where neither has a value, as a sum, in the type of Spark's own (a decimal's: 10 more
    digits)."""
    copies = _halved(twice, column_type)
    total = F.coalesce(once + copies, once, copies)
    if isinstance(column_type, DecimalType):
        precision = min(38, column_type.precision + 10)
        return total.cast(DecimalType(precision, column_type.scale))
    return total


def _mean_of_partials(partials: list[Column], _column_type: DataType) -> Column:
    total, weight = partials
    return F.try_divide(total, F.shiftright(weight, 1))  # no values: null, as avg


def _sum_parts(values: Column, copied: Column, column_type: DataType) -> list[Column]:
    """A sum's partials: of doubles one, a copy's value halved as it is added (exact for
    whole numbers); else the records' own and their copies' (halved once summed)."""
    if _fractional(column_type):
        return [F.sum(F.when(copied, values * 0.5).otherwise(values))]
    return [F.sum(F.when(~copied, values)), F.sum(F.when(copied, values))]


def _sum_of_partials(partials: list[Column], column_type: DataType) -> Column:
    if _fractional(column_type):
        return partials[0]
    return _plus_copies(*partials, column_type)


@dataclass(frozen=True)
class Function:
    """One aggregate function, stated for Spark, for Spark in two steps (partial aggregates of
    parts of a window, combined, then finished: for panes), and as an accumulator.

    The partials take ``copied``: records archived exactly twice (both copies are
    aggregated, the result holds one): counts and sums take a copy's value at half weight,
    exactly; a minimum or maximum does not mind a second copy."""

    spark: Callable[[Column, Over], Column]
    result_type: Callable[[DataType], DataType]
    zero: Any
    add: Callable[[Any, Any], Any]  # (accumulator, a non-null value) -> accumulator
    merge: Callable[[Any, Any], Any]
    result: Callable[[Any], Any]
    #: (accumulator, a non-null value) -> accumulator without it, as Flink SQL's retracting
    #: aggregates (OVER windows); None: a minimum or maximum is taken afresh from the values
    #: still held (``MinWithRetractAggFunction`` keeps them all).
    retract: Callable[[Any, Any], Any] | None
    partials: Callable[[Column, Column, DataType], list[Column]]  # (values, copied, type)
    combine: Callable[[Column, Over], Column]  # an aggregate of one partial over parts
    finish: Callable[[list[Column], DataType], Column]  # (partials, column type) -> value


FUNCTION: dict[str, Function] = {
    "sum": Function(
        lambda c, over: _over(F.sum(c), over),
        _sum_type,
        None,
        _plus,
        _plus,
        lambda a: a,
        lambda a, v: _plus(a, -v),  # SumWithRetractAggFunction: sum - value
        _sum_parts,
        _summed,
        _sum_of_partials,
    ),
    "count": Function(
        lambda c, over: _over(F.count(c), over),
        lambda _: LongType(),
        0,
        lambda a, _: a + 1,
        lambda a, b: a + b,
        lambda a: a,
        lambda a, _: a - 1,
        lambda c, copied, _: [F.sum(_weight(c, copied))],
        _summed,
        lambda p, _: F.shiftright(p[0], 1),
    ),
    "mean": Function(
        lambda c, over: _over(F.avg(c), over),
        lambda _: DoubleType(),
        (0, 0),
        lambda a, v: (a[0] + 1, a[1] + v),
        lambda a, b: (a[0] + b[0], a[1] + b[1]),
        lambda a: a[1] / a[0] if a[0] else None,
        lambda a, v: (a[0] - 1, a[1] - v),  # AvgAggFunction: its own sum and count
        # avg's own sum (of doubles) and count
        lambda c, copied, _: [
            *_sum_parts(c.cast("double"), copied, DoubleType()),
            F.sum(_weight(c, copied)),
        ],
        _summed,
        _mean_of_partials,
    ),
    "min": Function(
        _spark_min,
        _same,
        None,
        _extreme(min),
        _extreme(min),
        lambda a: a,
        None,
        lambda c, *_: [_spark_min(c, None)],
        _spark_min,
        lambda p, _: p[0],
    ),
    "max": Function(
        lambda c, over: _over(F.max(c), over),
        _same,
        None,
        _extreme(max),
        _extreme(max),
        lambda a: a,
        None,
        lambda c, *_: [F.max(c)],
        lambda p, over: _over(F.max(p), over),
        lambda p, _: p[0],
    ),
}
FUNCTIONS = tuple(FUNCTION)


@dataclass(frozen=True)
class Aggregation:
    """``function`` of ``column`` over a window, written as feature ``name``."""

    column: str
    function: str
    name: str

    def __post_init__(self) -> None:
        if self.function not in FUNCTION:
            raise ValueError(
                f"aggregation {self.name!r}: function {self.function!r} is not one of {FUNCTIONS}"
            )

    @property
    def rules(self) -> Function:
        return FUNCTION[self.function]

    def expr(self, over: Over = None, values: Column | None = None) -> Column:
        """The aggregate, in ``groupBy().agg`` or, with ``over``, as a running window; of
        ``values`` in place of the column where given."""
        return self.rules.spark(F.col(self.column) if values is None else values, over)

    def partials(self, values: Column, copied: Column, column_type: DataType) -> list[Column]:
        """Partial aggregates of ``values`` (of the column's ``column_type``) over a part of a
        window, for :meth:`finished` or :meth:`merged`; ``copied``: the record is one of two
        copies of one offset."""
        parts = self.rules.partials(values, copied, column_type)
        return [part.alias(f"{self.name}__part{i}") for i, part in enumerate(parts)]

    def _parts(self, column_type: DataType) -> list[Column]:
        return [F.col(name) for name in self.partial_names(column_type)]

    def finished(self, column_type: DataType) -> Column:
        """The feature, from the :meth:`partials` of the whole window, in one row."""
        return self.rules.finish(self._parts(column_type), column_type).alias(self.name)

    def merged(self, only: Column, column_type: DataType, over: Over = None) -> Column:
        """The feature, from the :meth:`partials` of the window's parts ``only`` holds for
        (with ``over``, of the parts so far)."""
        combined = [self.rules.combine(F.when(only, p), over) for p in self._parts(column_type)]
        return self.rules.finish(combined, column_type).alias(self.name)

    def merged_partials(self, only: Column, column_type: DataType) -> list[Column]:
        """The :meth:`partials` of the window's parts ``only`` holds for, combined: the
        window's own partials."""
        return [
            self.rules.combine(F.when(only, F.col(name)), None).alias(name)
            for name in self.partial_names(column_type)
        ]

    def partial_names(self, column_type: DataType) -> list[str]:
        """The names of the :meth:`partials` columns."""
        n = len(self.rules.partials(F.lit(None), F.lit(False), column_type))
        return [f"{self.name}__part{i}" for i in range(n)]

    def result_type(self, column_type: DataType) -> DataType:
        """The feature's type for a column of ``column_type`` (Spark's own aggregate's)."""
        return self.rules.result_type(column_type)
