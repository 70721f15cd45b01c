"""A Flink SQL script, read with Flink's parser into plain dataclasses: the ``SET`` options,
the tables, the views that project and filter them, and the aggregating ``INSERT INTO ...
SELECT`` (over a window table-valued function, an unbounded ``GROUP BY``, or ``OVER`` the
rows of a key up to the current one, in event-time order).

The reader accepts the statement shapes the backfill maps (docs/guides/flink-sql.md) and
refuses any other with :class:`UnsupportedSqlError`, naming the construct and where the
parser placed it. Values (which options, which bounds) are judged by
:mod:`feast_stream_backfill.flink_sql.mapping`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

from feast_stream_backfill.errors import UnsupportedSqlError
from feast_stream_backfill.flink_sql.expressions import (
    Names,
    identifier_parts,
    spark_predicate,
    spark_value,
)
from feast_stream_backfill.flink_sql.parser import jvm, parse_statements

#: The window table-valued functions: those mapped, and the others, refused by name.
MAPPED_WINDOWS = ("TUMBLE", "HOP", "CUMULATE", "SESSION")
#: ``AggregatingInsert.window`` of an ``OVER`` aggregation.
OVER = "OVER"
#: ``AggregatingInsert.frame`` of an ``OVER`` aggregation: ``RANGE`` (of event time) or ``ROWS``.
RANGE, ROWS = "range", "rows"
#: SQL's aggregate functions the plugin computes, by its name for them.
AGGREGATES = {"SUM": "sum", "COUNT": "count", "AVG": "mean", "MIN": "min", "MAX": "max"}


@dataclass(frozen=True)
class Position:
    """Where the parser placed a construct: 1-based line and column."""

    line: int
    column: int


@dataclass(frozen=True)
class SetOption:
    """``SET 'key' = 'value'``."""

    key: str
    value: str
    at: Position


@dataclass(frozen=True)
class TableOption:
    """One ``'key' = 'value'`` of a table's ``WITH`` clause."""

    key: str
    value: str
    at: Position


@dataclass(frozen=True)
class Column:
    """A physical column and its SQL type, as written (``TIMESTAMP(3)``)."""

    name: str
    type: str
    at: Position


@dataclass(frozen=True)
class Watermark:
    """``WATERMARK FOR column AS column - INTERVAL ...``: the bound is ``bound_ms`` (0 for
    ``AS column``)."""

    column: str
    bound_ms: int
    at: Position


@dataclass(frozen=True)
class Table:
    """``CREATE TABLE``: its physical columns, watermark (if any) and options, and the name of
    its ``PROCTIME()`` column (if any: a lookup join's time)."""

    name: str
    columns: tuple[Column, ...]
    watermark: Watermark | None
    options: tuple[TableOption, ...]
    at: Position
    proc_time: str | None = None

    def option(self, key: str) -> TableOption | None:
        return next((o for o in self.options if o.key == key), None)

    @property
    def types(self) -> dict[str, str]:
        """Each column's SQL type, by name."""
        return {c.name: c.type for c in self.columns}


@dataclass(frozen=True)
class ViewColumn:
    """A view's column: ``expression`` (Spark SQL over its source's columns) of SQL ``type``;
    ``passes`` names the source column it is (renamed or not), None for an expression;
    ``enriched``: it reads the view's lookup table (:func:`lookup_column`)."""

    name: str
    expression: str
    type: str
    passes: str | None
    at: Position
    enriched: bool = False


def lookup_column(table: str, column: str) -> str:
    """The name a lookup table's column takes in a record the lookup enriched."""
    return f"{table}__{column}"


@dataclass(frozen=True)
class LookupJoin:
    """``[LEFT] JOIN table FOR SYSTEM_TIME AS OF s.proc_time [AS alias] ON s.a = alias.b [AND
    ...]`` in a view of a Kafka table ``s``: each record joined to the row of ``table`` whose
    ``on`` columns (``(record column, table column)`` pairs) equal its own, as the table is
    when the job processes the record; ``inner``: a record without such a row is left out,
    else kept with nulls."""

    table: str
    on: tuple[tuple[str, str], ...]
    inner: bool
    at: Position


@dataclass(frozen=True)
class Projection:
    """``SELECT columns FROM source [WHERE ...]``: what a view computes from one table (or
    view), its columns named as the view's, and the records it keeps, ``where`` in Spark SQL
    over the source's columns."""

    source: str
    columns: tuple[ViewColumn, ...]
    where: str | None
    lookup: LookupJoin | None = None


@dataclass(frozen=True)
class View:
    """``CREATE [TEMPORARY] VIEW name AS`` one projection, or several joined by ``UNION
    ALL`` (``branches``, in order), all of the view's column names and types."""

    name: str
    branches: tuple[Projection, ...]
    at: Position

    @property
    def columns(self) -> tuple[ViewColumn, ...]:
        return self.branches[0].columns

    @property
    def types(self) -> dict[str, str]:
        """Each column's SQL type, by name."""
        return {c.name: c.type for c in self.columns}

    @property
    def lookup(self) -> LookupJoin | None:
        return self.branches[0].lookup


@dataclass(frozen=True)
class Aggregate:
    """``FUNCTION(column) AS name`` of the select list; ``column`` None for ``COUNT(*)`` and
    for an expression: ``FUNCTION(expression)``, the expression in Spark SQL
    (``expression``) and its SQL type (``expression_type``)."""

    function: str
    column: str | None
    name: str
    at: Position
    expression: str | None = None
    expression_type: str | None = None


