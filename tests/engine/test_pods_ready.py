"""waitForPodsReady: timeout evictions, requeue backoff, deactivation, blockAdmission."""

from __future__ import annotations

from typing import Any

from phalanx.engine import (
    Deactivate,
    Engine,
    EngineConfig,
    Evict,
    PodsReady,
    Requeue,
    Submit,
    Upsert,
    WaitForPodsReadyConfig,
    export_state,
    load_state,
)
from tests.engine.helpers import admitted_ids, cluster_queue, flavor, job, node


def _engine(**ready: Any) -> Engine:
    engine = Engine(
        EngineConfig.for_preset("kueue", wait_for_pods_ready=WaitForPodsReadyConfig(**ready))
    )
    for obj in (node("n0"), flavor("f"), cluster_queue("cq", {"f": 8})):
        engine.apply(Upsert(obj))
    return engine


def _evicts(decisions: list[Any]) -> list[Evict]:
    return [d for d in decisions if isinstance(d, Evict)]


def test_timeout_evicts_then_backoff_doubles() -> None:
    engine = _engine(timeout_s=100, backoff_base_s=60, backoff_max_s=100)
    engine.apply(Submit(job("cq", gpus=8, id=1)))
    assert admitted_ids(engine.cycle(0.0)) == [1]
    assert engine.next_wakeup() == 100.0
    assert not _evicts(engine.cycle(99.0))
    evicts = _evicts(engine.cycle(100.0))
    assert [(e.job_id, e.reason) for e in evicts] == [(1, "PodsReadyTimeout")]
    engine.apply(Requeue(1))
    reason = engine.explain(1)
    assert reason is not None and reason.code == "RequeueBackoff"
    assert engine.next_wakeup() == 160.0
    assert not admitted_ids(engine.cycle(159.0))
    assert admitted_ids(engine.cycle(160.0)) == [1]
    # Second timeout: 60 * 2 = 120, capped at 100.
    _evicts(engine.cycle(260.0))
    engine.apply(Requeue(1))
    assert engine.next_wakeup() == 360.0


def test_pods_ready_stops_the_clock() -> None:
    engine = _engine(timeout_s=100)
    engine.apply(Submit(job("cq", gpus=8, id=1)))
    engine.cycle(0.0)
    engine.apply(PodsReady(1, 50.0))
    assert not _evicts(engine.cycle(500.0))
    assert engine.next_wakeup() is None


def test_backoff_limit_deactivates() -> None:
    engine = _engine(timeout_s=10, backoff_limit_count=1, backoff_base_s=1)
    engine.apply(Submit(job("cq", gpus=8, id=1)))
    engine.cycle(0.0)
    engine.cycle(10.0)
    engine.apply(Requeue(1))
    assert admitted_ids(engine.cycle(11.0)) == [1]
    assert _evicts(engine.cycle(21.0))
    engine.apply(Requeue(1))
    decisions = engine.cycle(22.0)
    deactivated = [d for d in decisions if isinstance(d, Deactivate)]
    assert [(d.job_id, d.reason) for d in deactivated] == [(1, "RequeuingLimitExceeded")]
    assert 1 not in engine.jobs


def test_requeue_from_eviction_time_goes_behind_newer_jobs() -> None:
    engine = _engine(timeout_s=10, backoff_base_s=1)
    engine.apply(Submit(job("cq", gpus=8, id=1, submit=0.0)))
    engine.cycle(0.0)
    engine.apply(Submit(job("cq", gpus=8, id=2, submit=5.0)))
    engine.cycle(10.0)
    engine.apply(Requeue(1))
    # Job 1 now queues from its eviction (10) behind job 2 (5).
    assert admitted_ids(engine.cycle(20.0)) == [2]


def test_requeue_from_creation_keeps_its_place() -> None:
    engine = _engine(timeout_s=10, backoff_base_s=1, requeuing_timestamp="Creation")
    engine.apply(Submit(job("cq", gpus=8, id=1, submit=0.0)))
    engine.cycle(0.0)
    engine.apply(Submit(job("cq", gpus=8, id=2, submit=5.0)))
    engine.cycle(10.0)
    engine.apply(Requeue(1))
    assert admitted_ids(engine.cycle(20.0)) == [1]


def test_block_admission_until_pods_ready() -> None:
    engine = _engine(timeout_s=100, block_admission=True)
    engine.apply(Submit(job("cq", gpus=1, id=1)))
    engine.apply(Submit(job("cq", gpus=1, id=2, submit=1.0)))
    assert admitted_ids(engine.cycle(0.0)) == [1]
    assert not admitted_ids(engine.cycle(1.0))
    reason = engine.explain(2)
    assert reason is not None and reason.code == "WaitingForPodsReady"
    engine.apply(PodsReady(1, 2.0))
    assert admitted_ids(engine.cycle(3.0)) == [2]


def test_state_round_trip_keeps_deadlines_and_backoff() -> None:
    engine = _engine(timeout_s=100, backoff_base_s=60)
    engine.apply(Submit(job("cq", gpus=8, id=1)))
    engine.cycle(0.0)
    engine.cycle(100.0)
    engine.apply(Requeue(1))
    loaded = load_state(export_state(engine))
    assert loaded.next_wakeup() == engine.next_wakeup() == 160.0
    assert admitted_ids(loaded.cycle(160.0)) == [1]
