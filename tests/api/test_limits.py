"""PriorityClass (QOS) and tenant limits through the API: what is refused at submit time,
what waits with Slurm's reason code, and that limits round-trip as manifests."""

from __future__ import annotations

import time
from typing import Any

import pytest

from phalanx.errors import Invalid
from tests.api.server import Cluster, job

POLICY = "Job violates accounting/QOS policy"

CAPPED = """\
apiVersion: phalanx.io/v1
kind: PriorityClass
metadata:
  name: capped
spec:
  value: 50
  limits:
    maxTRESPerJob: {nvidia.com/gpu: 4}
    maxWall: "1:00:00"
    maxJobsPerUser: 1
    maxSubmitJobsPerUser: 3
"""

TEAM_B = """\
apiVersion: phalanx.io/v1
kind: Tenant
metadata:
  name: team-b
spec:
  allocation: 1
  limits:
    grpTRES: {nvidia.com/gpu: 8}
    maxSubmitJobs: 2
"""


@pytest.fixture(scope="module", autouse=True)
def limits(cluster: Cluster) -> None:
    with cluster.admin as admin:
        admin.apply(CAPPED + "---\n" + TEAM_B, source="limits.yaml")


def _wait(cluster: Cluster, job_id: int, check: Any, timeout: float = 30) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    with cluster.admin as admin:
        while True:
            view = admin.get(job_id)
            if check(view):
                return view
            assert time.monotonic() < deadline, view
            time.sleep(0.05)


def test_limits_round_trip_as_manifests(cluster: Cluster) -> None:
    with cluster.admin as admin:
        pc = admin.get_object("pc", "capped")
        assert pc["apiVersion"] == "phalanx.io/v1"
        assert pc["spec"]["limits"] == {
            "maxTRESPerJob": {"nvidia.com/gpu": "4"},
            "maxWall": 3600,
            "maxJobsPerUser": 1,
            "maxSubmitJobsPerUser": 3,
        }
        tenant = admin.get_object("tenant", "team-b")
        assert tenant["spec"]["limits"]["grpTRES"] == {"nvidia.com/gpu": "8"}
        again = admin.apply([pc, tenant], source="roundtrip")
        assert [r["outcome"] for r in again] == ["unchanged", "unchanged"]
        # A Kueue WorkloadPriorityClass (no limits) is still written as Kueue's.
        assert admin.get_object("pc", "high")["kind"] == "WorkloadPriorityClass"


def test_bad_limits_name_the_field(cluster: Cluster) -> None:
    bad = CAPPED.replace('maxWall: "1:00:00"', "maxWall: soon")
    with cluster.admin as admin, pytest.raises(Invalid) as err:
        admin.apply(bad, source="bad.yaml")
    assert "bad.yaml:9: PriorityClass/capped (document 1): spec.limits.maxWall:" in str(err.value)


def test_a_job_over_max_tres_per_job_is_refused(cluster: Cluster) -> None:
    big = job(["true"], priorityClass="capped", requests={"nvidia.com/gpu": "8"})
    with cluster.alice as alice, pytest.raises(Invalid) as err:
        alice.submit(big)
    message = str(err.value)
    assert POLICY in message
    assert "podSets:" in message
    assert "8 nvidia.com/gpu, over PriorityClass capped's maxTRESPerJob of 4" in message


def test_a_time_limit_over_max_wall_is_refused(cluster: Cluster) -> None:
    long = job(["true"], priorityClass="capped", timeLimit=7200)
    with cluster.alice as alice, pytest.raises(Invalid) as err:
        alice.submit(long)
    assert "run.timeLimit:" in str(err.value)
    assert "time limit 02:00:00 is over PriorityClass capped's maxWall of 01:00:00" in str(
        err.value
    )


def test_a_tenants_grp_tres_refuses_what_can_never_run(cluster: Cluster) -> None:
    big = job(["true"], requests={"nvidia.com/gpu": "16"})
    with cluster.bob as bob, pytest.raises(Invalid) as err:
        bob.submit(big)
    assert "over tenant team-b's grpTRES of 8" in str(err.value)


def test_max_jobs_per_user_pends_and_submit_limit_refuses(cluster: Cluster) -> None:
    sleeper = job(["sleep", "30"], priorityClass="capped")
    with cluster.alice as alice:
        first, second = alice.submit_many([sleeper, sleeper])
        # No time limit given: the class's maxWall is the job's (as Slurm does).
        assert alice.get(first)["time_limit"] == 3600
        _wait(cluster, first, lambda v: v["state"] == "RUNNING")
        held = _wait(cluster, second, lambda v: v["reason"] == "QOSMaxJobsPerUserLimit")
        assert held["state"] == "PENDING"
        assert held["message"] == (
            "QOSMaxJobsPerUserLimit: user alice would run 2 jobs in PriorityClass capped, "
            "limit 1 (1 running)"
        )
        # Two more would make four pending or running jobs: the whole batch is refused.
        with pytest.raises(Invalid) as err:
            alice.submit_many([sleeper, sleeper])
        assert POLICY in str(err.value)
        assert "QOSMaxSubmitJobPerUserLimit: user alice would have 4 pending or running jobs" in (
            str(err.value)
        )
        third = alice.submit(sleeper)
        with pytest.raises(Invalid, match="QOSMaxSubmitJobPerUserLimit"):
            alice.submit(sleeper)
        alice.cancel(first)
        _wait(cluster, second, lambda v: v["state"] == "RUNNING")
        for job_id in (second, third):
            alice.cancel(job_id)
        _wait(cluster, third, lambda v: v["state"] == "CANCELLED")
        # Finished jobs no longer count.
        alice.cancel(alice.submit(sleeper))


def test_tenant_max_submit_jobs_counts_the_tenants_jobs(cluster: Cluster) -> None:
    sleeper = job(["sleep", "30"])
    with cluster.bob as bob:
        ids = bob.submit_many([sleeper, sleeper])
        with pytest.raises(Invalid) as err:
            bob.submit(sleeper)
        assert "AssocGrpSubmitJobsLimit: tenant team-b would have 3 pending or running jobs" in (
            str(err.value)
        )
        for job_id in ids:
            bob.cancel(job_id)
