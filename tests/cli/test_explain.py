"""``phalanx explain JOB [-o json]`` against a real server, through ``main([...])``."""

from __future__ import annotations

import json

import pytest

from phalanx.cli.main import main
from tests.api.server import Cluster


@pytest.fixture
def as_alice(cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> Cluster:
    monkeypatch.setenv("PHALANX_URL", cluster.url)
    monkeypatch.setenv("PHALANX_TOKEN", cluster.alice_token)
    monkeypatch.setenv("NO_COLOR", "1")
    return cluster


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_explain_a_pending_job(as_alice: Cluster, capsys: pytest.CaptureFixture[str]) -> None:
    # 32 GPUs in one gang: more than team-a's 16 H100s plus its borrowingLimit of 8.
    code, out, err = run(capsys, "submit", "--gpus", "32", "--nodes", "4", "--", "true")
    assert code == 0, err
    job_id = int(out)

    code, out, err = run(capsys, "explain", str(job_id))
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].startswith(f"Job {job_id} is pending: ")
    assert "in ClusterQueue team-a" in lines[0]
    assert lines[1].startswith("Priority ")
    assert any(
        line.startswith("It needs 32 nvidia.com/gpu in flavor h100-infiniband, more than the 24")
        for line in lines
    ), out

    code, out, err = run(capsys, "explain", str(job_id), "-o", "json")
    assert code == 0, err
    answer = json.loads(out)
    assert answer["id"] == job_id and answer["scheduler"] == "pending"
    assert answer["reason"]["code"] == "ExceedsMaxQuota"
    assert answer["position"]["queue"]["of"] >= 1
    assert answer["text"].splitlines()[0] == lines[0]
    run(capsys, "cancel", str(job_id))


def test_another_tenants_job_is_not_found(
    as_alice: Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    with as_alice.bob as bob:
        theirs = bob.submit(
            {"podSets": [{"count": 1, "requests": {"cpu": "1"}}], "run": {"command": ["true"]}}
        )
    code, _, err = run(capsys, "explain", str(theirs))
    assert code == 1
    assert err.splitlines() == [f"phalanx: error: job {theirs} not found"]
    code, _, err = run(capsys, "explain", "nope")
    assert code != 0 and "is not a job id" in err
