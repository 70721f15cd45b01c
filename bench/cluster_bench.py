"""The backfill bench and ``feast materialize`` on a local Spark standalone cluster and in
``local[*]``: the figures side by side, and the Redis contents compared key for key.

1. ``scripts/spark_cluster.sh start`` starts a master and a worker (``--cores``,
   ``--worker-memory``) on 127.0.0.1; it is stopped at the end, on failure and on SIGTERM or
   SIGHUP too, unless it was running before;
2. ``bench.backfill_bench --master <url>``, then the same in ``local[*]``, one after the other
   (``--sizes 4000000 --repeat 1`` unless given: arguments this script does not know are
   passed through);
3. the demo's feature repo (``feature_repo``: ``user_spend_5m`` and the enriched
   ``user_fees_5m``) copied twice into a temporary folder, with data generated once by
   ``examples.generate`` (``--records``): one copy's ``spark_conf`` points at the cluster (and
   ``spark.executor.memory``), the other is ``local[*]``. In each, the real ``feast apply`` and
   ``feast materialize START END``, into its own database of a redis-server started here; then
   their wall times, ``DBSIZE``, a digest of every key's hash, and whether the two databases
   hold the same keys, fields and bytes.

A Python module rather than a shell script: the keys are Feast's serialized entity keys (bytes,
which ``redis-cli --scan`` piped through text tools would mangle) and are compared with
redis-py. No Spark runs in this process: every run is a process of its own, as its master is
fixed when its JVM starts.

    .venv/bin/python -m bench.cluster_bench [--records 1000000] [--sizes 4000000 16000000]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import redis
import yaml

from bench.executor_fault import STATE, standalone_cluster
from bench.materialize_bench import start_redis
from bench.soak_materialize import dump

ROOT = Path(__file__).resolve().parent.parent
REPO = ROOT / "feature_repo"
FEAST = str(Path(sys.executable).parent / "feast")
#: The whole span of the generated archive at up to 1.4M records (200 records/s from START).
START, END = "2026-01-01T00:00:00", "2026-01-01T02:00:00"


def load() -> str:
    return "load average " + ", ".join(f"{x:.2f}" for x in os.getloadavg())


def run(command: list[str], **kwargs) -> float:
    """Run ``command`` (its output straight to ours); its wall seconds."""
    print(f"\n$ {' '.join(command)}    ({load()})", flush=True)
    started = time.perf_counter()
    subprocess.run(command, check=True, **kwargs)
    return time.perf_counter() - started


def exit_on_signals() -> None:
    """SIGTERM and SIGHUP end this process through ``finally`` (the cluster and Redis are
    stopped, a running child killed by ``subprocess.run``), as a shell's ``trap ... EXIT``."""
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, lambda number, _: sys.exit(128 + number))


def backfill_benches(url: str, executor_memory: str, passed: list[str]) -> dict[str, float]:
    bench = [sys.executable, "-m", "bench.backfill_bench", "--sizes", "4000000", "--repeat", "1"]
    cluster = ["--master", url, "--executor-memory", executor_memory]
    return {
        "cluster": run([*bench, *passed, *cluster], cwd=ROOT),
        "local[*]": run([*bench, *passed], cwd=ROOT),
    }


def feature_repo(folder: Path, data: Path, spark_conf: dict[str, str]) -> Path:
    """A copy of the demo's feature repo reading ``data``'s archive and state, its
    ``spark_conf`` updated with ``spark_conf``."""
    folder.mkdir()
    shutil.copy(REPO / "features.py", folder)
    config = yaml.safe_load((REPO / "feature_store.yaml").read_text())
    config["offline_store"]["spark_conf"].update(spark_conf)
    (folder / "feature_store.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    for table in ("archive", "state"):
        shutil.copytree(data / table, folder / "data" / table)
    return folder


def materialize(repo: Path, port: int, db: int) -> tuple[float, float]:
    """``feast apply`` and ``feast materialize START END`` in ``repo`` into database ``db`` of
    the Redis at ``port``: their wall seconds."""
    env = {**os.environ, "FSB_REDIS": f"127.0.0.1:{port},db={db}"}
    applied = run([FEAST, "apply"], cwd=repo, env=env)
    return applied, run([FEAST, "materialize", START, END], cwd=repo, env=env)


def digest(contents: dict[bytes, dict[bytes, bytes]]) -> str:
    """SHA-256 of every key with its fields and values, in sorted order."""
    canonical = repr([(key, sorted(fields.items())) for key, fields in sorted(contents.items())])
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def materialize_both(url: str, executor_memory: str, records: int) -> bool:
    """Step 3: whether the cluster's Redis equals local[*]'s."""
    redis_server, port = start_redis()
    try:
        with tempfile.TemporaryDirectory(prefix="cluster_bench_") as tmp:
            data = Path(tmp) / "data"
            run(
                [sys.executable, "-m", "examples.generate", "--records", str(records)]
                + ["--archive", str(data / "archive/transactions")]
                + ["--predictions", str(data / "predictions"), "--predictions-rows", "1000"]
                + ["--user-tiers", str(data / "state/user_tiers")],
                cwd=ROOT,
            )
            modes = {
                "cluster": {"spark.master": url, "spark.executor.memory": executor_memory},
                "local[*]": {},
            }
            results = {}
            for db, (mode, conf) in enumerate(modes.items()):
                repo = feature_repo(Path(tmp) / f"repo_{db}", data, conf)
                applied, materialized = materialize(repo, port, db)
                contents = dump(redis.Redis(port=port, db=db))
                results[mode] = contents
                print(
                    f"{mode}: feast apply {applied:.1f} s, feast materialize {materialized:.1f} s,"
                    f" DBSIZE {len(contents):,}, digest {digest(contents)}  ({load()})",
                    flush=True,
                )
            same = results["cluster"] == results["local[*]"]
            fields = sum(len(h) for h in results["cluster"].values())
            print(
                f"cluster vs local[*]: {len(results['cluster']):,} vs "
                f"{len(results['local[*]']):,} keys ({fields:,} fields on the cluster): "
                f"{'IDENTICAL' if same else 'DIFFERENT'}",
                flush=True,
            )
            return same
    finally:
        redis_server.terminate()
        redis_server.wait(10)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        epilog="Other arguments go to bench.backfill_bench.",
        allow_abbrev=False,
    )
    parser.add_argument("--cores", default="2", help="the worker's cores")
    parser.add_argument("--worker-memory", default="4g", help="what the worker may give")
    parser.add_argument("--executor-memory", default="3g", help="each executor's heap")
    parser.add_argument("--records", type=int, default=1_000_000, help="materialized archive")
    parser.add_argument(
        "--only", choices=["backfill", "materialize"], help="one of the two parts only"
    )
    args, passed = parser.parse_known_args()
    exit_on_signals()

    was_running = (STATE / "url").exists()
    with standalone_cluster(args.cores, args.worker_memory) as url:
        print(
            f"standalone cluster {url}: 1 worker, {args.cores} cores, {args.worker_memory}"
            + (" (already running: left running)" if was_running else ""),
            flush=True,
        )
        if args.only != "materialize":
            walls = backfill_benches(url, args.executor_memory, passed)
            print(
                "backfill bench wall time (archive generation included): "
                + ", ".join(f"{mode} {s:.0f} s" for mode, s in walls.items()),
                flush=True,
            )
        if args.only != "backfill" and not materialize_both(
            url, args.executor_memory, args.records
        ):
            raise SystemExit(1)


if __name__ == "__main__":
    main()
