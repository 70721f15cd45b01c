"""``feast-stream-backfill`` (alias ``fsb``): explain a stream feature view's job, Feast-style.

Reads the feature repo's ``feature_store.yaml`` (``--chdir``, as ``feast``), takes the view's
job from the registry (:func:`feast_plugin.definitions.stream_job`) and runs on the offline
store's Spark session. Subcommands: ``plan``, ``advise``, ``timeline``, ``report``,
``check``. Progress bars go to stderr; Python warnings and Feast's and Spark's logs below
ERROR are silenced, so stdout holds the summary table alone.
"""

from __future__ import annotations

import logging
import os
import re
import sys
import tempfile
import warnings
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from feast import FeatureStore, StreamFeatureView
    from pyspark.sql import DataFrame, SparkSession

    from feast_stream_backfill.calibration import Calibration

from feast_stream_backfill.explain.predictions import PredictionsTable

_UNITS = {"ms": 1, "s": 1_000, "m": 60_000, "min": 60_000, "h": 3_600_000}


def parse_durations(text: str, none: bool = False) -> list[int | None]:
    """``"0,5s,1m"`` as milliseconds; ``none`` allows ``none`` (no idleness)."""
    values: list[int | None] = []
    for part in text.split(","):
        part = part.strip().lower()
        if none and part == "none":
            values.append(None)
            continue
        found = re.fullmatch(r"(\d+(?:\.\d+)?)\s*(ms|s|m|min|h)?", part)
        if not found:
            raise click.BadParameter(f"{part!r} is not a duration like 0, 500ms, 5s, 1m or 2h")
        number, unit = found.groups()
        values.append(round(float(number) * _UNITS[unit or "s"]))
    return values


def parse_key(text: str, keys: list[str]) -> dict[str, str]:
    """``u1`` for a single-key view, else ``col=value,col=value``."""
    if "=" not in text:
        if len(keys) != 1:
            raise click.BadParameter(f"the view has keys {keys}: give col=value,... for each")
        return {keys[0]: text}
    pairs = dict(p.split("=", 1) for p in text.split(","))
    if set(pairs) != set(keys):
        raise click.BadParameter(f"give exactly the view's keys {keys}, got {sorted(pairs)}")
    return pairs


def parse_time(text: str | None) -> datetime | None:
    if text is None:
        return None
    at = datetime.fromisoformat(text)
    return at if at.tzinfo else at.replace(tzinfo=timezone.utc)


#: Spark's JVM logs errors only (its default profile also prints WARN and a banner).
_LOG4J = """\
rootLogger.level = error
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n
"""


def _quiet() -> None:
    """Warnings and logs below ERROR off: Python's, Feast's and, for a Spark JVM this process
    starts, log4j's (through ``SPARK_SUBMIT_OPTS``, unless it already names a configuration)."""
    warnings.filterwarnings("ignore")
    for name in ("feast", "py4j", "pyspark"):
        logging.getLogger(name).setLevel(logging.ERROR)
    options = os.environ.get("SPARK_SUBMIT_OPTS", "")
    if "log4j2.configurationFile" not in options:
        quiet = Path(tempfile.gettempdir()) / "feast-stream-backfill-log4j2.properties"
        quiet.write_text(_LOG4J)
        os.environ["SPARK_SUBMIT_OPTS"] = f"{options} -Dlog4j2.configurationFile={quiet}".strip()


@contextmanager
def _progress(total: int, what: str) -> Iterator:
    from tqdm import tqdm

    with tqdm(total=total, desc=what, file=sys.stderr, leave=False) as bar:

        def step(name: str) -> None:
            bar.set_description(name, refresh=False)  # drawn once, by the update
            bar.update(1)

        yield step


def _find_predictions(ctx: click.Context, param: click.Parameter, value: str | None):
    """Resolved as the command line is parsed: a bad table is refused before any work."""
    table = None if value is None else PredictionsTable.find(value)
    ctx.ensure_object(Context).predictions = table
    return table


def _keep_prediction_time(ctx: click.Context, param: click.Parameter, value: str) -> str:
    ctx.ensure_object(Context).prediction_time = value
    return value


