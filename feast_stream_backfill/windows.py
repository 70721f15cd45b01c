"""Where does a record go? Window assigners (SEMANTICS section 3).

Windows are ``[start, end)`` with epoch-aligned starts (shifted by ``offset``), as Flink's
``TimeWindow.getWindowStartWithOffset``; ``maxTs = end - 1 ms`` is the instant whose
watermark fires the window.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

WINDOW_START, WINDOW_END = "_window_start", "_window_end"


def max_timestamp() -> Column:
    return F.col(WINDOW_END) - 1


@dataclass(frozen=True)
class TumblingWindows:
    """Flink's ``TumblingEventTimeWindows.of(size, offset)``."""

    size_ms: int
    offset_ms: int = 0

    def __post_init__(self) -> None:
        if self.size_ms <= 0:
            raise ValueError(f"window size must be > 0 ms, got {self.size_ms}")

    def assign(self, records: DataFrame, time_col: str) -> DataFrame:
        """Add ``_window_start`` and ``_window_end`` (epoch ms) from ``time_col``."""
        time = F.col(time_col)
        start = time - F.pmod(time - self.offset_ms, F.lit(self.size_ms))
        return records.withColumn(WINDOW_START, start).withColumn(
            WINDOW_END, F.col(WINDOW_START) + self.size_ms
        )
