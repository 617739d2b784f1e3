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


CHECKPOINTING = """#!/bin/sh
#SBATCH -p team-a -A team-a --gpus-per-node=8 -N1 -o %x-%j.out
if [ -f ckpt-$SLURM_JOB_ID ]; then echo "resumed, restart $SLURM_RESTART_COUNT"; exit 0; fi
trap 'echo saved > ckpt-$SLURM_JOB_ID; exit 0' TERM
echo started
sleep 60 &
wait
"""


def test_preempted_batch_jobs_requeue_only_with_requeue(
    cluster: Cluster,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("PHALANX_URL", cluster.url)
    monkeypatch.setenv("PHALANX_TOKEN", cluster.admin_token)
    monkeypatch.chdir(tmp_path)
    script = tmp_path / "ckpt.sbatch"
    script.write_text(CHECKPOINTING)
    with cluster.admin as client:
        # team-a may use 24 GPUs (16 nominal, 8 borrowed): this job takes the borrowed 8.
        filler = job(["sleep", "60"], tenant="team-a", name="filler")
        filler["podSets"] = [{"name": "main", "count": 1, "requests": {"nvidia.com/gpu": 8}}]
        first = client.submit(filler)
        deadline = time.monotonic() + 30
        while client.get(first)["state"] != "RUNNING":
            assert time.monotonic() < deadline
            time.sleep(0.05)
    ids = []
    for name, extra in (("kept", ["--requeue"]), ("dropped", [])):
        assert main(["sbatch", "--parsable", "-J", name, *extra, str(script)]) == 0
        ids.append(int(capsys.readouterr().out.strip()))
    kept, dropped = ids
    with cluster.admin as client:
        deadline = time.monotonic() + 30
        for job_id, name in ((kept, "kept"), (dropped, "dropped")):
            out = tmp_path / f"{name}-{job_id}.out"
            while not (out.exists() and "started" in out.read_text()):
                assert time.monotonic() < deadline, f"{name} never started"
                time.sleep(0.05)
        # Two whole nodes: the most recently started jobs go, the filler stays.
        big = job(["sleep", "1"], tenant="team-a", name="big", priorityClass="high")
        big["podSets"] = [{"name": "main", "count": 2, "requests": {"nvidia.com/gpu": 8}}]
        high = client.submit(big)
        assert client.wait(dropped, timeout=30)["state"] == "PREEMPTED"
        assert client.wait(high, timeout=30)["state"] == "COMPLETED"
        assert client.wait(kept, timeout=30)["state"] == "COMPLETED"
        assert client.get(first)["state"] == "RUNNING"
        client.cancel(first)
    assert "resumed, restart 1" in (tmp_path / f"kept-{kept}.out").read_text()
    dropped_out = (tmp_path / f"dropped-{dropped}.out").read_text()
    assert f"*** JOB {dropped} ON " in dropped_out and "DUE TO PREEMPTION ***" in dropped_out
    assert (tmp_path / f"ckpt-{dropped}").read_text() == "saved\n"
    jobs = f"{kept},{dropped}"
    fields = ["-o", "JobID,JobName,State,ExitCode"]
    assert main(["sacct", "-X", "-D", "-P", "-j", jobs, *fields]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "JobID|JobName|State|ExitCode",
        f"{kept}|kept|PREEMPTED|0:0",
        f"{kept}|kept|COMPLETED|0:0",
        f"{dropped}|dropped|PREEMPTED|0:0",
    ]
    # Without -X each job's current run is followed by its batch step (killed: 0:15).
    assert main(["sacct", "-D", "-P", "-j", jobs, *fields]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "JobID|JobName|State|ExitCode",
        f"{kept}|kept|PREEMPTED|0:0",
        f"{kept}|kept|COMPLETED|0:0",
        f"{kept}.batch|batch|COMPLETED|0:0",
        f"{dropped}|dropped|PREEMPTED|0:0",
        f"{dropped}.batch|batch|CANCELLED|0:15",
    ]
