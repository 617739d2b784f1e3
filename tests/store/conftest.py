"""Store fixtures: every test gets a fresh database on SQLite and on PostgreSQL."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from phalanx.store import NewJob, Store


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
