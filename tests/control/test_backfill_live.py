"""Backfill on a live server: a blocked gang's planned start over the API and in
``squeue --start``, and a short job backfilled while a long one waits."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest

from phalanx.client import Client
from phalanx.engine.config import BackfillConfig
from tests.api.server import CLUSTER


def _gang(nodes: int, limit: int, name: str) -> dict[str, object]:
    return {
        "name": name,
        "queue": "default",
        "podSets": [
            {
                "name": "main",
                "count": nodes,
                "tasksPerNode": 1,
                "requests": {"nvidia.com/gpu": 8, "cpu": "1", "memory": "1Gi"},
            }
        ],
        "run": {"command": ["sleep", str(limit)], "workingDir": "/tmp", "timeLimit": limit},
    }


@pytest.fixture()
def server(tmp_path: Path) -> Iterator[object]:
    from phalanx.server import start_server

    running = start_server(
        tmp_path / "state",
        port=0,
        configs=[CLUSTER],
        preset="kueue",
        backfill=BackfillConfig(interval_s=0),
    )
    try:
        yield running
    finally:
        running.stop()


def _wait(client: Client, job_id: int, state: str, timeout: float = 30.0) -> dict[str, object]:
    deadline = time.monotonic() + timeout
    while True:
        job = client.get(job_id)
        if job["state"] == state or time.monotonic() > deadline:
            return job
        time.sleep(0.1)


def test_a_blocked_gang_has_a_planned_start_and_a_short_job_backfills(server: object) -> None:
    url, token = server.url, server.admin_token  # type: ignore[attr-defined]
    state_dir = server.state_dir  # type: ignore[attr-defined]
    with Client(url, token, state_dir=state_dir) as client:
        running = client.submit({**_gang(2, 600, "running"), "tenant": "team-a"})
        assert _wait(client, running, "RUNNING")["state"] == "RUNNING"
        gang = client.submit({**_gang(3, 600, "gang"), "tenant": "team-a"})
        time.sleep(1.0)
        job = client.get(gang)
        assert job["state"] == "PENDING"
        started = datetime.fromisoformat(str(client.get(running)["start_time"])).timestamp()
        planned = datetime.fromisoformat(str(job["estimated_start"])).timestamp()
        # Planned from the admission (just before the start), rounded up to bf_resolution.
        assert started + 598 <= planned <= started + 600 + 60
        long = client.submit({**_gang(1, 1200, "long"), "tenant": "team-a"})
        short = client.submit({**_gang(1, 60, "short"), "tenant": "team-a"})
        assert _wait(client, short, "RUNNING")["state"] == "RUNNING"
        time.sleep(0.5)
        assert client.get(long)["state"] == "PENDING"

        result = subprocess.run(
            [sys.executable, "-m", "phalanx.cli.main", "squeue", "--start", "-h", "-o", "%i %S"],
            env={**os.environ, "PHALANX_URL": url, "PHALANX_TOKEN": token},
            capture_output=True,
            text=True,
            check=True,
        )
        rows = dict(line.split() for line in result.stdout.splitlines())
        assert rows[str(gang)] != "N/A"
        for job_id in (running, gang, long, short):
            client.cancel(job_id)