@dataclass(frozen=True)
class AggregatingInsert:
    """``INSERT INTO target SELECT ... FROM TABLE(TUMBLE|HOP|CUMULATE|SESSION(...)) GROUP BY
    keys, window_start, window_end``, ``SELECT ... FROM source GROUP BY keys`` (an unbounded
    aggregation: ``window`` and ``time_column`` None), or ``SELECT keys, aggregates OVER
    (PARTITION BY keys ORDER BY time_column frame) FROM source`` (``window`` ``"OVER"``;
    ``time_at`` where its ``ORDER BY`` names the column). An ``OVER``'s ``frame`` is
    ``"range"``, with ``preceding_ms`` the range before the current row, or ``"rows"``, with
    ``preceding_rows`` the rows before it; None for ``UNBOUNDED PRECEDING``. ``size_ms``:
    SESSION's gap, the others' size; ``slide_ms``: HOP's slide, CUMULATE's step, None for the
    others; ``where``: the ``WHERE`` clause as a Spark SQL predicate keeping the same
    records; ``processing_time``: the window's ``DESCRIPTOR`` or the ``OVER``'s ``ORDER BY``
    names the table's ``PROCTIME()`` column (``time_at``: where)."""

    target: str
    source: str
    window: str | None
    time_column: str | None
    size_ms: int | None
    slide_ms: int | None
    keys: tuple[str, ...]
    aggregates: tuple[Aggregate, ...]
    at: Position
    where: str | None = None
    preceding_ms: int | None = None
    time_at: Position | None = None
    frame: str = RANGE
    preceding_rows: int | None = None
    processing_time: bool = False

    @property
    def unbounded(self) -> bool:
        return self.window is None

    @property
    def over(self) -> bool:
        return self.window == OVER

    @property
    def per_record(self) -> bool:
        """It writes a key's aggregate with every record, at its processing time: an unbounded
        ``GROUP BY``, or an ``OVER`` from ``UNBOUNDED PRECEDING`` ordered by processing time."""
        bounded = self.preceding_ms is not None or self.preceding_rows is not None
        return self.unbounded or self.over and self.processing_time and not bounded

    @property
    def watermarked(self) -> bool:
        """It reads the table's watermark: a window or an ``OVER`` ordered by event time."""
        return not (self.unbounded or self.processing_time)


@dataclass(frozen=True)
class Script:
    """What a script declares, in order."""

    options: tuple[SetOption, ...] = ()
    tables: tuple[Table, ...] = ()
    inserts: tuple[AggregatingInsert, ...] = field(default=())
    views: tuple[View, ...] = ()


#: What a query may read, by name: a table or a view.
Relations = dict[str, "Table | View"]


def read_script(script: str) -> Script:
    """Parse ``script`` with Flink's parser and read it, refusing what is not mapped."""
    options, tables, views, inserts = [], [], [], []
    relations: Relations = {}
    for statement in parse_statements(script):
        kind = _class(statement)
        if kind == "SqlSet":
            options.append(_set(statement))
        elif kind in ("SqlCreateTable", "SqlCreateView"):
            relation = (
                _table(statement) if kind == "SqlCreateTable" else _view(statement, relations)
            )
            if relation.name in relations:
                raise _refused(statement, f"a second table or view named {relation.name}")
            relations[relation.name] = relation
            (tables if kind == "SqlCreateTable" else views).append(relation)
        elif kind == "RichSqlInsert":
            inserts.append(_insert(statement, relations))
        else:
            raise _refused(statement, f"the statement {_first_words(statement)}")
    return Script(tuple(options), tuple(tables), tuple(inserts), tuple(views))


def _class(node: Any) -> str:
    return str(node.getClass().getSimpleName())


def _kind(node: Any) -> str:
    return str(node.getKind().toString())


def position(node: Any) -> Position:
    at = node.getParserPosition()
    return Position(int(at.getLineNum()), int(at.getColumnNum()))


def _refused(node: Any, construct: str, why: str = "") -> UnsupportedSqlError:
    at = position(node)
    return UnsupportedSqlError(construct, at.line, at.column, why)


def _first_words(node: Any) -> str:
    words = str(node.toString()).split()
    return " ".join(words[:3]) + (" ..." if len(words) > 3 else "")


def _name(identifier: Any) -> str:
    if _kind(identifier) != "IDENTIFIER" or not identifier.isSimple():
        raise _refused(identifier, f"the expression {identifier.toString()}", "a column name")
    return str(identifier.getSimple())


def _set(statement: Any) -> SetOption:
    if statement.getKey() is None:
        raise _refused(statement, "SET without a key")
    return SetOption(
        str(statement.getKeyString()), str(statement.getValueString()), position(statement)
    )


def _table(statement: Any) -> Table:
    """``CREATE TABLE name (physical columns[, WATERMARK]) WITH (...)``."""
    operands = list(statement.getOperandList())  # name, columns, constraints, options, ...
    name, columns, options = operands[0], statement.getColumnList(), operands[3]
    partitions, watermark = statement.getPartitionKeyList(), statement.getWatermark()
    if statement.isTemporary():
        raise _refused(statement, "CREATE TEMPORARY TABLE")
    if partitions is not None and partitions.size() > 0:
        raise _refused(partitions, "PARTITIONED BY")
    if statement.getDistribution() is not None:
        raise _refused(statement, "DISTRIBUTED BY")
    read: list[Column] = []
    proc_time = None
    for column in columns:
        if _is_proc_time(column) and proc_time is None:
            proc_time = str(column.getName())
            continue
        if _class(column) != "SqlRegularColumn":
            raise _refused(
                column,
                f"the computed or metadata column {column.getName()}",
                "one `name AS PROCTIME()` is mapped",
            )
        read.append(
            Column(str(column.getName()), str(column.getType().toString()), position(column))
        )
    return Table(
        name=_table_name(name),
        columns=tuple(read),
        watermark=_watermark(watermark.get()) if watermark.isPresent() else None,
        options=tuple(
            TableOption(str(o.getKeyString()), str(o.getValueString()), position(o.getKey()))
            for o in options
        ),
        at=position(statement),
        proc_time=proc_time,
    )


