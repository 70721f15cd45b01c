"""On-demand Flink SQL conformance run: ``python -m tests.conformance.sql [--random N]
[--seed S] [--plugin]``.

Runs the hand-written jobs and N random ones (:mod:`jobs`) on Flink SQL (one JVM) and compares
each emission log (rows, values, emit times, order per key and instant) and the dropped
records with the reference simulator's log of the job ``job_from_sql`` maps the script onto
and, with ``--plugin``, with the plugin's backfill of the script (one Spark session; some 20 s
a job on a loaded 2-core machine). Prints counts per construct (window, or OVER frame, x
emission x idleness, and per aggregate function), jobs, rows and dropped pairs per window or
OVER frame, the updates of GROUP BYs without a state TTL that Flink left out (unchanged),
every disagreement, wall times; exits 1 on any disagreement.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from collections import Counter
from collections.abc import Callable
from functools import partial
from pathlib import Path

from feast_stream_backfill.flink_sql.mapping import NEVER_EXPIRES
from tests.conformance.sql.harness import (
    SqlJob,
    SqlRun,
    build,
    compare,
    flink_log,
    plugin_log,
    processing_order,
    run_flink,
    simulated_log,
)
from tests.conformance.sql.jobs import generated, hand_written

SPARK_CONF = Path(__file__).resolve().parents[2] / "spark_conf"


def _own_bound(job: SqlJob) -> bool:
    """The two tables of a UNION ALL have different watermark bounds."""
    bounds = re.findall(r"WATERMARK FOR \w+ AS \w+ - (INTERVAL '[^']*' \w+)", job.script)
    return len(set(bounds)) > 1


def constructs(job: SqlJob) -> list[str]:
    """The counts a job adds to: its window (an OVER's frame) x emission x idleness, its
    functions, value type (and an OVER's bound of 0, frame written without BETWEEN or not at
    all, or named window)."""
    idle = "idle" if job.idle else "not idle"
    over = re.split(r"ORDER BY \w+", job.script, maxsplit=1)[-1] if job.is_over else ""
    view = (
        job.script.split("CREATE TEMPORARY VIEW", 1)[-1].split(";", 1)[0] if job.reads_view else ""
    )
    union = "UNION ALL" in view
    counts = "COUNT(*)" in job.functions
    return [
        f"{job.window} x {job.emission} x {idle}",
        *(["WHERE"] if job.where is not None else []),
        *(["aggregates of an expression"] if job.argument is not None else []),
        *(["OVER of RANGE 0 PRECEDING"] if job.over == 0 else []),
        *(["OVER of ROWS 0 PRECEDING"] if job.over_rows == 0 else []),
        *(
            ["OVER frame without BETWEEN"]
            if over and not over.startswith((" RANGE BETWEEN", " ROWS BETWEEN", ")"))
            else []
        ),
        *(["OVER without a frame (RANGE UNBOUNDED)"] if over.startswith(")") else []),
        *(["OVER w, a WINDOW clause"] if "\nWINDOW w AS" in job.script else []),
        *(f"{function} of {job.value_type}" for function in sorted(set(job.functions))),
        *(
            [f"GROUP BY without a state TTL, {'with' if counts else 'without'} COUNT(*)"]
            if job.skips_unchanged
            else []
        ),
        *(
            [f"{job.window} without a state TTL"]
            if job.proc_over and job.ttl == NEVER_EXPIRES
            else []
        ),
        *(["a view"] if view and not union and job.lookup is None else []),
        *([f"a lookup join, {'inner' if job.lookup.inner else 'LEFT'}"] if job.lookup else []),
        *(["a lookup join's view WHERE"] if job.lookup and job.view_where else []),
        *(["a UNION ALL of two tables"] if union else []),
        *(["a UNION ALL, its second table's own bound"] if union and _own_bound(job) else []),
        *(["a view: SELECT *"] if "SELECT *" in view else []),
        *(["a view's WHERE"] if "WHERE" in view else []),
        *(["a view renaming the key"] if job.view_keys else []),
        *(["a view renaming the time column"] if " AS event_ts" in view else []),
        *(["a view computing amount"] if job.view_value is not None else []),
    ]


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.conformance.sql")
    parser.add_argument("--random", type=int, default=100, help="random jobs (default 100)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--plugin", action="store_true", help="also the Spark backfill (slow)")
    parser.add_argument("--show", type=int, default=3, help="disagreements printed in full")
    args = parser.parse_args()

    started = time.monotonic()
    jobs = hand_written() + generated(args.random, args.seed)
    runs = run_flink(build(), jobs)
    flink_seconds = time.monotonic() - started

    references: dict[str, Callable[[SqlJob], tuple]] = {
        "the simulator of job_from_sql's job": simulated_log
    }
    if args.plugin:  # Spark starts only here
        from feast_stream_backfill.spark import get_spark

        os.environ.setdefault("SPARK_CONF_DIR", str(SPARK_CONF))  # the test suite's: faster
        conf = {"spark.sql.shuffle.partitions": "2", "spark.default.parallelism": "2"}
        references["the plugin's backfill"] = partial(plugin_log, get_spark(conf))
    failed = False
    for name, reference in references.items():
        reference_started = time.monotonic()
        failed |= not _compare(jobs, runs, name, reference, args.show)
        print(f"  {time.monotonic() - reference_started:.1f} s")
    print(
        f"Flink SQL run of {len(jobs)} jobs: {flink_seconds:.1f} s (one JVM, build included); "
        f"whole run {time.monotonic() - started:.1f} s"
    )
    return 1 if failed else 0


def _compare(
    jobs: list[SqlJob], runs: list, name: str, reference: Callable[[SqlJob], tuple], show: int
) -> bool:
    """Compare every job's Flink SQL log with ``reference``'s, print the counts; True if all
    are identical."""
    seen: Counter[str] = Counter()
    identical: Counter[str] = Counter()
    kind_jobs: Counter[str] = Counter()
    kind_rows: Counter[str] = Counter()
    kind_firing: Counter[str] = Counter()
    kind_dropped: Counter[str] = Counter()
    late_kept: Counter[str] = Counter()
    rows = matched = dropped = shown = firing = updates = skipped = 0
    failed = []
    for job, run in zip(jobs, runs, strict=True):
        flink_rows, flink_dropped, odd = flink_log(run, job)
        try:
            problems = odd + compare((flink_rows, flink_dropped), reference(job))
        except Exception as error:  # reported with the job; the others go on
            problems = [f"raised {type(error).__name__}: {str(error).strip()[-600:]}"]
        rows += len(flink_rows)
        kind_jobs[job.window] += 1
        kind_rows[job.window] += len(flink_rows)
        kind_firing[job.window] += bool(flink_rows)
        kind_dropped[job.window] += sum(flink_dropped.values())
        late_kept[job.frame] += _over_late_kept(job, run)
        firing += bool(flink_rows)
        if job.skips_unchanged:  # each record the GROUP BY reads updates its key once
            kept = sum(job.kept(r) for _, r in processing_order(job))
            updates, skipped = updates + kept, skipped + kept - len(flink_rows)
        matched += len(flink_rows) - sum(p.startswith("Flink only") for p in problems)
        dropped += sum(flink_dropped.values())
        for construct in constructs(job):
            seen[construct] += 1
            identical[construct] += not problems
        if problems:
            failed.append(job.name)
            if shown < show:
                shown += 1
                print(f"{name} disagrees on {job.name}:\n{job.script}")
                print(f"  records (partition, offset, et, key, value): {_records(job)}")
                print("  " + "\n  ".join(problems[:12]))
            else:
                print(f"{name} disagrees on {job.name} ({constructs(job)[0]}): {problems[0]}")
    print(
        f"Flink SQL vs {name}: {len(jobs) - len(failed)}/{len(jobs)} jobs identical "
        f"({firing} with rows); {matched}/{rows} Flink rows matched; "
        f"{dropped} dropped (record, window) pairs"
    )
    for construct in sorted(seen):
        print(f"  {construct}: {identical[construct]}/{seen[construct]}")
    print(
        "  jobs, jobs with rows, Flink rows, dropped pairs per kind: "
        + ", ".join(
            f"{k} {kind_jobs[k]}, {kind_firing[k]}, {kind_rows[k]}, {kind_dropped[k]}"
            for k in sorted(kind_rows)
        )
        + "; OVER records read at or behind the watermark and kept, per frame: "
        + ", ".join(f"{k} {late_kept[k]}" for k in sorted(late_kept) if k)
    )
    print(
        f"  GROUP BY without a state TTL: {skipped} of {updates} updates unchanged, "
        "not written by Flink"
    )
    return not failed


def _over_late_kept(job: SqlJob, run: SqlRun) -> int:
    """An OVER job's records its WHERE kept that came at or behind the OVER operator's
    watermark and were not dropped (later than their key's last timer): written at a later
    rise of the watermark."""
    if not job.is_over:
        return 0
    return sum(
        r.et <= watermark and not counted and job.kept(r)
        for (_, r), (watermark, counted) in zip(processing_order(job), run.records, strict=True)
    )


def _records(job: SqlJob) -> list[tuple]:
    return [(r.partition, r.offset, r.et, r.key, r.value) for r in job.records]


if __name__ == "__main__":
    sys.exit(main())
