"""Errors that name what is wrong with the input, and where."""


class BadArchiveError(ValueError):
    """An archived topic cannot be backfilled as it is (the message names table and column)."""


class BadStateTableError(BadArchiveError):
    """A state table cannot be used for enrichment as it is (the message names table and
    column). A kind of :class:`BadArchiveError`: both are bad input to a backfill."""


def conflicting_copies(topic: str, n: int, partition: int, offset: int) -> BadArchiveError:
    """``n`` archived copies whose content differs from their record's, one at ``partition``,
    ``offset``: picking one would be a guess."""
    return BadArchiveError(
        f"archived topic {topic!r}: {n} record(s) archived twice with different content, "
        f"e.g. partition {partition} offset {offset}; refusing to pick one"
    )


class UnsupportedSqlError(ValueError):
    """A Flink SQL script uses a construct the backfill does not model exactly: the message
    names the construct, its line and its column (``construct``, ``line``, ``column``)."""

    def __init__(self, construct: str, line: int, column: int, why: str = "") -> None:
        self.construct, self.line, self.column = construct, line, column
        reason = f": {why}" if why else ""
        super().__init__(f"line {line}, column {column}: {construct} is not supported{reason}")
