"""``phalanx up --health-check`` on a live server: the program fails for one node,
which drains with the program's first line as the reason, takes no job, and resumes
(and takes the waiting job) once the program passes for it again."""

from __future__ import annotations

import contextlib
import stat
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from phalanx.client import Client
from phalanx.control.spawn import ServerProcess, spawn_server
from tests.api.server import CLUSTER

BAD = "gpu-h100-1"


def _job(name: str, tenant: str) -> dict[str, Any]:
    return {
        "name": name,
        "tenant": tenant,
        "queue": "default",
        "podSets": [
            {
                "name": "main",
                "count": 1,
                "tasksPerNode": 1,
                "requests": {"nvidia.com/gpu": 8, "cpu": "1", "memory": "1Gi"},
            }
        ],
        "run": {"command": ["sleep", "600"], "workingDir": "/tmp", "timeLimit": 600},
    }


def _until(what: Callable[[], Any], timeout: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = what()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(0.2)


def _node(client: Client, name: str) -> dict[str, Any]:
    return next(n for n in client.nodes() if n["metadata"]["name"] == name)


@pytest.fixture()
def flag(tmp_path: Path) -> Path:
    return tmp_path / "gpu-broken"


@pytest.fixture()
def server(tmp_path: Path, flag: Path) -> Iterator[ServerProcess]:
    check = tmp_path / "check.sh"
    check.write_text(
        "#!/bin/sh\n"
        f'if [ "$PHALANX_NODE" = {BAD} ] && [ -e {flag} ]; then\n'
        '  echo "GPU 3 fell off the bus on $SLURMD_NODENAME ($CUDA_VISIBLE_DEVICES)"\n'
        "  echo 'second line'\n"
        "  exit 1\n"
        "fi\n"
        "exit 0\n"
    )
    check.chmod(check.stat().st_mode | stat.S_IXUSR)
    flag.touch()  # broken from the start: the check at start-up drains it
    running = spawn_server(
        tmp_path / "state",
        [
            "--port",
            "0",
            "--config",
            str(CLUSTER),
            "--single-user",
            "--health-check",
            str(check),
            "--health-check-interval",
            "1",
        ],
    )
    try:
        yield running
    finally:
        running.proc.terminate()
        running.proc.wait(timeout=30)


def test_a_failing_node_drains_takes_no_job_and_resumes(server: ServerProcess, flag: Path) -> None:
    with Client(server.url, server.token, state_dir=server.state_dir) as client:
        drained = _until(lambda: _node(client, BAD)["status"].get("state") == "drain")
        node = _node(client, BAD)
        assert drained, node
        annotations = node["metadata"].get("annotations", {})
        assert annotations.get("phalanx.io/reason") == (
            f"GPU 3 fell off the bus on {BAD} (0,1,2,3,4,5,6,7)"
        ), node
        # Four whole-node jobs for four H100 nodes, one of them drained: three run,
        # none of them there; the fourth waits.
        jobs = [client.submit(_job(f"j{i}", ("team-a", "team-b")[i % 2])) for i in range(4)]
        try:
            running = _until(
                lambda: (
                    [j for j in map(client.get, jobs) if j["state"] == "RUNNING"]
                    if sum(client.get(j)["state"] == "RUNNING" for j in jobs) == 3
                    else []
                )
            )
            assert len(running) == 3, [client.get(j) for j in jobs]
            time.sleep(2.5)  # a few more rounds of checks: nothing moves
            states = {j: client.get(j) for j in jobs}
            assert sum(s["state"] == "RUNNING" for s in states.values()) == 3, states
            assert all(BAD not in (s.get("nodes") or []) for s in states.values()), states
            waiting = next(j for j, s in states.items() if s["state"] == "PENDING")
            # The program passes again: the node resumes and takes the waiting job.
            flag.unlink()
            assert _until(lambda: _node(client, BAD)["status"].get("state") != "drain")
            job = _until(lambda: client.get(waiting)["state"] == "RUNNING" and client.get(waiting))
            assert job and job["nodes"] == [BAD], client.get(waiting)
        finally:
            for j in jobs:
                with contextlib.suppress(Exception):
                    client.cancel(j)
