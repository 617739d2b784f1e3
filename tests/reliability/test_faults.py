"""Faults against a real ``phalanx up``: the control plane killed again and again under
load (``bench/faults.py``, small here), and a job's supervisor killed."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
from bench.faults import run

from tests.reliability.server import start
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
        wait_states(server, [first], {"NODE_FAIL"}, timeout=60)
        # Its four GPUs went back: the job waiting for them starts.
        wait_states(server, [second], {"RUNNING"}, timeout=60)
        with server.client() as c:
            ended = c.get(f"/api/v1/jobs/{first}").json()
            events = c.get(f"/api/v1/jobs/{first}/events").json()["items"]
        assert "supervisor lost" in (ended["message"] + " ".join(e["message"] for e in events))
    finally:
        server.stop()
