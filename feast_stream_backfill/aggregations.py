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


@dataclass(frozen=True)
class Function:
    """One aggregate function, stated for Spark and as an accumulator."""

    spark: Callable[[Column, Over], Column]
    result_type: Callable[[DataType], DataType]
    zero: Any
    add: Callable[[Any, Any], Any]  # (accumulator, a non-null value) -> accumulator
    merge: Callable[[Any, Any], Any]
    result: Callable[[Any], Any]


FUNCTION: dict[str, Function] = {
    "sum": Function(
        lambda c, over: _over(F.sum(c), over), _sum_type, None, _plus, _plus, lambda a: a
    ),
    "count": Function(
        lambda c, over: _over(F.count(c), over),
        lambda _: LongType(),
        0,
        lambda a, _: a + 1,
        lambda a, b: a + b,
        lambda a: a,
    ),
    "mean": Function(
        lambda c, over: _over(F.avg(c), over),
        lambda _: DoubleType(),
        (0, 0),
        lambda a, v: (a[0] + 1, a[1] + v),
        lambda a, b: (a[0] + b[0], a[1] + b[1]),
        lambda a: a[1] / a[0] if a[0] else None,
    ),
    "min": Function(_spark_min, _same, None, _extreme(min), _extreme(min), lambda a: a),
    "max": Function(
        lambda c, over: _over(F.max(c), over),
        _same,
        None,
        _extreme(max),
        _extreme(max),
        lambda a: a,
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

    def result_type(self, column_type: DataType) -> DataType:
        """The feature's type for a column of ``column_type`` (Spark's own aggregate's)."""
        return self.rules.result_type(column_type)
