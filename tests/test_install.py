"""The plugin as a user installs it: Delta Lake's jars fetched once into the plugin's own
directory (checked, quiet, clear when offline), and the wheel pip-installed into a fresh
virtualenv running a feature repo end to end, on a machine whose ``~/.m2`` holds a pom without
its jar (on which Spark's Ivy resolution fails before the JVM starts).

The archive of tests/install_repo/ (B = 5 s, 5-minute windows, 200 ms watermark ticks; the
arithmetic is tests/test_feast_integration.py's)::

    p0: u1 10:00:10 $10, u1 10:01:00 $20, u1 10:04:59 $5, u2 10:05:30 $7, u1 10:10:30 $1
    p1: u2 10:02:00 $3,  u1 10:06:00 $4,  u2 10:10:10 $2

[10:00, 10:05) fires at 10:06:00 (u1 $35, u2 $3), [10:05, 10:10) at 10:10:30 (u1 $4, u2 $7),
[10:10, 10:15) never.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from datetime import datetime
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from feast_stream_backfill import jars
from feast_stream_backfill.spark import with_delta_jars
from tests.test_feast_integration import ARCHIVE  # the same hand-computed archive

ROOT = Path(__file__).resolve().parent.parent
INSTALL_REPO = Path(__file__).resolve().parent / "install_repo"


#: What a dependency resolver (Spark's Ivy, Maven) or a download prints.
RESOLVER_OUTPUT = re.compile(r"ivy|resolv|:: |artifact|maven|download", re.IGNORECASE)


@contextlib.contextmanager
def maven_repository(root: Path) -> Iterator[tuple[str, list[str]]]:
    """``root`` served over HTTP on a free loopback port: its URL and the paths requested."""
    requested: list[str] = []

    class Handler(SimpleHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            requested.append(self.path)

    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(Handler, directory=str(root)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/maven2", requested
    finally:
        server.shutdown()
        server.server_close()


def maven_layout(root: Path, contents: dict[str, bytes] | None = None) -> Path:
    """A Maven repository under ``root/maven2`` holding the pinned jars (their real bytes, from
    the plugin's jar directory; ``contents`` replaces some by file name)."""
    for jar, path in zip(jars.DELTA_JARS, jars.delta_jars(), strict=True):
        target = root / jar.url("maven2")
        target.parent.mkdir(parents=True, exist_ok=True)
        if contents and jar.file_name in contents:
            target.write_bytes(contents[jar.file_name])
        else:
            shutil.copy(path, target)
    return root


@pytest.fixture(scope="module")
def real_jars(tmp_path_factory) -> Path:
    return maven_layout(tmp_path_factory.mktemp("maven"))


def test_the_jars_are_downloaded_once_and_checked(real_jars, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("FSB_JARS_DIR", str(tmp_path / "jars"))
    with maven_repository(real_jars) as (url, requested):
        monkeypatch.setenv("FSB_MAVEN_REPOSITORY", url)
        paths = jars.delta_jars()
        assert capsys.readouterr().err == (
            f"feast-stream-backfill: downloading Delta Lake's jars (5 files, 12.7 MB) from "
            f"{url} into {tmp_path / 'jars'}\n"
        )
        assert [p.name for p in paths] == [jar.file_name for jar in jars.DELTA_JARS]
        assert sorted(p.name for p in (tmp_path / "jars").iterdir()) == sorted(
            p.name for p in paths
        )
        assert len(requested) == 5

        assert jars.delta_jars() == paths
        assert capsys.readouterr().err == "", "the second time: nothing printed"
        assert len(requested) == 5, "the second time: nothing downloaded"

        # A damaged file (an interrupted copy by hand, a full disk) is fetched again, alone.
        paths[1].write_bytes(paths[1].read_bytes()[:1000])
        assert jars.delta_jars() == paths
        assert "(1 file, 0.1 MB)" in capsys.readouterr().err
        assert requested[5:] == [f"/maven2/{jars.DELTA_JARS[1].url('')[1:]}"]
        assert paths[1].stat().st_size == jars.DELTA_JARS[1].size


def test_a_download_that_is_not_the_pinned_jar_is_refused_and_not_kept(
    tmp_path, monkeypatch, capsys
):
    wrong = maven_layout(tmp_path / "maven", {"delta-storage-4.4.0.jar": b"not a jar"})
    monkeypatch.setenv("FSB_JARS_DIR", str(tmp_path / "jars"))
    with maven_repository(wrong) as (url, _):
        monkeypatch.setenv("FSB_MAVEN_REPOSITORY", url)
        with pytest.raises(jars.JarsUnavailableError) as caught:
            jars.delta_jars()
    message = str(caught.value)
    assert f"downloading {url}/io/delta/delta-storage/4.4.0/delta-storage-4.4.0.jar" in message
    assert "is not delta-storage-4.4.0.jar as pinned (113863 bytes, SHA-256 c4673548" in message
    kept = sorted(p.name for p in (tmp_path / "jars").iterdir())
    assert kept == ["delta-spark_4.2_2.13-4.4.0.jar"], "nothing bad or half written is kept"


def test_offline_the_error_names_the_urls_the_directory_and_what_to_do(tmp_path, monkeypatch):
    with maven_repository(tmp_path) as (url, _):
        pass  # the port is free again: nothing answers there
    monkeypatch.setenv("FSB_MAVEN_REPOSITORY", url)
    monkeypatch.setenv("FSB_JARS_DIR", str(tmp_path / "jars"))
    with pytest.raises(jars.JarsUnavailableError) as caught:
        jars.delta_jars()
    message = str(caught.value)
    assert message.startswith(f"Delta Lake's jars are missing from {tmp_path / 'jars'} and ")
    assert "Connection refused" in message
    for jar in jars.DELTA_JARS:
        assert f"\n  {jar.url(url)}\n" in message
    assert "FSB_JARS_DIR" in message and "FSB_MAVEN_REPOSITORY" in message
    assert "python -m feast_stream_backfill.jars" in message


def test_offline_importing_the_plugin_leaves_the_error_to_the_first_spark_session(tmp_path):
    """Feast imports the offline store while it loads feature_store.yaml: offline, that import
    succeeds, and the plugin's first Spark session raises the jars' error on its own."""
    with maven_repository(tmp_path) as (url, _):
        pass  # the port is free again: nothing answers there
    env = {**os.environ, "FSB_MAVEN_REPOSITORY": url, "FSB_JARS_DIR": str(tmp_path / "jars")}
    env.pop("PYSPARK_SUBMIT_ARGS", None)
    script = (
        "import os\n"
        "import feast_stream_backfill.feast_plugin.offline_store\n"
        "print('submit args:', os.environ.get('PYSPARK_SUBMIT_ARGS'))\n"
        "from feast_stream_backfill.jars import JarsUnavailableError\n"
        "from feast_stream_backfill.spark import get_spark\n"
        "try:\n"
        "    get_spark()\n"
        "except JarsUnavailableError as e:\n"
        "    print('refused:', str(e).splitlines()[0])\n"
    )
    run = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0, run.stderr
    assert "submit args: None" in run.stdout
    assert f"refused: Delta Lake's jars are missing from {tmp_path / 'jars'} and " in run.stdout


def test_delta_jars_join_the_users_spark_jars_unless_the_user_brings_delta(tmp_path, monkeypatch):
    own = {"spark.jars": "/opt/jars/hadoop-aws.jar", "spark.master": "local[2]"}
    settings = with_delta_jars(own)
    assert settings["spark.jars"].split(",") == [
        "/opt/jars/hadoop-aws.jar",
        *map(str, jars.delta_jars()),
    ]
    assert settings["spark.master"] == "local[2]"

    # A Delta of the user's own: nothing fetched (this directory is empty and nothing answers).
    monkeypatch.setenv("FSB_JARS_DIR", str(tmp_path / "empty"))
    monkeypatch.setenv("FSB_MAVEN_REPOSITORY", "http://127.0.0.1:1/")
    packages = {"spark.jars.packages": "io.delta:delta-spark_2.13:4.0.0"}
    assert with_delta_jars(packages) == packages
    by_hand = {"spark.jars": "/opt/delta/delta-spark_2.13-4.0.0.jar,/opt/delta/storage.jar"}
    assert with_delta_jars(by_hand) == by_hand


def run(command: list[str], env: dict[str, str] | None = None, cwd: Path | None = None) -> str:
    """``command``'s stdout and stderr, together; the test fails showing them if it fails."""
    done = subprocess.run(
        command, env=env, cwd=cwd, capture_output=True, text=True, timeout=600, check=False
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, f"{' '.join(map(str, command))} failed:\n{output}"
    return output


def resolver_lines(output: str) -> list[str]:
    return [line for line in output.splitlines() if RESOLVER_OUTPUT.search(line)]


def write_archive(path: Path) -> None:
    path.mkdir(parents=True)
    times = [datetime.fromisoformat(f"2026-01-01T{hms}+00:00") for _, _, hms, _, _ in ARCHIVE]
    table = pa.table(
        {
            "partition": pa.array([r[0] for r in ARCHIVE], pa.int32()),
            "offset": pa.array([r[1] for r in ARCHIVE], pa.int64()),
            "event_time": pa.array(times, pa.timestamp("us", tz="UTC")),
            "user_id": [r[3] for r in ARCHIVE],
            "amount": [r[4] for r in ARCHIVE],
        }
    )
    pq.write_table(table, path / "part-00000.parquet")


def test_the_wheel_in_a_fresh_virtualenv_runs_a_feature_repo(tmp_path, redis_server):
    # The environment of a user's shell: nothing of this checkout's nor of the suite's Spark.
    # Python writes bytecode there: with PYTHONDONTWRITEBYTECODE (set on some CI machines) each
    # of the three commands below compiled Feast, pandas and PySpark again from source.
    leaks = {
        "PYTHONPATH",
        "VIRTUAL_ENV",
        "XDG_CACHE_HOME",
        "FSB_JARS_DIR",
        "FSB_MAVEN_REPOSITORY",
        "PYTHONDONTWRITEBYTECODE",
    }
    user_env = {
        k: v for k, v in os.environ.items() if k not in leaks and not k.startswith("PYSPARK_")
    }

    # The sdist, then the wheel built from it (as pip builds from an sdist), outside the checkout.
    had_build = (ROOT / "build").exists()
    dist = tmp_path / "dist"
    run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(dist), str(ROOT)])
    assert had_build or not (ROOT / "build").exists(), "building left build/ in the checkout"
    (wheel,) = dist.glob("*.whl")

    # pip resolves the wheel's dependencies from the package index. This environment's pip: the
    # older one a new virtualenv bootstraps took minutes longer for the same wheel. Bytecode is
    # compiled as modules are first imported, not all of it ahead.
    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", "--without-pip", str(venv)])
    pip = [sys.executable, "-m", "pip", "--python", str(venv / "bin/python"), "install", "-q"]
    run([*pip, "--no-compile", str(wheel)], user_env)

    # A home whose local Maven repository has slf4j-api's pom but not its jar.
    home = tmp_path / "home"
    pom = home / ".m2/repository/org/slf4j/slf4j-api/2.0.13/slf4j-api-2.0.13.pom"
    pom.parent.mkdir(parents=True)
    pom.write_text(
        '<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>'
        "<groupId>org.slf4j</groupId><artifactId>slf4j-api</artifactId>"
        "<version>2.0.13</version></project>\n"
    )
    env = {
        **user_env,
        "HOME": str(home),
        "FSB_REDIS": redis_server,
        "PATH": f"{venv / 'bin'}:{user_env['PATH']}",
    }

    repo = tmp_path / "repo"
    repo.mkdir()
    for name in ("feature_store.yaml", "features.py"):
        shutil.copy(INSTALL_REPO / name, repo / name)
    write_archive(repo / "data/archive/transactions")

    applied = run(["feast", "apply"], env, repo)
    cache = home / ".cache/feast-stream-backfill/jars"
    assert resolver_lines(applied) == [
        "feast-stream-backfill: downloading Delta Lake's jars (5 files, 12.7 MB) from "
        f"https://repo1.maven.org/maven2 into {cache}"
    ]
    assert sorted(p.name for p in cache.iterdir()) == sorted(j.file_name for j in jars.DELTA_JARS)

    materialized = run(
        ["feast", "materialize", "2026-01-01T00:00:00", "2026-01-01T10:20:00"], env, repo
    )
    assert resolver_lines(materialized) == []
    assert not list(home.glob(".ivy2*")), "Spark's Ivy resolution ran"

    checked = run(["python", str(INSTALL_REPO / "check.py")], env, repo)
    assert resolver_lines(checked) == []
    (result,) = (json.loads(line) for line in checked.splitlines() if line.startswith("{"))
    assert Path(result["plugin"]).is_relative_to(venv), "imported from the wheel's install"
    # u1 at 10:05:00 (not fired yet), 10:06:00; u2 at 10:06:00; u1 at 10:10:30.
    assert result["training_spend"] == [None, 35.0, 3.0, 4.0]
    assert result["online_spend"] == [4.0, 7.0]
    assert result["online_transactions"] == [1, 1]