class Context:
    def __init__(self, chdir: str = ".") -> None:
        self.repo = Path(chdir).resolve()
        self.predictions: PredictionsTable | None = None
        self.prediction_time = "event_timestamp"
        self._guards: ExitStack | None = None
        self._command = ""

    @contextmanager
    def guarded(self, command: str) -> Iterator[None]:
        """The block with the driver's heap watched from when :meth:`load` starts Spark
        (:func:`~feast_stream_backfill.explain.memory.heap_guard`): a heap too small for
        the work ends the command with an error naming the setting, not with a thrash."""
        from feast_stream_backfill.explain.memory import DriverMemoryError

        self._command = command
        try:
            with ExitStack() as guards:
                self._guards = guards
                yield
        except DriverMemoryError as exc:
            raise click.ClickException(str(exc)) from exc
        finally:
            self._guards = None

    def view(self, view_name: str):
        """``(store, view)``: the feature repo's store and the stream view from its registry."""
        from feast import FeatureStore

        warnings.filterwarnings("ignore")  # again: importing Feast adds its own filters
        if not (self.repo / "feature_store.yaml").exists():
            raise click.UsageError(f"no feature_store.yaml in {self.repo} (use --chdir)")
        store = FeatureStore(repo_path=str(self.repo))
        try:
            return store, store.get_stream_feature_view(view_name)
        except Exception as exc:  # Feast raises its own not-found errors
            raise click.UsageError(f"stream feature view {view_name!r}: {exc}") from exc

    def job(self, view_name: str):
        """``(store, view, job)``: the view's job from the registry, without Spark."""
        store, view = self.view(view_name)
        return store, view, _stream_job(store, view, None)

    def load(self, view_name: str):
        """``(store, view, prepared, spark)`` for the view."""
        from feast_stream_backfill.explain.prepared import prepare
        from feast_stream_backfill.feast_plugin.view_rows import spark_for

        store, view = self.view(view_name)
        spark = spark_for(store.config)
        job = _stream_job(store, view, spark)
        if self._guards is not None:
            from feast_stream_backfill.explain.memory import heap_guard

            self._guards.enter_context(heap_guard(spark, self._command))
        if self.predictions is not None:  # before the archive is read
            self.predictions.check(spark, list(job.keys), self.prediction_time)
        try:
            prepared = prepare(spark, job)
        except ValueError as exc:
            raise click.UsageError(f"stream feature view {view_name!r}: {exc}") from exc
        return store, view, prepared, spark


def _stream_job(store: FeatureStore, view: StreamFeatureView, spark: SparkSession | None):
    """The view's job (with ``spark``, a Flink SQL view's archive is checked too)."""
    from feast_stream_backfill.feast_plugin.definitions import stream_job

    try:
        return stream_job(view, store.config.repo_path, spark)
    except ValueError as exc:  # a declaration the apply checks would have named
        raise click.UsageError(str(exc)) from exc


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--chdir", "-c", default=".", help="The feature repo (with feature_store.yaml).")
@click.pass_context
def cli(ctx: click.Context, chdir: str) -> None:
    """Explain what a Flink job over archived Kafka records would have written, and when."""
    _quiet()
    ctx.obj = Context(chdir)


def _predictions(spark: SparkSession, table: PredictionsTable | None) -> DataFrame | None:
    return None if table is None else table.read(spark)


def _calibration(
    store: FeatureStore, view: StreamFeatureView, spark: SparkSession
) -> Calibration | None:
    """The view's calibration as ``calibrate`` keeps it; None where none is kept (an offline
    store without emission logs keeps none)."""
    from feast_stream_backfill.calibration import load_calibration
    from feast_stream_backfill.feast_plugin.observed_writes import view_calibration_path

    try:
        path = view_calibration_path(store, view)
    except ValueError:
        return None
    return load_calibration(spark, path)


def _cells(bounds: str | None, lateness: str | None, idle: str | None, job):
    from feast_stream_backfill.explain.advisor import grid

    b = parse_durations(bounds) if bounds else [job.watermark.out_of_orderness_ms]
    lat = parse_durations(lateness) if lateness else [job.trigger.allowed_lateness_ms]
    t = parse_durations(idle, none=True) if idle else [job.watermark.idle_timeout_ms]
    return grid(b, lat, t)


PREDICTIONS = click.option(
    "--predictions",
    callback=_find_predictions,
    help="Table of prediction points (the view's keys and --prediction-time) to count the "
    "points an event-time join gets wrong: Delta, or parquet or csv (with a header), a file or "
    "a directory.",
)
PREDICTION_TIME = click.option(
    "--prediction-time",
    default="event_timestamp",
    show_default=True,
    callback=_keep_prediction_time,
    help="The --predictions column holding each point's time.",
)


