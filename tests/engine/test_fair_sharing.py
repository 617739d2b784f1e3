"""Fair sharing: dominant resource shares, the tournament and fair-sharing preemption."""

from __future__ import annotations

import math
from typing import Any

from phalanx.engine import (
    Engine,
    EngineConfig,
    Evict,
    FairSharingConfig,
    Requeue,
    Submit,
    Upsert,
)
from phalanx.engine.fairsharing import MAX_SHARE, dominant_share
from tests.engine.helpers import admitted_ids, cluster_queue, cohort, flavor, job, node

POLICY = {"withinClusterQueue": "LowerPriority", "reclaimWithinCohort": "Any"}


def _engine(*objects: Any, strategies: tuple[str, ...] | None = None) -> Engine:
    fair = FairSharingConfig() if strategies is None else FairSharingConfig(strategies)
    engine = Engine(EngineConfig.for_preset("kueue", fair_sharing=fair))
    for obj in objects:
        engine.apply(Upsert(obj))
    return engine


def _cq(name: str, gpus: int, weight: float | None = None, **extra: Any) -> Any:
    if weight is not None:
        extra["fairSharing"] = {"weight": weight}
    return cluster_queue(name, {"f": gpus}, cohort="co", **extra)


def _evicts(decisions: list[Any]) -> dict[int, Evict]:
    return {d.job_id: d for d in decisions if isinstance(d, Evict)}


def test_dominant_share_and_weighted_share() -> None:
    engine = _engine(
        node("n0", gpus=16), flavor("f"), _cq("a", 4), _cq("b", 4, weight=2), _cq("c", 8)
    )
    engine.apply(Submit(job("a", gpus=8, id=1)))
    engine.apply(Submit(job("b", gpus=7, id=2)))
    engine.cycle(1.0)
    engine.cycle(2.0)
    # a borrows 4 of the 16 its cohort could lend: 250; b borrows 3 with weight 2: 93.75.
    assert engine.weighted_share("ClusterQueue", "a") == 250
    assert engine.weighted_share("ClusterQueue", "b") == 94
    assert engine.weighted_share("ClusterQueue", "c") == 0
    assert engine.weighted_share("Cohort", "co") == 0  # a root
    b = engine.cache.cluster_queues["b"].node
    assert math.isclose(dominant_share(b, 2.0), 93.75)
    assert math.isinf(dominant_share(b, 0.0))


def test_zero_weight_reports_max_share() -> None:
    engine = _engine(node("n0", gpus=16), flavor("f"), _cq("a", 0, weight=0), _cq("b", 8))
    engine.apply(Submit(job("a", gpus=1, id=1)))
    engine.cycle(1.0)
    assert engine.weighted_share("ClusterQueue", "a") == MAX_SHARE


def test_tournament_admits_the_lower_share_first() -> None:
    # Both heads borrow; a already borrows, so b's head goes first despite lower priority.
    engine = _engine(node("n0", gpus=16), flavor("f"), _cq("a", 2), _cq("b", 2), _cq("lender", 6))
    engine.apply(Submit(job("a", gpus=4, id=1)))
    engine.cycle(1.0)
    engine.apply(Submit(job("a", gpus=4, id=2, priority=100, submit=2.0)))
    engine.apply(Submit(job("b", gpus=4, id=3, priority=0, submit=2.0)))
    decisions = engine.cycle(3.0)
    assert admitted_ids(decisions) == [3]


def test_non_borrowing_subtree_wins_the_tournament() -> None:
    engine = _engine(
        node("n0", gpus=16),
        flavor("f"),
        cohort("co"),
        _cq("a", 4),
        _cq("b", 0),
        _cq("lender", 4),
    )
    engine.apply(Submit(job("b", gpus=4, id=1, priority=100)))
    engine.apply(Submit(job("a", gpus=4, id=2, priority=0, submit=1.0)))
    decisions = engine.cycle(1.0)
    assert admitted_ids(decisions)[0] == 2


def test_fair_preemption_reclaims_within_nominal() -> None:
    engine = _engine(node("n0", gpus=16), flavor("f"), _cq("a", 8, preemption=POLICY), _cq("b", 8))
    engine.apply(Submit(job("b", gpus=8, count=2, id=1)))
    engine.cycle(1.0)
    engine.apply(Submit(job("a", gpus=4, id=2, submit=2.0)))
    evicts = _evicts(engine.cycle(3.0))
    assert evicts[1].preemption_reason == "InCohortReclamation"


def test_fair_preemption_does_not_transfer_the_imbalance() -> None:
    # a (nominal 3) borrows 0; b (nominal 3) uses 6 via two jobs. a wants 4 (borrowing 1):
    # preempting b's 5 would leave b below a; the 1 keeps a <= b, so it goes.
    engine = _engine(
        node("n0", gpus=16),
        flavor("f"),
        _cq("a", 3, preemption=POLICY),
        _cq("b", 3, preemption=POLICY),
        _cq("c", 3, preemption=POLICY),
        strategies=("LessThanOrEqualToFinalShare",),
    )
    engine.apply(Submit(job("a", gpus=3, id=1)))
    engine.apply(Submit(job("b", gpus=5, id=2, priority=0)))
    engine.cycle(1.0)
    engine.apply(Submit(job("b", gpus=1, id=3, priority=1)))
    engine.cycle(2.0)
    engine.apply(Submit(job("a", gpus=1, id=4, submit=3.0)))
    evicts = _evicts(engine.cycle(4.0))
    assert list(evicts) == [3]
    assert evicts[3].preemption_reason == "InCohortFairSharing"
    engine.apply(Requeue(3))
    assert 4 in admitted_ids(engine.cycle(5.0))


def test_fair_preemption_rejects_when_the_preemptor_would_lead() -> None:
    engine = _engine(
        node("n0", gpus=16),
        flavor("f"),
        _cq("a", 2, preemption=POLICY),
        _cq("b", 2, preemption=POLICY),
        strategies=("LessThanOrEqualToFinalShare",),
    )
    # b borrows 1, a already borrows 1: taking b's job would make a borrow 3 > b's 0.
    engine.apply(Submit(job("a", gpus=3, id=1)))
    engine.apply(Submit(job("b", gpus=1, id=2)))
    engine.apply(Submit(job("b", gpus=2, id=3, submit=1.0)))
    engine.cycle(1.0)
    engine.cycle(2.0)
    engine.apply(Submit(job("a", gpus=2, id=4, submit=3.0)))
    assert not _evicts(engine.cycle(4.0))
