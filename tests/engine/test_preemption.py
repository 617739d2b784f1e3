"""Classical preemption: policies, victim choice, asynchronous eviction, nodes."""

from __future__ import annotations

from typing import Any

from phalanx.engine import (
    Admit,
    Engine,
    EngineConfig,
    Evict,
    Finish,
    Pending,
    Requeue,
    Submit,
    Upsert,
)
from tests.engine.helpers import GPU, admits, cluster_queue, flavor, job, node, quota


def _evicts(decisions: list[Any]) -> dict[int, Evict]:
    return {d.job_id: d for d in decisions if isinstance(d, Evict)}


def _engine(*objects: Any, preset: str = "kueue") -> Engine:
    engine = Engine(EngineConfig.for_preset(preset))
    for obj in objects:
        engine.apply(Upsert(obj))
    return engine


def _settle(engine: Engine, now: float, rounds: int = 5) -> list[Any]:
    """Cycle, requeueing every evicted job as the control plane does."""
    out: list[Any] = []
    for i in range(rounds):
        decisions = engine.cycle(now + i)
        out.extend(decisions)
        for d in decisions:
            if isinstance(d, Evict):
                engine.apply(Requeue(d.job_id))
    return out


def _cq(name: str, gpus: int, cohort: str | None = None, **preemption: Any) -> Any:
    extra: dict[str, Any] = {}
    if preemption:
        extra["preemption"] = preemption
    return cluster_queue(name, {"f": gpus}, cohort=cohort, **extra)


def test_within_cluster_queue_lower_priority_evicts_and_admits_later() -> None:
    engine = _engine(
        node("n0", gpus=8), flavor("f"), _cq("cq", 8, withinClusterQueue="LowerPriority")
    )
    low = job("cq", gpus=8, id=1, priority=0)
    engine.apply(Submit(low))
    assert 1 in admits(engine.cycle(1.0))
    engine.apply(Submit(job("cq", gpus=8, id=2, priority=10, submit=2.0)))
    decisions = engine.cycle(3.0)
    evict = _evicts(decisions)[1]
    assert (evict.reason, evict.preemption_reason, evict.preemptor) == (
        "Preempted",
        "InClusterQueue",
        2,
    )
    pending = [d for d in decisions if isinstance(d, Pending) and d.job_id == 2]
    assert pending and pending[0].reason.message == "Pending the preemption of 1 workload(s)"
    # The victim keeps its quota and node until it is requeued.
    assert engine.cache.nodes["n0"].used[GPU] == 8
    assert not admits(engine.cycle(4.0))
    engine.apply(Requeue(1))
    assert 2 in admits(engine.cycle(5.0))


def test_a_new_higher_priority_job_of_a_parked_shape_preempts_at_once() -> None:
    engine = _engine(
        node("n0", gpus=8), flavor("f"), _cq("cq", 8, withinClusterQueue="LowerPriority")
    )
    engine.apply(Submit(job("cq", gpus=8, id=1, priority=0)))
    assert 1 in admits(engine.cycle(1.0))
    # Same shape, same priority: it cannot preempt, and its shape is parked.
    engine.apply(Submit(job("cq", gpus=8, id=2, priority=0, submit=2.0)))
    assert not _evicts(engine.cycle(2.0))
    assert engine.jobs[2].queue is not None and engine.jobs[2].queue.parked
    # A job of the same shape and a higher priority is tried at the next cycle.
    engine.apply(Submit(job("cq", gpus=8, id=3, priority=10, submit=3.0)))
    evict = _evicts(engine.cycle(3.0))
    assert list(evict) == [1] and evict[1].preemptor == 3


def test_equal_priority_is_not_preempted_under_lower_priority() -> None:
    engine = _engine(node("n0"), flavor("f"), _cq("cq", 8, withinClusterQueue="LowerPriority"))
    engine.apply(Submit(job("cq", gpus=8, id=1, priority=5)))
    engine.cycle(1.0)
    engine.apply(Submit(job("cq", gpus=8, id=2, priority=5, submit=2.0)))
    assert not _evicts(engine.cycle(3.0))


def test_lower_or_newer_equal_priority_preempts_the_newer_equal() -> None:
    engine = _engine(
        node("n0"), flavor("f"), _cq("cq", 8, withinClusterQueue="LowerOrNewerEqualPriority")
    )
    # The admitted job was queued later than the pending one (created after it).
    engine.apply(Submit(job("cq", gpus=8, id=1, priority=5, submit=10.0)))
    engine.cycle(11.0)
    engine.apply(Submit(job("cq", gpus=8, id=2, priority=5, submit=5.0)))
    assert _evicts(engine.cycle(12.0))[1].preemption_reason == "InClusterQueue"