@cli.command()
@click.argument("view", required=False)
@click.option(
    "--sql",
    "script",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="A Flink SQL script to backfill instead of a view of the feature repo.",
)
@click.option(
    "--archive",
    "archives",
    multiple=True,
    metavar="TABLE=PATH",
    help="With --sql: the Delta table of a Kafka table's records (columns partition, offset, "
    "the watermark's column and the payload), by table or topic name; repeatable.",
)
@click.option(
    "--state",
    "states",
    multiple=True,
    metavar="TABLE=KIND:PATH",
    help="With --sql: the history of a table the script's lookup joins read, a Delta table: "
    "KIND scd (valid_from, valid_to), cdc (change_time, op) or delta (its own history), keyed "
    "by the columns the join compares; repeatable.",
)
@click.option("--insert", help="With --sql: the INSERT's target table, where there are several.")
@click.option(
    "-o", "--output", help="With --sql: the emission log's Delta table (dropped records beside)."
)
@click.pass_obj
def backfill(ctx: Context, view, script, archives, states, insert, output) -> None:
    """Write the emission log: every value the job would have written, and when.

    VIEW: the stream view's log where the offline store keeps it (as materialize would).
    --sql: a Flink SQL script's INSERT over --archive tables, into --output.
    """
    if (view is None) == (script is None):
        raise click.UsageError("give a VIEW of the feature repo, or --sql with a script")
    if script is None and (archives or states or insert or output):
        raise click.UsageError("--archive, --state, --insert and --output go with --sql")
    with ctx.guarded("backfill"), _progress(2, "backfilling") as step:
        if script is None:
            from feast_stream_backfill.feast_plugin.view_rows import emissions_for, project_logs

            store, feature_view = ctx.view(view)
            step("reading the archive and backfilling")
            try:
                emissions = emissions_for(store.config, feature_view)
            except ValueError as exc:
                raise click.UsageError(str(exc)) from exc
            where = f"{project_logs(store.config, store.config.project)}/{view}"
        else:
            where, emissions = _backfill_sql(script, archives, states, insert, output, step)
        step("counting")
        count = emissions.count()
    click.echo(f"{count:,} emissions written to {where}")


def _backfill_sql(script: Path, archives, states, insert, output, step) -> tuple[str, DataFrame]:
    from feast_stream_backfill.emission_store import ensure_emission_log
    from feast_stream_backfill.flink_sql import job_from_sql
    from feast_stream_backfill.spark import get_spark

    if not output:
        raise click.UsageError("--sql needs --output, the emission log's Delta table")
    tables = {}
    for given in archives:
        name, sep, path = given.partition("=")
        if not sep or not name or not path:
            raise click.UsageError(f"--archive {given!r}: expected TABLE=PATH")
        tables[name] = _absolute(path)
    text = script.read_text()
    try:
        histories = _states(text, states)
        spark = get_spark()
        step("reading the script and the archive, backfilling")
        job = job_from_sql(spark, text, tables, insert, histories)
    except ValueError as exc:  # an UnsupportedSqlError names the construct, line and column
        raise click.UsageError(f"{script}: {exc}") from exc
    path = _absolute(output)
    return path, ensure_emission_log(spark, job, path)


def _absolute(path: str) -> str:
    return str(Path(path).resolve()) if "://" not in path else path


def _states(script: str, given: tuple[str, ...]) -> dict:
    """``--state TABLE=KIND:PATH`` as the state sources ``job_from_sql`` takes, each keyed by
    the columns the script's lookup join compares."""
    from feast_stream_backfill.enrichment import CdcLog, DeltaHistory, ScdTable
    from feast_stream_backfill.flink_sql import lookup_keys

    kinds = {"scd": ScdTable, "cdc": CdcLog, "delta": DeltaHistory}
    keys = lookup_keys(script)
    states = {}
    for option in given:
        name, sep, rest = option.partition("=")
        kind, colon, path = rest.partition(":")
        if not sep or not colon or not path or kind not in kinds:
            raise click.UsageError(
                f"--state {option!r}: expected TABLE=KIND:PATH, KIND one of {', '.join(kinds)}"
            )
        if name not in keys:
            raise click.UsageError(
                f"--state {option!r}: the script looks up no table {name!r} "
                f"({', '.join(keys) or 'it has no lookup join'})"
            )
        states[name] = kinds[kind](name, keys[name], path=_absolute(path))
    return states


@cli.command()
@click.argument("view")
@click.pass_obj
def plan(ctx: Context, view) -> None:
    """Which strategy computes the view's windows, and why (what each strategy needs)."""
    from feast_stream_backfill.planner import plan as plan_job

    _, _, job = ctx.job(view)
    click.echo(plan_job(job).explain())


