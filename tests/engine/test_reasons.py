"""Pending reasons: every ReasonCode that can arise, its sentence and its details.

A pending job's reason is data: a code, a sentence naming the resource, the
flavor and the amounts, and details for machines (``shortBy``, ``shortIn``,
``maxTasks``, ``blockedBy``, ...). ``Engine.explain`` answers for any pending
job; a Pending decision goes out only when a job's reason changes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from phalanx.engine import Delete, Engine, Finish, Pending, ReasonCode, Submit, Upsert
from phalanx.model import CPU, MEMORY, Job, LocalQueue, PodSet, ResourceFlavor
from tests.engine.helpers import (
    GPU,
    admitted_ids,
    cluster_queue,
    cohort,
    engine_with,
    flavor,
    gang,
    job,
    local_queue,
    make_node,
    node,
    pendings,
    quota,
    step,
    taint,
)


def _nodes(n: int = 4) -> list[Any]:
    return [node(f"n{i}") for i in range(n)]


@dataclass
class ReasonCase:
    objects: list[Any]
    jobs: list[Job]
    """The last job is the one whose reason is checked."""
    code: ReasonCode
    phrases: list[str]
    details: dict[str, object] = field(default_factory=dict)
    emitted: bool = True
    """Whether a Pending decision carries the reason (else: explain() only)."""


REASON_CASES: dict[str, ReasonCase] = {
    "insufficient-quota-in-cluster-queue": ReasonCase(
        objects=[flavor("f"), *_nodes(), cluster_queue("cq", {"f": 8})],
        jobs=[job("cq", gpus=2, id=1), job("cq", gpus=8, id=2)],
        code=ReasonCode.INSUFFICIENT_QUOTA,
        phrases=[
            "pod set main",
            "insufficient quota for nvidia.com/gpu in flavor f",
            "ClusterQueue cq is short by 2 nvidia.com/gpu",
            "needs 8, 6 available",
        ],
        details={
            "clusterQueue": "cq",
            "podSet": "main",
            "flavor": "f",
            "resource": GPU,
            "shortBy": 2,
            "shortIn": "ClusterQueue/cq",
        },
    ),
    "insufficient-quota-in-cohort": ReasonCase(
        objects=[
            flavor("f"),
            *_nodes(),
            cluster_queue("cq", {"f": 8}, cohort="co"),
            cluster_queue("lender", {"f": 4}, cohort="co"),
        ],
        jobs=[job("lender", gpus=3, id=1), job("cq", gpus=8, id=2), job("cq", gpus=3, id=3)],
        code=ReasonCode.INSUFFICIENT_QUOTA,
        phrases=["Cohort co is short by 2 nvidia.com/gpu", "needs 3, 1 available", "flavor f"],
        details={"shortBy": 2, "shortIn": "Cohort/co", "resource": GPU, "flavor": "f"},
    ),
    "insufficient-quota-borrowing-limit": ReasonCase(
        objects=[
            flavor("f"),
            *_nodes(),
            cluster_queue("cq", {"f": [quota(GPU, 4, borrowing=2)]}, cohort="co"),
            cluster_queue("lender", {"f": 16}, cohort="co"),
        ],
        jobs=[job("cq", gpus=8, id=1)],
        code=ReasonCode.EXCEEDS_MAX_QUOTA,
        phrases=["8 nvidia.com/gpu requested", "the 6 the ClusterQueue could ever get"],
        details={"flavor": "f", "resource": GPU},
    ),
    "insufficient-quota-borrowing-limit-reached": ReasonCase(
        objects=[
            flavor("f"),
            *_nodes(),
            cluster_queue("cq", {"f": [quota(GPU, 4, borrowing=2)]}, cohort="co"),
            cluster_queue("lender", {"f": 16}, cohort="co"),
        ],
        jobs=[job("cq", gpus=5, id=1), job("cq", gpus=2, id=2)],
        code=ReasonCode.INSUFFICIENT_QUOTA,
        phrases=["ClusterQueue cq (borrowingLimit reached) is short by 1 nvidia.com/gpu"],
        details={"shortBy": 1, "shortIn": "ClusterQueue/cq"},
    ),
    "insufficient-quota-in-parent-cohort": ReasonCase(
        objects=[
            flavor("f"),
            *_nodes(),
            cohort("root", flavors={"f": 2}),
            cohort("child", parent="root"),
            cluster_queue("cq", {"f": 4}, cohort="child"),
        ],
        jobs=[job("cq", gpus=5, id=1), job("cq", gpus=4, id=2)],
        code=ReasonCode.INSUFFICIENT_QUOTA,
        phrases=["Cohort root is short by 3 nvidia.com/gpu", "needs 4, 1 available"],
        details={"shortBy": 3, "shortIn": "Cohort/root"},
    ),
    "insufficient-cpu-quota-in-millicores": ReasonCase(
        objects=[
            flavor("f"),
            *_nodes(),
            cluster_queue("cq", {"f": [quota(GPU, 8), quota(CPU, "2")]}),
        ],
        jobs=[
            job("cq", gpus=1, id=1, requests={CPU: "1500m"}),
            job("cq", gpus=1, id=2, requests={CPU: "1"}),
        ],
        code=ReasonCode.INSUFFICIENT_QUOTA,
        phrases=[
            "insufficient quota for cpu in flavor f",
            "short by 500m cpu",
            "needs 1, 500m available",
        ],
        details={"resource": CPU, "shortBy": 500},
    ),
    "insufficient-memory-quota-in-binary-units": ReasonCase(
        objects=[
            flavor("f"),
            *_nodes(),
            cluster_queue("cq", {"f": [quota(GPU, 8), quota(MEMORY, "64Gi")]}),
        ],
        jobs=[
            job("cq", gpus=1, id=1, requests={MEMORY: "48Gi"}),
            job("cq", gpus=1, id=2, requests={MEMORY: "32Gi"}),
        ],
        code=ReasonCode.INSUFFICIENT_QUOTA,
        phrases=["insufficient quota for memory in flavor f", "short by 16Gi memory"],
        details={"resource": MEMORY, "shortBy": 16 * 2**30},
    ),
    "exceeds-max-quota": ReasonCase(
        objects=[flavor("f"), *_nodes(), cluster_queue("cq", {"f": 8})],
        jobs=[job("cq", gpus=8, count=2, id=1)],
        code=ReasonCode.EXCEEDS_MAX_QUOTA,
        phrases=[
            "flavor f",
            "16 nvidia.com/gpu requested",
            "the 8 the ClusterQueue could ever get",
        ],
        details={"flavor": "f", "resource": GPU, "clusterQueue": "cq"},
    ),
    "exceeds-max-quota-counting-cohort": ReasonCase(
        objects=[
            flavor("f"),
            *_nodes(),
            cluster_queue("cq", {"f": 8}, cohort="co"),
            cluster_queue("other", {"f": 8}, cohort="co"),
        ],
        jobs=[job("cq", gpus=8, count=3, id=1)],
        code=ReasonCode.EXCEEDS_MAX_QUOTA,
        phrases=["24 nvidia.com/gpu requested", "the 16 the ClusterQueue could ever get"],
    ),
    # Kueue "flavors with mixed taint mismatch and exceeding limits".
    "exceeds-max-quota-beside-untolerated-flavor": ReasonCase(
        objects=[
            ResourceFlavor(name="spot", node_taints=[taint("spot", "x")]),
            flavor("on-demand"),
            *_nodes(),
            cluster_queue("cq", {"spot": 16, "on-demand": 4}),
        ],
        jobs=[job("cq", gpus=8, id=1)],
        code=ReasonCode.EXCEEDS_MAX_QUOTA,
        phrases=["flavor spot doesn't match", "flavor on-demand: 8 nvidia.com/gpu requested"],
        details={"flavor": "on-demand", "resource": GPU},
    ),
    # Kueue "flavors with mixed misconfiguration and insufficient quota".
    "insufficient-quota-beside-untolerated-flavor": ReasonCase(
        objects=[
            ResourceFlavor(name="spot", node_taints=[taint("spot", "x")]),
            flavor("on-demand"),
            *_nodes(),
            cluster_queue("cq", {"spot": 16, "on-demand": 8}),
        ],
        jobs=[job("cq", gpus=3, id=1, priority=1), job("cq", gpus=8, id=2)],
        code=ReasonCode.INSUFFICIENT_QUOTA,
        phrases=["flavor spot doesn't match", "in flavor on-demand", "short by 3"],
        details={"flavor": "on-demand", "shortBy": 3},
    ),
    "no-matching-flavor-selector": ReasonCase(
        objects=[
            flavor("a100", gpu="a100"),
            flavor("h100", gpu="h100"),
            make_node("a0", labels={"gpu": "a100"}),
            cluster_queue("cq", {"a100": 8, "h100": 8}),
        ],
        jobs=[job("cq", gpus=1, id=1, node_selector={"gpu": "b200"})],
        code=ReasonCode.NO_MATCHING_FLAVOR,
        phrases=[
            "flavor a100 doesn't match the node selector",
            "flavor h100 doesn't match the node selector",
        ],
        details={"flavor": "a100", "podSet": "main"},
    ),
    "no-matching-flavor-taint": ReasonCase(
        objects=[
            ResourceFlavor(name="spot", node_taints=[taint("spot", "x")]),
            *_nodes(),
            cluster_queue("cq", {"spot": 8}),
        ],
        jobs=[job("cq", gpus=1, id=1)],
        code=ReasonCode.NO_MATCHING_FLAVOR,
        phrases=["flavor spot doesn't match", "tolerations"],
    ),
    "no-node-fit": ReasonCase(
        objects=[flavor("f"), *_nodes(4), cluster_queue("cq", {"f": 64})],
        jobs=[job("cq", gpus=8, count=5, id=1)],
        code=ReasonCode.NO_NODE_FIT,
        phrases=[
            "quota fits in flavor f",
            "5 tasks of 8 nvidia.com/gpu needed",
            "at most 4 fit now",
        ],
        details={"flavor": "f", "maxTasks": 4, "podSet": "main"},
    ),
    "no-node-fit-tasks-per-node": ReasonCase(
        objects=[flavor("f"), *_nodes(2), cluster_queue("cq", {"f": 64})],
        jobs=[job("cq", gpus=2, count=6, id=1, tasks_per_node=2)],
        code=ReasonCode.NO_NODE_FIT,
        phrases=["6 tasks of 2 nvidia.com/gpu needed", "at most 4 fit now"],
        details={"maxTasks": 4},
    ),
    "no-node-fit-beats-quota-in-other-flavor": ReasonCase(
        # a100 is short of quota, h100 has quota but too few nodes: the nearest miss wins.
        objects=[
            flavor("a100", gpu="a100"),
            flavor("h100", gpu="h100"),
            make_node("a0", labels={"gpu": "a100"}),
            make_node("a1", labels={"gpu": "a100"}),
            make_node("h0", labels={"gpu": "h100"}),
            cluster_queue("cq", {"a100": 16, "h100": 16}),
        ],
        jobs=[job("cq", gpus=4, id=1, priority=1), job("cq", gpus=8, count=2, id=2)],
        code=ReasonCode.NO_NODE_FIT,
        phrases=["insufficient quota for nvidia.com/gpu in flavor a100", "at most 1 fit now"],
        details={"flavor": "h100", "maxTasks": 1},
    ),
    "undeclared-resource": ReasonCase(
        objects=[flavor("f"), *_nodes(), cluster_queue("cq", {"f": 8})],
        jobs=[job("cq", gpus=1, id=1, requests={CPU: "4"})],
        code=ReasonCode.UNDECLARED_RESOURCE,
        phrases=["resource cpu has no quota in the ClusterQueue"],
        details={"resource": CPU},
    ),
    "undeclared-resource-cpu-only-pod-set": ReasonCase(
        objects=[flavor("f"), *_nodes(), cluster_queue("cq", {"f": 8})],
        jobs=[
            gang(
                "cq",
                1,
                [
                    PodSet(name="launcher", requests={CPU: "1"}),
                    PodSet(name="worker", count=2, requests={GPU: 4}),
                ],
            )
        ],
        code=ReasonCode.UNDECLARED_RESOURCE,
        phrases=["pod set launcher", "resource cpu has no quota"],
        details={"podSet": "launcher"},
    ),
    "cluster-queue-not-found": ReasonCase(
        objects=[flavor("f"), *_nodes()],
        jobs=[job("missing", id=1)],
        code=ReasonCode.CLUSTER_QUEUE_NOT_FOUND,
        phrases=["ClusterQueue missing doesn't exist"],
        details={"clusterQueue": "missing"},
    ),
    "cluster-queue-of-local-queue-not-found": ReasonCase(
        objects=[flavor("f"), *_nodes(), local_queue("lq", "missing", namespace="team")],
        jobs=[job(queue="lq", tenant="team", id=1)],
        code=ReasonCode.CLUSTER_QUEUE_NOT_FOUND,
        phrases=["ClusterQueue missing doesn't exist"],
    ),
    "local-queue-not-found": ReasonCase(
        objects=[flavor("f"), *_nodes(), cluster_queue("cq", {"f": 8})],
        jobs=[job(queue="lq", tenant="team", id=1)],
        code=ReasonCode.LOCAL_QUEUE_NOT_FOUND,
        phrases=["LocalQueue lq doesn't exist in namespace team"],
        details={"localQueue": "team/lq"},
    ),
    "local-queue-in-other-namespace": ReasonCase(
        objects=[
            flavor("f"),
            *_nodes(),
            cluster_queue("cq", {"f": 8}),
            local_queue("lq", "cq", namespace="other"),
        ],
        jobs=[job(queue="lq", tenant="team", id=1)],
        code=ReasonCode.LOCAL_QUEUE_NOT_FOUND,
        phrases=["namespace team"],
    ),
    "cluster-queue-hold": ReasonCase(
        objects=[flavor("f"), *_nodes(), cluster_queue("cq", {"f": 8}, stopPolicy="Hold")],
        jobs=[job("cq", id=1)],
        code=ReasonCode.STOPPED,
        phrases=["ClusterQueue cq is stopped", "Hold"],
        details={"clusterQueue": "cq"},
    ),
    "local-queue-hold": ReasonCase(
        objects=[
            flavor("f"),
            *_nodes(),
            cluster_queue("cq", {"f": 8}),
            LocalQueue(name="lq", namespace="team", cluster_queue="cq", stop_policy="Hold"),
        ],
        jobs=[job(queue="lq", tenant="team", id=1)],
        code=ReasonCode.STOPPED,
        phrases=["LocalQueue team/lq is stopped", "Hold"],
        details={"localQueue": "team/lq"},
    ),
    "cluster-queue-inactive": ReasonCase(
        objects=[*_nodes(), cluster_queue("cq", {"ghost": 8})],
        jobs=[job("cq", id=1)],
        code=ReasonCode.INACTIVE,
        phrases=["ClusterQueue cq is inactive", "flavor ghost not found"],
        details={"flavor": "ghost"},
    ),
    "strict-fifo": ReasonCase(
        objects=[
            flavor("f"),
            *_nodes(),
            cluster_queue("cq", {"f": 8}, strategy="StrictFIFO"),
        ],
        jobs=[job("cq", gpus=4, id=1), job("cq", gpus=8, id=2), job("cq", gpus=1, id=3)],
        code=ReasonCode.STRICT_FIFO,
        phrases=["behind job 2", "StrictFIFO ClusterQueue cq"],
        details={"clusterQueue": "cq", "blockedBy": 2},
        emitted=False,
    ),
}


@pytest.mark.parametrize("case", REASON_CASES.values(), ids=REASON_CASES.keys())
def test_reason(case: ReasonCase) -> None:
    engine = engine_with(*case.objects, jobs=tuple(case.jobs))
    out = engine.cycle(0.0)
    target = case.jobs[-1].id
    assert target not in admitted_ids(out)
    reason = engine.explain(target)
    assert reason is not None
    assert reason.code is case.code, reason
    for phrase in case.phrases:
        assert phrase in reason.message, (phrase, reason.message)
    for key, value in case.details.items():
        assert reason.details.get(key) == value, (key, reason.details)
    emitted = pendings(out)
    if case.emitted:
        assert emitted.get(target) == reason
    else:
        assert target not in emitted
    # The reason survives its JSON form.
    assert Pending(target, reason).to_dict()["code"] == case.code.value


def test_priority_reason_before_first_cycle() -> None:
    engine = engine_with(
        flavor("f"), *_nodes(), cluster_queue("cq", {"f": 8}), jobs=(job("cq", id=1),)
    )
    reason = engine.explain(1)
    assert reason is not None
    assert reason.code is ReasonCode.PRIORITY
    assert "ClusterQueue cq" in reason.message
    assert reason.details == {"clusterQueue": "cq"}


def test_explain_of_admitted_or_unknown_job_is_none() -> None:
    engine = engine_with(
        flavor("f"), *_nodes(), cluster_queue("cq", {"f": 8}), jobs=(job("cq", id=1),)
    )
    engine.cycle(0.0)
    assert engine.explain(1) is None
    assert engine.explain(999) is None


# --------------------------------------------------------------------------- transitions


def test_waiting_reasons_resolve_when_objects_appear() -> None:
    engine = engine_with(flavor("f"), *_nodes(), jobs=(job(queue="lq", tenant="team", id=1),))
    out = engine.cycle(0.0)
    assert pendings(out)[1].code is ReasonCode.LOCAL_QUEUE_NOT_FOUND
    out = step(engine, 1.0, Upsert(local_queue("lq", "cq", namespace="team")))
    assert pendings(out)[1].code is ReasonCode.CLUSTER_QUEUE_NOT_FOUND
    out = step(engine, 2.0, Upsert(cluster_queue("cq", {"f": 8})))
    assert admitted_ids(out) == [1]


def test_hold_then_release_cluster_queue() -> None:
    engine = engine_with(
        flavor("f"),
        *_nodes(),
        cluster_queue("cq", {"f": 8}),
        jobs=(job("cq", gpus=8, id=1),),
    )
    # Put on hold before the first cycle: the pending job says so.
    out = step(engine, 0.0, Upsert(cluster_queue("cq", {"f": 8}, stopPolicy="Hold")))
    assert pendings(out)[1].code is ReasonCode.STOPPED
    assert admitted_ids(out) == []
    # A job submitted while on hold is told too.
    out = step(engine, 1.0, Submit(job("cq", gpus=1, id=2)))
    assert pendings(out)[2].code is ReasonCode.STOPPED
    # Nothing new to say while the hold lasts.
    assert engine.cycle(2.0) == []
    out = step(engine, 3.0, Upsert(cluster_queue("cq", {"f": 8})))
    assert admitted_ids(out) == [1]
    assert pendings(out)[2].code is ReasonCode.INSUFFICIENT_QUOTA


def test_local_queue_hold_then_release() -> None:
    engine = engine_with(
        flavor("f"),
        *_nodes(),
        cluster_queue("cq", {"f": 8}),
        local_queue("lq", "cq", namespace="team"),
        jobs=(job(queue="lq", tenant="team", id=1),),
    )
    held = LocalQueue(name="lq", namespace="team", cluster_queue="cq", stop_policy="Hold")
    out = step(engine, 0.0, Upsert(held))
    assert pendings(out)[1].code is ReasonCode.STOPPED
    assert admitted_ids(step(engine, 1.0, Upsert(local_queue("lq", "cq", namespace="team")))) == [1]


def test_deleting_the_cluster_queue_of_pending_jobs() -> None:
    engine = engine_with(
        flavor("f"),
        *_nodes(),
        cluster_queue("cq", {"f": 8}),
        jobs=(job("cq", gpus=8, id=1), job("cq", gpus=8, id=2)),
    )
    engine.cycle(0.0)
    out = step(engine, 1.0, Delete("ClusterQueue", "cq"))
    assert pendings(out)[2].code is ReasonCode.CLUSTER_QUEUE_NOT_FOUND


# --------------------------------------------------------------------------- emission


def _waiting_engine() -> Engine:
    engine = engine_with(
        flavor("f"),
        *_nodes(),
        cluster_queue("cq", {"f": 8}),
        cluster_queue("solo", {"f": 8}),
        jobs=(job("cq", gpus=6, id=1), job("cq", gpus=4, id=2), job("solo", gpus=8, id=3)),
    )
    out = engine.cycle(0.0)
    assert admitted_ids(out) == [1, 3]
    assert list(pendings(out)) == [2]
    return engine


def test_pending_not_reemitted_when_reason_unchanged() -> None:
    engine = _waiting_engine()
    before = engine.explain(2)
    # A new node wakes every parked queue; job 2 is re-evaluated, same answer.
    out = step(engine, 1.0, Upsert(node("n9")))
    assert out == []
    assert engine.explain(2) == before
    # Quota released in another root does not concern it.
    out = step(engine, 2.0, Finish(3))
    assert out == []


def test_pending_reemitted_when_reason_changes() -> None:
    engine = _waiting_engine()
    first = engine.explain(2)
    assert first is not None and first.details["shortBy"] == 2
    # Less quota: the same job is now more than the queue could ever get.
    out = step(engine, 1.0, Upsert(cluster_queue("cq", {"f": 2})))
    assert [d.job_id for d in out] == [2]
    assert pendings(out)[2].code is ReasonCode.EXCEEDS_MAX_QUOTA
    # Some quota back: insufficient again, with new amounts.
    out = step(engine, 2.0, Upsert(cluster_queue("cq", {"f": 9})))
    reason = pendings(out)[2]
    assert reason.code is ReasonCode.INSUFFICIENT_QUOTA
    assert reason.details["shortBy"] == 1
    assert "needs 4, 3 available" in reason.message


def test_each_job_gets_one_pending_per_reason() -> None:
    """Over many cycles a waiting job's stream holds one Pending per distinct reason."""
    engine = _waiting_engine()
    seen: list[Any] = []
    for t in range(1, 10):
        out = step(engine, float(t), Upsert(node(f"extra{t}")))
        seen.extend(d for d in out if isinstance(d, Pending))
    assert seen == []
