"""The Slurm commands against a real phalanx server, through ``main([...])``.

Tests that need server features the lead is still adding are skipped only
while the feature is missing (``_server_has``).
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from phalanx.cli.main import main
from phalanx.errors import PhalanxError
from tests.api.server import Cluster, job


@pytest.fixture
def as_admin(cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> Cluster:
    monkeypatch.setenv("PHALANX_URL", cluster.url)
    monkeypatch.setenv("PHALANX_TOKEN", cluster.admin_token)
    return cluster


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def _server_has(cluster: Cluster, feature: str) -> bool:
    """Whether the server already provides ``feature`` (Slurm job fields, hold endpoint)."""
    with cluster.admin as client:
        job_id = client.submit(job(["true"], tenant="team-a"))
        view = client.wait(job_id, timeout=30)
        if feature == "slurm_fields":
            return "slurm_reason" in view and "num_cpus" in view
        if feature == "hold":
            try:
                client.hold(job_id)
            except PhalanxError as exc:
                return exc.error not in ("NotFound", None) and "405" not in exc.detail
            return True
    return False


def test_squeue_shows_pending_and_running(
    as_admin: Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    with as_admin.admin as client:
        sleeper = client.submit(job(["sleep", "30"], tenant="team-a", name="sleeper"))
        for _ in range(100):
            if client.get(sleeper)["state"] == "RUNNING":
                break
            time.sleep(0.1)
    try:
        code, out, err = run(capsys, "squeue")
        assert code == 0, err
        lines = out.splitlines()
        assert lines[0] == (
            "             JOBID PARTITION     NAME     USER ST       TIME  NODES NODELIST(REASON)"
        )
        mine = [line for line in lines if line.split()[0] == str(sleeper)]
        assert len(mine) == 1
        assert mine[0].split()[4] == "R"
        code, out, _ = run(capsys, "squeue", "-h", "-j", str(sleeper), "-o", "%i %t %j")
        assert (code, out) == (0, f"{sleeper} R sleeper\n")
        code, out, _ = run(capsys, "squeue", "-h", "-t", "CD", "-o", "%i")
        assert str(sleeper) not in out.split()
    finally:
        with as_admin.admin as client:
            client.cancel(sleeper)


def test_scancel_and_sacct(as_admin: Cluster, capsys: pytest.CaptureFixture[str]) -> None:
    with as_admin.admin as client:
        sleeper = client.submit(job(["sleep", "60"], tenant="team-a", name="victim"))
        done = client.submit(job(["sh", "-c", "exit 3"], tenant="team-a", name="three"))
        client.wait(done, timeout=30)
    code, out, err = run(capsys, "scancel", "-v", str(sleeper))
    assert code == 0, err
    assert f"scancel: Terminating job {sleeper}" in err
    with as_admin.admin as client:
        assert client.wait(sleeper, timeout=30)["state"] == "CANCELLED"
    code, _, err = run(capsys, "scancel", "999999")
    assert code == 1
    assert err == "scancel: error: Kill job error on job id 999999: Invalid job id specified\n"
    code, _, err = run(capsys, "scancel", "12_x")
    assert code == 1 and err.startswith("scancel: error: Invalid job id 12_x")
    code, out, err = run(
        capsys, "sacct", "-P", "-j", f"{done},{sleeper}", "-o", "JobID,State,ExitCode"
    )
    assert code == 0, err
    assert out.splitlines() == [
        "JobID|State|ExitCode",
        f"{sleeper}|CANCELLED|{_exit_of(as_admin, sleeper)}",
        f"{done}|FAILED|3:0",
    ]
    code, out, _ = run(capsys, "sacct", "-n", "-p", "-j", str(done), "-o", "JobName,State")
    assert out == "three|FAILED|\n"
    code, out, _ = run(capsys, "sacct", "-j", str(done))
    assert out.splitlines()[1].startswith("------------ ---------- ")


def test_sacct_and_sshare_read_the_usage_ledger(
    as_admin: Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    with as_admin.admin as client:
        job_id = client.submit(
            job(
                ["sleep", "1"],
                tenant="team-a",
                requests={"cpu": "2", "memory": "1Gi", "nvidia.com/gpu": "1"},
            )
        )
        client.wait(job_id, timeout=30)
    code, out, err = run(
        capsys, "sacct", "-n", "-P", "-j", str(job_id), "-o", "JobID,AllocTRES,Charged,GPUHours"
    )
    assert code == 0, err
    jid, tres, charged, gpu_hours = out.strip().split("|")
    # No TRESBillingWeights: billing is the CPUs; charged for about one second.
    assert (jid, tres) == (str(job_id), "billing=2,cpu=2,gres/gpu=1,mem=1G,node=1")
    assert 2 <= int(charged) <= 10 and gpu_hours == "0.00"
    code, out, err = run(capsys, "sshare", "-a", "-P", "-A", "team-a")
    assert code == 0, err
    lines = [line.split("|") for line in out.splitlines()[1:]]
    assert {f[0].strip() for f in lines} == {"team-a"}  # the account's rows only
    [user_row] = [f for f in lines if f[1] == as_admin.admin.whoami()["user"]]
    assert int(user_row[4]) >= 2  # RawUsage: decayed billing-seconds
    assert float(user_row[6]) > 0  # a user's FairShare


def _exit_of(cluster: Cluster, job_id: int) -> str:
    with cluster.admin as client:
        view = client.get(job_id)
    if view.get("signal"):
        return f"0:{view['signal']}"
    return f"{view.get('exit_code') or 0}:0"


def test_sinfo_lists_partitions_and_nodes(
    as_admin: Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(capsys, "sinfo")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == "PARTITION AVAIL  TIMELIMIT  NODES  STATE NODELIST"
    partitions = {line.split()[0].rstrip("*") for line in lines[1:]}
    assert partitions == {"team-a", "team-b"}
    total = sum(int(line.split()[3]) for line in lines[1:] if line.startswith("team-a"))
    assert total == 6
    code, out, _ = run(capsys, "sinfo", "-h", "-N", "-p", "team-b", "-o", "%N %G")
    assert sorted(out.splitlines())[0] == "gpu-h100-0 gpu:8"
    code, out, _ = run(capsys, "scontrol", "show", "partition", "team-a")
    assert out.startswith("PartitionName=team-a\n")
    assert "TotalNodes=6" in out
    code, out, _ = run(capsys, "scontrol", "-o", "show", "node", "gpu-l40s-0")
    assert out.startswith("NodeName=gpu-l40s-0 ") and "Gres=gpu:4" in out


def test_scontrol_show_job(as_admin: Cluster, capsys: pytest.CaptureFixture[str]) -> None:
    with as_admin.admin as client:
        job_id = client.submit(job(["true"], tenant="team-a", name="shown"))
        client.wait(job_id, timeout=30)
    code, out, err = run(capsys, "scontrol", "show", "job", str(job_id))
    assert code == 0, err
    assert out.startswith(f"JobId={job_id} JobName=shown\n   UserId=")
    assert "   JobState=COMPLETED Reason=None Dependency=(null)\n" in out
    assert "ExitCode=0:0" in out
    code, _, err = run(capsys, "scontrol", "show", "job", "999999")
    assert (code, err) == (1, "slurm_load_jobs error: Invalid job id specified\n")


def test_sshare_and_sprio(as_admin: Cluster, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "sshare")
    assert code == 0, err
    assert out.splitlines()[0].split() == [
        "Account",
        "User",
        "RawShares",
        "NormShares",
        "RawUsage",
        "EffectvUsage",
        "FairShare",
    ]
    assert out.splitlines()[2].startswith("root ")
    assert any(line.startswith(" team-a ") for line in out.splitlines())
    code, out, err = run(capsys, "sprio")
    assert code == 0, err
    assert out.split()[:3] == ["JOBID", "PARTITION", "PRIORITY"]


def test_shims_run_the_commands(
    as_admin: Cluster, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, out, _ = run(capsys, "shims", str(tmp_path))
    assert code == 0
    assert f"wrote {tmp_path}/squeue" in out and "PATH" in out
    done = subprocess.run(
        [str(tmp_path / "scontrol"), "show", "hostnames", "n[1-2]"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert (done.returncode, done.stdout) == (0, "n1\nn2\n"), done.stderr
    assert Path(sys.executable).exists()


def test_slurm_fields_in_squeue(as_admin: Cluster, capsys: pytest.CaptureFixture[str]) -> None:
    if not _server_has(as_admin, "slurm_fields"):
        pytest.skip("server does not give Slurm job fields yet (slurm_reason, num_cpus)")
    with as_admin.admin as client:
        job_id = client.submit(job(["true"], tenant="team-a", name="fields"))
        client.wait(job_id, timeout=30)
    _, out, _ = run(capsys, "sacct", "-n", "-P", "-j", str(job_id), "-o", "Partition,Account")
    assert out == "team-a|team-a\n"


def test_hold_and_release(as_admin: Cluster, capsys: pytest.CaptureFixture[str]) -> None:
    if not _server_has(as_admin, "hold"):
        pytest.skip("server has no POST /api/v1/jobs/{id}/hold yet")
    with as_admin.admin as client:
        # more GPUs than the cluster has keeps it pending
        job_id = client.submit(
            job(["true"], tenant="team-a", requests={"cpu": "1", "nvidia.com/gpu": "64"})
        )
    try:
        assert run(capsys, "scontrol", "hold", str(job_id))[0] == 0
        _, out, _ = run(capsys, "squeue", "-h", "-j", str(job_id), "-o", "%t %r")
        assert out in ("PD JobHeldUser\n", "PD JobHeldAdmin\n")  # admin holds: JobHeldAdmin
        assert run(capsys, "scontrol", "release", str(job_id))[0] == 0
        _, out, _ = run(capsys, "squeue", "-h", "-j", str(job_id), "-o", "%r")
        assert not out.startswith("JobHeld")
    finally:
        run(capsys, "scancel", str(job_id))


def test_sbatch_submits_and_test_only_validates(
    as_admin: Cluster,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)
    script = tmp_path / "hello.sbatch"
    script.write_text(
        "#!/bin/sh\n#SBATCH -p team-a -A team-a -J hello -o %x-%j.out\n"
        "echo hello $SLURM_JOB_NAME $SLURM_JOB_PARTITION $SLURM_NNODES\n"
    )
    code, out, err = run(capsys, "sbatch", "--parsable", str(script))
    assert code == 0, err
    job_id = int(out.strip())
    with as_admin.admin as client:
        assert client.wait(job_id, timeout=30)["state"] == "COMPLETED"
    assert (tmp_path / f"hello-{job_id}.out").read_text() == "hello hello team-a 1\n"
    code, out, err = run(
        capsys, "sbatch", "--test-only", "-p", "team-b", "-A", "team-b", "-c", "4", "--wrap", "true"
    )
    assert code == 0, err
    # It fits now: the engine's plan is the present.
    expected = "using 4 processors on nodes (null) in partition team-b\n"
    when = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d"
    assert re.fullmatch(f"sbatch: Job 0 to start at {when} {re.escape(expected)}", err), err
    code, out, err = run(
        capsys, "sbatch", "--test-only", "-p", "nope", "-A", "team-a", "--wrap", "true"
    )
    assert code == 1 and "no ClusterQueue named 'nope'" in err
