"""The plugin's JVM jars: the exact files the pinned delta-spark needs, and Flink's SQL parser,
fetched once from Maven Central into a directory the plugin owns and checked against their
SHA-256.

Spark's own resolver (``spark.jars.packages``, Ivy) is not used: it reads and writes the
user's ``~/.m2`` and ``~/.ivy2``, a half-filled ``~/.m2`` makes the JVM fail to start, and it
prints its resolution report on every start. Here a start with the jars in place reads five
files and prints nothing; a first start prints one line and downloads 12.7 MB.

``python -m feast_stream_backfill.jars`` fetches them ahead of time and prints their paths;
``--urls`` prints what to download by hand for a machine without network access.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import sys
import tempfile
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

#: Where the jars are downloaded from unless ``FSB_MAVEN_REPOSITORY`` names a mirror.
MAVEN_CENTRAL = "https://repo1.maven.org/maven2"

#: The plugin's directory under the user's cache directory (``FSB_JARS_DIR`` overrides it).
CACHE_NAME = "feast-stream-backfill"


@dataclass(frozen=True)
class Jar:
    """One pinned Maven artifact: the file Spark puts on its classpath."""

    group: str
    artifact: str
    version: str
    size: int
    sha256: str

    @property
    def file_name(self) -> str:
        return f"{self.artifact}-{self.version}.jar"

    def url(self, repository: str) -> str:
        group = self.group.replace(".", "/")
        return f"{repository.rstrip('/')}/{group}/{self.artifact}/{self.version}/{self.file_name}"


#: ``io.delta:delta-spark_4.2_2.13:4.4.0`` and its ``io.delta`` dependencies (the pyspark
#: wheel ships Spark, Scala, Hadoop, Parquet and the rest of what Delta needs).
DELTA_JARS: tuple[Jar, ...] = (
    Jar(
        "io.delta",
        "delta-spark_4.2_2.13",
        "4.4.0",
        9515916,
        "27d4fd8b1f879535c573ed1c718177d6a27f24d3e626ba02e216369725721ead",
    ),
    Jar(
        "io.delta",
        "delta-storage",
        "4.4.0",
        113863,
        "c46735481fa8e326b0957be02b4420cbcab4b325bb08009b7f2045a95133f1cc",
    ),
    Jar(
        "io.delta",
        "delta-kernel-api",
        "4.4.0",
        2838619,
        "ee9b5a14ac3b7efdff4d61a58478fe8eb0e5a3fbca43889dca7290795fe79a11",
    ),
    Jar(
        "io.delta",
        "delta-kernel-defaults",
        "4.4.0",
        227185,
        "225c975199e4718b38ee5b7e6da7f19e9585024262b2cec2656b32151a856b0b",
    ),
    Jar(
        "io.delta",
        "delta-kernel-unitycatalog",
        "4.4.0",
        43048,
        "cea22dfb4ac562b3cd27bf652697750e8336009d73fb06631363aaaad5345ffa",
    ),
)


#: ``org.apache.flink:flink-sql-parser:2.3.0`` (the Flink of the conformance harness) and the
#: compile dependencies it needs to parse: Calcite, not shaded (the parser's own
#: ``org.apache.calcite.sql`` classes replace some of Calcite's, so it comes first), Avatica,
#: Guava, commons-math3 (Calcite's interval units) and slf4j's API. Not Spark's classpath: the
#: parser runs in its own small JVM (:mod:`feast_stream_backfill.flink_sql.parser`).
FLINK_SQL_PARSER_JARS: tuple[Jar, ...] = (
    Jar(
        "org.apache.flink",
        "flink-sql-parser",
        "2.3.0",
        731234,
        "2210424a83fff71a3653179b8447914cec6a118919cf9b61d3ed2e994b05b5ae",
    ),
    Jar(
        "org.apache.flink",
        "flink-annotations",
        "2.3.0",
        19427,
        "43eef36e172f5bc727a63c75347ba5cc4ceeb569f5daaf64421da248c224308a",
    ),
    Jar(
        "org.apache.calcite",
        "calcite-core",
        "1.36.0",
        7915023,
        "1322396c24f0c80c03fc4ac8ed4f35e61d97d6717b74a6da866502c8e59827b7",
    ),
    Jar(
        "org.apache.calcite",
        "calcite-linq4j",
        "1.36.0",
        510210,
        "8e5a76cbfb997157a4abe9de52a6d92515a6e611f13c8b46312982d46ea6ff3f",
    ),
    Jar(
        "org.apache.calcite.avatica",
        "avatica-core",
        "1.23.0",
        1278202,
        "9e138b51f28da396fec4e29574f05d60c8ea56551c2a6213fdb90f269e63ed7f",
    ),
    Jar(
        "com.google.guava",
        "guava",
        "33.4.0-jre",
        3080298,
        "b918c98a7e44dbe94ebd9fe3e40cddaadb5a93e6a78eb6008b42df237241e538",
    ),
    Jar(
        "com.google.guava",
        "failureaccess",
        "1.0.2",
        4740,
        "8a8f81cf9b359e3f6dfa691a1e776985c061ef2f223c9b2c80753e1b458e8064",
    ),
    Jar(
        "org.apache.commons",
        "commons-math3",
        "3.6.1",
        2213560,
        "1e56d7b058d28b65abd256b8458e3885b674c1d588fa43cd7d1cbb9c7ef2b308",
    ),
    Jar(
        "org.slf4j",
        "slf4j-api",
        "1.7.33",
        41473,
        "336811855ee97fcd8413343dc42f4d26362502860e8a9193e4db305e3e8ef80a",
    ),
)


class JarsUnavailableError(RuntimeError):
    """The plugin's jars are neither in the jar directory nor downloadable (the message says which
    files, from where, and how to provide them by hand)."""


def user_cache_dir() -> Path:
    """The platform's per-user cache directory (``XDG_CACHE_HOME``, ``~/.cache``;
    ``~/Library/Caches`` on macOS; ``%LOCALAPPDATA%`` on Windows)."""
    if sys.platform == "win32" and os.environ.get("LOCALAPPDATA"):
        return Path(os.environ["LOCALAPPDATA"])
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Caches"
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")


def jars_dir() -> Path:
    """Where the jars are kept: ``FSB_JARS_DIR``, else the plugin's directory in the user's
    cache (shared by every environment of the user; file names carry their versions)."""
    configured = os.environ.get("FSB_JARS_DIR")
    return Path(configured) if configured else user_cache_dir() / CACHE_NAME / "jars"


def maven_repository() -> str:
    """``FSB_MAVEN_REPOSITORY`` (a mirror of Maven Central's layout), else Maven Central."""
    return os.environ.get("FSB_MAVEN_REPOSITORY") or MAVEN_CENTRAL


def delta_jars() -> list[Path]:
    """The paths of Delta's jars (:func:`pinned_jars`)."""
    return pinned_jars(DELTA_JARS, "Delta Lake's jars")


def flink_sql_parser_jars() -> list[Path]:
    """The paths of Flink's SQL parser and its dependencies, in classpath order
    (:func:`pinned_jars`)."""
    return pinned_jars(FLINK_SQL_PARSER_JARS, "Flink's SQL parser's jars")


def pinned_jars(pinned: tuple[Jar, ...], what: str) -> list[Path]:
    """The paths of the ``pinned`` jars, downloading those missing (or not matching their
    checksum) first, with one line on stderr naming ``what``. Raises
    :class:`JarsUnavailableError` when they cannot be had."""
    directory = jars_dir()
    missing = [jar for jar in pinned if not _verified(directory / jar.file_name, jar)]
    if missing:
        _download(missing, directory, maven_repository(), what)
    return [directory / jar.file_name for jar in pinned]


def _verified(path: Path, jar: Jar) -> bool:
    """Whether ``path`` is ``jar``'s file (size, then SHA-256: tens of ms for all five)."""
    try:
        if path.stat().st_size != jar.size:
            return False
        digest = hashlib.sha256()
        with path.open("rb") as file:
            while chunk := file.read(1 << 20):
                digest.update(chunk)
        return digest.hexdigest() == jar.sha256
    except OSError:
        return False


def _download(jars: list[Jar], directory: Path, repository: str, what: str) -> None:
    megabytes = sum(jar.size for jar in jars) / 1e6
    print(
        f"feast-stream-backfill: downloading {what} ({len(jars)} "
        f"file{'s' if len(jars) > 1 else ''}, {megabytes:.1f} MB) from {repository} "
        f"into {directory}",
        file=sys.stderr,
        flush=True,
    )
    for jar in jars:
        url = jar.url(repository)
        try:
            directory.mkdir(parents=True, exist_ok=True)
            _fetch(url, directory / jar.file_name, jar)
        except (OSError, ValueError) as error:
            message = _unavailable(jars, directory, repository, url, error, what)
            raise JarsUnavailableError(message) from error


def _fetch(url: str, path: Path, jar: Jar) -> None:
    """Download ``url`` beside ``path`` and move it there once verified: processes fetching
    at the same time each complete their own file, and ``path`` is never half written."""
    handle, partial = tempfile.mkstemp(dir=path.parent, prefix=f".{jar.file_name}.")
    try:
        with os.fdopen(handle, "wb") as file, urllib.request.urlopen(url, timeout=60) as reply:
            shutil.copyfileobj(reply, file)
        if not _verified(Path(partial), jar):
            raise ValueError(
                f"the file downloaded is not {jar.file_name} as pinned "
                f"({jar.size} bytes, SHA-256 {jar.sha256})"
            )
        os.chmod(partial, 0o644)  # mkstemp's 0600 would hide a shared FSB_JARS_DIR's jars
        os.replace(partial, path)
    finally:
        Path(partial).unlink(missing_ok=True)


def _unavailable(
    jars: list[Jar], directory: Path, repository: str, url: str, error: Exception, what: str
) -> str:
    reason = error.reason if isinstance(error, urllib.error.URLError) else error
    urls = "\n".join(f"  {jar.url(repository)}" for jar in jars)
    return (
        f"{what} are missing from {directory} and downloading {url} failed: "
        f"{reason}\nDownload these files:\n{urls}\n"
        f"and put them in {directory}, or in a directory named by FSB_JARS_DIR; or set "
        "FSB_MAVEN_REPOSITORY to a Maven repository this machine can reach. "
        "`python -m feast_stream_backfill.jars` downloads them on a machine with access."
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m feast_stream_backfill.jars",
        description="Download Delta Lake's jars (if missing) and print their paths.",
    )
    parser.add_argument(
        "--urls", action="store_true", help="print the URLs to download instead, and exit"
    )
    args = parser.parse_args(argv)
    if args.urls:
        print("\n".join(jar.url(maven_repository()) for jar in DELTA_JARS))
        return 0
    try:
        paths = delta_jars()
    except JarsUnavailableError as error:
        print(error, file=sys.stderr)
        return 1
    print("\n".join(map(str, paths)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