def test_never_policy_changes_nothing() -> None:
    engine = _engine(node("n0"), flavor("f"), _cq("cq", 8))
    engine.apply(Submit(job("cq", gpus=8, id=1, priority=0)))
    engine.cycle(1.0)
    engine.apply(Submit(job("cq", gpus=8, id=2, priority=100)))
    decisions = engine.cycle(2.0)
    assert not _evicts(decisions)
    reason = engine.explain(2)
    assert reason is not None and reason.code == "InsufficientQuota"


def test_minimal_victim_set_lowest_priority_then_most_recent() -> None:
    engine = _engine(node("n0"), flavor("f"), _cq("cq", 8, withinClusterQueue="LowerPriority"))
    for i, (prio, at) in enumerate([(1, 1.0), (1, 2.0), (3, 3.0), (2, 4.0)], start=1):
        engine.apply(Submit(job("cq", gpus=2, id=i, priority=prio, submit=at)))
        engine.cycle(at)
    engine.apply(Submit(job("cq", gpus=4, id=9, priority=10, submit=9.0)))
    victims = _evicts(engine.cycle(10.0))
    # Priority 1 first (the most recently admitted of them first): jobs 2 and 1.
    assert sorted(victims) == [1, 2]


def test_fill_back_spares_victims_not_needed() -> None:
    engine = _engine(node("n0"), flavor("f"), _cq("cq", 8, withinClusterQueue="LowerPriority"))
    engine.apply(Submit(job("cq", gpus=1, id=1, priority=0, submit=1.0)))
    engine.cycle(1.0)
    engine.apply(Submit(job("cq", gpus=7, id=2, priority=1, submit=2.0)))
    engine.cycle(2.0)
    # Needs 7: removing 1 (priority 0) is not enough, then 2; 1 comes back in fill-back.
    engine.apply(Submit(job("cq", gpus=7, id=3, priority=10, submit=3.0)))
    assert sorted(_evicts(engine.cycle(3.0))) == [2]


def test_reclaim_within_cohort_any_evicts_borrower() -> None:
    engine = _engine(
        node("n0"),
        node("n1"),
        flavor("f"),
        _cq("a", 8, "co", reclaimWithinCohort="Any"),
        _cq("b", 8, "co"),
    )
    engine.apply(Submit(job("b", gpus=8, count=2, id=1, priority=100)))
    assert 1 in admits(engine.cycle(1.0))  # b borrows a's 8
    engine.apply(Submit(job("a", gpus=8, id=2, priority=0)))
    evict = _evicts(engine.cycle(2.0))[1]
    assert evict.preemption_reason == "InCohortReclamation"
    assert evict.message.endswith("preemptor path: /co/a; preemptee path: /co/b")
    engine.apply(Requeue(1))
    decisions = _settle(engine, 3.0)
    assert 2 in admits(decisions)


def test_reclaim_lower_priority_spares_higher_priority_borrower() -> None:
    engine = _engine(
        node("n0"),
        node("n1"),
        flavor("f"),
        _cq("a", 8, "co", reclaimWithinCohort="LowerPriority"),
        _cq("b", 8, "co"),
    )
    engine.apply(Submit(job("b", gpus=8, count=2, id=1, priority=100)))
    engine.cycle(1.0)
    engine.apply(Submit(job("a", gpus=8, id=2, priority=0)))
    assert not _evicts(engine.cycle(2.0))


def test_borrow_within_cohort_threshold() -> None:
    objects = [
        node("n0", gpus=16),
        flavor("f"),
        _cq(
            "a",
            8,
            "co",
            reclaimWithinCohort="Any",
            borrowWithinCohort={"policy": "LowerPriority", "maxPriorityThreshold": 5},
        ),
        _cq("b", 8, "co"),
    ]
    engine = _engine(*objects)
    engine.apply(Submit(job("b", gpus=8, count=2, id=1, priority=3)))
    engine.cycle(1.0)
    engine.apply(Submit(job("a", gpus=8, count=2, id=2, priority=10)))
    evict = _evicts(engine.cycle(2.0))[1]
    assert evict.preemption_reason == "InCohortReclaimWhileBorrowing"

    engine = _engine(*objects)
    engine.apply(Submit(job("b", gpus=8, count=2, id=1, priority=6)))
    engine.cycle(1.0)
    engine.apply(Submit(job("a", gpus=8, count=2, id=2, priority=10)))
    assert not _evicts(engine.cycle(2.0))


def test_preemption_frees_nodes_for_the_gang() -> None:
    # Quota is plentiful; the nodes are the constraint.
    engine = _engine(
        node("n0", gpus=8),
        flavor("f"),
        _cq("cq", 64, withinClusterQueue="LowerPriority"),
    )
    engine.apply(Submit(job("cq", gpus=4, count=2, id=1, priority=0)))
    engine.cycle(1.0)
    engine.apply(Submit(job("cq", gpus=8, id=2, priority=5, submit=2.0)))
    decisions = engine.cycle(3.0)
    assert sorted(_evicts(decisions)) == [1]
    engine.apply(Requeue(1))
    admitted = admits(engine.cycle(4.0))
    assert admitted[2].nodes == ["n0"]