def _is_proc_time(column: Any) -> bool:
    """``name AS PROCTIME()``: the time the job processes the record (no value of its own)."""
    if _class(column) != "SqlComputedColumn":
        return False
    call = column.getExpr()
    return (
        _class(call) == "SqlBasicCall"
        and str(call.getOperator().getName()).upper() == "PROCTIME"
        and call.getOperandList().size() == 0
    )


def _table_name(identifier: Any) -> str:
    if not identifier.isSimple():
        raise _refused(identifier, f"the qualified table name {identifier.toString()}")
    return str(identifier.getSimple())


def _watermark(watermark: Any) -> Watermark:
    """``FOR ts AS ts`` or ``FOR ts AS ts - INTERVAL 'n' unit``: any other expression is
    refused."""
    column = _name(watermark.getEventTimeColumnName())
    strategy = watermark.getWatermarkStrategy()
    if _kind(strategy) == "IDENTIFIER" and _name(strategy) == column:
        return Watermark(column, 0, position(watermark))
    if _kind(strategy) == "MINUS":
        left, right = strategy.getOperandList()
        if (
            _kind(left) == "IDENTIFIER"
            and _name(left) == column
            and _class(right) == "SqlIntervalLiteral"
        ):
            return Watermark(column, interval_ms(right), position(watermark))
    raise _refused(
        strategy,
        f"the watermark expression {strategy.toString()}",
        f"only `{column}` or `{column} - INTERVAL 'n' unit` is modelled",
    )


def interval_ms(literal: Any) -> int:
    """A day-time interval literal in milliseconds (Calcite's own conversion, sign included)."""
    value = literal.getValue()
    if value.getIntervalQualifier().isYearMonth():
        raise _refused(literal, f"the interval {literal.toString()}", "months vary in length")
    return int(jvm().org.apache.calcite.sql.parser.SqlParserUtil.intervalToMillis(value))


def _view(statement: Any, relations: Relations) -> View:
    """``CREATE [TEMPORARY] VIEW name AS SELECT columns FROM source [WHERE ...]``, or such
    SELECTs joined by ``UNION ALL`` (each input's columns of the first's types, named as the
    first's), ``source`` a table or view declared before it; each column ``*``, a source
    column (``AS`` a new name or not) or ``expression AS name``, written with the operators of
    ``WHERE`` (:mod:`feast_stream_backfill.flink_sql.expressions`)."""
    name = _table_name(statement.getName())
    if statement.getFieldList().size():
        raise _refused(statement.getFieldList(), f"the column list of view {name}")
    selects = _union_inputs(statement.getQuery(), name)
    branches = [_projection(select, name, relations) for select in selects]
    first = branches[0]
    joined = next((b.lookup for b in branches if b.lookup is not None), None)
    if joined is not None and len(branches) > 1:
        raise UnsupportedSqlError(
            f"a lookup join in a UNION ALL input of view {name}",
            joined.at.line,
            joined.at.column,
            "a view of one Kafka table and its lookup join is mapped",
        )
    for select, branch in zip(selects[1:], branches[1:], strict=True):
        if len(branch.columns) != len(first.columns):
            raise _refused(
                select,
                f"a UNION ALL input of {len(branch.columns)} columns in view {name}",
                f"the first has {len(first.columns)}",
            )
        for column, named in zip(branch.columns, first.columns, strict=True):
            if column.type != named.type:
                at = column.at
                raise UnsupportedSqlError(
                    f"the view {name}'s column {named.name} of type {column.type} here, "
                    f"{named.type} in its first UNION ALL input",
                    at.line,
                    at.column,
                    "Flink would cast them to a common type: cast them alike in the script",
                )
    names = [c.name for c in first.columns]
    renamed = [
        replace(b, columns=tuple(replace(c, name=n) for c, n in zip(b.columns, names, strict=True)))
        for b in branches
    ]
    return View(name, tuple(renamed), position(statement))


def _union_inputs(query: Any, view: str) -> list[Any]:
    """The SELECTs of a view's query: it, or each input of its ``UNION ALL``s, in order."""
    if _kind(query) == "SELECT":
        return [query]
    if _kind(query) == "UNION" and query.getOperator().isAll():
        return [s for operand in query.getOperandList() for s in _union_inputs(operand, view)]
    raise _refused(
        query,
        f"the view {view} AS {_first_words(query)}",
        "a SELECT, or SELECTs joined by UNION ALL, is mapped",
    )


