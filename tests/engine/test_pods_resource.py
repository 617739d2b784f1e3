"""Kueue's ``pods`` resource: a ClusterQueue whose resource group covers it is charged
one per pod, in quota, borrowing, preemption, backfill plans and pending reasons."""

from __future__ import annotations

from phalanx.engine import Engine, EngineConfig, Submit, Upsert
from phalanx.engine.config import BackfillConfig
from phalanx.engine.decisions import Admit, Pending
from phalanx.model import GPU, Job, PodSet
from tests.engine.helpers import cluster_queue, flavor, node, quota


def _engine(pods: int, config: EngineConfig | None = None, cohort: str | None = None) -> Engine:
    engine = Engine(config or EngineConfig())
    engine.apply(Upsert(flavor("f")))
    for i in range(4):
        engine.apply(Upsert(node(f"n{i}")))
    spec = {"f": [quota(GPU, 32), quota("cpu", 384), quota("pods", pods)]}
    engine.apply(Upsert(cluster_queue("cq", spec, cohort=cohort)))
    return engine


def _job(job_id: int, pods: int, submit: float = 0.0, limit: float | None = None) -> Job:
    pod_set = PodSet(count=pods, requests={"cpu": 1})
    return Job(
        id=job_id, cluster_queue="cq", submit_time=submit, pod_sets=[pod_set], time_limit=limit
    )


def test_a_five_pod_quota_admits_five_pods_not_six() -> None:
    engine = _engine(pods=5)
    engine.apply(Submit(_job(1, 3)))
    engine.apply(Submit(_job(2, 3, submit=1.0)))
    decisions = engine.cycle(2.0)
    assert [d.job_id for d in decisions if isinstance(d, Admit)] == [1]
    [pending] = [d for d in decisions if isinstance(d, Pending) and d.job_id == 2]
    assert "pods" in pending.reason.message
    assert engine.jobs[1].admission.usage[("f", "pods")] == 3  # type: ignore[union-attr]


def test_a_job_of_more_pods_than_the_quota_never_fits() -> None:
    engine = _engine(pods=5)
    engine.apply(Submit(_job(1, 6)))
    [decision] = engine.cycle(0.0)
    assert isinstance(decision, Pending)
    assert "pods" in decision.reason.message


def test_pods_are_not_charged_where_no_group_covers_them() -> None:
    engine = Engine(EngineConfig())
    engine.apply(Upsert(flavor("f")))
    engine.apply(Upsert(node("n0")))
    engine.apply(Upsert(cluster_queue("cq", {"f": [quota(GPU, 8), quota("cpu", 96)]})))
    engine.apply(Submit(_job(1, 50)))
    assert [type(d) for d in engine.cycle(0.0)] == [Admit]
    assert ("f", "pods") not in engine.jobs[1].admission.usage  # type: ignore[union-attr]


def test_a_reservation_holds_the_pods_it_needs() -> None:
    engine = _engine(pods=5, config=EngineConfig(backfill=BackfillConfig(interval_s=0)))
    engine.apply(Submit(_job(1, 4, limit=600)))
    engine.cycle(0.0)
    engine.apply(Submit(_job(2, 5, submit=1.0, limit=600)))
    engine.cycle(1.0)
    [reservation] = engine.reservations()
    assert reservation.job_id == 2 and dict(reservation.quota).get(("f", "pods")) == 1
    # One more pod would outlive the reservation's start: it waits.
    engine.apply(Submit(_job(3, 1, submit=2.0, limit=3600)))
    assert not [d for d in engine.cycle(2.0) if isinstance(d, Admit)]
