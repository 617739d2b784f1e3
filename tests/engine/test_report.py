"""``explain_job``: the facts behind ``phalanx explain``, read from a real engine."""

from __future__ import annotations

import json

from phalanx.engine import Engine, EngineConfig, Finish, ReasonCode, Submit, Upsert
from phalanx.engine.config import BackfillConfig
from phalanx.engine.explain.report import Position, explain_job
from phalanx.model import Job, PodSet
from tests.engine.helpers import (
    GPU,
    cluster_queue,
    engine_with,
    flavor,
    job,
    local_queue,
    node,
    quota,
    step,
)


def _nodes(n: int = 4) -> list[object]:
    return [node(f"n{i}") for i in range(n)]


def test_quota_shortage_numbers_name_the_cohort() -> None:
    engine = engine_with(
        flavor("f"),
        *_nodes(),
        cluster_queue("a", {"f": 8}, cohort="co"),
        cluster_queue("b", {"f": 8}, cohort="co"),
        jobs=(job("b", gpus=6, id=1), job("a", gpus=4, id=2)),
    )
    step(engine, 1.0)
    step(engine, 2.0, Submit(job("a", gpus=8, id=3, submit=2.0)))
    ex = explain_job(engine, 3)
    assert ex is not None
    assert ex.state == "pending"
    assert ex.cluster_queue == "a" and ex.cohort == "co"
    assert ex.reason_code == ReasonCode.INSUFFICIENT_QUOTA.value
    [line] = ex.quota
    assert (line.flavor, line.resource, line.requested) == ("f", GPU, 8)
    assert (line.nominal, line.usage, line.borrowed, line.free) == (8, 4, 0, 4)
    # The cohort pools 16, 10 are used: 6 for a, of which 2 would be borrowed.
    assert (line.available, line.from_cohort, line.cohort_available) == (6, 2, 6)
    assert (line.short_by, line.short_in, line.limit) == (2, "Cohort/co", "quota")
    assert line.potential == 16 and not line.never_fits
    assert ex.shortages == (line,)
    assert ex.reason_details["shortBy"] == line.short_by

    # Once a's first job ends, the job fits and is admitted.
    step(engine, 3.0, Finish(2))
    ex = explain_job(engine, 3)
    assert ex is not None
    assert ex.state == "admitted"


def test_borrowing_limit_binds_in_the_cluster_queue() -> None:
    engine = engine_with(
        flavor("f"),
        *_nodes(),
        cluster_queue("cq", {"f": [quota(GPU, 4, borrowing=2)]}, cohort="co"),
        cluster_queue("lender", {"f": 16}, cohort="co"),
        jobs=(job("cq", gpus=5, id=1), job("cq", gpus=2, id=2)),
    )
    step(engine, 1.0)
    ex = explain_job(engine, 2)
    assert ex is not None
    [line] = ex.quota
    assert (line.usage, line.borrowed, line.borrowing_limit) == (5, 1, 2)
    assert (line.free, line.available, line.short_by) == (0, 1, 1)
    assert (line.short_in, line.limit) == ("ClusterQueue/cq", "borrowingLimit")


def test_more_than_the_queue_could_ever_get() -> None:
    engine = engine_with(
        flavor("f"), *_nodes(), cluster_queue("cq", {"f": 8}), jobs=(job("cq", 8, count=2, id=1),)
    )
    step(engine, 1.0)
    ex = explain_job(engine, 1)
    assert ex is not None
    assert ex.reason_code == ReasonCode.EXCEEDS_MAX_QUOTA.value
    [line] = ex.quota
    assert line.never_fits and line.potential == 8 and line.short_by == 8


def test_gang_shortage_counts_tasks_and_free_capacity() -> None:
    engine = engine_with(
        flavor("f"),
        *_nodes(4),
        cluster_queue("cq", {"f": 64}),
        jobs=(job("cq", gpus=4, id=1), job("cq", gpus=8, count=4, id=2)),
    )
    step(engine, 1.0)
    ex = explain_job(engine, 2)
    assert ex is not None
    assert ex.reason_code == ReasonCode.NO_NODE_FIT.value
    gang = ex.gang
    assert gang is not None
    assert (gang.pod_set, gang.flavor, gang.tasks_needed, gang.tasks_fit) == ("main", "f", 4, 3)
    assert gang.per_task == {GPU: 8}
    assert (gang.nodes, gang.schedulable, gang.idle) == (4, 4, 3)
    assert gang.free == {GPU: 28}
    # Quota is not what is short.
    assert ex.shortages == ()


