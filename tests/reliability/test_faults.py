"""Faults against a real ``phalanx up``: the control plane killed again and again under
load (``bench/faults.py``, small here), and a job's supervisor killed."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
from bench.faults import run

from tests.reliability.server import Server, start
from tests.reliability.test_reliability import CLUSTER, jobs, nodes_yaml, submission, wait_states

pytestmark = pytest.mark.timeout(600)


def test_three_kill_9s_under_load_lose_no_job_and_run_none_twice() -> None:
    report = run(jobs=240, kills=3, seed=7, settle_s=240)
    assert report["kills"] == 3
    assert report["jobs_stored"] == 240
    assert report["problems"] == []
    assert set(report["states"]) <= {"COMPLETED", "FAILED", "CANCELLED"}


def test_a_killed_supervisor_ends_its_job_and_frees_its_gpus(tmp_path: Path) -> None:
    config = tmp_path / "cluster.yaml"
    config.write_text(CLUSTER + nodes_yaml(1))
    work = tmp_path / "work"
    work.mkdir()
    server = start(tmp_path / "state", config)
    try:
        whole = submission(["sleep", "120"], work)
        whole["podSets"][0]["requests"]["nvidia.com/gpu"] = 4
        with server.client() as c:
            first = c.post("/api/v1/jobs", json=whole).json()["id"]
            wait_states(server, [first], {"RUNNING"}, timeout=60)
            second = c.post("/api/v1/jobs", json=whole).json()["id"]
        time.sleep(1)
        assert {j["id"]: j["state"] for j in jobs(server)}[second] == "PENDING"
        pid_file = tmp_path / "state" / "runtime" / "jobs" / str(first) / "1" / "supervisor.pid"
        os.kill(int(pid_file.read_text().strip()), signal.SIGKILL)
        wait_states(server, [first], {"FAILED"}, timeout=60)
        # Its four GPUs went back: the job waiting for them starts.
        wait_states(server, [second], {"RUNNING"}, timeout=60)
        with server.client() as c:
            ended = c.get(f"/api/v1/jobs/{first}").json()
            events = c.get(f"/api/v1/jobs/{first}/events").json()["items"]
        assert "supervisor lost" in (ended["message"] + " ".join(e["message"] for e in events))
    finally:
        server.stop()


def test_a_job_whose_supervisor_never_started_is_launched_again(tmp_path: Path) -> None:
    import sys

    from phalanx.runtime.local import LocalRuntime
    from phalanx.server import start_server

    config = tmp_path / "cluster.yaml"
    config.write_text(CLUSTER + nodes_yaml(1))
    work = tmp_path / "work"
    work.mkdir()
    server = start_server(tmp_path / "state", port=0, configs=[config])
    runtime = server.plane.runtime
    assert isinstance(runtime, LocalRuntime)
    working = list(runtime.supervisor_command)
    # As when the control plane dies while it starts a supervisor: none comes up.
    runtime.supervisor_command = [
        sys.executable,
        "-c",
        "import sys, time; time.sleep(0.3); sys.exit(3)",
    ]
    handle = Server(None, server.url, server.admin_token, tmp_path / "state")  # type: ignore[arg-type]
    try:
        with handle.client() as c:
            broken = c.post("/api/v1/jobs", json=submission(["echo", "run"], work)).json()["id"]
            wait_states(handle, [broken], {"NODE_FAIL"}, timeout=60)
            kinds = [e["kind"] for e in c.get(f"/api/v1/jobs/{broken}/events").json()["items"]]
            # Launched three times, then given up: it cannot start here at all.
            assert kinds.count("Requeued") == 2 and "Started" not in kinds, kinds
            lucky = c.post("/api/v1/jobs", json=submission(["echo", "run"], work)).json()["id"]
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                events = c.get(f"/api/v1/jobs/{lucky}/events").json()["items"]
                if any(e["kind"] == "Requeued" for e in events):
                    break
                time.sleep(0.01)
            runtime.supervisor_command = working  # a later launch works
            wait_states(handle, [lucky], {"COMPLETED"}, timeout=60)
            assert (work / f"out-{lucky}.log").read_text() == "run\n"
    finally:
        server.stop()
