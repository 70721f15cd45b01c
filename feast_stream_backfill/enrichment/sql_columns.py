"""Which columns a Spark SQL expression reads, from its words alone.

A derived column (``{"fee": "amount * fee_rate"}``) may read archive columns, which the
backfill must select when it reads the archive: before the enriched records, whose schema Spark
would need to analyse the expression, exist. So the expression is tokenized instead: its names
that are not functions, struct fields, keywords, types, time units or lambda parameters.
"""

from __future__ import annotations

import re

from feast_stream_backfill.columns import VIEW_KEEPS

#: Internal columns a topic's transform adds to its records, read as archive columns are.
CARRIED = frozenset({VIEW_KEEPS})

_TOKENS = re.compile(
    r"""
      (?P<string>'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")
    | `(?P<quoted>(?:[^`]|``)+)`
    | (?P<number>\d+(?:\.\d*)?(?:[eE][+-]?\d+)?[A-Za-z]*|\.\d+(?:[eE][+-]?\d+)?[A-Za-z]*)
    | (?P<name>[A-Za-z_][A-Za-z0-9_]*)
    | (?P<symbol>::|->|\S)
    """,
    re.VERBOSE,
)

#: Words of Spark SQL expressions that are not column names (keywords, types, time units).
_NOT_COLUMNS = frozenset(
    """
    and or not is null true false case when then else end in like ilike rlike regexp between
    distinct as from for escape any some all exists div unknown to nulls first last
    interval year years month months week weeks day days hour hours minute minutes second
    seconds millisecond milliseconds microsecond microseconds
    boolean byte tinyint short smallint int integer long bigint float real double decimal dec
    numeric string varchar char binary date timestamp timestamp_ntz timestamp_ltz array map
    struct void x
    """.split()
)


def expression_columns(expression: str) -> list[str]:
    """The columns a Spark SQL expression reads, as far as its words tell: names outside
    string literals that are not called (``round(``), not struct fields (``a.b`` reads
    ``a``), not SQL keywords, types or time units, not lambda parameters; ``backquoted``
    names always. Internal columns (``_et``, ``_pt``) are left out, but for those a topic's
    records carry from its transform (:data:`CARRIED`)."""
    tokens = [(m.lastgroup, m.group(m.lastgroup)) for m in _TOKENS.finditer(expression)]
    parameters = set()  # of lambdas: `x -> ...`, `(x, y) -> ...`
    for j, (_, text) in enumerate(tokens):
        if text == "->" and j > 0:
            k = j - 1
            if tokens[k][1] == ")":
                while k > 0 and tokens[k][1] != "(":
                    k -= 1
                    parameters.add(tokens[k][1])
            else:
                parameters.add(tokens[k][1])
    found: list[str] = []
    for i, (kind, text) in enumerate(tokens):
        if kind == "quoted":
            found.append(text.replace("``", "`"))
            continue
        if kind != "name" or text.lower() in _NOT_COLUMNS or text in parameters:
            continue
        before = tokens[i - 1][1] if i > 0 else ""
        after = tokens[i + 1] if i + 1 < len(tokens) else ("", "")
        if after[1] in ("(", "->") or after[0] == "string" or before in (".", "::"):
            continue
        found.append(text)
    return [c for c in dict.fromkeys(found) if not c.startswith("_") or c in CARRIED]
