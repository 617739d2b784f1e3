"""Ordering of pending jobs: the ``kueue`` and ``phalanx`` presets.

``kueue``: priority value descending, then submit time, then id (Kueue's
queue heap, §2.2). ``phalanx``: the fair-share formula of
:mod:`phalanx.engine.priority.ordering`::

    P = w_age*ln(1+wait) + w_share*(1 - U/L) + w_qos*Q - w_size*(gpus/cluster_gpus)

recomputed every ``priority_calc_period_s`` (and when its inputs change by an
event), never per cycle: an Admit's ``priority`` is the value computed at the
last recalculation.
"""

from __future__ import annotations

import math
from typing import Any

import pytest

from phalanx.engine import (
    Engine,
    EngineConfig,
    FairShareWeights,
    Finish,
    Submit,
    TenantUsage,
    Upsert,
)
from phalanx.model import Job, PodSet, PriorityClass, Tenant
from tests.engine.helpers import (
    GPU,
    admits,
    admitted_ids,
    cluster_queue,
    flavor,
    job,
    node,
    step,
)


def _engine(config: EngineConfig, *objects: Any, gpus: int = 8) -> Engine:
    """One 8-GPU node per 8 GPUs of ``gpus``; a ClusterQueue "cq" with ``gpus`` quota."""
    engine = Engine(config)
    for obj in (
        flavor("f"),
        *[node(f"n{i}") for i in range(max(1, gpus // 8))],
        cluster_queue("cq", {"f": gpus}),
        *objects,
    ):
        engine.apply(Upsert(obj))
    return engine


def _classed(job_id: int, priority_class: str | None, submit: float = 0.0, gpus: int = 8) -> Job:
    return Job(
        id=job_id,
        cluster_queue="cq",
        priority_class=priority_class,
        submit_time=submit,
        pod_sets=[PodSet(requests={GPU: gpus})],
    )


# --------------------------------------------------------------------------- kueue preset


KUEUE = EngineConfig(preset="kueue")


@pytest.mark.parametrize(
    ("jobs", "expected"),
    [
        pytest.param([(1, 0, 0.0), (2, 10, 5.0), (3, 5, 1.0)], [2, 3, 1], id="priority-desc"),
        pytest.param([(1, 0, 9.0), (2, 0, 3.0), (3, 0, 6.0)], [2, 3, 1], id="then-submit-time"),
        pytest.param([(7, 0, 1.0), (3, 0, 1.0), (5, 0, 1.0)], [3, 5, 7], id="then-id"),
        pytest.param(
            [(1, -5, 0.0), (2, 0, 9.0), (3, 0, 2.0), (4, 100, 50.0), (5, 0, 2.0)],
            [4, 3, 5, 2, 1],
            id="mixed",
        ),
    ],
)
def test_kueue_order(jobs: list[tuple[int, int, float]], expected: list[int]) -> None:
    # Quota for one job at a time: each Finish admits the next in queue order.
    engine = _engine(KUEUE)
    for job_id, priority, submit in jobs:
        engine.apply(Submit(job("cq", gpus=8, id=job_id, priority=priority, submit=submit)))
    order: list[int] = []
    now = 100.0
    for _ in jobs:
        out = engine.cycle(now)
        assert len(admitted_ids(out)) == 1
        order += admitted_ids(out)
        engine.apply(Finish(order[-1]))
        now += 1.0
    assert order == expected


def test_kueue_order_within_one_cycle() -> None:
    """With room for all, one cycle admits them in queue order."""
    engine = _engine(KUEUE, gpus=64)
    for job_id, priority, submit in [(1, 0, 3.0), (2, 5, 9.0), (3, 0, 1.0), (4, 5, 2.0)]:
        engine.apply(Submit(job("cq", gpus=1, id=job_id, priority=priority, submit=submit)))
    assert admitted_ids(engine.cycle(10.0)) == [4, 2, 3, 1]


def test_kueue_priority_is_the_priority_class_value() -> None:
    engine = _engine(
        KUEUE,
        PriorityClass(name="high", value=1000),
        PriorityClass(name="low", value=-10),
        gpus=64,
    )
    jobs = [
        _classed(1, "low"),
        _classed(2, None),
        _classed(3, "high"),
        _classed(4, "missing"),
        job("cq", gpus=8, id=5, priority=50),
    ]
    out = step(engine, 0.0, *[Submit(j) for j in jobs])
    assert admitted_ids(out) == [3, 5, 2, 4, 1]
    assert {j: a.priority for j, a in admits(out).items()} == {
        1: -10.0,
        2: 0.0,
        3: 1000.0,
        4: 0.0,
        5: 50.0,
    }


def test_kueue_order_ignores_tenant_usage_and_age() -> None:
    engine = _engine(KUEUE)
    engine.apply(Submit(job("cq", gpus=8, id=1, tenant="heavy", submit=0.0)))
    engine.apply(Submit(job("cq", gpus=8, id=2, tenant="light", submit=1.0)))
    engine.apply(TenantUsage("heavy", 1000.0))
    out = engine.cycle(10_000.0)
    assert admitted_ids(out) == [1]
    assert admits(out)[1].priority == 0.0


# --------------------------------------------------------------------------- phalanx preset


def _fair(weights: FairShareWeights | None = None, period: float = 300.0) -> EngineConfig:
    return EngineConfig(
        preset="phalanx",
        weights=weights or FairShareWeights(),
        priority_calc_period_s=period,
    )


def _formula(
    w: FairShareWeights,
    wait: float,
    usage: float = 0.0,
    allocation: float = 1.0,
    qos: float = 0.0,
    gpus: int = 8,
    cluster_gpus: int = 8,
) -> float:
    share = 1.0 - usage / allocation if allocation > 0 else 0.0
    return (
        w.age * math.log1p(max(0.0, wait))
        + w.share * share
        + w.qos * qos
        - w.size * (gpus / cluster_gpus)
    )


def test_phalanx_priority_follows_the_formula() -> None:
    w = FairShareWeights(age=2.0, share=10.0, qos=5.0, size=3.0)
    engine = _engine(
        _fair(w),
        PriorityClass(name="high", value=200),
        PriorityClass(name="mid", value=50),
        Tenant(name="team", allocation=4.0),
        gpus=32,
    )
    engine.apply(TenantUsage("team", 1.0))
    j = Job(
        id=1,
        tenant="team",
        cluster_queue="cq",
        priority_class="mid",
        submit_time=40.0,
        pod_sets=[PodSet(count=2, requests={GPU: 4})],
    )
    out = step(engine, 100.0, Submit(j))
    # team is the only tenant: L is the whole cluster over the 7-day half-life window.
    allocation = 32 * (7 * 24) / math.log(2)
    expected = _formula(
        w, wait=60.0, usage=1.0, allocation=allocation, qos=0.25, gpus=8, cluster_gpus=32
    )
    assert admits(out)[1].priority == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize(
    ("usage", "allocation", "share"),
    [
        pytest.param(0.0, 1.0, 1.0, id="idle-tenant"),
        pytest.param(3.0, 4.0, 0.25, id="three-quarters-used"),
        pytest.param(8.0, 4.0, -1.0, id="over-allocation"),
        pytest.param(5.0, 0.0, 0.0, id="zero-allocation"),
    ],
)
def test_phalanx_share_term(usage: float, allocation: float, share: float) -> None:
    w = FairShareWeights(age=0.0, share=1.0, qos=0.0, size=0.0)
    engine = _engine(_fair(w))
    engine.apply(TenantUsage("t", usage, allocation))
    out = step(engine, 0.0, Submit(job("cq", gpus=8, id=1, tenant="t")))
    assert admits(out)[1].priority == pytest.approx(share)


def test_tenant_usage_lowers_a_heavy_tenants_priority() -> None:
    engine = _engine(_fair(), Tenant(name="heavy"), Tenant(name="light"))
    # Heavy's job sorts first on every other count (older, lower id).
    engine.apply(Submit(job("cq", gpus=8, id=1, tenant="heavy", submit=0.0)))
    engine.apply(Submit(job("cq", gpus=8, id=2, tenant="light", submit=0.0)))
    engine.apply(TenantUsage("heavy", 0.6))
    out = engine.cycle(0.0)
    assert admitted_ids(out) == [2]
    # Once heavy's usage decays, its job is back in front of a newer light job.
    engine.apply(Submit(job("cq", gpus=8, id=3, tenant="light", submit=0.0)))
    engine.apply(TenantUsage("heavy", 0.0))
    out = step(engine, 1.0, Finish(2))
    assert admitted_ids(out) == [1]


def test_tenant_usage_takes_effect_without_waiting_for_the_period() -> None:
    w = FairShareWeights(age=0.0, share=1.0, qos=0.0, size=0.0)
    engine = _engine(_fair(w, period=10_000.0))
    engine.apply(TenantUsage("a", 0.0, 1.0))
    engine.apply(TenantUsage("b", 0.0, 1.0))
    engine.apply(Submit(job("cq", gpus=8, id=1, tenant="a", submit=0.0)))
    engine.apply(Submit(job("cq", gpus=8, id=2, tenant="b", submit=0.0)))
    engine.apply(Submit(job("cq", gpus=8, id=3, tenant="a", submit=0.0)))
    assert admitted_ids(engine.cycle(0.0)) == [1]
    engine.apply(TenantUsage("a", 0.5))
    out = step(engine, 1.0, Finish(1))
    assert admitted_ids(out) == [2]
    assert admits(out)[2].priority == pytest.approx(1.0)
    out = step(engine, 2.0, Finish(2))
    assert admits(out)[3].priority == pytest.approx(0.5)


def test_tenant_allocation_from_tenant_object() -> None:
    w = FairShareWeights(age=0.0, share=1.0, qos=0.0, size=0.0)
    engine = _engine(_fair(w), Tenant(name="t", allocation=8.0))
    engine.apply(TenantUsage("t", 2.0))  # L derived from the tenant tree
    out = step(engine, 0.0, Submit(job("cq", gpus=8, id=1, tenant="t")))
    allocation = 8 * (7 * 24) / math.log(2)
    assert admits(out)[1].priority == pytest.approx(1.0 - 2.0 / allocation)


def test_priority_class_term() -> None:
    w = FairShareWeights(age=0.0, share=0.0, qos=5.0, size=0.0)
    engine = _engine(
        _fair(w),
        PriorityClass(name="high", value=1000),
        PriorityClass(name="low", value=10),
        gpus=64,
    )
    out = step(
        engine,
        0.0,
        Submit(_classed(1, "low")),
        Submit(_classed(2, None)),
        Submit(_classed(3, "high")),
    )
    assert admitted_ids(out) == [3, 1, 2]
    assert [admits(out)[i].priority for i in (3, 1, 2)] == pytest.approx([5.0, 0.05, 0.0])


def test_size_term_favours_smaller_jobs() -> None:
    w = FairShareWeights(age=0.0, share=0.0, qos=0.0, size=4.0)
    engine = _engine(_fair(w), gpus=32)
    out = step(
        engine,
        0.0,
        Submit(job("cq", gpus=8, count=2, id=1)),
        Submit(job("cq", gpus=1, id=2)),
        Submit(job("cq", gpus=8, id=3)),
    )
    assert admitted_ids(out) == [2, 3, 1]
    assert [admits(out)[i].priority for i in (2, 3, 1)] == pytest.approx([-0.125, -1.0, -2.0])


def test_size_term_follows_cluster_size() -> None:
    w = FairShareWeights(age=0.0, share=0.0, qos=0.0, size=1.0)
    engine = _engine(_fair(w))
    engine.apply(Submit(job("cq", gpus=8, id=1)))
    engine.apply(Submit(job("cq", gpus=8, id=2)))
    assert admits(engine.cycle(0.0))[1].priority == pytest.approx(-1.0)
    # The cluster doubles: the waiting job's size term halves at the next cycle.
    engine.apply(Upsert(node("n-extra")))
    out = step(engine, 1.0, Finish(1))
    assert admits(out)[2].priority == pytest.approx(-0.5)


def test_age_term_orders_old_jobs_first() -> None:
    w = FairShareWeights(age=1.0, share=0.0, qos=0.0, size=0.0)
    engine = _engine(_fair(w))
    engine.apply(Submit(job("cq", gpus=8, id=1, submit=50.0)))
    engine.apply(Submit(job("cq", gpus=8, id=2, submit=0.0)))
    out = engine.cycle(100.0)
    assert admitted_ids(out) == [2]
    assert admits(out)[2].priority == pytest.approx(math.log1p(100.0))


# --------------------------------------------------------------------------- recalculation


W_AGE_SHARE = FairShareWeights(age=1.0, share=1.0, qos=0.0, size=0.0)


@pytest.mark.parametrize(
    ("period", "winner", "priority"),
    [
        # Last recalculation at t=0: A (heavy) 0 + 0.5; B (light) 0 + 1.0.
        pytest.param(300.0, 2, 1.0, id="no-recalculation-yet"),
        # Recalculated at t=100: A ln(101) + 0.5; B ln(11) + 1.0.
        pytest.param(50.0, 1, math.log1p(100.0) + 0.5, id="recalculated"),
    ],
)
def test_priorities_recomputed_on_the_period(period: float, winner: int, priority: float) -> None:
    engine = _engine(_fair(W_AGE_SHARE, period=period))
    engine.apply(TenantUsage("heavy", 0.5, 1.0))
    engine.apply(TenantUsage("light", 0.0, 1.0))
    engine.apply(Submit(job("cq", gpus=8, id=99, tenant="light", submit=0.0)))
    engine.apply(Submit(job("cq", gpus=8, id=1, tenant="heavy", submit=0.0)))
    assert admitted_ids(engine.cycle(0.0)) == [99]
    engine.apply(Submit(job("cq", gpus=8, id=2, tenant="light", submit=90.0)))
    out = step(engine, 100.0, Finish(99))
    assert admitted_ids(out) == [winner]
    assert admits(out)[winner].priority == pytest.approx(priority, rel=1e-12)


def test_priority_is_not_recomputed_per_cycle() -> None:
    w = FairShareWeights(age=1.0, share=0.0, qos=0.0, size=0.0)
    engine = _engine(_fair(w, period=300.0))
    engine.apply(Submit(job("cq", gpus=8, id=1, submit=0.0)))
    engine.apply(Submit(job("cq", gpus=8, id=2, submit=0.0)))
    engine.apply(Submit(job("cq", gpus=8, id=3, submit=0.0)))
    engine.apply(Submit(job("cq", gpus=8, id=4, submit=0.0)))
    assert admits(engine.cycle(10.0))[1].priority == pytest.approx(math.log1p(10.0))
    # Cycles at 100, 200, 250: still the value computed at t=10.
    for t in (100.0, 200.0, 250.0):
        assert engine.cycle(t) == []
    out = step(engine, 260.0, Finish(1))
    assert admits(out)[2].priority == pytest.approx(math.log1p(10.0))
    # t=310 is a period after t=10: recalculated.
    out = step(engine, 310.0, Finish(2))
    assert admits(out)[3].priority == pytest.approx(math.log1p(310.0))
    # The next recalculation is due at 610, not at 320.
    out = step(engine, 320.0, Finish(3))
    assert admits(out)[4].priority == pytest.approx(math.log1p(310.0))


def test_job_submitted_after_last_recalculation_has_no_age_yet() -> None:
    w = FairShareWeights(age=1.0, share=0.0, qos=0.0, size=0.0)
    engine = _engine(_fair(w, period=300.0))
    engine.cycle(0.0)
    out = step(engine, 150.0, Submit(job("cq", gpus=8, id=1, submit=120.0)))
    assert admits(out)[1].priority == 0.0


@pytest.mark.parametrize(("period", "second"), [(1000.0, 1), (100_000.0, 3)])
def test_recalculation_reorders_the_queue(period: float, second: int) -> None:
    """Age overtakes share at a recalculation: the order in the queue changes then, not before."""
    w = FairShareWeights(age=1.0, share=10.0, qos=0.0, size=0.0)
    engine = _engine(_fair(w, period=period))
    engine.apply(TenantUsage("heavy", 0.5, 1.0))
    for tenant in ("light", "default"):
        engine.apply(TenantUsage(tenant, 0.0, 1.0))
    engine.apply(Submit(job("cq", gpus=8, id=99, submit=-1.0)))
    engine.apply(Submit(job("cq", gpus=8, id=1, tenant="heavy", submit=0.0)))
    engine.apply(Submit(job("cq", gpus=8, id=2, tenant="light", submit=0.0)))
    engine.apply(Submit(job("cq", gpus=8, id=3, tenant="light", submit=999.0)))
    assert admitted_ids(engine.cycle(0.0)) == [99]
    # As computed at t=0: heavy 5, light 10 and 10. Recomputed at t=1000: heavy
    # ln(1001)+5 = 11.9, light-old ln(1001)+10 = 16.9, light-new ln(2)+10 = 10.7.
    out = step(engine, 1000.0, Finish(99))
    assert admitted_ids(out) == [2]
    out = step(engine, 1001.0, Finish(2))
    assert admitted_ids(out) == [second]
    if second == 1:
        assert admits(out)[1].priority == pytest.approx(math.log1p(1000.0) + 5.0)
    else:
        assert admits(out)[3].priority == pytest.approx(10.0)