def _projection(select: Any, name: str, relations: Relations) -> Projection:
    """One SELECT of view ``name``: :func:`_view`'s columns of one table or view, and its
    ``WHERE``."""
    _refuse_clauses(select, "a view projects and filters the records of one table or view")
    if select.getGroup() is not None or select.getWindowList().size() > 0:
        clause = select.getGroup() or select.getWindowList()
        raise _refused(clause, f"an aggregation in view {name}", "the INSERT aggregates")
    source = select.getFrom()
    lookup, scope = None, None
    if _kind(source) == "JOIN":
        lookup, source, scope = _lookup_join(source, name, relations)
    elif _kind(source) != "IDENTIFIER":
        raise _refused(
            source,
            f"the source {_first_words(source)} in view {name}",
            "a view of one table or view is mapped",
        )
    source_name = _table_name(source)
    if source_name not in relations:
        raise _refused(source, f"the table {source_name}", "not declared before the view")
    types = relations[source_name].types
    names = scope or Names(types)
    columns: list[ViewColumn] = []
    for item in select.getSelectList():
        if _kind(item) == "IDENTIFIER" and item.isStar():
            if lookup is not None:
                raise _refused(item, f"* in view {name}", "name the columns of a lookup join")
            columns += [ViewColumn(c, f"`{c}`", t, c, position(item)) for c, t in types.items()]
            continue
        expression, alias = item.getOperandList() if _kind(item) == "AS" else (item, None)
        if alias is None and _kind(expression) != "IDENTIFIER":
            raise _refused(
                item, f"the view column {item.toString()}", "an expression needs AS name"
            )
        if lookup is None and _kind(expression) == "IDENTIFIER":
            passed = _name(expression)
            if passed not in types:
                raise _refused(expression, f"the column {passed}", f"not a column of {source_name}")
        value, value_type = spark_value(expression, names)
        column = _name(alias) if alias is not None else identifier_parts(expression)[-1]
        passes = value.strip("`") if _kind(expression) == "IDENTIFIER" else None
        enriched = lookup is not None and any(
            f"`{lookup_column(lookup.table, c)}`" in value for c in relations[lookup.table].types
        )
        if passes is not None and passes not in types:
            passes = None  # a lookup table's column
        columns.append(
            ViewColumn(column, value, value_type, passes, position(item), enriched=enriched)
        )
    named = [c.name for c in columns]
    for column in columns:
        at = column.at
        if named.count(column.name) > 1:
            raise UnsupportedSqlError(
                f"the view {name}'s second column named {column.name}", at.line, at.column
            )
        # Computed beside the records' columns, before the lookup, which reads them: a
        # column computed from the lookup table is computed after it, and replaces nothing.
        if (
            lookup is not None
            and not column.enriched
            and column.name in types
            and column.passes != column.name
        ):
            raise UnsupportedSqlError(
                f"the view {name}'s column {column.name}",
                at.line,
                at.column,
                f"the lookup join reads the column of {source_name} of that name: name the "
                "view's column otherwise",
            )
    where = None
    if select.getWhere() is not None:
        looked_up = relations[lookup.table].types if lookup is not None else {}
        why = "a WHERE on the lookup table's columns is not mapped"
        unreadable = {lookup_column(lookup.table, c): why for c in looked_up} if lookup else {}
        where = spark_predicate(select.getWhere(), replace(names, unreadable=unreadable))
    return Projection(source_name, tuple(columns), where, lookup)


def _lookup_join(join: Any, view: str, relations: Relations) -> tuple[LookupJoin, Any, Names]:
    """``source [AS s] [LEFT] JOIN table FOR SYSTEM_TIME AS OF s.proc_time [AS t] ON s.a = t.b
    [AND ...]`` (Flink's processing-time lookup join): the join, the source's identifier and
    the names the view's expressions read, the source's columns as they are, the table's as
    :func:`lookup_column` names them (its join columns refused: read the source's)."""
    kind = str(join.getJoinType().toString())
    right = _kind(join.getRight())
    if kind not in ("INNER", "LEFT") or join.isNatural() or right not in ("AS", "SNAPSHOT"):
        raise _refused(
            join,
            f"the {kind.lower()} join in view {view}",
            "a lookup join, [LEFT] JOIN table FOR SYSTEM_TIME AS OF the source's PROCTIME() "
            "column, is mapped",
        )
    source, source_alias = _aliased(join.getLeft())
    snapshot, alias = _aliased(join.getRight())
    if _kind(source) != "IDENTIFIER" or _kind(snapshot) != "SNAPSHOT":
        raise _refused(
            join,
            f"a regular join in view {view}",
            "a lookup join of a Kafka table, JOIN table FOR SYSTEM_TIME AS OF its PROCTIME() "
            "column, is mapped",
        )
    table_node, period = snapshot.getOperandList()
    source_name, table = _table_name(source), _table_name(table_node)
    for node, name in ((source, source_name), (table_node, table)):
        if not isinstance(relations.get(name), Table):
            raise _refused(node, f"the table {name}", "a table declared before the view")
    record = relations[source_name]
    assert isinstance(record, Table)
    source_alias, alias = source_alias or source_name, alias or table
    columns = relations[table].types
    scope = Names(
        {**record.types, **{lookup_column(table, c): t for c, t in columns.items()}},
        tables={
            source_alias: {c: c for c in record.types},
            alias: {c: lookup_column(table, c) for c in columns},
        },
    )
    at_time = _qualified(period, source_alias)
    if record.proc_time is None or at_time != record.proc_time:
        watermarked = record.watermark is not None and at_time == record.watermark.column
        raise _refused(
            period,
            f"FOR SYSTEM_TIME AS OF {period.toString()}",
            "an event-time temporal join waits for both sides' watermarks, which is not modelled"
            if watermarked
            else f"a lookup join at the PROCTIME() column of {source_name} is mapped",
        )
    if str(join.getConditionType().toString()) != "ON":
        raise _refused(join, f"the join of view {view} without ON", "ON equalities are mapped")
    on = _join_keys(join.getCondition(), source_alias, alias, record.types, columns)
    keys = {lookup_column(table, c) for _, c in on}
    why = "the lookup table's join column: read the source's, equal to it where the row is found"
    lookup = LookupJoin(table, on, kind == "INNER", position(join))
    return lookup, source, replace(scope, unreadable=dict.fromkeys(keys, why))


