"""Soak: 100 materialization steps over a day of data leave Redis byte-identical to one
``materialize`` over their union, with the driver's memory flat across the steps.

The demo's repository (``feature_repo``: ``user_spend_5m`` over the ``transactions`` archive)
in a temporary folder, its archive generated over one day. Step 1 is ``materialize(START,
END_1)`` (a first ``materialize_incremental`` would start at now - ttl, which is not in the
data), steps 2-100 ``materialize_incremental(END_i)``, END_i = START + i * day / 100, into
database 0 of a redis-server started here; then ``materialize(START, END_100)`` into database 1.
Every key's every field is compared byte for byte. After each step the resident memory (RSS) of
the driver's Python process and of its JVM is read from ``/proc``.

    .venv/bin/python -m bench.soak_materialize [--records 200000] [--steps 100]
"""

from __future__ import annotations

import argparse
import os
import runpy
import shutil
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import redis
from feast import FeatureStore

from bench.materialize_bench import start_redis
from examples.generate import generate_archive
from feast_stream_backfill.spark import get_spark

REPO = Path(__file__).resolve().parent.parent / "feature_repo"
START = datetime(2026, 1, 1, tzinfo=timezone.utc)
DAY = timedelta(days=1)


def rss_mb(pid: int | str = "self") -> float:
    """Resident memory of a process (``VmRSS`` in ``/proc/<pid>/status``), in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for process {pid}")


def dump(client: redis.Redis) -> dict[bytes, dict[bytes, bytes]]:
    return {key: client.hgetall(key) for key in sorted(client.scan_iter(count=10_000))}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--users", type=int, default=5_000)
    parser.add_argument("--steps", type=int, default=100)
    args = parser.parse_args()

    redis_proc, port = start_redis()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            repo = Path(tmp) / "repo"
            (repo / "data").mkdir(parents=True)
            shutil.copy(REPO / "feature_store.yaml", repo)
            spark = get_spark()
            generate_archive(
                spark,
                str(repo / "data/archive/transactions"),
                n_records=args.records,
                n_users=args.users,
                start=START,
                records_per_second=args.records / DAY.total_seconds(),
            )
            features = runpy.run_path(str(REPO / "features.py"))
            os.environ["FSB_REDIS"] = f"127.0.0.1:{port},db=0"
            store = FeatureStore(repo_path=str(repo))
            store.apply([features[n] for n in ("user", "transactions", "user_spend_5m")])
            jvm = spark._jvm.java.lang.ProcessHandle.current().pid()
            view = ["user_spend_5m"]

            print(f"{'step':>4} {'END':>20} {'s':>6} {'python MiB':>10} {'JVM MiB':>8}")
            memory = []
            for step in range(1, args.steps + 1):
                end = START + DAY * step / args.steps
                started = time.perf_counter()
                if step == 1:
                    store.materialize(START, end, view)  # the emission log is made here
                else:
                    store.materialize_incremental(end, view)
                elapsed = time.perf_counter() - started
                memory.append((rss_mb(), rss_mb(jvm)))
                print(
                    f"{step:>4} {end:%Y-%m-%d %H:%M:%S} {elapsed:>6.1f} "
                    f"{memory[-1][0]:>10.0f} {memory[-1][1]:>8.0f}",
                    flush=True,
                )

            os.environ["FSB_REDIS"] = f"127.0.0.1:{port},db=1"
            FeatureStore(repo_path=str(repo)).materialize(START, START + DAY, view)
            incremental = dump(redis.Redis(port=port, db=0))
            union = dump(redis.Redis(port=port, db=1))
            size = sum(
                len(k) + sum(len(f) + len(v) for f, v in h.items()) for k, h in union.items()
            )
            print(
                f"{args.steps} steps vs one materialize over their union: {len(union):,} keys, "
                f"{size:,} bytes of keys, fields and values compared: "
                f"{'identical' if incremental == union else 'DIFFERENT'}"
            )
            settled = memory[len(memory) // 10 :]  # after the first tenth (warm-up)
            for name, column in (("python", 0), ("JVM", 1)):
                values = [m[column] for m in settled]
                print(
                    f"{name} driver RSS from step {len(memory) - len(settled) + 1}: "
                    f"{values[0]:.0f} -> {values[-1]:.0f} MiB (min {min(values):.0f}, "
                    f"max {max(values):.0f})"
                )
            if incremental != union:
                raise SystemExit(1)
    finally:
        redis_proc.terminate()
        redis_proc.wait(10)


if __name__ == "__main__":
    main()
