"""Kueue's cycle shape (one head per ClusterQueue per cycle) and namespaceSelector."""

from __future__ import annotations

from typing import Any

from phalanx.engine import Engine, EngineConfig, Pending, Submit, Upsert
from phalanx.model import ClusterQueue, Tenant
from tests.engine.helpers import admits, admitted_ids, cluster_queue, flavor, job, local_queue, node


def _engine(*objects: Any, **config: Any) -> Engine:
    engine = Engine(EngineConfig.for_preset("kueue", **config))
    for obj in objects:
        engine.apply(Upsert(obj))
    return engine


def test_kueue_preset_takes_one_head_per_cluster_queue_per_cycle() -> None:
    engine = _engine(
        node("n0"), flavor("f"), cluster_queue("a", {"f": 4}), cluster_queue("b", {"f": 4})
    )
    for i in range(3):
        engine.apply(Submit(job("a", id=10 + i, submit=float(i))))
        engine.apply(Submit(job("b", id=20 + i, submit=float(i))))
    assert sorted(admitted_ids(engine.cycle(1.0))) == [10, 20]
    assert engine.next_wakeup() == 1.0  # heads are waiting: run again at once
    assert sorted(admitted_ids(engine.cycle(2.0))) == [11, 21]
    assert sorted(admitted_ids(engine.cycle(3.0))) == [12, 22]
    # Nothing waits; next is waitForPodsReady's timeout of the first admissions (30 min).
    assert engine.next_wakeup() == 1.0 + 1800


def test_phalanx_rounds_admit_everything_that_fits() -> None:
    engine = _engine(node("n0"), flavor("f"), cluster_queue("a", {"f": 4}), heads_per_cycle=None)
    for i in range(3):
        engine.apply(Submit(job("a", id=i + 1, submit=float(i))))
    assert admitted_ids(engine.cycle(1.0)) == [1, 2, 3]


def test_non_borrowing_heads_go_first_and_the_skipped_one_returns() -> None:
    # a borrows from the cohort for its head; b's head stays within nominal: b goes first,
    # and a's head, nominated against the same snapshot, no longer fits.
    engine = _engine(
        node("n0", gpus=16),
        flavor("f"),
        cluster_queue("a", {"f": 0}, cohort="co"),
        cluster_queue("b", {"f": 8}, cohort="co"),
    )
    engine.apply(Submit(job("a", gpus=8, id=1, priority=100)))
    engine.apply(Submit(job("b", gpus=8, id=2, priority=0, submit=5.0)))
    decisions = engine.cycle(1.0)
    assert admitted_ids(decisions) == [2]
    skipped = [d.reason for d in decisions if isinstance(d, Pending) and d.job_id == 1]
    assert skipped and skipped[0].message == (
        "Workload no longer fits after processing another workload"
    )
    # Not parked: it is the head again in the next cycle.
    assert engine.next_wakeup() == 1.0


def test_higher_priority_first_within_the_same_borrowing_level() -> None:
    engine = _engine(
        node("n0", gpus=16),
        flavor("f"),
        cluster_queue("a", {"f": 4}, cohort="co"),
        cluster_queue("b", {"f": 4}, cohort="co"),
    )
    engine.apply(Submit(job("a", gpus=4, id=1, priority=1)))
    engine.apply(Submit(job("b", gpus=4, id=2, priority=9)))
    assert admitted_ids(engine.cycle(1.0)) == [2, 1]


def _selector_cq(selector: dict[str, Any] | None) -> ClusterQueue:
    return cluster_queue("cq", {"f": 8}, namespaceSelector=selector)


def test_namespace_selector_match_labels_and_expressions() -> None:
    selector = {
        "matchLabels": {"team": "ml"},
        "matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["batch"]}],
    }
    engine = _engine(
        node("n0"),
        flavor("f"),
        _selector_cq(selector),
        local_queue("lq", "cq", namespace="ml"),
        local_queue("lq", "cq", namespace="web"),
        Tenant(name="ml", labels={"team": "ml"}),
        Tenant(name="web", labels={"team": "web"}),
    )
    engine.apply(Submit(job(queue="lq", tenant="ml", id=1)))
    engine.apply(Submit(job(queue="lq", tenant="web", id=2)))
    decisions = engine.cycle(1.0)
    assert admitted_ids(decisions) == [1]
    reason = engine.explain(2)
    assert reason is not None and reason.code == "NamespaceMismatch"
    assert reason.message == "Workload namespace doesn't match ClusterQueue selector"
    # Relabel the namespace: the job can now use the queue.
    engine.apply(Upsert(Tenant(name="web", labels={"team": "ml"})))
    assert 2 in admits(engine.cycle(2.0))


def test_namespace_selector_metadata_name_and_empty_selector() -> None:
    selector = {
        "matchExpressions": [
            {"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["ml"]}
        ]
    }
    engine = _engine(
        node("n0"),
        flavor("f"),
        _selector_cq(selector),
        local_queue("lq", "cq", namespace="ml"),
        local_queue("lq", "cq", namespace="web"),
    )
    engine.apply(Submit(job(queue="lq", tenant="ml", id=1)))
    engine.apply(Submit(job(queue="lq", tenant="web", id=2)))
    assert admitted_ids(engine.cycle(1.0)) == [1]
    engine.apply(Upsert(_selector_cq({})))
    assert admitted_ids(engine.cycle(2.0)) == [2]
