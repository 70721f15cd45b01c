"""Redis with a password (an ACL user, the default user off) and with TLS (certificates made
here with ``openssl``), both through Feast's ``connection_string``; the password never shows.

A ``feast materialize`` command fails (Redis full: ``maxmemory``) and then succeeds against a
TLS Redis; everything it prints (stdout, stderr: Feast's logging at DEBUG, Spark's, the progress
bars, the executors' errors) and every file of the repository (registry, emission logs and their
Delta metadata) is searched for the password. A wrong password and a plain-TCP run in-process:
their errors and log records too.
"""

from __future__ import annotations

import logging
import os
import secrets
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pyarrow as pa
import pytest
from feast import RepoConfig
from feast.types import String
from redis.exceptions import ConnectionError as RedisConnectionError

from feast_stream_backfill.feast_plugin.online_writer import OnlineStoreWriteError
from feast_stream_backfill.feast_plugin.redis_writer import RedisBatchWriter
from feast_stream_backfill.feast_plugin.view_rows import emissions_for
from tests.bulk_repo import END, START, make_repo
from tests.conftest import _free_port
from tests.test_faults import dump, store_on
from tests.test_materialize import RedisServer, _sample_view

FEAST = str(Path(sys.executable).parent / "feast")
USERS = 3_000
#: Not JSON (Feast's connection-string parser would make a number of an all-digit one).
PASSWORD = "pw-" + secrets.token_hex(12)
USER = "feast_writer"
ACL = ["--user", "default", "off", "--user", USER, "on", f">{PASSWORD}", "~*", "&*", "+@all"]


def certificates(folder: Path) -> dict[str, Path]:
    """A CA and a certificate for 127.0.0.1 signed by it (elliptic-curve keys: fast)."""
    folder.mkdir(parents=True, exist_ok=True)
    files = {n: folder / n for n in ("ca.key", "ca.crt", "redis.key", "redis.csr", "redis.crt")}
    key = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    san = folder / "san.cnf"
    san.write_text("subjectAltName=IP:127.0.0.1\n")
    for command in (
        ["req", "-x509", *key, "-keyout", files["ca.key"], "-out", files["ca.crt"]]
        + ["-days", "1", "-subj", "/CN=fsb test CA"],
        ["req", *key, "-keyout", files["redis.key"], "-out", files["redis.csr"]]
        + ["-subj", "/CN=127.0.0.1"],
        ["x509", "-req", "-in", files["redis.csr"], "-CA", files["ca.crt"], "-CAkey"]
        + [files["ca.key"], "-CAcreateserial", "-out", files["redis.crt"], "-days", "1"]
        + ["-extfile", san],
    ):
        subprocess.run(["openssl", *map(str, command)], check=True, capture_output=True)
    return files


@pytest.fixture(scope="module")
def repo(tmp_path_factory, spark) -> Path:
    path = tmp_path_factory.mktemp("secrets_repo")
    os.environ["FSB_REDIS"] = "127.0.0.1:1"
    store = make_repo(spark, path, USERS, "secrets")
    emissions_for(store.config, store.get_stream_feature_view("spend"))  # commands read it
    return path


@pytest.fixture(scope="module")
def tls(tmp_path_factory):
    """A redis-server answering TLS only, to the ACL user only: ``(server, connection
    string)``."""
    folder = tmp_path_factory.mktemp("tls")
    files = certificates(folder / "certs")
    port = _free_port()
    tls_args = ["--port", "0", "--tls-port", str(port), "--tls-auth-clients", "no"]
    tls_args += ["--tls-cert-file", str(files["redis.crt"]), "--tls-key-file"]
    tls_args += [str(files["redis.key"]), "--tls-ca-cert-file", str(files["ca.crt"])]
    server = RedisServer(
        folder / "redis",
        *tls_args,
        *ACL,
        port=port,
        ssl=True,
        ssl_ca_certs=str(files["ca.crt"]),
        username=USER,
        password=PASSWORD,
    )
    connection = (
        f"127.0.0.1:{port},ssl=true,ssl_ca_certs={files['ca.crt']},"
        f"username={USER},password={PASSWORD}"
    )
    yield server, connection
    server.stop()