def _aliased(node: Any) -> tuple[Any, str | None]:
    """``x AS alias``: ``x`` and the alias; ``x``: ``x`` and None."""
    if _kind(node) == "AS":
        operands = list(node.getOperandList())
        if len(operands) != 2:
            raise _refused(node, f"the column list of {node.toString()}")
        return operands[0], _name(operands[1])
    return node, None


def _qualified(identifier: Any, alias: str) -> str | None:
    """The column ``alias.column`` (or ``column``) names, None for anything else."""
    if _kind(identifier) != "IDENTIFIER":
        return None
    parts = identifier_parts(identifier)
    if len(parts) == 2 and parts[0] == alias:
        return parts[1]
    return parts[0] if len(parts) == 1 else None


def _join_keys(
    condition: Any,
    source: str,
    alias: str,
    source_types: dict[str, str],
    table_types: dict[str, str],
) -> tuple[tuple[str, str], ...]:
    """``s.a = t.b [AND ...]`` as ``(a, b)`` pairs."""
    if _kind(condition) == "AND":
        return tuple(
            pair
            for operand in condition.getOperandList()
            for pair in _join_keys(operand, source, alias, source_types, table_types)
        )
    if _kind(condition) == "EQUALS":
        left, right = condition.getOperandList()
        for a, b in ((left, right), (right, left)):
            record, looked_up = _qualified(a, source), _qualified(b, alias)
            if record in source_types and looked_up in table_types:
                return ((record, looked_up),)
    raise _refused(
        condition,
        f"the join condition {condition.toString()}",
        "equalities of a source column and a lookup table column, joined by AND, are mapped",
    )


def _refuse_clauses(select: Any, why: str) -> None:
    """Refuse the clauses of a ``SELECT`` the mapping has no counterpart for."""
    for clause, name in (
        (select.getHaving(), "HAVING"),
        (select.getQualify(), "QUALIFY"),
        (select.getOrderList(), "ORDER BY"),
        (select.getFetch(), "LIMIT"),
        (select.getOffset(), "OFFSET"),
    ):
        if clause is not None and not (_class(clause) == "SqlNodeList" and clause.size() == 0):
            raise _refused(clause, name, why)
    if select.getHints() is not None and select.getHints().size() > 0:
        hint = select.getHints().get(0)
        raise _refused(hint, f"the query hint {hint.toString()}", "hints are not mapped")
    if select.isDistinct():
        raise _refused(select, "SELECT DISTINCT")


def _insert(statement: Any, relations: Relations) -> AggregatingInsert:
    """``INSERT INTO target SELECT keys, window_start, window_end, aggregates FROM
    TABLE(TUMBLE|HOP|...(TABLE source, DESCRIPTOR(ts), ...)) GROUP BY keys, window_start,
    window_end``, or ``INSERT INTO target SELECT keys, aggregates FROM source GROUP BY keys``,
    each with an optional ``WHERE`` before the ``GROUP BY``, nothing more; the ``WHERE`` and
    aggregates' expressions in Spark SQL (:mod:`feast_stream_backfill.flink_sql.expressions`)."""
    if statement.isOverwrite() or statement.isUpsert():
        raise _refused(statement, "INSERT OVERWRITE or UPSERT")
    if statement.getTargetColumnList() is not None:
        raise _refused(statement.getTargetColumnList(), "an INSERT's column list")
    select = statement.getSource()
    if _kind(select) != "SELECT":
        raise _refused(select, f"the query {_first_words(select)}", "one SELECT is mapped")
    _refuse_clauses(select, "a WHERE before the aggregation is mapped")
    if any(_is_over(item) for item in select.getSelectList()):
        return _over_insert(statement, select, relations)
    if select.getWindowList().size() > 0:
        raise _refused(select.getWindowList(), "a WINDOW clause without OVER aggregates")
    source = select.getFrom()
    window = None if _kind(source) == "IDENTIFIER" else _window(source)
    keys = _group_keys(select, windowed=window is not None)
    if (
        window is not None
        and window.function == "SESSION"
        and set(window.partition_by) != set(keys)
    ):
        raise _refused(
            select.getGroup(),
            f"a SESSION partitioned by {', '.join(window.partition_by)} grouped by "
            f"{', '.join(keys)}",
            "the GROUP BY keys must be the PARTITION BY columns",
        )
    window_columns = ("window_start", "window_end") if window is not None else ()
    source_table = window.source if window is not None else _table_name(source)
    relation = relations.get(source_table)
    processing_time = (
        window is not None
        and isinstance(relation, Table)
        and window.time_column == relation.proc_time
    )
    types = _types(relations, source_table)
    aggregated, filtered = _insert_names(relations, source_table)
    _check_columns(select.getGroup(), keys, types, source_table)
    _refuse_enriched_keys(select.getGroup(), keys, aggregated)
    aggregates = []
    for item in select.getSelectList():
        if _kind(item) == "IDENTIFIER":
            name = _name(item)
            if name not in (*keys, *window_columns):
                raise _refused(item, f"the column {name}", "not a GROUP BY key")
            continue
        aggregates.append(_aggregate(item, aggregated, source_table))
    if not aggregates:
        raise _refused(select, "a SELECT without aggregates")
    where = None if select.getWhere() is None else spark_predicate(select.getWhere(), filtered)
    return AggregatingInsert(
        target=_table_name(statement.getTargetTable()),
        source=source_table,
        window=window.function if window is not None else None,
        time_column=window.time_column if window is not None else None,
        size_ms=window.size_ms if window is not None else None,
        slide_ms=window.slide_ms if window is not None else None,
        keys=keys,
        aggregates=tuple(aggregates),
        at=position(statement.getTargetTable()),
        where=where,
        time_at=window.time_at if window is not None else None,
        processing_time=processing_time,
    )


