"""Shared fixtures: a throwaway PostgreSQL server for the tests that need one.

``postgres_url`` starts a real server (``initdb`` + ``pg_ctl``) once per session on a
free 127.0.0.1 port and yields a ``postgresql+psycopg://`` URL of an empty database.
PostgreSQL refuses to run as root, so under root the server runs as the ``postgres``
OS user. Without PostgreSQL binaries the dependent tests are skipped, or fail when
``CI`` or ``PHALANX_REQUIRE_POSTGRES`` is set.

"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import NoReturn

import psycopg
import pytest
from sqlalchemy.engine import make_url

_PG_SUPERUSER = "postgres"
_PG_DATABASE = "phalanx_test"


def _unavailable(reason: str) -> NoReturn:
    if os.environ.get("CI") or os.environ.get("PHALANX_REQUIRE_POSTGRES"):
        pytest.fail(f"{reason} (required because CI or PHALANX_REQUIRE_POSTGRES is set)")
    pytest.skip(reason)


def _find_pg_bin() -> Path | None:
    """The directory holding initdb and pg_ctl: PATH first, then Debian's layout."""
    initdb = shutil.which("initdb")
    if initdb and shutil.which("pg_ctl"):
        return Path(initdb).resolve().parent
    candidates = glob.glob("/usr/lib/postgresql/*/bin")
    candidates.sort(key=lambda p: int(Path(p).parent.name) if Path(p).parent.name.isdigit() else 0)
    for candidate in reversed(candidates):
        if (Path(candidate) / "initdb").exists() and (Path(candidate) / "pg_ctl").exists():
            return Path(candidate)
    return None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class PgServer:
    """A running PostgreSQL server the tests started: its URL, and restart/stop."""

    def __init__(
        self, url: str, pg_ctl: list[str], data: Path, cwd: Path, start_args: list[str]
    ) -> None:
        self.url = url
        self._pg_ctl = pg_ctl
        self._data = data
        self._cwd = cwd
        self._start_args = start_args

    def ctl(self, *args: str) -> None:
        subprocess.run(
            [*self._pg_ctl, "-D", str(self._data), *args],
            check=True,
            capture_output=True,
            text=True,
            cwd=self._cwd,
        )

    def stop(self) -> None:
        """Stop at once (``-m immediate``: like a crash; clients are cut off)."""
        self.ctl("-m", "immediate", "stop")

    def start(self) -> None:
        self.ctl(*self._start_args, "-w", "-t", "60", "start")


@pytest.fixture
def postgres_server() -> Iterator[PgServer]:
    """A PostgreSQL server of the test's own (to stop and restart), with an empty
    database; commits are synchronous, so a stop loses none."""
    yield from _postgres(durable=True)


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """URL of an empty database on a PostgreSQL server started for this test session."""
    for server in _postgres():
        yield server.url


def _postgres(durable: bool = False) -> Iterator[PgServer]:
    bin_dir = _find_pg_bin()
    if bin_dir is None:
        _unavailable("PostgreSQL not installed: run make test-deps")
    as_postgres: list[str] = []
    if os.geteuid() == 0:
        runuser = shutil.which("runuser")
        if runuser is None:
            _unavailable("running as root needs runuser to start PostgreSQL as 'postgres'")
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            _unavailable("running as root needs a 'postgres' OS user to start PostgreSQL")
        as_postgres = [str(runuser), "-u", "postgres", "--"]

    root = Path(tempfile.mkdtemp(prefix="phalanx-pg-"))
    data = root / "data"
    log = root / "server.log"
    if as_postgres:
        shutil.chown(root, user="postgres", group="postgres")

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*as_postgres, *args], check=True, capture_output=True, text=True, cwd=root
        )

    started = False
    try:
        run(
            str(bin_dir / "initdb"),
            "-D",
            str(data),
            "-U",
            _PG_SUPERUSER,
            "--auth=trust",
            "--encoding=UTF8",
            "--no-sync",
        )
        port = 0
        for _attempt in range(5):
            port = _free_port()
            options = (
                f"-c listen_addresses=127.0.0.1 -c port={port} "
                f"-c unix_socket_directories={root} -c fsync=off "
                f"-c synchronous_commit={'on' if durable else 'off'} "
                "-c full_page_writes=off -c max_connections=300"
            )
            try:
                run(
                    str(bin_dir / "pg_ctl"),
                    "-D",
                    str(data),
                    "-l",
                    str(log),
                    "-w",
                    "-t",
                    "30",
                    "-o",
                    options,
                    "start",
                )
            except subprocess.CalledProcessError:
                continue  # most likely the port was taken in between: try another
            started = True
            break
        if not started:
            detail = log.read_text() if log.exists() else ""
            pytest.fail(f"could not start PostgreSQL:\n{detail}")

        import psycopg

        with psycopg.connect(
            host="127.0.0.1", port=port, user=_PG_SUPERUSER, dbname="postgres", autocommit=True
        ) as conn:
            conn.execute(f"CREATE DATABASE {_PG_DATABASE}")
        url = f"postgresql+psycopg://{_PG_SUPERUSER}@127.0.0.1:{port}/{_PG_DATABASE}"
        yield PgServer(
            url,
            [*as_postgres, str(bin_dir / "pg_ctl")],
            data,
            root,
            ["-l", str(log), "-o", options],
        )
    finally:
        if started:
            subprocess.run(
                [*as_postgres, str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "fast", "stop"],
                capture_output=True,
                cwd=root,
                check=False,
            )
        shutil.rmtree(root, ignore_errors=True)


def _admin_connect(url: str) -> psycopg.Connection:
    parsed = make_url(url)
    return psycopg.connect(
        host=parsed.host,
        port=parsed.port,
        user=parsed.username,
        dbname="postgres",
        autocommit=True,
    )


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """URL of a new, empty database on the parametrized backend."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'phalanx.db'}"
        return
    yield from _fresh_database(request.getfixturevalue("postgres_url"))


@pytest.fixture
def pg_database(postgres_url: str) -> Iterator[str]:
    """URL of a new, empty PostgreSQL database (dropped afterwards)."""
    yield from _fresh_database(postgres_url)


def _fresh_database(server_url: str) -> Iterator[str]:
    name = f"t_{uuid.uuid4().hex}"
    with _admin_connect(server_url) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    yield make_url(server_url).set(database=name).render_as_string(hide_password=False)
    with _admin_connect(server_url) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.fixture
def database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str | None]:
    """The store URL for a test parametrized with ``backend`` (None: the embedded SQLite)."""
    backend = getattr(request, "param", None) or request.getfixturevalue("backend")
    if backend == "sqlite":
        yield None
        return
    yield from _fresh_database(request.getfixturevalue("postgres_url"))