def test_claimed_victims_are_not_reused_in_the_same_cycle() -> None:
    engine = _engine(
        node("n0", gpus=16),
        flavor("f"),
        _cq("a", 8, "co", reclaimWithinCohort="Any"),
        _cq("c", 8, "co", reclaimWithinCohort="Any"),
        _cq("b", 0, "co"),
    )
    engine.apply(Submit(job("b", gpus=8, id=1, priority=0)))
    engine.apply(Submit(job("b", gpus=8, id=2, priority=0, submit=1.0)))
    engine.cycle(1.0)
    engine.cycle(2.0)
    engine.apply(Submit(job("a", gpus=8, id=3, priority=0, submit=3.0)))
    engine.apply(Submit(job("c", gpus=8, id=4, priority=0, submit=3.0)))
    evicts = _evicts(engine.cycle(4.0))
    assert sorted(evicts) == [1, 2]
    assert {evicts[1].preemptor, evicts[2].preemptor} == {3, 4}


def test_victims_finishing_wake_the_sticky_preemptor() -> None:
    engine = _engine(node("n0"), flavor("f"), _cq("cq", 8, withinClusterQueue="LowerPriority"))
    engine.apply(Submit(job("cq", gpus=8, id=1, priority=0)))
    engine.cycle(1.0)
    engine.apply(Submit(job("cq", gpus=8, id=2, priority=10, submit=2.0)))
    engine.cycle(3.0)
    # A newcomer of equal shape may not jump the sticky preemptor.
    engine.apply(Submit(job("cq", gpus=8, id=3, priority=20, submit=4.0)))
    engine.apply(Finish(1))
    decisions = [d for d in _settle(engine, 5.0, rounds=2) if isinstance(d, Admit)]
    assert decisions[0].job_id == 2


def test_hold_nominal_capacity_when_lender_cannot_reclaim() -> None:
    engine = _engine(
        node("n0", gpus=16),
        flavor("f"),
        cluster_queue(
            "lender",
            {"f": [quota(GPU, 8)]},
            cohort="co",
            preemption={"withinClusterQueue": "LowerPriority", "reclaimWithinCohort": "Never"},
        ),
        _cq("borrower", 0, "co"),
    )
    engine.apply(Submit(job("lender", gpus=4, id=1, priority=10)))
    engine.cycle(1.0)
    # The lender's head needs 8 (its nominal) and cannot reclaim; a borrower wants 4.
    engine.apply(Submit(job("lender", gpus=8, id=2, priority=5, submit=2.0)))
    engine.apply(Submit(job("borrower", gpus=4, id=3, priority=0, submit=2.0)))
    decisions = engine.cycle(3.0)
    assert 3 not in admits(decisions)
    # The hold lasts one cycle (BestEffortFIFO parks the lender's head).
    assert 3 in admits(engine.cycle(4.0))


def test_when_can_preempt_may_stop_search_preempts_in_the_first_flavor() -> None:
    def build(when: str) -> Engine:
        cq = cluster_queue(
            "cq",
            {"one": 8, "two": 8},
            preemption={"withinClusterQueue": "LowerPriority"},
            flavorFungibility={"whenCanBorrow": "MayStopSearch", "whenCanPreempt": when},
        )
        engine = _engine(node("n0", gpus=16), flavor("one"), flavor("two"), cq)
        engine.apply(Submit(job("cq", gpus=2, id=1, priority=-1)))
        engine.cycle(1.0)
        engine.apply(Submit(job("cq", gpus=7, id=2, priority=0, submit=2.0)))
        return engine

    stop = build("MayStopSearch")
    assert _evicts(stop.cycle(3.0))[1].preemption_reason == "InClusterQueue"
    stop.apply(Requeue(1))
    assert admits(stop.cycle(4.0))[2].flavor == "one"

    going_on = build("TryNextFlavor")
    decisions = going_on.cycle(3.0)
    assert not _evicts(decisions)
    assert admits(decisions)[2].flavor == "two"


def test_state_round_trip_mid_preemption_continues_identically() -> None:
    from phalanx.engine import export_state, load_state
    from tests.engine.helpers import decisions_json

    engine = _engine(node("n0"), flavor("f"), _cq("cq", 8, withinClusterQueue="LowerPriority"))
    engine.apply(Submit(job("cq", gpus=8, id=1, priority=0)))
    engine.cycle(1.0)
    engine.apply(Submit(job("cq", gpus=8, id=2, priority=10, submit=2.0)))
    engine.cycle(3.0)
    loaded = load_state(export_state(engine))
    for e in (engine, loaded):
        e.apply(Submit(job("cq", gpus=8, id=3, priority=20, submit=4.0)))
        e.apply(Requeue(1))
    first, second = engine.cycle(5.0), loaded.cycle(5.0)
    assert decisions_json(first) == decisions_json(second)
    assert admits(first)[2].job_id == 2  # the pinned preemptor, before job 3