@dataclass(frozen=True)
class _WindowCall:
    """A window table-valued function: its input table, name, time column (and where its
    ``DESCRIPTOR`` names it), lengths, and SESSION's ``PARTITION BY`` columns."""

    source: str
    function: str
    time_column: str
    time_at: Position
    size_ms: int
    slide_ms: int | None
    partition_by: tuple[str, ...] = ()


def _window(source: Any) -> _WindowCall:
    """``TABLE(TUMBLE(TABLE t, DESCRIPTOR(ts), size))``, ``TABLE(HOP(TABLE t, DESCRIPTOR(ts),
    slide, size))``, ``TABLE(CUMULATE(TABLE t, DESCRIPTOR(ts), step, size))`` or
    ``TABLE(SESSION(TABLE t PARTITION BY keys, DESCRIPTOR(ts), gap))`` (the gap as size)."""
    if _kind(source) == "JOIN":
        raise _refused(source, "a join")
    if _kind(source) != "COLLECTION_TABLE":
        raise _refused(
            source,
            f"the source {_first_words(source)}",
            "a table, or a TUMBLE, HOP, CUMULATE or SESSION window table-valued function, "
            "is mapped",
        )
    call = source.getOperandList()[0]
    function = str(call.getOperator().getName()).upper()
    if function not in MAPPED_WINDOWS:
        raise _refused(call, f"the {function} window")
    operands = list(call.getOperandList())
    expected = 3 if function in ("TUMBLE", "SESSION") else 4
    if len(operands) != expected or any(_kind(o) == "ARGUMENT_ASSIGNMENT" for o in operands):
        raise _refused(
            call,
            f"{function} with {len(operands)} arguments or named ones",
            "the window offset is not mapped yet",
        )
    table, descriptor, *intervals = operands
    table, partition_by = _partitioned(table, function)
    if _kind(table) != "EXPLICIT_TABLE":
        raise _refused(table, f"the window's input {table.toString()}", "a table is mapped")
    if str(descriptor.getOperator().getName()).upper() != "DESCRIPTOR":
        raise _refused(descriptor, f"the time argument {descriptor.toString()}")
    for interval in intervals:
        if _class(interval) != "SqlIntervalLiteral":
            raise _refused(interval, f"the window length {interval.toString()}")
    lengths = [interval_ms(i) for i in intervals]
    (column,) = descriptor.getOperandList()
    called = partial(_WindowCall, _table_name(table.getOperandList()[0]), function)
    time = (_name(column), position(column))
    if len(lengths) == 1:
        return called(*time, lengths[0], None, partition_by)
    slide, size = lengths
    return called(*time, size, slide)


def _partitioned(table: Any, function: str) -> tuple[Any, tuple[str, ...]]:
    """SESSION's ``TABLE t PARTITION BY keys`` (required: without it, sessions span every key):
    the table and the keys. Other windows take a plain ``TABLE t``."""
    if function != "SESSION":
        if _kind(table) == "SET_SEMANTICS_TABLE":
            raise _refused(table, f"{function} with PARTITION BY")
        return table, ()
    if _kind(table) != "SET_SEMANTICS_TABLE":
        raise _refused(
            table, "a SESSION without PARTITION BY", "sessions per GROUP BY key are mapped"
        )
    inner, partition, order = table.getOperandList()
    if order.size():
        raise _refused(order, "a SESSION's ORDER BY")
    return inner, tuple(_name(c) for c in partition)


def _group_keys(select: Any, windowed: bool) -> tuple[str, ...]:
    """The ``GROUP BY`` columns other than ``window_start, window_end``: both required over a
    window, neither without."""
    group = select.getGroup()
    if group is None:
        raise _refused(select, "an aggregation without GROUP BY")
    names = []
    for item in group:
        if _kind(item) != "IDENTIFIER":
            raise _refused(item, f"GROUP BY {item.toString()}", "plain columns are mapped")
        names.append(_name(item))
        if not windowed and names[-1] in ("window_start", "window_end"):
            raise _refused(item, f"GROUP BY {names[-1]} without a window")
    window_columns = {"window_start", "window_end"} & set(names)
    if windowed and len(window_columns) < 2:
        raise _refused(
            group,
            "a GROUP BY without window_start and window_end over a window",
            "a window aggregation groups by both",
        )
    keys = tuple(n for n in names if n not in ("window_start", "window_end"))
    if not keys:
        raise _refused(group, "a GROUP BY without a key")
    return keys


def _types(relations: Relations, name: str) -> dict[str, str]:
    """The column types of the table or view ``name`` (empty when not declared: the mapping
    refuses it by name)."""
    relation = relations.get(name)
    return relation.types if relation is not None else {}


