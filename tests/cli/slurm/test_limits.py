"""QOS limits as Slurm users see them: squeue/scontrol reasons and sbatch's refusal."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from phalanx.cli.main import main
from tests.api.server import Cluster, job

QOS = """\
apiVersion: phalanx.io/v1
kind: PriorityClass
metadata:
  name: single
spec:
  value: 10
  limits:
    maxJobsPerUser: 1
    maxTRESPerJob: {nvidia.com/gpu: 2}
"""


@pytest.fixture
def as_admin(cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> Cluster:
    monkeypatch.setenv("PHALANX_URL", cluster.url)
    monkeypatch.setenv("PHALANX_TOKEN", cluster.admin_token)
    with cluster.admin as admin:
        admin.apply(QOS, source="qos.yaml")
    return cluster


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_squeue_and_scontrol_show_the_qos_reason(
    as_admin: Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    sleeper = job(["sleep", "30"], tenant="team-a", priorityClass="single")
    with as_admin.admin as client:
        first, second = client.submit_many([sleeper, sleeper])
    try:
        deadline = time.monotonic() + 30
        while True:
            _, out, _ = run(capsys, "squeue", "-h", "-j", str(second), "-o", "%t %r")
            if out == "PD QOSMaxJobsPerUserLimit\n" or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert out == "PD QOSMaxJobsPerUserLimit\n"
        _, out, _ = run(capsys, "scontrol", "show", "job", str(second))
        assert "Reason=QOSMaxJobsPerUserLimit" in out
    finally:
        run(capsys, "scancel", str(first), str(second))


def test_sbatch_over_a_per_job_limit_is_refused(
    as_admin: Cluster, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    script = tmp_path / "big.sh"
    script.write_text("#!/bin/bash\n#SBATCH --gpus=4\n#SBATCH --qos=single\ntrue\n")
    code, _, err = run(capsys, "sbatch", "-A", "team-a", "-p", "team-a", str(script))
    assert code != 0
    assert "sbatch: error: Batch job submission failed: " in err
    assert "Job violates accounting/QOS policy (job submit limit, user's size and/or time " in err
    assert "over PriorityClass single's maxTRESPerJob of 2" in err
    assert "Traceback" not in err


def test_get_priority_classes_table_shows_value_and_limits() -> None:
    from phalanx.cli.render import object_table
    from phalanx.dialects.kueue.manifests import load_text, to_manifest

    kueue = "apiVersion: kueue.x-k8s.io/v1beta2\nkind: WorkloadPriorityClass\n"
    kueue += "metadata: {name: high}\nvalue: 1000\ndescription: Deadlines.\n"
    items = [to_manifest(m.kind, m.obj) for m in load_text(QOS + "---\n" + kueue)]
    header, rows = object_table("PriorityClass", items)
    assert header == ["NAME", "VALUE", "DESCRIPTION", "LIMITS"]
    assert rows == [
        ["single", "10", "", "maxTRESPerJob=gpu=2,maxJobsPerUser=1"],
        ["high", "1000", "Deadlines.", ""],
    ]
