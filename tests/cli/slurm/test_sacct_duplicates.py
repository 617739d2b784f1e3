"""``sacct -D``: a requeued job's earlier runs, through the CLI and the REST API."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from phalanx.cli.main import main
from tests.api.server import Cluster, job


def test_duplicates_show_the_requeued_run_before_the_current_one(
    cluster: Cluster,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("PHALANX_URL", cluster.url)
    monkeypatch.setenv("PHALANX_TOKEN", cluster.admin_token)
    marker = tmp_path / "ran-once"
    script = f"test -f {marker} && exit 0; touch {marker}; exec sleep 30"
    with cluster.admin as client:
        job_id = client.submit(job(["sh", "-c", script], tenant="team-a", name="twice"))
        deadline = time.monotonic() + 30
        while client.get(job_id)["state"] != "RUNNING" or not marker.exists():
            assert time.monotonic() < deadline
            time.sleep(0.05)
        client.requeue(job_id)
        assert client.wait(job_id, timeout=30)["state"] == "COMPLETED"
    capsys.readouterr()
    assert main(["sacct", "-D", "-P", "-j", str(job_id), "-o", "JobID,JobName,State"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "JobID|JobName|State",
        f"{job_id}|twice|REQUEUED",
        f"{job_id}|twice|COMPLETED",
    ]
    assert main(["sacct", "-n", "-P", "-j", str(job_id), "-o", "JobID,State"]) == 0
    assert capsys.readouterr().out == f"{job_id}|COMPLETED\n"
    assert main(["sacct", "-D", "-n", "-P", "-s", "RQ", "-j", str(job_id), "-o", "State"]) == 0
    assert capsys.readouterr().out == "REQUEUED\n"
