"""The ``--predictions`` table of the explain commands: found, opened and checked before any
work starts, so that a table that cannot be used is refused with the reason."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


#: File suffixes of the table formats ``--predictions`` reads besides Delta.
_SUFFIXES = {".parquet": "parquet", ".pq": "parquet", ".csv": "csv"}


@dataclass(frozen=True)
class PredictionsTable:
    """A ``--predictions`` table and the format it was found in: ``delta`` (a directory with
    a ``_delta_log``), ``parquet`` or ``csv`` (a file, or a directory of such files; csv with a
    header row, its column types inferred)."""

    path: str
    format: str

    @classmethod
    def find(cls, path: str) -> PredictionsTable:
        """Which format ``path`` holds, from its files alone (no Spark): a remote path by its
        suffix, Delta without one. Refused with the reason when there is nothing readable."""
        if "://" in path:
            return cls(path, _SUFFIXES.get(Path(path.rstrip("/")).suffix.lower(), "delta"))
        local = Path(path)
        if not local.exists():
            raise click.BadParameter(f"no file or directory at {path}")
        if (local / "_delta_log").is_dir():
            return cls(path, "delta")
        files = [local] if local.is_file() else _data_files(local)
        kinds = {_SUFFIXES.get(f.suffix.lower()) for f in files}
        if len(kinds) == 1 and None not in kinds:
            return cls(path, kinds.pop())
        found = ", ".join(sorted({f.suffix or f.name for f in files})[:5]) or "no files"
        raise click.BadParameter(
            f"{path} is not a Delta table (no _delta_log), a parquet file or a csv file, nor a "
            f"directory of one kind of them ({found})"
        )

    def read(self, spark: SparkSession) -> DataFrame:
        """Parquet as the offline store reads it (pandas' nanosecond timestamps too)."""
        from feast_stream_backfill.feast_plugin.view_rows import read_parquet_source

        if self.format == "parquet":
            return read_parquet_source(spark, self.path, f"--predictions {self.path}")
        reader = spark.read.format(self.format)
        if self.format == "csv":
            reader = reader.option("header", True).option("inferSchema", True)
        return reader.load(self.path)

    def check(self, spark: SparkSession, keys: list[str], prediction_time: str) -> None:
        """The table opens and has the view's keys and an instant ``prediction_time``."""
        from pyspark.errors import AnalysisException
        from pyspark.sql.types import DateType, TimestampNTZType, TimestampType

        where = f"--predictions {self.path} ({self.format})"
        try:
            schema = self.read(spark).schema
        except (AnalysisException, ValueError) as exc:
            raise click.UsageError(f"{where}: cannot be read: {exc}") from exc
        missing = [c for c in [*keys, prediction_time] if c not in schema.fieldNames()]
        if missing:
            raise click.UsageError(
                f"{where}: no column(s) {missing} (the view's keys and --prediction-time); "
                f"it has {schema.fieldNames()}"
            )
        kind = schema[prediction_time].dataType
        if not isinstance(kind, TimestampType | TimestampNTZType | DateType):
            raise click.UsageError(
                f"{where}: --prediction-time column {prediction_time!r} is "
                f"{kind.simpleString()}, not a timestamp"
            )


def _data_files(directory: Path) -> list[Path]:
    """A table directory's files, without the hidden and ``_``-prefixed ones Spark skips."""
    return [
        f
        for f in directory.rglob("*")
        if f.is_file()
        and not any(part.startswith((".", "_")) for part in f.relative_to(directory).parts)
    ]
