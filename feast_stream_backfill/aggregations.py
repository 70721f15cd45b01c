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
from pyspark.sql.types import DataType, DoubleType, FloatType, LongType

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


def _spark_min(c: Column, over: Over) -> Column:
    highest = _over(F.max(c), over)  # Spark orders NaN above every number
    return F.when(F.isnan(highest), highest).otherwise(_over(F.min(c), over))


def _same(column_type: DataType) -> DataType:
    return column_type


def _sum_type(column_type: DataType) -> DataType:
    return DoubleType() if isinstance(column_type, (DoubleType, FloatType)) else LongType()


def _mean_of_partials(partials: list[Column]) -> Column:
    total, count = partials
    return F.try_divide(F.sum(total), F.sum(count))  # no values: null, as avg


@dataclass(frozen=True)
class Function:
    """One aggregate function, stated for Spark, for Spark in two steps (partial aggregates of
    parts of a window, merged: for panes), and as an accumulator."""

    spark: Callable[[Column, Over], Column]
    result_type: Callable[[DataType], DataType]
    zero: Any
    add: Callable[[Any, Any], Any]  # (accumulator, a non-null value) -> accumulator
    merge: Callable[[Any, Any], Any]
    result: Callable[[Any], Any]
    partials: Callable[[Column], list[Column]]
    merge_partials: Callable[[list[Column]], Column]


FUNCTION: dict[str, Function] = {
    "sum": Function(
        lambda c, over: _over(F.sum(c), over),
        _sum_type,
        None,
        _plus,
        _plus,
        lambda a: a,
        lambda c: [F.sum(c)],
        lambda p: F.sum(p[0]),
    ),
    "count": Function(
        lambda c, over: _over(F.count(c), over),
        lambda _: LongType(),
        0,
        lambda a, _: a + 1,
        lambda a, b: a + b,
        lambda a: a,
        lambda c: [F.count(c)],
        lambda p: F.sum(p[0]),
    ),
    "mean": Function(
        lambda c, over: _over(F.avg(c), over),
        lambda _: DoubleType(),
        (0, 0),
        lambda a, v: (a[0] + 1, a[1] + v),
        lambda a, b: (a[0] + b[0], a[1] + b[1]),
        lambda a: a[1] / a[0] if a[0] else None,
        lambda c: [F.sum(c.cast("double")), F.count(c)],  # avg's own sum and count
        _mean_of_partials,
    ),
    "min": Function(
        _spark_min,
        _same,
        None,
        _extreme(min),
        _extreme(min),
        lambda a: a,
        lambda c: [_spark_min(c, None)],
        lambda p: _spark_min(p[0], None),
    ),
    "max": Function(
        lambda c, over: _over(F.max(c), over),
        _same,
        None,
        _extreme(max),
        _extreme(max),
        lambda a: a,
        lambda c: [F.max(c)],
        lambda p: F.max(p[0]),
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

    def partials(self, values: Column) -> list[Column]:
        """Partial aggregates of ``values`` over a part of a window, for :meth:`merged`."""
        parts = self.rules.partials(values)
        return [part.alias(f"{self.name}__part{i}") for i, part in enumerate(parts)]

    def merged(self, only: Column) -> Column:
        """The feature, from the :meth:`partials` of the window's parts ``only`` holds for."""
        n = len(self.rules.partials(F.col(self.column)))
        parts = [F.when(only, F.col(f"{self.name}__part{i}")) for i in range(n)]
        return self.rules.merge_partials(parts).alias(self.name)

    def result_type(self, column_type: DataType) -> DataType:
        """The feature's type for a column of ``column_type`` (Spark's own aggregate's)."""
        return self.rules.result_type(column_type)
