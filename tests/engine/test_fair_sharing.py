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
from phalanx.engine.fairsharing.shares import MAX_SHARE, dominant_share
from phalanx.engine.preemption.preemptor import _almost_lca
from phalanx.model import Cohort, FairSharing
from tests.engine.helpers import admitted_ids, cluster_queue, cohort, flavor, job, node, quota

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


def _cohort(
    name: str, parent: str | None = None, weight: float | None = None, **gpus: int
) -> Cohort:
    co = cohort(name, parent, gpus or None)
    if weight is None:
        return co
    return co.model_copy(update={"fair_sharing": FairSharing.model_validate({"weight": weight})})


def _deep(strategies: tuple[str, ...] | None = None) -> Engine:
    """a under root/ta/taa, b under root/tb/tbb, the only GPU in root/tc (Kueue's
    "deep preemption"): ta weighs 1.01, tb 0.99."""
    return _engine(
        node("n0", gpus=16),
        flavor("f"),
        _cohort("root"),
        _cohort("ta", "root", weight=1.01),
        _cohort("taa", "ta"),
        _cohort("tb", "root", weight=0.99),
        _cohort("tbb", "tb"),
        _cohort("tc", "root", f=1),
        cluster_queue("a", {"f": 0}, cohort="taa", preemption={"reclaimWithinCohort": "Any"}),
        cluster_queue("b", {"f": 0}, cohort="tbb"),
        strategies=strategies,
    )


def test_almost_lca_is_the_pair_of_children_below_the_lowest_common_cohort() -> None:
    engine = _deep()
    nodes = engine.cache.cohort_nodes
    a = engine.cache.cluster_queues["a"].node
    b = engine.cache.cluster_queues["b"].node
    assert _almost_lca(a, b) == (nodes["ta"], nodes["tb"])
    engine.apply(Upsert(cluster_queue("a2", {"f": 0}, cohort="taa")))
    a2 = engine.cache.cluster_queues["a2"].node
    assert _almost_lca(a, a2) == (a, a2)


def test_fair_preemption_compares_the_cohorts_below_the_lowest_common_one() -> None:
    # Both queues' own shares are 1000; their cohorts' are 1000/1.01 (with a's job) and
    # 1000/0.99: rule S2-b holds between the cohorts, not between the queues.
    engine = _deep()
    engine.apply(Submit(job("b", gpus=1, id=1)))
    engine.cycle(1.0)
    engine.apply(Submit(job("a", gpus=1, id=2, submit=2.0)))
    evicts = _evicts(engine.cycle(3.0))
    assert list(evicts) == [1]
    assert evicts[1].preemption_reason == "InCohortFairSharing"


def test_fair_preemption_rule_s2a_alone_keeps_the_lower_weight_cohort() -> None:
    # tb would end at share 0, below ta: S2-a rejects, and there is no S2-b.
    engine = _deep(strategies=("LessThanOrEqualToFinalShare",))
    engine.apply(Submit(job("b", gpus=1, id=1)))
    engine.cycle(1.0)
    engine.apply(Submit(job("a", gpus=1, id=2, submit=2.0)))
    assert not _evicts(engine.cycle(3.0))


def test_fair_preemption_passes_over_a_cohort_that_does_not_borrow() -> None:
    # b borrows inside cohort right, which does not borrow from root: a preempts its own.
    engine = _engine(
        node("n0", gpus=16),
        flavor("f"),
        _cohort("root"),
        _cohort("right", "root", weight=0.1, f=1),
        cluster_queue("a", {"f": 5}, cohort="root", preemption=POLICY, fairSharing={"weight": 10}),
        cluster_queue("b", {"f": 0}, cohort="right", fairSharing={"weight": 0.1}),
    )
    for i in range(3):
        engine.apply(Submit(job("a", gpus=1, id=1 + i, priority=-1)))
    engine.apply(Submit(job("b", gpus=1, id=4, priority=-1)))
    for t in range(4):
        engine.cycle(float(t))
    engine.apply(Submit(job("a", gpus=5, id=5, priority=0, submit=5.0)))
    evicts = _evicts(engine.cycle(6.0))
    assert sorted(evicts) == [1, 2, 3]
    assert {e.preemption_reason for e in evicts.values()} == {"InClusterQueue"}


def test_fair_preemption_search_leaves_the_quota_tree_as_it_was() -> None:
    # Lending limits make usage travel up unevenly; a search that finds nothing must leave
    # every node's usage as it found it.
    engine = _engine(
        node("n0", gpus=16),
        flavor("f"),
        _cohort("root"),
        _cohort("left", "root", weight=2),
        _cohort("right", "root"),
        cluster_queue(
            "a", {"f": [quota("nvidia.com/gpu", 2, lending=1)]}, cohort="left", preemption=POLICY
        ),
        cluster_queue("b", {"f": [quota("nvidia.com/gpu", 2, lending=1)]}, cohort="left"),
        cluster_queue("c", {"f": [quota("nvidia.com/gpu", 4, lending=2)]}, cohort="right"),
        strategies=("LessThanOrEqualToFinalShare",),
    )
    engine.apply(Submit(job("b", gpus=3, id=1)))
    engine.apply(Submit(job("c", gpus=4, id=2)))
    engine.cycle(1.0)
    engine.cycle(2.0)

    def usage() -> dict[str, dict[Any, int]]:
        nodes = [*engine.cache.cohort_nodes.values()]
        nodes += [info.node for info in engine.cache.cluster_queues.values()]
        return {n.name: {fr: v for fr, v in n.usage.items() if v} for n in nodes}

    before = usage()
    engine.apply(Submit(job("a", gpus=3, id=3, priority=-5, submit=3.0)))
    engine.cycle(4.0)
    assert usage() == before