def _insert_names(relations: Relations, name: str) -> tuple[Names, Names]:
    """What the ``INSERT``'s aggregates and its ``WHERE`` read of the table or view ``name``:
    a column the view computes from its lookup table is its expression in an aggregate (the
    backfill computes it after the lookup) and refused in the ``WHERE`` (the backfill filters
    before it)."""
    types = _types(relations, name)
    relation = relations.get(name)
    enriched = [c for c in relation.columns if c.enriched] if isinstance(relation, View) else []
    why = "a WHERE on a column computed from the lookup table is not mapped"
    return (
        Names(types, values={c.name: c.expression for c in enriched}),
        Names(types, unreadable={c.name: why for c in enriched}),
    )


def _refuse_enriched_keys(at: Any, keys: tuple[str, ...], aggregated: Names) -> None:
    for key in keys:
        if key in aggregated.values:
            raise _refused(
                at,
                f"the key {key}, computed from the lookup table",
                "keys are columns of the Kafka table",
            )


def _check_columns(at: Any, columns: tuple[str, ...], types: dict[str, str], source: str) -> None:
    """Each of ``columns`` is a column of ``source`` (when declared)."""
    for column in columns:
        if types and column not in types:
            raise _refused(at, f"the column {column}", f"not a column of {source}")


def _aggregate(item: Any, names: Names, source: str) -> Aggregate:
    """``FUNCTION(column) AS name``, ``FUNCTION(expression) AS name`` or ``COUNT(*) AS
    name``."""
    if _kind(item) != "AS":
        raise _refused(item, f"the select item {item.toString()}", "aggregates need AS name")
    call, alias = item.getOperandList()
    return _aggregate_call(call, alias, names, source)


def _aggregate_call(call: Any, alias: Any, names: Names, source: str) -> Aggregate:
    """The aggregate ``call`` named ``alias``: one of :data:`AGGREGATES` of a column of
    ``source``, of an expression, or ``COUNT(*)``; of a column written as its value
    (``names.values``), as of that expression."""
    types = dict(names.types)
    function = str(call.getOperator().getName()).upper() if _class(call) == "SqlBasicCall" else ""
    if function not in AGGREGATES:
        raise _refused(
            call,
            f"the expression {call.toString()}",
            f"one of {', '.join(AGGREGATES)} of a column is mapped",
        )
    if call.getFunctionQuantifier() is not None:
        raise _refused(call, f"{function}({call.getFunctionQuantifier().toString()} ...)")
    operands = list(call.getOperandList())
    if function == "COUNT" and call.isCountStar():
        column = None
    elif (
        len(operands) == 1
        and _kind(operands[0]) == "IDENTIFIER"
        and _name(operands[0]) not in names.values
    ):
        column = _name(operands[0])
        _check_columns(operands[0], (column,), types, source)
    elif len(operands) == 1:
        expression, expression_type = spark_value(operands[0], names)
        return Aggregate(
            AGGREGATES[function],
            None,
            _name(alias),
            position(call),
            expression,
            expression_type,
        )
    else:
        raise _refused(call, f"the aggregate {call.toString()}", "of one argument is mapped")
    return Aggregate(AGGREGATES[function], column, _name(alias), position(call))


@dataclass(frozen=True)
class _Over:
    """An ``OVER`` window as mapped: its ``PARTITION BY`` columns, ``ORDER BY`` column (and
    where that is written), its frame, ``"range"`` or ``"rows"``, and how far the frame
    reaches before the current row (milliseconds of a ``RANGE``, rows of ``ROWS``; None:
    ``UNBOUNDED PRECEDING``)."""

    partition_by: tuple[str, ...]
    time_column: str
    time_at: Position = field(compare=False)
    frame: str
    preceding: int | None


def _is_over(item: Any) -> bool:
    """A select item ``aggregate OVER window AS name`` (or without its name)."""
    call = item.getOperandList()[0] if _kind(item) == "AS" else item
    return _kind(call) == "OVER"


