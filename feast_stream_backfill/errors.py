"""Errors that name what is wrong with the input, and where."""


class BadArchiveError(ValueError):
    """An archived topic cannot be backfilled as it is (the message names table and column)."""