def test_positions_in_queue_and_cluster_and_jobs_ahead() -> None:
    engine = engine_with(
        flavor("f"),
        *_nodes(1),
        cluster_queue("a", {"f": 8}),
        cluster_queue("b", {"f": 8}),
        jobs=(
            job("a", gpus=8, id=1, priority=3),
            job("a", gpus=8, id=2, priority=5, submit=1.0),
            job("b", gpus=8, id=3, priority=9, submit=1.0),
            job("a", gpus=8, id=4, priority=5, submit=2.0),
            job("a", gpus=8, id=5, priority=1, submit=3.0),
            job("b", gpus=8, id=6, priority=7, submit=3.0),
        ),
    )
    step(engine, 5.0)
    # b's head sorts first and takes the only node.
    assert [j for j in range(1, 7) if engine.jobs[j].admission is not None] == [3]
    ex = explain_job(engine, 5)
    assert ex is not None
    assert ex.queue_position == Position(4, 4)
    assert ex.cluster_position == Position(5, 5)
    assert [(j.id, j.priority) for j in ex.ahead] == [(2, 5.0), (4, 5.0), (1, 3.0)]
    ex4 = explain_job(engine, 4)
    assert ex4 is not None
    assert ex4.queue_position == Position(2, 4)
    assert ex4.cluster_position == Position(3, 5)  # behind 6 (priority 7) and 2
    assert [j.id for j in ex4.ahead] == [2]
    ex6 = explain_job(engine, 6)
    assert ex6 is not None
    assert (ex6.queue_position, ex6.cluster_position) == (Position(1, 1), Position(1, 5))
    assert ex6.ahead == ()
    # The whole explanation is plain JSON.
    data = json.loads(json.dumps(ex.to_dict()))
    assert data["position"]["queue"] == {"rank": 4, "of": 4}
    assert data["priority"]["total"] == 1.0


def test_waiting_for_a_missing_local_queue() -> None:
    engine = engine_with(
        flavor("f"),
        *_nodes(1),
        cluster_queue("cq", {"f": 8}),
        jobs=(job(queue="nope", tenant="team", id=1),),
    )
    step(engine, 1.0)
    ex = explain_job(engine, 1)
    assert ex is not None
    assert ex.state == "waiting"
    assert ex.cluster_queue is None and ex.local_queue == "team/nope"
    assert ex.reason_code == ReasonCode.LOCAL_QUEUE_NOT_FOUND.value
    assert ex.reason_details == {"localQueue": "team/nope"}
    assert ex.queue_position is None and ex.quota == ()

    # Once the LocalQueue exists the job queues, and here it fits at once.
    step(engine, 2.0, Upsert(local_queue("nope", "cq", namespace="team")))
    ex = explain_job(engine, 1)
    assert ex is not None and ex.state == "admitted"
    assert ex.local_queue == "team/nope"


def test_strict_fifo_names_the_blocking_head() -> None:
    engine = engine_with(
        flavor("f"),
        *_nodes(1),
        cluster_queue("cq", {"f": 8}, strategy="StrictFIFO"),
        jobs=(
            job("cq", gpus=6, id=1),
            job("cq", gpus=4, id=2, submit=1.0),
            job("cq", gpus=1, id=3, submit=2.0),
        ),
    )
    step(engine, 3.0)
    ex = explain_job(engine, 3)
    assert ex is not None
    assert ex.reason_code == ReasonCode.STRICT_FIFO.value
    assert ex.blocked_by is not None and ex.blocked_by.id == 2
    assert [j.id for j in ex.ahead] == [2]
    assert ex.queue_position is not None and ex.queue_position.rank == 2
    # Its quota would fit: the strategy, not quota, holds it.
    [line] = ex.quota
    assert line.short_by == 0 and line.available == 2