@cli.command()
@click.argument("view")
@click.option(
    "--B", "bounds", help="Out-of-orderness bounds B, e.g. 0,5s,30s (default: the job's)."
)
@click.option("--L", "lateness", help="Allowed lateness values L, e.g. 0,1m (default: the job's).")
@click.option("--T", "idle", help="Idle timeouts T, e.g. none,1m (default: the job's).")
@PREDICTIONS
@PREDICTION_TIME
@click.pass_obj
def advise(ctx: Context, view, bounds, lateness, idle, predictions, prediction_time) -> None:
    """Cost of each (B, L[, T]): drops, pending, emission delay, wrong prediction points."""
    from feast_stream_backfill.explain.advisor import advise as advise_grid
    from feast_stream_backfill.explain.memory import cells_per_pass

    with ctx.guarded("advise"), _progress(6, "reading the archive") as step:
        store, feature_view, prepared, spark = ctx.load(view)
        cells = _cells(bounds, lateness, idle, prepared.job)
        step("advising")
        ttl = feature_view.ttl.total_seconds() if feature_view.ttl else None
        points = _predictions(spark, predictions)
        per_pass = cells_per_pass(spark)
        table = advise_grid(prepared, cells, points, prediction_time, ttl, step, per_pass)
        prepared.release()
    click.echo(table.to_string(index=False, float_format=lambda v: f"{v:,.3f}", na_rep="-"))


@cli.command()
@click.argument("view")
@click.option("--key", "key_text", required=True, help="The key: u1, or col=value,col=value.")
@click.option("--from", "start", help="Start of the picture, processing time (ISO 8601, UTC).")
@click.option("--to", "end", help="End of the picture, processing time (ISO 8601, UTC).")
@click.option("--feature", help="The feature drawn below (default: the first).")
@click.option("-o", "--output", default="timeline.png", show_default=True, help="PNG file.")
@click.pass_obj
def timeline(ctx: Context, view, key_text, start, end, feature, output) -> None:
    """One key's records, watermark, windows, firings and values over time (PNG); where the
    view is calibrated, shaded where the live job likely showed another value."""
    from feast_stream_backfill.calibration.visibility import UNCERTAIN_BELOW
    from feast_stream_backfill.explain.timeline import draw_key_timeline, key_timeline

    with ctx.guarded("timeline"), _progress(2, "reading the archive") as step:
        store, feature_view, prepared, spark = ctx.load(view)
        key = parse_key(key_text, list(prepared.job.keys))
        calibration = _calibration(store, feature_view, spark)
        delays = None if calibration is None else calibration.delays
        step("computing the timeline")
        try:
            drawn = key_timeline(prepared, key, feature, parse_time(start), parse_time(end))
        except ValueError as exc:
            raise click.UsageError(str(exc)) from exc
        step("drawing")
        draw_key_timeline(drawn, None if delays is None else delays.quantiles).savefig(
            output, dpi=100
        )
        prepared.release()
    shaded = f"; shaded where the live job showed it with P < {UNCERTAIN_BELOW:g}"
    shaded = "" if delays is None else shaded
    click.echo(f"{len(drawn.emissions):,} firings of {key} drawn to {output}{shaded}")


@cli.command()
@click.argument("views", nargs=-1, required=True)
@click.option("--B", "bounds", help="B values for the advisor (default: 0, the job's B, 30 s).")
@click.option("--L", "lateness", help="L values for the advisor (default: 0 and 1 minute).")
@click.option("--key", "key_text", help="Key of the timeline (default: the hottest).")
@PREDICTIONS
@PREDICTION_TIME
@click.option("-o", "--output", default="report.html", show_default=True, help="HTML file.")
@click.pass_obj
def report(ctx: Context, views, bounds, lateness, key_text, predictions, prediction_time, output):
    """One self-contained HTML page: advice, anomalies and pictures for each view, and each
    view against the live job where it is calibrated."""
    from feast_stream_backfill.explain.advisor import grid
    from feast_stream_backfill.explain.memory import cells_per_pass
    from feast_stream_backfill.explain.report import findings, render_html, view_report

    reports = []
    for name in views:
        with ctx.guarded("report"), _progress(9, f"{name}: reading the archive") as step:
            store, feature_view, prepared, spark = ctx.load(name)
            job = prepared.job
            b = (
                parse_durations(bounds)
                if bounds
                else sorted({0, job.watermark.out_of_orderness_ms, 30_000})
            )
            lat = parse_durations(lateness) if lateness else [0, 60_000]
            cells = grid(b, lat, [job.watermark.idle_timeout_ms])
            key = parse_key(key_text, list(job.keys)) if key_text else None
            ttl = feature_view.ttl.total_seconds() if feature_view.ttl else None
            points = _predictions(spark, predictions)
            per_pass = cells_per_pass(spark)
            calibration = _calibration(store, feature_view, spark)
            made = view_report(
                prepared,
                name,
                cells,
                points,
                ttl,
                key,
                step,
                per_pass,
                prediction_time,
                calibration,
            )
            prepared.release()
        reports.append(made)
        click.echo(f"{name}:")
        for line in findings(made.anomalies):
            click.echo(f"  - {line}")
    Path(output).write_text(render_html(reports), encoding="utf-8")
    click.echo(f"report written to {output}")


