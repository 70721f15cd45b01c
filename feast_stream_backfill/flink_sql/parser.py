"""Flink's own SQL parser (``flink-sql-parser`` 2.3.0), in a small JVM of its own, through py4j.

Not Spark's JVM: jars reach Spark's driver classpath only when a session starts, so a session
already running (a notebook's, Feast's) could not parse; the parser brings Calcite 1.36 and
Guava 33.4 unshaded, beside Spark's own Guava; and on a cluster ``spark.jars`` would ship
13.8 MB to every executor for a driver-side parse. Its own JVM starts in about 0.15 s and
parses its first script in about 0.5 s (class loading; later scripts take milliseconds). It
runs the ``java`` PySpark would (``JAVA_HOME``, else the ``PATH``'s) with py4j's gateway jar
from the pyspark wheel, and is started once per Python process.
"""

from __future__ import annotations

import atexit
import os
from collections import deque
from functools import cache
from pathlib import Path
from typing import Any

import pyspark
from py4j.java_gateway import GatewayParameters, JavaGateway, launch_gateway
from py4j.protocol import Py4JJavaError

from feast_stream_backfill.errors import UnsupportedSqlError
from feast_stream_backfill.jars import flink_sql_parser_jars


def _java() -> str:
    home = os.environ.get("JAVA_HOME")
    return str(Path(home) / "bin" / "java") if home else "java"


def _py4j_jar() -> str:
    jars = sorted((Path(pyspark.__file__).resolve().parent / "jars").glob("py4j-*.jar"))
    if not jars:
        raise RuntimeError("pyspark's py4j jar is missing: reinstall pyspark")
    return str(jars[-1])


@cache
def _gateway() -> JavaGateway:
    """The parser's JVM, started on first use and stopped when Python exits."""
    classpath = os.pathsep.join(str(jar) for jar in flink_sql_parser_jars())
    port = launch_gateway(
        classpath=classpath,
        jarpath=_py4j_jar(),
        java_path=_java(),
        javaopts=["-Xmx128m", "-XX:TieredStopAtLevel=1"],
        die_on_exit=True,
        redirect_stderr=deque(maxlen=100),
    )
    gateway = JavaGateway(gateway_parameters=GatewayParameters(port=port, auto_convert=True))
    atexit.register(gateway.shutdown)
    return gateway


def jvm() -> Any:
    """The parser JVM's classes (``jvm().org.apache.calcite...``)."""
    return _gateway().jvm


def parse_statements(script: str) -> list[Any]:
    """The script's statements as Flink's parser builds them (Calcite ``SqlNode``s), parsed as
    Flink's planner does: Flink's parser factory and conformance, Java lexical rules
    (back-quoted identifiers, case kept). A syntax error raises :class:`UnsupportedSqlError`
    with the parser's position and message."""
    classes = jvm()
    calcite = classes.org.apache.calcite
    flink = classes.org.apache.flink.sql.parser
    config = (
        calcite.sql.parser.SqlParser.config()
        .withParserFactory(flink.impl.FlinkSqlParserImpl.FACTORY)
        .withConformance(flink.validate.FlinkSqlConformance.DEFAULT)
        .withLex(calcite.config.Lex.JAVA)
    )
    try:
        return list(calcite.sql.parser.SqlParser.create(script, config).parseStmtList())
    except Py4JJavaError as error:
        parse_error = error.java_exception
        message = str(parse_error.getMessage()).splitlines()[0]
        if parse_error.getClass().getName() != "org.apache.calcite.sql.parser.SqlParseException":
            raise UnsupportedSqlError("the script", 1, 1, message) from None
        position = parse_error.getPos()
        raise UnsupportedSqlError(
            "a statement Flink's parser rejects",
            position.getLineNum(),
            position.getColumnNum(),
            message,
        ) from None
