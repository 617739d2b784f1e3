"""A heterogeneous job end to end on a real server: ``sbatch`` with ``#SBATCH hetjob``, its
batch environment, ``srun --het-group`` and ``srun a : b`` steps in it, and squeue,
scontrol and sacct showing a line (a record) per component, as Slurm 22.05 does."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from phalanx.cli.main import main
from phalanx.dialects.slurm.environment import node_list
from tests.api.server import Cluster, job

SCRIPT = """#!/bin/bash
#SBATCH -J hetlive -p team-a -A team-a -o %x-%j.out
#SBATCH -N1 --gpus-per-node=2
#SBATCH hetjob
#SBATCH -p team-a -N2 --gpus-per-node=4 --ntasks-per-node=1
env | grep -E '^(SLURM_|CUDA_VISIBLE_DEVICES=)' | sort > batch.env
srun -l --het-group=1 sh -c 'echo G1 $SLURM_PROCID $SLURMD_NODENAME $SLURM_JOB_ID \
$SLURM_NTASKS $SLURM_JOB_NODELIST $CUDA_VISIBLE_DEVICES'
srun sh -c 'echo G0 $SLURM_PROCID $SLURMD_NODENAME $SLURM_NTASKS'
srun -l -n1 sh -c 'echo M0 $SLURM_PROCID $SLURM_NTASKS $SLURM_STEP_ID' : \
-n2 sh -c 'echo M1 $SLURM_PROCID $SLURM_NTASKS $SLURM_STEP_ID'
srun --het-group=2 true; echo rc=$?
"""


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def as_admin(cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> Cluster:
    monkeypatch.setenv("PHALANX_URL", cluster.url)
    monkeypatch.setenv("PHALANX_TOKEN", cluster.admin_token)
    return cluster


def _env(path: Path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)


def test_a_hetjob_runs_as_one_job_with_slurms_environment_and_steps(
    as_admin: Cluster,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "het.sbatch").write_text(SCRIPT)
    code, out, err = run(capsys, "sbatch", "--parsable", "het.sbatch")
    assert code == 0, err
    job_id = int(out.strip())
    with as_admin.admin as client:
        view = client.wait(job_id, timeout=60)
        # The components take the ids after the job's (as in Slurm): the next job gets +2.
        after = client.submit(job(["true"], tenant="team-a"))
    output = (tmp_path / f"hetlive-{job_id}.out").read_text()
    assert view["state"] == "COMPLETED", output
    assert after == job_id + 2
    first, second = view["het_components"]
    assert (first["id"], second["id"]) == (job_id, job_id + 1)
    assert (len(first["nodes"]), len(second["nodes"]), first["gpus"], second["gpus"]) == (
        1,
        2,
        2,
        8,
    )
    assert [p["name"] for p in view["pod_sets"]] == ["het-group-0", "het-group-1"]

    env = _env(tmp_path / "batch.env")
    for offset, component, gpus in ((0, first, "2"), (1, second, "4")):
        for kind in ("HET", "PACK"):
            assert env[f"SLURM_JOB_ID_{kind}_GROUP_{offset}"] == str(job_id + offset)
            assert env[f"SLURM_JOB_NODELIST_{kind}_GROUP_{offset}"] == node_list(component["nodes"])
            assert env[f"SLURM_JOB_NUM_NODES_{kind}_GROUP_{offset}"] == str(len(component["nodes"]))
            assert env[f"SLURM_GPUS_PER_NODE_{kind}_GROUP_{offset}"] == gpus
            assert env[f"SLURM_JOB_PARTITION_{kind}_GROUP_{offset}"] == "team-a"
            assert env[f"SLURM_JOB_NAME_{kind}_GROUP_{offset}"] == "hetlive"
    assert env["SLURM_HET_SIZE"] == env["SLURM_PACK_SIZE"] == "2"
    assert env["SLURM_NTASKS_HET_GROUP_1"] == "2"
    assert env["SLURM_NTASKS_PER_NODE_HET_GROUP_1"] == "1"
    # The plain names are component 0's; its options only suffixed, as in Slurm 22.05.
    assert env["SLURM_JOB_ID"] == str(job_id)
    assert env["SLURM_JOB_NODELIST"] == first["nodes"][0]
    assert env["SLURM_JOB_NUM_NODES"] == "1"
    assert len(env["SLURM_JOB_GPUS"].split(",")) == 2
    assert "SLURM_GPUS_PER_NODE" not in env and "SLURM_NTASKS" not in env

    lines = output.splitlines()
    g1 = sorted(line for line in lines if " G1 " in line)
    assert len(g1) == 2, output
    for rank, line in enumerate(g1):
        label, _, procid, node, jobid, ntasks, nodelist, cuda = line.split()
        assert (label, procid, jobid, ntasks) == (f"{rank}:", str(rank), str(job_id), "2")
        assert node == second["nodes"][rank] and nodelist == node_list(second["nodes"])
        assert len(cuda.split(",")) == 4
    assert [line for line in lines if line.startswith("G0 ")] == [f"G0 0 {first['nodes'][0]} 1"]
    mpmd = sorted(line for line in lines if " M0 " in line or " M1 " in line)
    assert mpmd == ["0: M0 0 3 2", "1: M1 1 3 2", "2: M1 2 3 2"], output
    assert "srun: error: Requested het-group offset exceeds highest hetjob index (2 > 1)" in lines
    assert "rc=1" in lines

    # sacct: a line per component, the batch step on +0, each step where its tasks ran.
    code, out, err = run(
        capsys, "sacct", "-P", "-j", str(job_id), "-o", "JobID,JobIDRaw,JobName,State,NTasks"
    )
    assert code == 0, err
    assert out.splitlines() == [
        "JobID|JobIDRaw|JobName|State|NTasks",
        f"{job_id}+0|{job_id}|hetlive|COMPLETED|",
        f"{job_id}+0.batch|{job_id}.batch|batch|COMPLETED|1",
        f"{job_id}+0.1|{job_id}.1|sh|COMPLETED|1",
        f"{job_id}+0.2|{job_id}.2|sh|COMPLETED|1",
        f"{job_id}+1|{job_id + 1}|hetlive|COMPLETED|",
        f"{job_id}+1.0|{job_id + 1}.0|sh|COMPLETED|2",
        f"{job_id}+1.2|{job_id + 1}.2|sh|COMPLETED|2",
    ]
    code, out, _ = run(capsys, "sacct", "-P", "-n", "-X", "-j", str(job_id + 1), "-o", "JobID")
    assert out.splitlines() == [f"{job_id}+1"]


def test_squeue_scontrol_and_scancel_see_each_component(
    as_admin: Cluster,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)
    code, out, err = run(
        capsys,
        "sbatch",
        "--parsable",
        "-J",
        "hetsleep",
        "-A",
        "team-a",
        "-p",
        "team-a",
        "-N1",
        "--gpus-per-node=2",
        ":",
        "-p",
        "team-a",
        "-N2",
        "--gpus-per-node=4",
        "--wrap",
        "sleep 60",
    )
    assert code == 0, err
    job_id = int(out.strip())
    try:
        with as_admin.admin as client:
            for _ in range(200):
                view = client.get(job_id)
                if view["state"] == "RUNNING":
                    break
                time.sleep(0.05)
        first, second = view["het_components"]
        nodes0, nodes1 = node_list(first["nodes"]), node_list(second["nodes"])
        code, out, err = run(capsys, "squeue", "-j", str(job_id), "-o", "%i|%A|%F|%j|%T|%N|%D")
        assert code == 0, err
        assert out.splitlines() == [
            "JOBID|JOBID|ARRAY_JOB_ID|NAME|STATE|NODELIST|NODES",
            f"{job_id}+0|{job_id}|{job_id}|hetsleep|RUNNING|{nodes0}|1",
            f"{job_id}+1|{job_id + 1}|{job_id + 1}|hetsleep|RUNNING|{nodes1}|2",
        ]
        # A component's own id lists that component; `N+1` the whole job (Slurm's squeue).
        code, out, _ = run(capsys, "squeue", "-h", "-j", str(job_id + 1), "-o", "%i")
        assert out.splitlines() == [f"{job_id}+1"]
        code, out, _ = run(capsys, "squeue", "-h", "-j", f"{job_id}+1", "-o", "%i")
        assert out.splitlines() == [f"{job_id}+0", f"{job_id}+1"]
        code, out, _ = run(capsys, "squeue")
        rows = [line.split() for line in out.splitlines()[1:] if "hetsleep" in line]
        assert [r[0] for r in rows] == [f"{job_id}+0", f"{job_id}+1"]
        assert [r[-1] for r in rows] == [nodes0, nodes1]

        code, out, err = run(capsys, "scontrol", "show", "job", str(job_id))
        assert code == 0, err
        records = [r for r in out.split("\n\n") if r.strip()]
        assert len(records) == 2
        assert records[0].splitlines()[:2] == [
            f"JobId={job_id} HetJobId={job_id} HetJobOffset=0 JobName=hetsleep",
            f"   HetJobIdSet={job_id}-{job_id + 1}",
        ]
        assert records[1].splitlines()[0] == (
            f"JobId={job_id + 1} HetJobId={job_id} HetJobOffset=1 JobName=hetsleep"
        )
        assert f"   NodeList={nodes1}" in records[1].splitlines()
        assert re.search(r"NumNodes=2 NumCPUs=2 NumTasks=2", records[1])
        for target in (str(job_id + 1), f"{job_id}+1"):
            code, out, _ = run(capsys, "scontrol", "show", "job", target)
            assert code == 0 and out.startswith(f"JobId={job_id + 1} HetJobId={job_id} "), out

        code, _, err = run(capsys, "scancel", f"{job_id}+1")
        assert code == 1
        assert "phalanx runs a heterogeneous job as one job and cancels it whole" in err
    finally:
        run(capsys, "scancel", str(job_id))
    with as_admin.admin as client:
        assert client.wait(job_id, timeout=30)["state"] == "CANCELLED"


def test_components_in_different_partitions_are_refused(
    as_admin: Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(
        capsys, "sbatch", "-A", "team-a", "-p", "team-a", ":", "-p", "team-b", "--wrap", "true"
    )
    assert code == 1
    assert "heterogeneous job components in different partitions (team-a, team-b)" in err
    # A component without --partition is in the default partition, as in Slurm; here
    # there is none, so the server refuses it.
    code, _, err = run(capsys, "sbatch", "-A", "team-a", "-p", "team-a", ":", "--wrap", "true")
    assert code == 1
    assert "component 1 has no --partition and there is no default partition" in err
