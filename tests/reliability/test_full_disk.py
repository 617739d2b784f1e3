"""SQLite on a full disk: submissions get a clear error and nothing is half-applied;
once there is room again everything carries on, and the database is intact."""

from __future__ import annotations

import contextlib
import os
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.reliability.server import Server
from tests.reliability.test_reliability import CLUSTER, jobs, nodes_yaml, submission, wait_states

pytestmark = pytest.mark.timeout(300)


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 16 MiB file system of the test's own (tmpfs; needs the right to mount)."""
    where = tmp_path / "disk"
    where.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(where)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a small file system here ({done.stderr.strip()})")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def _fill(path: Path) -> None:
    """Take every free byte of ``path``'s file system."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        for size in (1 << 20, 1 << 12, 1):
            with contextlib.suppress(OSError):
                while True:
                    os.write(fd, b"\0" * size)
    finally:
        os.close(fd)


def test_a_full_disk_is_a_clear_error_and_recovers(small_disk: Path, tmp_path: Path) -> None:
    from phalanx.server import start_server

    config = tmp_path / "cluster.yaml"
    config.write_text(CLUSTER + nodes_yaml(2))
    work = tmp_path / "work"
    work.mkdir()
    state = small_disk / "state"
    running = start_server(state, port=0, configs=[config])
    server = Server(None, running.url, running.admin_token, state)  # type: ignore[arg-type]
    headers = {"Authorization": f"Bearer {running.admin_token}"}
    accepted: list[int] = []
    try:
        with httpx.Client(base_url=running.url, headers=headers, timeout=60) as c:
            body = submission(["sh", "-c", "echo run"], work)
            for _ in range(10):
                accepted.append(c.post("/api/v1/jobs", json=body).json()["id"])
            wait_states(server, accepted, {"COMPLETED"}, timeout=60)
            filler = small_disk / "filler"
            _fill(filler)
            answers = [c.post("/api/v1/jobs/batch", json={"jobs": [body] * 50}) for _ in range(5)]
            refused = [r for r in answers if r.status_code != 201]
            assert refused, "a full disk took every submission"
            for r in refused:
                assert r.status_code == 503, r.text
                assert "nothing was applied" in r.json()["detail"]
            accepted += [i for r in answers if r.status_code == 201 for i in r.json()["ids"]]
            assert running.plane.ready
            filler.unlink()
            for _ in range(5):
                r = c.post("/api/v1/jobs", json=body)
                if r.status_code == 201:
                    accepted.append(r.json()["id"])
                    break
            else:
                raise AssertionError(f"no recovery once there was room: {r.text}")
            accepted.append(c.post("/api/v1/jobs", json=body).json()["id"])
            wait_states(server, accepted, {"COMPLETED"}, timeout=120)
            assert sorted(j["id"] for j in jobs(server)) == sorted(accepted)
    finally:
        running.stop()
    with sqlite3.connect(state / "phalanx.db") as db:
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    assert os.path.exists(state / "phalanx.db")