def materialize_command(repo: Path, connection: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [FEAST, "--log-level", "DEBUG", "materialize", START.isoformat(), END.isoformat()]
        + ["-v", "spend"],
        cwd=repo,
        env={**os.environ, "FSB_REDIS": connection},
        capture_output=True,
        text=True,
        timeout=600,
    )


def files_holding(folder: Path, secret: str) -> list[Path]:
    return [p for p in folder.rglob("*") if p.is_file() and secret.encode() in p.read_bytes()]


@pytest.mark.skipif(
    not os.environ.get("FSB_FRESH_PROCESS_TESTS"),
    reason="two feast commands, each its own Spark JVM (about 2 minutes in CI's share): "
    "FSB_FRESH_PROCESS_TESTS=1",
)
def test_a_failing_and_a_succeeding_command_over_tls_never_show_the_password(repo, tls):
    server, connection = tls
    used = server.client.info("memory")["used_memory"]
    server.client.config_set("maxmemory", used + 300_000)
    failed = materialize_command(repo, connection)
    output = failed.stdout + failed.stderr
    assert failed.returncode != 0, output
    assert "writing 'spend' to the online store at '127.0.0.1:" in output
    assert "ssl=true" in output and "OOM command not allowed" in output
    assert 0 < server.client.dbsize() < USERS
    assert PASSWORD not in output

    server.client.config_set("maxmemory", 0)
    succeeded = materialize_command(repo, connection)
    output = succeeded.stdout + succeeded.stderr
    assert succeeded.returncode == 0, output
    assert server.client.dbsize() == USERS
    assert PASSWORD not in output
    assert files_holding(repo, PASSWORD) == []


def test_a_password_over_plain_tcp_and_a_wrong_one_never_show(repo, tls, tmp_path, caplog):
    """A wrong password fails before any Spark work, naming the store; the right one over
    plain TCP writes the bytes written over TLS; neither password is in the error or a log
    record (caught at DEBUG)."""
    caplog.set_level(logging.DEBUG)
    plain = RedisServer(tmp_path / "plain", *ACL, username=USER, password=PASSWORD)
    try:
        wrong = "pw-" + secrets.token_hex(12)
        with pytest.raises(OnlineStoreWriteError) as refused:
            store_on(repo, f"{plain.address},username={USER},password={wrong}").materialize(
                START, END, ["spend"]
            )
        assert f"cannot reach the online store at '{plain.address}'" in str(refused.value)
        assert wrong not in str(refused.value) and wrong not in caplog.text

        right = f"{plain.address},username={USER},password={PASSWORD}"
        store_on(repo, right).materialize(START, END, ["spend"])
        tls_server, over_tls = tls
        tls_server.client.config_set("maxmemory", 0)
        store_on(repo, over_tls).materialize(START, END, ["spend"])
        assert PASSWORD not in caplog.text
        assert len(dump(plain, 0)) == USERS
        assert dump(plain, 0) == dump(tls_server, 0)
    finally:
        plain.stop()


class _LostSocket:
    """A connection that broke after the handshake."""

    def sendall(self, data: object) -> None:
        raise BrokenPipeError(32, "Broken pipe")

    def recv_into(self, buffer: bytearray) -> int:
        return 0


def test_a_connection_lost_mid_write_is_named_without_the_password(tmp_path):
    """The executors' writer names Redis in its connection errors (sending, receiving): by the
    address Feast's connection string gives, without ``username=`` and ``password=``."""
    config = RepoConfig(
        project="p",
        provider="local",
        registry=str(tmp_path / "registry.db"),
        online_store={
            "type": "redis",
            "connection_string": f"127.0.0.1:1,username={USER},password={PASSWORD},db=2",
        },
        entity_key_serialization_version=3,
    )
    writer = RedisBatchWriter(config, _sample_view(String), "ts")
    writer._connection = SimpleNamespace(_sock=_LostSocket())
    for lose in (lambda: writer._send(pa.array([b"*1\r\n$4\r\nPING\r\n"])), writer._receive):
        with pytest.raises(RedisConnectionError) as lost:
            lose()
        assert str(lost.value).startswith("Redis at 127.0.0.1:1,db=2"), str(lost.value)
        assert PASSWORD not in str(lost.value) and USER not in str(lost.value)
