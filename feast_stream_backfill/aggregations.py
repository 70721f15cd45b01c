"""What does a window compute? The aggregations Feast's ``Aggregation`` names."""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import Column
from pyspark.sql import functions as F

_FUNCTIONS = {
    "sum": F.sum,
    "count": F.count,  # non-null values, as Flink SQL's COUNT(col); record_count counts rows
    "mean": F.avg,
    "min": F.min,
    "max": F.max,
}
FUNCTIONS = tuple(_FUNCTIONS)


@dataclass(frozen=True)
class Aggregation:
    """``function`` of ``column`` over a window, written as feature ``name``.

    All of them are order-independent, so a firing's value depends only on which records the
    window holds, not on the order they came in.
    """

    column: str
    function: str
    name: str

    def __post_init__(self) -> None:
        if self.function not in _FUNCTIONS:
            raise ValueError(
                f"aggregation {self.name!r}: function {self.function!r} is not one of {FUNCTIONS}"
            )

    def expr(self) -> Column:
        """The aggregate; usable in ``groupBy().agg`` and as a window function."""
        return _FUNCTIONS[self.function](F.col(self.column))
