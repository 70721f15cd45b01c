"""Errors that name what is wrong with the input, and where."""


class BadArchiveError(ValueError):
    """An archived topic cannot be backfilled as it is (the message names table and column)."""


class BadStateTableError(BadArchiveError):
    """A state table cannot be used for enrichment as it is (the message names table and
    column). A kind of :class:`BadArchiveError`: both are bad input to a backfill."""
