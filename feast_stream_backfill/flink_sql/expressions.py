"""A Flink SQL ``WHERE``, or an aggregate's argument, as the Spark SQL expression that gives
the same answer, for the operators on which the two agree; anything else is refused, named
with its line and column.

Written by hand because no maintained library translates Flink SQL to Spark SQL (sqlglot has
no Flink dialect). Where the two differ, the translation says so:

- Comparing floating-point values, Flink's generated code compares Java doubles: a NaN is
  neither equal to, below nor above anything (``<>`` is true). Spark SQL orders NaN above
  every number and equal to itself. A comparison with a ``DOUBLE`` or ``FLOAT`` operand is
  therefore guarded: ``CASE WHEN isnan(a) OR isnan(b) THEN <Java's answer> ELSE a op b END``.
  ``NOT``, ``IN`` and ``BETWEEN`` over such values are refused: Flink's planner rewrites them
  (``NOT (a > b)`` into ``a <= b``, ranges into search arguments) in ways whose NaN answers
  differ from the written form's.
- ``/`` is refused: Flink divides integers as integers, Spark as doubles.

Column names are backquoted and string literals re-escaped for Spark; numbers, ``TRUE``,
``FALSE`` and ``NULL`` are written as Flink's parser read them. Over a join, a column is named
as the record the backfill computes names it (``tables``: each alias's columns); a column a view
computes from a lookup table is written as its expression (``values``), since the lookup's
columns exist only after enrichment.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from py4j.java_gateway import get_field

from feast_stream_backfill.errors import UnsupportedSqlError

#: Calcite's kinds of the comparisons and arithmetic mapped, as Spark SQL writes them.
COMPARISONS = {
    "EQUALS": "=",
    "NOT_EQUALS": "<>",
    "LESS_THAN": "<",
    "LESS_THAN_OR_EQUAL": "<=",
    "GREATER_THAN": ">",
    "GREATER_THAN_OR_EQUAL": ">=",
}
ARITHMETIC = {"PLUS": "+", "MINUS": "-", "TIMES": "*"}
#: The SQL types of floating-point columns (``DOUBLE PRECISION`` reads as ``DOUBLE``).
FLOATING = ("DOUBLE", "FLOAT", "REAL")


@dataclass(frozen=True)
class Names:
    """What an expression's column names stand for, beyond ``types`` (each column's SQL type,
    by the name the backfill's records give it). ``tables``: over a join, each table alias's
    columns by that name (an unqualified column is the one alias's that has it); ``values``:
    columns written as the Spark SQL of their value; ``unreadable``: columns refused here,
    with why."""

    types: Mapping[str, str]
    tables: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    values: Mapping[str, str] = field(default_factory=dict)
    unreadable: Mapping[str, str] = field(default_factory=dict)


def identifier_parts(node: Any) -> list[str]:
    """An identifier's names: ``["t", "c"]`` for ``t.c``."""
    return [str(n) for n in get_field(node, "names")]


def spark_predicate(node: Any, names: Mapping[str, str] | Names) -> str:
    """``node`` (a parsed Flink SQL boolean expression over columns of SQL types ``names``) as
    a Spark SQL predicate true for exactly the records Flink keeps."""
    return _Translation(names).render(node)


def spark_value(node: Any, names: Mapping[str, str] | Names) -> tuple[str, str]:
    """``node`` (a parsed Flink SQL value expression) as Spark SQL, and its SQL type as Flink
    derives it: ``DOUBLE``, ``FLOAT``, ``BIGINT``, ``INT``, ``DECIMAL``, ``BOOLEAN``,
    ``STRING`` or ``NULL``."""
    translation = _Translation(names)
    return translation.render(node), translation.type_of(node)


class _Translation:
    def __init__(self, names: Mapping[str, str] | Names) -> None:
        self.names = names if isinstance(names, Names) else Names(dict(names))
        self.types = dict(self.names.types)

    def render(self, node: Any) -> str:
        kind = str(node.getKind().toString())
        operands = list(node.getOperandList()) if kind not in ("IDENTIFIER", "LITERAL") else []
        if kind == "IDENTIFIER":
            column = self._column(node)
            value = self.names.values.get(column)
            return f"({value})" if value is not None else f"`{column}`"
        if kind == "LITERAL":
            return self._literal(node)
        if kind in COMPARISONS:
            return self._comparison(COMPARISONS[kind], operands)
        if kind in ("AND", "OR"):
            return "(" + f" {kind} ".join(self.render(o) for o in operands) + ")"
        if kind in ARITHMETIC:
            left, right = operands
            return f"({self.render(left)} {ARITHMETIC[kind]} {self.render(right)})"
        if kind == "MINUS_PREFIX":
            return f"(- {self.render(operands[0])})"
        if kind in ("IS_NULL", "IS_NOT_NULL"):
            return f"({self.render(operands[0])} {kind.replace('_', ' ')})"
        if kind == "NOT":
            if self._compares_floating(operands[0]):
                raise _refused(node, f"NOT over a floating-point comparison {node.toString()}")
            return f"(NOT {self.render(operands[0])})"
        if kind in ("IN", "NOT_IN"):
            value, values = operands
            if self._floating(value) or any(self._floating(v) for v in values):
                raise _refused(node, f"{kind.replace('_', ' ')} over floating-point values")
            listed = ", ".join(self.render(v) for v in values)
            return f"({self.render(value)} {kind.replace('_', ' ')} ({listed}))"
        if kind == "CASE":
            return self._case(node)
        raise _refused(node, f"the expression {node.toString()}", _WHY.get(kind, ""))

    def _column(self, node: Any) -> str:
        """The name of the column ``node`` reads, as the backfill's records name it."""
        tables = self.names.tables
        if not node.isSimple():
            parts = identifier_parts(node)
            if len(parts) != 2 or parts[0] not in tables:
                raise _refused(node, f"the qualified name {node.toString()}")
            alias, column = parts
            if column not in tables[alias]:
                raise _refused(node, f"the column {node.toString()}", f"not a column of {alias}")
            name = tables[alias][column]
        elif tables:
            column = str(node.getSimple())
            found = [t[column] for t in tables.values() if column in t]
            if len(found) != 1:
                why = "a column of both tables" if found else "not a column of the joined tables"
                raise _refused(node, f"the column {column}", why)
            name = found[0]
        else:
            name = str(node.getSimple())
            if name not in self.types:
                raise _refused(node, f"the column {name}", "not a column of the table")
        if name in self.names.unreadable:
            raise _refused(node, f"the column {node.toString()}", self.names.unreadable[name])
        return name

    def _literal(self, node: Any) -> str:
        type_name = str(node.getTypeName().toString())
        if type_name == "CHAR":
            text = str(node.toValue())
            return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"
        if type_name in ("DECIMAL", "DOUBLE", "BOOLEAN", "NULL"):
            return str(node.toString())
        raise _refused(node, f"the literal {node.toString()}")

    def _comparison(self, operator: str, operands: list[Any]) -> str:
        left, right = (self.render(o) for o in operands)
        compared = f"({left} {operator} {right})"
        if not any(self._floating(o) for o in operands):
            return compared
        nan = "true" if operator == "<>" else "false"  # Java's answer with a NaN operand
        return f"(CASE WHEN isnan({left}) OR isnan({right}) THEN {nan} ELSE {compared} END)"

    def _case(self, node: Any) -> str:
        if node.getValueOperand() is not None:
            raise _refused(node, "CASE value WHEN ...", "CASE WHEN condition THEN ... is mapped")
        branches = " ".join(
            f"WHEN {self.render(w)} THEN {self.render(t)}"
            for w, t in zip(node.getWhenOperands(), node.getThenOperands(), strict=True)
        )
        otherwise = node.getElseOperand()
        tail = f" ELSE {self.render(otherwise)}" if otherwise is not None else ""
        return f"(CASE {branches}{tail} END)"

    def type_of(self, node: Any) -> str:
        """The expression's SQL type, by Calcite's rules for the operators mapped: arithmetic
        and ``CASE`` take the widest of their operands (``DOUBLE`` over ``FLOAT`` over
        ``DECIMAL`` over ``BIGINT`` over ``INT``; ``NULL`` takes the other's)."""
        kind = str(node.getKind().toString())
        if kind == "IDENTIFIER":
            declared = self.types[self._column(node)].split("(")[0].upper()
            return {"INTEGER": "INT", "VARCHAR": "STRING", "CHAR": "STRING"}.get(declared, declared)
        if kind == "LITERAL":
            name = str(node.getTypeName().toString())
            if name == "DECIMAL":
                return "INT" if node.isExact() and int(node.getScale()) == 0 else "DECIMAL"
            return {"CHAR": "STRING"}.get(name, name)
        if kind in ARITHMETIC or kind == "MINUS_PREFIX":
            return _widest(self.type_of(o) for o in node.getOperandList())
        if kind == "CASE":
            branches = [*node.getThenOperands()]
            if node.getElseOperand() is not None:
                branches.append(node.getElseOperand())
            return _widest(self.type_of(b) for b in branches)
        return "BOOLEAN"

    def _floating(self, node: Any) -> bool:
        """Could the value be a NaN: a floating-point column, a double literal, or arithmetic
        or a CASE over one."""
        kind = str(node.getKind().toString())
        if kind == "IDENTIFIER":
            return self.types.get(self._column(node), "").startswith(FLOATING)
        if kind == "LITERAL":
            return str(node.getTypeName().toString()) == "DOUBLE"
        if kind in (*ARITHMETIC, "MINUS_PREFIX"):
            return any(self._floating(o) for o in node.getOperandList())
        if kind == "CASE":
            return any(self._floating(t) for t in node.getThenOperands()) or (
                node.getElseOperand() is not None and self._floating(node.getElseOperand())
            )
        return False

    def _compares_floating(self, node: Any) -> bool:
        kind = str(node.getKind().toString())
        if kind in COMPARISONS:
            return any(self._floating(o) for o in node.getOperandList())
        if kind in ("IDENTIFIER", "LITERAL"):
            return False
        operands = [o for o in node.getOperandList() if o is not None]
        return any(_class(o) != "SqlNodeList" and self._compares_floating(o) for o in operands)


_WIDTH = ("NULL", "INT", "BIGINT", "DECIMAL", "FLOAT", "DOUBLE")


def _widest(types: Any) -> str:
    found = list(types)
    numeric = [t for t in found if t in _WIDTH]
    if len(numeric) < len(found):  # strings or booleans: the first non-null one
        return next(t for t in found if t != "NULL")
    return max(numeric, key=_WIDTH.index)


_WHY = {
    "DIVIDE": "Flink divides integers as integers, Spark as doubles",
    "LIKE": "its escapes and patterns are not mapped",
    "CAST": "casts are not mapped",
    "OTHER_FUNCTION": "functions are not mapped",
    "BETWEEN": "write it as two comparisons",
}


def _class(node: Any) -> str:
    return str(node.getClass().getSimpleName())


def _refused(node: Any, construct: str, why: str = "") -> UnsupportedSqlError:
    at = node.getParserPosition()
    return UnsupportedSqlError(construct, int(at.getLineNum()), int(at.getColumnNum()), why)
