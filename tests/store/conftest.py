"""Store fixtures: every test gets a fresh database on SQLite and on PostgreSQL."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest
from sqlalchemy.engine import make_url

from phalanx.store import NewJob, Store


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
    server_url: str = request.getfixturevalue("postgres_url")
    name = f"t_{uuid.uuid4().hex}"
    with _admin_connect(server_url) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    yield make_url(server_url).set(database=name).render_as_string(hide_password=False)
    with _admin_connect(server_url) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.fixture
def store(db_url: str, tmp_path: Path) -> Iterator[Store]:
    """An open store on a fresh database (closed after the test)."""
    s = Store.open(db_url, state_dir=tmp_path / "state")
    yield s
    s.close()


@pytest.fixture
def new_job() -> Callable[..., NewJob]:
    """Factory of :class:`NewJob` with overridable fields."""

    def make(i: int = 0, **overrides: object) -> NewJob:
        fields: dict[str, object] = {
            "name": f"job-{i}",
            "tenant": "team-a",
            "user": "alice",
            "queue": "default",
            "cluster_queue": "cq",
            "priority_class": None,
            "priority": None,
            "gpus": 1,
            "submission": {"script": f"echo {i}", "tasks": 1, "env": {"A": "1"}},
            "submit_time": 1000.0 + i,
        }
        fields.update(overrides)
        return NewJob(**fields)  # type: ignore[arg-type]

    return make
