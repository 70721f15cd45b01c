"""An executor killed mid-backfill on a Spark standalone cluster: Spark retries, and the emission
log equals an undisturbed run's.

``scripts/spark_cluster.sh`` starts a master and a worker (their own JVMs) on 127.0.0.1; this
process is the driver. The backfill of a generated archive runs once undisturbed, then again
while the executor's JVM (a child of the worker) is killed with SIGKILL part-way: once the run
has started ``--kill-at`` of the undisturbed run's Spark jobs and a stage is running. The
worker starts a new executor; Spark reruns the lost tasks, recomputes the shuffle outputs and
cached blocks that died with the executor, and the two emission logs and dropped-record tables
are compared row for row in Spark (``exceptAll`` both ways). What Spark retried is read from
the driver's REST API
(``/api/v1/applications/<id>/stages`` and ``/allexecutors``).

    .venv/bin/python -m bench.executor_fault [--records 400000] [--kind tumbling]

The cluster is stopped at the end (``scripts/spark_cluster.sh stop``) unless it was running.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from bench.backfill_bench import KINDS, bench_job
from examples.generate import generate_archive
from feast_stream_backfill import backfill
from feast_stream_backfill.spark import get_spark

ROOT = Path(__file__).resolve().parent.parent
CLUSTER = ROOT / "scripts" / "spark_cluster.sh"
STATE = ROOT / ".spark-cluster"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def standalone_cluster(cores: str, memory: str) -> Iterator[str]:
    """The local standalone cluster's master URL (``scripts/spark_cluster.sh start``), stopped
    on leaving unless it was running before."""
    was_running = (STATE / "url").exists()
    try:
        yield subprocess.run(
            ["bash", str(CLUSTER), "start", cores, memory],
            check=True,
            stdout=subprocess.PIPE,
            text=True,
        ).stdout.split()[-1]
    finally:
        if not was_running:
            subprocess.run(["bash", str(CLUSTER), "stop"], check=False)


def executors(worker: int) -> list[int]:
    """The executor JVMs the worker started: its child processes (any of its threads')."""
    return sorted(
        int(pid)
        for children in Path(f"/proc/{worker}/task").glob("*/children")
        for pid in children.read_text().split()
    )


def rest(spark, path: str) -> list[dict]:
    """The driver's monitoring REST API (``/api/v1/applications/<app id>/<path>``)."""
    app = spark.sparkContext.applicationId
    url = f"{spark.sparkContext.uiWebUrl}/api/v1/applications/{app}/{path}"
    with urllib.request.urlopen(url, timeout=30) as response:
        return json.load(response)


def job_ids(spark) -> set[int]:
    return set(spark.sparkContext.statusTracker().getJobIdsForGroup())


def kill_executor_at_job(spark, job: int, worker: int, killed: list) -> threading.Thread:
    """A thread that SIGKILLs the worker's executor(s) once the ``job``-th Spark job from now
    has started and a stage is running (tasks in flight, shuffle outputs and cached blocks on
    the executor)."""
    before = job_ids(spark)
    tracker = spark.sparkContext.statusTracker()

    def run() -> None:
        while len(job_ids(spark) - before) < job or not tracker.getActiveStageIds():
            time.sleep(0.05)
        for pid in executors(worker):
            os.kill(pid, signal.SIGKILL)
            killed.append((pid, time.monotonic(), len(job_ids(spark) - before)))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def run_backfill(spark, job, out: str) -> float:
    started = time.perf_counter()
    backfill(spark, job).write(out, out + "_dropped")
    return time.perf_counter() - started


def differences(spark, a: str, b: str) -> int:
    left, right = (spark.read.format("delta").load(p) for p in (a, b))
    return left.exceptAll(right).count() + right.exceptAll(left).count()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=400_000)
    parser.add_argument("--kind", default="tumbling", choices=list(KINDS))
    parser.add_argument(
        "--kill-at", type=float, default=0.5, help="at this share of the run's Spark jobs"
    )
    parser.add_argument("--cores", default="2")
    parser.add_argument("--memory", default="3g")
    args = parser.parse_args()

    with standalone_cluster(args.cores, args.memory) as url:
        worker = int((STATE / "worker.pid").read_text())
        spark = get_spark(
            {
                "spark.master": url,
                "spark.ui.enabled": "true",
                "spark.ui.port": str(free_port()),
                "spark.executor.memory": "2g",
                "spark.sql.shuffle.partitions": "8",
            }
        )
        print(f"spark {spark.version}, master {url}, {args.records:,} records, job {args.kind}")
        with tempfile.TemporaryDirectory(dir=ROOT / ".spark-cluster") as tmp:
            archive = f"{tmp}/archive"
            generate_archive(spark, archive, n_records=args.records)
            job = bench_job(archive, args.kind)
            run_backfill(spark, job, f"{tmp}/warm-up")
            before_stages = {(s["stageId"], s["attemptId"]) for s in rest(spark, "stages")}
            before_jobs = job_ids(spark)
            clean = run_backfill(spark, job, f"{tmp}/clean")
            jobs = len(job_ids(spark) - before_jobs)
            print(f"undisturbed: {clean:.1f} s, {jobs} Spark jobs, executors {executors(worker)}")

            killed: list = []
            started = time.monotonic()
            at_job = max(1, round(jobs * args.kill_at))
            killer = kill_executor_at_job(spark, at_job, worker, killed)
            disturbed = run_backfill(spark, job, f"{tmp}/disturbed")
            killer.join(1)
            for pid, at, job_number in killed:
                print(
                    f"killed executor JVM {pid} (SIGKILL) {at - started:.1f} s into the run, "
                    f"in Spark job {job_number} of {jobs}"
                )
            time.sleep(2)
            print(f"disturbed: {disturbed:.1f} s, executors now {executors(worker)}")

            stages = [
                s
                for s in rest(spark, "stages")
                if (s["stageId"], s["attemptId"]) not in before_stages
            ]
            failed_tasks = sum(s["numFailedTasks"] for s in stages)
            retried = sorted({s["stageId"] for s in stages if s["attemptId"] > 0})
            lost = [e for e in rest(spark, "allexecutors") if not e["isActive"]]
            print(
                f"Spark: {failed_tasks} failed task attempts, {len(retried)} stages run again "
                f"(attempt > 0: {retried}), {len(lost)} executor(s) lost: "
                + "; ".join(f"{e['id']}: {e.get('removeReason', '?')}" for e in lost)
            )
            emissions = differences(spark, f"{tmp}/clean", f"{tmp}/disturbed")
            dropped = differences(spark, f"{tmp}/clean_dropped", f"{tmp}/disturbed_dropped")
            rows = spark.read.format("delta").load(f"{tmp}/clean").count()
            print(
                f"emission log: {rows:,} rows, {emissions} differ; dropped records: "
                f"{dropped} rows differ -> {'IDENTICAL' if emissions + dropped == 0 else 'DIFFER'}"
            )
            spark.stop()
            if not killed or emissions + dropped:
                raise SystemExit(1)


if __name__ == "__main__":
    main()
