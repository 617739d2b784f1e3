"""A leading server whose lease is taken from under it: its next write is fenced off, it
stands by (nothing of the write stored), and it leads again once the lease is free."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from phalanx.auth import ADMIN
from phalanx.errors import NotLeader
from phalanx.model import JobSubmission
from phalanx.server import start_server
from tests.reliability.test_reliability import CLUSTER, nodes_yaml

pytestmark = pytest.mark.timeout(120)


def _job() -> JobSubmission:
    return JobSubmission.model_validate(
        {
            "tenant": "team-a",
            "queue": "default",
            "podSets": [{"count": 1, "requests": {"cpu": 1}}],
            "run": {"command": ["true"]},
        }
    )


def _wait(condition: object, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_a_leader_whose_lease_is_taken_is_fenced_and_stands_by(
    pg_database: str, tmp_path: Path
) -> None:
    database = pg_database
    thief = create_engine(database)
    config = tmp_path / "cluster.yaml"
    config.write_text(CLUSTER + nodes_yaml(1))
    with start_server(
        tmp_path / "state", port=0, database=database, runtime="noop", configs=[config]
    ) as server:
        assert server.leading and server.elector is not None
        before = server.plane.store.max_job_id()
        with thief.begin() as conn:
            # Another server's takeover: a new epoch, a live session, a long lease.
            conn.execute(
                text(
                    "UPDATE leader_lease SET holder = 'thief', epoch = epoch + 1, "
                    "url = 'http://thief', backend_pid = pg_backend_pid(), "
                    "backend_start = (SELECT extract(epoch from backend_start) "
                    "FROM pg_stat_activity WHERE pid = pg_backend_pid()), "
                    "expires = extract(epoch from clock_timestamp()) + 600"
                )
            )
        with pytest.raises(NotLeader):
            server.plane.submit(ADMIN, [_job()])
        assert server.plane.store.max_job_id() == before  # nothing of it stored
        _wait(lambda: not server.leading)
        assert server.plane.ready
        _wait(lambda: server.plane.leader_url == "http://thief")
        with pytest.raises(NotLeader) as info:
            server.plane.submit(ADMIN, [_job()])
        assert info.value.leader == "http://thief"
        with pytest.raises(NotLeader):
            server.plane.cluster_queue_status()

        with thief.begin() as conn:  # the thief goes away cleanly
            conn.execute(text("UPDATE leader_lease SET holder = NULL, expires = NULL"))
        _wait(lambda: server.leading)
        assert server.elector.terms == 2
        [job_id] = server.plane.submit(ADMIN, [_job()])
        assert job_id > before
    thief.dispose()
