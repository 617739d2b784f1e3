"""PostgreSQL stopped and started again under a running ``phalanx up``: the control
plane waits it out, reconnects and carries on; every accepted job ends once."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest

from phalanx.control.spawn import spawn_server
from tests.conftest import PgServer
from tests.reliability.test_reliability import CLUSTER, jobs, nodes_yaml, submission, wait_states

pytestmark = pytest.mark.timeout(300)


def test_a_postgres_restart_mid_run_loses_no_transition(
    postgres_server: PgServer, tmp_path: Path
) -> None:
    config = tmp_path / "cluster.yaml"
    config.write_text(CLUSTER + nodes_yaml(5))
    work = tmp_path / "work"
    work.mkdir()
    state = tmp_path / "state"
    server = spawn_server(
        state, ["--port", "0", "--config", str(config), "--database", postgres_server.url]
    )
    headers = {"Authorization": f"Bearer {server.token}"}
    accepted: list[int] = []

    def submit(count: int) -> int:
        """Submit ``count`` short jobs one by one; how many were refused."""
        refused = 0
        with httpx.Client(base_url=server.url, headers=headers, timeout=30) as c:
            for _ in range(count):
                body = submission(["sh", "-c", "echo run; sleep 0.5"], work)
                try:
                    r = c.post("/api/v1/jobs", json=body)
                except httpx.HTTPError:
                    refused += 1
                    continue
                if r.status_code == 201:
                    accepted.append(r.json()["id"])
                else:
                    assert r.status_code == 503, r.text  # a clear "try again", not a 500
                    assert "nothing was applied" in r.text
                    refused += 1
        return refused

    from tests.reliability.server import Server

    handle = Server(server.proc, server.url, server.token, state)
    try:
        submit(30)
        wait_states(handle, accepted[:5], {"RUNNING", "COMPLETED"}, timeout=60)
        postgres_server.stop()
        refused = submit(5)
        time.sleep(2)
        assert server.proc.poll() is None, "the server died with its database"
        postgres_server.start()
        submit(30)
        wait_states(handle, accepted, {"COMPLETED"}, timeout=180)
        stored = {j["id"] for j in jobs(handle)}
        assert set(accepted) <= stored
        with handle.client() as c:
            for job_id in accepted:
                kinds = [e["kind"] for e in c.get(f"/api/v1/jobs/{job_id}/events").json()["items"]]
                assert kinds.count("Started") == 1 and kinds.count("Finished") == 1, kinds
                assert (work / f"out-{job_id}.log").read_text() == "run\n"
        assert refused <= 5
    finally:
        handle.stop()