@cli.command()
@click.argument("view")
@click.option("-o", "--output", default="calibration.png", show_default=True, help="PNG file.")
@click.pass_obj
def calibrate(ctx: Context, view, output) -> None:
    """The backfill against the live job: its writes (the view's observed writes) and the
    requests Feast logged for the view. Fitted delays with intervals, values not reproduced,
    partitions and hours that stand out, the share of training values that are uncertain, and
    the tags to set. The fit is kept beside the view's emission log."""
    from feast_stream_backfill.calibration import calibrate as calibrate_view
    from feast_stream_backfill.calibration.picture import draw_calibration
    from feast_stream_backfill.feast_plugin.observed_writes import (
        OBSERVED_WRITES,
        observed_serves,
        observed_writes,
        view_calibration_path,
    )
    from feast_stream_backfill.feast_plugin.view_rows import emissions_for, spark_for

    with ctx.guarded("calibrate"), _progress(3, "backfilling the view") as step:
        store, feature_view, job = ctx.job(view)
        spark = spark_for(store.config)
        try:
            writes = observed_writes(store, feature_view, spark)
            serves = observed_serves(store, feature_view, spark)
            path = view_calibration_path(store, feature_view)
        except ValueError as exc:
            raise click.UsageError(str(exc)) from exc
        if writes is None and serves is None:
            raise click.UsageError(
                f"stream feature view {view!r}: nothing to calibrate against: no "
                f"{OBSERVED_WRITES!r} tag naming the FileSource of the live job's writes "
                "(calibration_tags), and no feature service serving it logs requests "
                "(LoggingConfig with a FileLoggingDestination)"
            )
        emissions = emissions_for(store.config, feature_view)
        step("placing the live job's writes and requests among the emissions")
        calibration = calibrate_view(spark, job, writes, emissions, serves)
        step("drawing")
        calibration.store(spark, path)
        draw_calibration(calibration, f"{view}: the live job against the backfill").savefig(
            output, dpi=100
        )
    for line in calibration.summary():
        click.echo(line)
    click.echo(f"calibration kept at {path}; picture written to {output}")


@cli.command()
@click.argument("view")
@click.option(
    "--at",
    "at",
    help="Instant to compare at (ISO 8601, UTC); default: the instant the online store was "
    "materialized up to (Feast's registry).",
)
@click.option("--keys", default=1000, show_default=True, help="How many keys to compare.")
@click.pass_obj
def check(ctx: Context, view, at, keys) -> None:
    """Online values (Redis) against the training join at --at, for the most active keys.
    Says the instant the online store was materialized up to, and warns when --at is another:
    the two sides then differ without a bug."""
    from feast import FeatureStore

    from feast_stream_backfill.feast_plugin.consistency import (
        compare,
        materialization_note,
        materialized_to,
    )

    if not (ctx.repo / "feature_store.yaml").exists():
        raise click.UsageError(f"no feature_store.yaml in {ctx.repo} (use --chdir)")
    store = FeatureStore(repo_path=str(ctx.repo))
    try:
        to = materialized_to(store.get_stream_feature_view(view))
    except Exception as exc:  # Feast raises its own not-found errors
        raise click.UsageError(f"stream feature view {view!r}: {exc}") from exc
    if at is None and to is None:
        raise click.UsageError(
            f"stream feature view {view!r} was never materialized (Feast's registry): give --at"
        )
    instant = parse_time(at) if at is not None else to
    note = materialization_note(instant, to)
    if note:
        click.echo(f"warning: {note}", err=True)
    with _progress(1, "comparing online and training values") as step:
        result = compare(store, view, instant, keys)
        step("done")
    materialized = to.isoformat() if to else "never"
    click.echo(f"online store materialized up to: {materialized} (Feast's registry)")
    click.echo(f"compared at: {instant.isoformat()}")
    click.echo(f"{result.keys_compared} keys compared")
    for feature, count in result.items():
        click.echo(f"{feature:<30} {count:>8,} mismatches")
    if any(result.values()) or not result.keys_compared:
        sys.exit(1)


def main() -> None:
    cli()


if __name__ == "__main__":
    main()