def _over_insert(statement: Any, select: Any, relations: Relations) -> AggregatingInsert:
    """``INSERT INTO target SELECT keys, [time column,] aggregate OVER window AS name, ...
    FROM source [WHERE ...] [WINDOW w AS (...)]``: every aggregate over the same window
    (inline or named), keyed by its ``PARTITION BY`` columns; the select list's columns are
    those keys and the window's time column (Flink writes them beside the aggregates)."""
    if select.getGroup() is not None:
        raise _refused(
            select.getGroup(),
            "GROUP BY with OVER aggregations",
            "an OVER aggregation writes a row per record, a GROUP BY one per group",
        )
    source = select.getFrom()
    if _kind(source) == "JOIN":
        raise _refused(source, "a join")
    if _kind(source) != "IDENTIFIER":
        raise _refused(
            source,
            f"OVER aggregations over {_first_words(source)}",
            "OVER aggregations of a table are mapped",
        )
    types = _types(relations, _table_name(source))
    aggregated, filtered = _insert_names(relations, _table_name(source))
    named = {str(w.getDeclName().getSimple()): w for w in select.getWindowList()}
    window: _Over | None = None
    columns, aggregates = [], []
    for item in select.getSelectList():
        if _kind(item) == "IDENTIFIER":
            columns.append(item)
            continue
        if not _is_over(item):
            raise _refused(
                item,
                f"the select item {item.toString()} beside OVER aggregations",
                "every aggregate is OVER the same window",
            )
        if _kind(item) != "AS":
            raise _refused(item, f"the select item {item.toString()}", "aggregates need AS name")
        over, alias = item.getOperandList()
        call, spec = over.getOperandList()
        this = _over_window(spec, named)
        if window is not None and this != window:
            raise _refused(
                spec,
                f"aggregates over different windows, one OVER {spec.toString()}",
                "every aggregate is mapped OVER one window",
            )
        window = this
        aggregates.append(_aggregate_call(call, alias, aggregated, _table_name(source)))
    assert window is not None  # _insert routes here only with an OVER aggregate
    relation = relations.get(_table_name(source))
    processing_time = isinstance(relation, Table) and window.time_column == relation.proc_time
    time_types = {window.time_column: "TIMESTAMP_LTZ(3)"} if processing_time else {}
    _check_columns(
        select,
        (*window.partition_by, window.time_column),
        {**types, **time_types},
        _table_name(source),
    )
    _refuse_enriched_keys(select, window.partition_by, aggregated)
    for column in columns:
        name = _name(column)
        if name not in (*window.partition_by, window.time_column):
            raise _refused(
                column,
                f"the column {name}",
                "not a PARTITION BY key or the ORDER BY time column",
            )
    where = None if select.getWhere() is None else spark_predicate(select.getWhere(), filtered)
    return AggregatingInsert(
        target=_table_name(statement.getTargetTable()),
        source=_table_name(source),
        window=OVER,
        time_column=window.time_column,
        size_ms=None,
        slide_ms=None,
        keys=window.partition_by,
        aggregates=tuple(aggregates),
        at=position(statement.getTargetTable()),
        where=where,
        preceding_ms=window.preceding if window.frame == RANGE else None,
        time_at=window.time_at,
        frame=window.frame,
        preceding_rows=window.preceding if window.frame == ROWS else None,
        processing_time=processing_time,
    )


def _over_window(spec: Any, named: dict[str, Any]) -> _Over:
    """``OVER (PARTITION BY keys ORDER BY ts frame)``, or ``OVER w`` / ``OVER (w)`` naming such
    a window of the ``WINDOW`` clause. The frames, each ending at the current row (``[BETWEEN
    ... AND CURRENT ROW]``): ``RANGE INTERVAL 'n' unit PRECEDING``, ``ROWS n PRECEDING``,
    ``RANGE`` or ``ROWS UNBOUNDED PRECEDING``, and none written: ``RANGE UNBOUNDED
    PRECEDING``, SQL's default. Refused: a frame reaching past the current row
    (``FOLLOWING``: Flink runs none) or starting at it, and ``DISALLOW PARTIAL``."""
    if _kind(spec) == "IDENTIFIER" or spec.getRefName() is not None:
        reference = spec if _kind(spec) == "IDENTIFIER" else spec.getRefName()
        name = _name(reference)
        if _kind(spec) != "IDENTIFIER" and (
            spec.getPartitionList().size()
            or spec.getOrderList().size()
            or spec.getLowerBound() is not None
        ):
            raise _refused(spec, f"a window extending {name}", "name the window as declared")
        if name not in named:
            raise _refused(reference, f"the window {name}", "not declared by WINDOW")
        spec = named[name]
    partition = [_name(c) for c in spec.getPartitionList()]
    if not partition:
        raise _refused(spec, "an OVER window without PARTITION BY", "the keys are its columns")
    order = list(spec.getOrderList())
    if len(order) != 1 or _kind(order[0]) != "IDENTIFIER":
        raise _refused(
            spec.getOrderList() if order else spec,
            f"an OVER window ordered by {spec.getOrderList().toString() or 'nothing'}",
            "ORDER BY the table's watermarked time column (ascending) is mapped",
        )
    if not spec.isAllowPartial():
        raise _refused(spec, "an OVER window that DISALLOWs PARTIAL frames")
    frame = ROWS if spec.isRows() else RANGE
    lower, upper = spec.getLowerBound(), spec.getUpperBound()
    if upper is not None and not jvm().org.apache.calcite.sql.SqlWindow.isCurrentRow(upper):
        raise _refused(
            upper,
            f"the OVER frame's end {upper.toString()}",
            "a frame ending at the CURRENT ROW is mapped",
        )
    over = partial(_Over, tuple(partition), _name(order[0]), position(order[0]), frame)
    if lower is None or jvm().org.apache.calcite.sql.SqlWindow.isUnboundedPreceding(lower):
        return over(None)
    if _kind(lower) != "PRECEDING":
        raise _refused(
            lower,
            f"the OVER frame from {lower.toString()}",
            "a frame from n PRECEDING or UNBOUNDED PRECEDING to the CURRENT ROW is mapped",
        )
    (length,) = lower.getOperandList()
    if frame == ROWS:
        rows = _row_count(length)
        if rows is None:
            raise _refused(
                length,
                f"the OVER frame of ROWS {length.toString()} PRECEDING",
                "a whole number of rows >= 0 is mapped",
            )
        return over(rows)
    if _class(length) != "SqlIntervalLiteral" or interval_ms(length) < 0:
        raise _refused(
            length,
            f"the OVER range {length.toString()} PRECEDING",
            "a RANGE of INTERVAL 'n' unit >= 0 is mapped",
        )
    return over(interval_ms(length))


def _row_count(literal: Any) -> int | None:
    """A ``ROWS`` frame's count of rows: a whole-number literal >= 0 (else None)."""
    if _class(literal) != "SqlNumericLiteral" or not literal.isExact():
        return None
    text = str(literal.toValue())
    return int(text) if text.isdigit() else None
