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


def _pinned(name: str, node: str) -> dict[str, Any]:
    job = _job(name, "team-a")
    job["podSets"][0]["nodeSelector"] = {"kubernetes.io/hostname": node}
    return job


def test_jobs_whose_supervisor_dies_drain_their_node(tmp_path: Path) -> None:
    """``--drain-after-failures 2/1h``: two attempts on one node lost to a dead
    supervisor (FAILED, tasks killed by the runtime) drain it; a user's non-zero
    exit does not count."""
    import os
    import signal

    from phalanx.server import start_server

    state = tmp_path / "state"
    node = "gpu-h100-2"
    server = start_server(
        state, port=0, configs=[CLUSTER], single_user=True, drain_after_failures="2/1h"
    )
    try:
        with Client(server.url, server.admin_token, state_dir=state) as client:
            user_error = _pinned("exit-1", node)
            user_error["run"]["command"] = ["sh", "-c", "exit 1"]
            failed = client.submit(user_error)
            assert _until(lambda: client.get(failed)["state"] == "FAILED")
            killed = []
            for i in range(2):
                job = client.submit(_pinned(f"lost-{i}", node))
                assert _until(lambda job=job: client.get(job)["state"] == "RUNNING")
                pid_file = state / "runtime" / "jobs" / str(job) / "1" / "supervisor.pid"
                os.kill(int(pid_file.read_text().strip()), signal.SIGKILL)
                ended = _until(lambda job=job: client.get(job)["state"] == "FAILED")
                assert ended, client.get(job)
                killed.append(job)
            drained = _until(lambda: _node(client, node)["status"].get("state") == "drain")
            info = _node(client, node)
            assert drained, info
            reason = info["metadata"]["annotations"]["phalanx.io/reason"]
            assert reason == f"2 job failures in 1h: {killed[0]},{killed[1]}"
            waiting = client.submit(_pinned("after", node))
            time.sleep(1.0)
            assert client.get(waiting)["state"] == "PENDING"
            client.cancel(waiting)
    finally:
        server.stop()


def test_failure_counts_survive_a_restart(tmp_path: Path) -> None:
    """``--drain-after-failures 2/1h`` counts the failures of the window from before a
    restart: one lost attempt, a restart, then another drains the node."""
    import os
    import signal

    from phalanx.server import start_server

    state = tmp_path / "state"
    node = "gpu-h100-2"
    killed = []
    for round_ in range(2):
        server = start_server(
            state, port=0, configs=[CLUSTER], single_user=True, drain_after_failures="2/1h"
        )
        try:
            with Client(server.url, server.admin_token, state_dir=state) as client:
                job = client.submit(_pinned(f"lost-{round_}", node))
                assert _until(lambda job=job: client.get(job)["state"] == "RUNNING")
                pid_file = state / "runtime" / "jobs" / str(job) / "1" / "supervisor.pid"
                os.kill(int(pid_file.read_text().strip()), signal.SIGKILL)
                assert _until(lambda job=job: client.get(job)["state"] == "FAILED")
                killed.append(job)
                if round_ == 0:
                    time.sleep(0.5)
                    assert _node(client, node)["status"].get("state") != "drain"
                    continue
                drained = _until(lambda: _node(client, node)["status"].get("state") == "drain")
                info = _node(client, node)
                assert drained, info
                reason = info["metadata"]["annotations"]["phalanx.io/reason"]
                assert reason == f"2 job failures in 1h: {killed[0]},{killed[1]}"
        finally:
            server.stop()


def test_detect_checks_the_gpus_through_nvml(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--detect``'s built-in check against a fake NVML: an ECC error drains the
    node until it clears; an XID error drains it until an admin resumes it."""
    import socket
    import sys

    from phalanx.server import start_server
    from tests.runtime.test_detect import _Event, _HealthNVML

    nvml = _HealthNVML(2)
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    state = tmp_path / "state"
    server = start_server(state, port=0, single_user=True, detect=True, health_check_interval_s=0.2)
    name = socket.gethostname()
    try:
        with Client(server.url, server.admin_token, state_dir=state) as client:

            def node() -> dict[str, Any]:
                return _node(client, name)

            def reason() -> str:
                return str(node()["metadata"].get("annotations", {}).get("phalanx.io/reason", ""))

            assert node()["status"]["state"] == "idle"
            nvml.ecc[1] = 3
            assert _until(lambda: reason() == "GPU 1: 3 uncorrected ECC errors"), node()
            nvml.ecc.clear()
            assert _until(lambda: node()["status"]["state"] == "idle"), node()
            nvml.events.append(_Event(0, 79))
            assert _until(lambda: reason() == "GPU 0: XID 79 (GPU has fallen off the bus)")
            time.sleep(1.0)  # checks pass again, but the drain stays for an admin
            assert node()["status"]["state"] == "drain"
    finally:
        server.stop()