def test_admitted_job_says_where_and_whether_it_borrows() -> None:
    engine = engine_with(
        flavor("f"),
        *_nodes(2),
        cluster_queue("a", {"f": 4}, cohort="co"),
        cluster_queue("b", {"f": 12}, cohort="co"),
        jobs=(job("a", gpus=8, id=1),),
    )
    step(engine, 7.0)
    ex = explain_job(engine, 1)
    assert ex is not None
    assert ex.state == "admitted" and ex.reason_code is None
    adm = ex.admission
    assert adm is not None
    assert adm.cluster_queue == "a" and adm.borrowing
    assert adm.flavors == {"main": {GPU: "f"}}
    assert len(adm.nodes) == 1 and adm.nodes[0] in {"n0", "n1"}
    assert adm.usage == (("f", GPU, 8),)
    assert adm.admitted_at == 7.0 and not adm.evicting
    assert ex.to_dict()["admission"]["borrowing"] is True


def test_unknown_and_finished_jobs_are_none() -> None:
    engine = engine_with(flavor("f"), *_nodes(1), cluster_queue("cq", {"f": 8}))
    assert explain_job(engine, 99) is None
    step(engine, 1.0, Submit(job("cq", id=7)))
    step(engine, 2.0, Finish(7))
    assert explain_job(engine, 7) is None


def test_priority_factors_add_up_to_the_priority() -> None:
    engine = engine_with(
        flavor("f"),
        *_nodes(1),
        cluster_queue("cq", {"f": 8}),
        preset="phalanx",
        jobs=(job("cq", gpus=8, id=1), job("cq", gpus=4, id=2, submit=10.0)),
    )
    step(engine, 100.0)
    # Only one fits; which one the fair-share order picks does not matter here.
    [pending] = [j for j in (1, 2) if engine.jobs[j].admission is None]
    ex = explain_job(engine, pending)
    assert ex is not None and ex.state == "pending"
    factors = ex.priority_factors
    assert factors is not None and "age" in factors
    assert abs(sum(factors.values()) - ex.priority) < 1e-9
    assert ex.to_dict()["priority"] == {"total": ex.priority, "factors": factors}
    admitted = explain_job(engine, 3 - pending)
    assert admitted is not None and admitted.priority_factors is None


def _limited(id: int, nodes: int, limit: float | None, priority: int) -> Job:
    return Job(
        id=id,
        cluster_queue="cq",
        priority=priority,
        time_limit=limit,
        pod_sets=[PodSet(count=nodes, tasks_per_node=1, requests={GPU: 8})],
    )


def test_reservations_and_estimates_from_the_backfill_plan() -> None:
    engine = Engine(EngineConfig(preset="kueue", backfill=BackfillConfig(interval_s=0)))
    for obj in (flavor("f"), *[node(f"n{i}") for i in range(1, 5)], cluster_queue("cq", {"f": 32})):
        engine.apply(Upsert(obj))
    # n1, n2 busy until 100; n3 until 1000; n4 idle.
    step(engine, 0.0, Submit(_limited(1, 2, 100, 10)), Submit(_limited(2, 1, 1000, 10)))
    step(engine, 1.0, Submit(_limited(3, 3, None, 5)))
    step(engine, 2.0, Submit(_limited(4, 1, 200, 1)))
    assert all(engine.jobs[j].admission is None for j in (3, 4))

    held = explain_job(engine, 3)
    assert held is not None and held.reservation is not None
    assert held.reservation.job_id == 3 and held.reservation.start == 120.0
    assert sorted(held.reservation.nodes) == ["n1", "n2", "n4"]
    assert held.estimated_start == 120.0
    assert held.reservation_ahead is None  # nothing ahead of it
    # The quota held for its own reservation is its own: 24 used by 1 and 2, 8 free.
    [line] = held.quota
    assert (line.usage, line.free, line.reserved, line.short_by) == (24, 8, 0, 16)

    behind = explain_job(engine, 4)
    assert behind is not None
    ahead = behind.reservation_ahead
    assert ahead is not None
    assert (ahead.job_id, ahead.priority, ahead.start, ahead.ahead) == (3, 5.0, 120.0, True)
    assert behind.estimated_start == engine.estimated_start(4) is not None
    assert behind.reservation is None
    # Job 3's reservation holds 8 more than jobs ending before it give back.
    [line] = behind.quota
    assert (line.usage, line.reserved, line.free, line.short_by) == (32, 8, 0, 8)
