"""The three ordering presets on small scenarios, per-ClusterQueue presets, and the factors.

* ``phalanx``: ``L`` is the tenant's normalized share of the cluster x
  cluster GPUs x ``half_life_h / ln 2`` (the calc period without decay),
  unless ``TenantUsage.allocation`` gives it; ``Q`` is clamped into [0, 1].
* ``slurm``: priority/multifactor end to end through the engine, with Slurm's
  documented and derived vectors (slurm.md §4.3, §4.5, §4.6): the 7574 / 8494 /
  7534 job, the classic fair-share factors and Fair Tree's ranks over a tenant
  tree whose users share their tenant's factor.
* ``phalanx.io/preset`` on a ClusterQueue picks the ordering of its jobs.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import pytest

from phalanx.dialects.kueue import load_text
from phalanx.engine import (
    Engine,
    EngineConfig,
    FairShareWeights,
    Finish,
    Submit,
    TenantUsage,
    Upsert,
)
from phalanx.engine.config import AdmissionFairSharingConfig, SlurmPriorityConfig, UsageConfig
from phalanx.engine.snapshot import export_state, load_state
from phalanx.errors import Invalid
from phalanx.model import FairSharing, Job, LocalQueue, PodSet, PriorityClass, Tenant
from tests.engine.helpers import (
    GPU,
    admits,
    admitted_ids,
    cluster_queue,
    flavor,
    job,
    node,
    quota,
)

SHARE_ONLY = FairShareWeights(age=0.0, share=1.0, qos=0.0, size=0.0)


def _engine(config: EngineConfig, *objects: Any, nodes: int = 2, cpu: str = "96") -> Engine:
    engine = Engine(config)
    for obj in (flavor("f"), *[node(f"n{i}", cpu=cpu) for i in range(nodes)], *objects):
        engine.apply(Upsert(obj))
    return engine


def _cq(name: str = "cq", gpus: int = 16, cpus: int | None = None, **annotations: str) -> Any:
    extra: dict[str, Any] = {"annotations": annotations} if annotations else {}
    quotas = [quota(GPU, gpus)] + ([quota("cpu", cpus)] if cpus is not None else [])
    return cluster_queue(name, {"f": quotas}, **extra)


def _factor(engine: Engine, job_id: int, name: str) -> float:
    factors = engine.priority_factors(job_id)
    assert factors is not None
    return factors[name]


# --------------------------------------------------------------------------- phalanx: L


TREE = (
    Tenant(name="org", allocation=1.0),
    Tenant(name="a", parent="org", allocation=3.0),
    Tenant(name="b", parent="org", allocation=1.0),
    Tenant(name="c", allocation=1.0),
)
"""Normalized shares: org 1/2, c 1/2, a 1/2 * 3/4 = 3/8, b 1/2 * 1/4 = 1/8."""


@pytest.mark.parametrize(
    ("tenant", "share"), [("org", 0.5), ("a", 0.375), ("b", 0.125), ("c", 0.5)]
)
def test_phalanx_allocation_is_the_normalized_share_over_the_decay_window(
    tenant: str, share: float
) -> None:
    config = EngineConfig(weights=SHARE_ONLY, usage=UsageConfig(half_life_s=3600.0))
    engine = _engine(config, _cq(), *TREE)
    engine.apply(TenantUsage(tenant, 2.0))
    engine.apply(Submit(job("cq", gpus=1, id=1, tenant=tenant)))
    limit = share * 16 * 1.0 / math.log(2)  # 16 GPUs, a one-hour half-life
    assert admits(engine.cycle(0.0))[1].priority == pytest.approx(1.0 - 2.0 / limit)


def test_phalanx_without_decay_uses_the_calc_period_as_the_window() -> None:
    config = EngineConfig(
        weights=SHARE_ONLY, usage=UsageConfig(half_life_s=0.0), priority_calc_period_s=7200.0
    )
    engine = _engine(config, _cq(), Tenant(name="t"))
    engine.apply(TenantUsage("t", 4.0))
    engine.apply(Submit(job("cq", gpus=1, id=1, tenant="t")))
    limit = 16 * 2.0 / math.log(2)
    assert admits(engine.cycle(0.0))[1].priority == pytest.approx(1.0 - 4.0 / limit)


def test_phalanx_explicit_allocation_overrides_the_tree_and_sticks() -> None:
    engine = _engine(EngineConfig(weights=SHARE_ONLY), _cq(), Tenant(name="t"))
    engine.apply(TenantUsage("t", 1.0, allocation=4.0))
    engine.apply(TenantUsage("t", 3.0))  # no allocation: the explicit 4 still holds
    engine.apply(Submit(job("cq", gpus=1, id=1, tenant="t")))
    assert admits(engine.cycle(0.0))[1].priority == pytest.approx(0.25)


def test_phalanx_undeclared_tenant_has_no_share_term() -> None:
    engine = _engine(EngineConfig(weights=SHARE_ONLY), _cq(), Tenant(name="t"))
    engine.apply(Submit(job("cq", gpus=1, id=1, tenant="nobody")))
    engine.apply(Submit(job("cq", gpus=1, id=2, tenant="t")))
    out = engine.cycle(0.0)
    assert admitted_ids(out) == [2, 1]
    assert admits(out)[1].priority == 0.0
    assert admits(out)[2].priority == 1.0


def test_phalanx_tenant_change_renormalizes_every_tenant() -> None:
    engine = _engine(EngineConfig(weights=SHARE_ONLY), _cq(gpus=0), Tenant(name="a"))
    engine.apply(TenantUsage("a", 100.0))
    engine.apply(Submit(job("cq", gpus=1, id=1, tenant="a")))
    before = engine.priority_factors(1)
    engine.apply(Upsert(Tenant(name="b", allocation=3.0)))  # a's share drops to 1/4
    engine.cycle(0.0)
    after = engine.priority_factors(1)
    assert before is not None and after is not None
    limit = 16 * (7 * 24) / math.log(2)
    assert before["share"] == pytest.approx(1.0 - 100.0 / limit)
    assert after["share"] == pytest.approx(1.0 - 100.0 / (limit / 4))


def test_phalanx_qos_is_clamped_into_zero_one() -> None:
    w = FairShareWeights(age=0.0, share=0.0, qos=1.0, size=0.0)
    engine = _engine(
        EngineConfig(weights=w),
        _cq(),
        PriorityClass(name="top", value=100),
        PriorityClass(name="neg", value=-50),
    )
    for i, pc in ((1, "neg"), (2, "top")):
        engine.apply(Submit(Job(id=i, cluster_queue="cq", priority_class=pc, pod_sets=[PodSet()])))
    out = engine.cycle(0.0)
    assert {i: a.priority for i, a in admits(out).items()} == {1: 0.0, 2: 1.0}


def test_phalanx_factors_add_up_to_the_priority() -> None:
    w = FairShareWeights(age=2.0, share=3.0, qos=4.0, size=5.0)
    engine = _engine(EngineConfig(weights=w), _cq(gpus=1), Tenant(name="t"))
    engine.apply(Submit(job("cq", gpus=1, id=1, tenant="t", submit=0.0)))
    engine.apply(Submit(job("cq", gpus=4, id=2, tenant="t", submit=0.0)))
    out = engine.cycle(100.0)
    assert admitted_ids(out) == [1]
    factors = engine.priority_factors(2)
    assert factors is not None
    assert set(factors) == {"age", "share", "qos", "size"}
    assert factors["age"] == pytest.approx(2.0 * math.log1p(100.0))
    assert factors["size"] == pytest.approx(-5.0 * 4 / 16)
    assert engine.priority_factors(1) is None  # admitted
    assert engine.priority_factors(99) is None  # unknown
    assert sum(factors.values()) == pytest.approx(engine.jobs[2].priority)


# --------------------------------------------------------------------------- slurm: vectors

VECTOR_WEIGHTS = SlurmPriorityConfig(
    weight_age=1000,
    weight_fairshare=10000,
    weight_job_size=1000,
    weight_partition=1000,
    weight_qos=2000,
    weight_tres="GRES/gpu=3000",
)

FIVE = tuple(Tenant(name=f"t{i}") for i in range(1, 6))
"""Five equal top-level tenants; with usage 0, 1, 2, 3, 4 Fair Tree ranks them 1.0 .. 0.2."""


def _vector_engine(slurm: SlurmPriorityConfig) -> Engine:
    """slurm.md's derived vector: 100 nodes of 64 CPUs and 8 GPUs (6400 CPUs, 800 GPUs);
    partition gpu PriorityJobFactor 20 (the largest), QOS normal 10 of at most 100."""
    engine = _engine(
        EngineConfig(preset="slurm", slurm_priority=slurm, priority_calc_period_s=3600.0),
        _cq("gpu", gpus=800, cpus=6400, **{"slurm.phalanx.io/priority-job-factor": "20"}),
        _cq("small", gpus=800, cpus=6400, **{"slurm.phalanx.io/priority-job-factor": "10"}),
        PriorityClass(name="normal", value=10),
        PriorityClass(name="top", value=100),
        *FIVE,
        nodes=100,
        cpu="64",
    )
    for i, tenant in enumerate(FIVE):
        engine.apply(TenantUsage(tenant.name, float(i), billing=float(i)))
    return engine


def _vector_job(id: int, cq: str = "gpu", time_limit: float | None = None) -> Job:
    return Job(
        id=id,
        tenant="t3",  # Fair Tree rank 3 of 5: fair-share 0.6
        cluster_queue=cq,
        priority_class="normal",
        submit_time=0.0,
        time_limit=time_limit,
        pod_sets=[PodSet(count=4, tasks_per_node=1, requests={GPU: 8, "cpu": 64})],
    )


@pytest.mark.parametrize(
    ("slurm", "time_limit", "expected"),
    [
        pytest.param(VECTOR_WEIGHTS, None, 7574, id="favor-large"),
        pytest.param(replace(VECTOR_WEIGHTS, favor_small=True), None, 8494, id="favor-small"),
        pytest.param(
            replace(VECTOR_WEIGHTS, flags=("SMALL_RELATIVE_TO_TIME",)),
            120 * 60.0,
            7534,
            id="small-relative-to-time",
        ),
    ],
)
def test_slurm_end_to_end_vector(
    slurm: SlurmPriorityConfig, time_limit: float | None, expected: int
) -> None:
    engine = _vector_engine(slurm)
    engine.apply(Submit(_vector_job(1, time_limit=time_limit)))
    out = engine.cycle(36 * 3600.0)
    assert admits(out)[1].priority == expected


def test_slurm_factors_are_the_weighted_terms() -> None:
    engine = _vector_engine(VECTOR_WEIGHTS)
    # A blocker takes the whole gpu partition so that job 2 stays pending.
    engine.apply(
        Submit(Job(id=1, cluster_queue="gpu", pod_sets=[PodSet(count=100, requests={GPU: 8})]))
    )
    engine.cycle(0.0)
    engine.apply(Submit(_vector_job(2)))
    engine.apply(Submit(_vector_job(3, cq="small")))
    engine.cycle(36 * 3600.0)
    factors = engine.priority_factors(2)
    assert factors == pytest.approx(
        {
            "site": 0.0,
            "age": 1000 * 129600 / 604800,
            "assoc": 0.0,
            "fairshare": 6000.0,
            "jobsize": 40.0,
            "partition": 1000.0,
            "qos": 200.0,
            "tres": 120.0,
            "tres:gres/gpu": 120.0,
            "nice": 0.0,
        }
    )
    # The other partition's factor is 10 over the largest, 20.
    small = engine.priority_factors(3)
    assert small is not None and small["partition"] == pytest.approx(500.0)


def test_slurm_nice_is_subtracted_and_the_priority_stays_at_least_one() -> None:
    slurm = SlurmPriorityConfig(
        weight_age=0, weight_fairshare=0, weight_job_size=0, weight_partition=0, weight_qos=100
    )
    engine = _engine(
        EngineConfig(preset="slurm", slurm_priority=slurm),
        _cq(),
        PriorityClass(name="top", value=10),
    )
    for i, nice in ((1, 30), (2, 500), (3, -20)):
        engine.apply(
            Submit(
                Job(id=i, cluster_queue="cq", priority_class="top", nice=nice, pod_sets=[PodSet()])
            )
        )
    out = engine.cycle(0.0)
    assert admitted_ids(out) == [3, 1, 2]
    assert {i: a.priority for i, a in admits(out).items()} == {1: 70.0, 2: 1.0, 3: 120.0}


def test_slurm_basic_is_fifo() -> None:
    slurm = SlurmPriorityConfig(priority_type="priority/basic")
    engine = _engine(
        EngineConfig(preset="slurm", slurm_priority=slurm), _cq(), PriorityClass(name="hi", value=9)
    )
    engine.apply(Submit(job("cq", gpus=1, id=1, submit=5.0)))
    engine.apply(
        Submit(
            Job(id=2, cluster_queue="cq", priority_class="hi", submit_time=9.0, pod_sets=[PodSet()])
        )
    )
    engine.apply(Submit(job("cq", gpus=1, id=3, submit=1.0)))
    assert admitted_ids(engine.cycle(10.0)) == [3, 1, 2]


# --------------------------------------------------------------------------- slurm: fair-share

DOC_TREE = (
    Tenant(name="A", allocation=40),
    Tenant(name="B", parent="A", allocation=30),
    Tenant(name="C", parent="A", allocation=10),
    Tenant(name="C2", parent="C", allocation=1),
    Tenant(name="C3", parent="C", allocation=1),
    Tenant(name="D", allocation=60),
    Tenant(name="E", parent="D", allocation=25),
    Tenant(name="F", parent="D", allocation=35),
)
"""slurm.md §4.5's tree, with user1 = B, user2 = C2, user3 = C3, user4 = E, user5 = F."""

DOC_USAGE = {"A": 0.45, "B": 0.2, "C": 0.25, "C2": 0.25, "D": 0.25, "E": 0.25}

FS_ONLY = dict(weight_age=0, weight_job_size=0, weight_partition=0, weight_qos=0)


def _fairshare(flags: tuple[str, ...], *extra: Tenant, usage: dict[str, float]) -> dict[str, float]:
    slurm = SlurmPriorityConfig(weight_fairshare=1_000_000, flags=flags, **FS_ONLY)
    engine = _engine(
        EngineConfig(preset="slurm", slurm_priority=slurm), _cq(gpus=0), *DOC_TREE, *extra
    )
    for tenant, billing in usage.items():
        engine.apply(TenantUsage(tenant, 0.0, billing=billing))
    leaves = ("B", "C2", "C3", "E", "F")
    for i, tenant in enumerate(leaves, start=1):
        engine.apply(Submit(job("cq", gpus=1, id=i, tenant=tenant)))
    engine.cycle(0.0)
    out = {}
    for i, tenant in enumerate(leaves, start=1):
        factors = engine.priority_factors(i)
        assert factors is not None
        out[tenant] = factors["fairshare"] / 1_000_000
    return out


def test_slurm_classic_fair_share_matches_slurms_worked_example() -> None:
    # "other" (no shares) makes the cluster's total usage 1, as in the example.
    other = Tenant(name="other", allocation=0)
    factors = _fairshare(("NO_FAIR_TREE",), other, usage={**DOC_USAGE, "other": 0.30})
    assert factors == pytest.approx(
        {"B": 0.408479, "C2": 0.022097, "C3": 0.125, "E": 0.5, "F": 0.749154}, abs=1e-6
    )


def test_slurm_fair_tree_ranks_the_worked_example() -> None:
    factors = _fairshare((), usage=DOC_USAGE)
    assert factors == pytest.approx({"F": 1.0, "E": 0.8, "B": 0.6, "C3": 0.4, "C2": 0.2})


def test_slurm_parent_tenant_gets_its_best_descendants_factor() -> None:
    slurm = SlurmPriorityConfig(weight_fairshare=1000, **FS_ONLY)
    engine = _engine(EngineConfig(preset="slurm", slurm_priority=slurm), _cq(), *DOC_TREE)
    for tenant, billing in DOC_USAGE.items():
        engine.apply(TenantUsage(tenant, 0.0, billing=billing))
    engine.apply(Submit(job("cq", gpus=1, id=1, tenant="D")))
    engine.apply(Submit(job("cq", gpus=1, id=2, tenant="A")))
    out = engine.cycle(0.0)
    assert {i: a.priority for i, a in admits(out).items()} == {1: 1000.0, 2: 600.0}


def test_slurm_usage_of_one_tenant_reorders_the_others_jobs() -> None:
    slurm = SlurmPriorityConfig(weight_fairshare=1000, **FS_ONLY)
    engine = _engine(
        EngineConfig(preset="slurm", slurm_priority=slurm, priority_calc_period_s=1e9),
        _cq(gpus=1),
        Tenant(name="x"),
        Tenant(name="y"),
    )
    engine.apply(Submit(job("cq", gpus=1, id=1, tenant="y", submit=0.0)))
    engine.apply(Submit(job("cq", gpus=1, id=2, tenant="x", submit=1.0)))
    engine.apply(Submit(job("cq", gpus=1, id=9, tenant="x", submit=2.0)))
    assert admitted_ids(engine.cycle(10.0)) == [1]  # both at rank 1: FIFO
    engine.apply(Submit(job("cq", gpus=1, id=3, tenant="y", submit=0.0)))
    # y's usage ranks y second of two: its new job (the oldest) now sorts after x's.
    engine.apply(TenantUsage("y", 0.0, billing=5.0))
    engine.cycle(11.0)
    assert _factor(engine, 3, "fairshare") == pytest.approx(500.0)
    assert _factor(engine, 2, "fairshare") == pytest.approx(1000.0)
    engine.apply(Finish(1))
    assert admitted_ids(engine.cycle(12.0)) == [2]


# --------------------------------------------------------------------------- per-queue presets


def test_cluster_queue_annotation_picks_its_ordering() -> None:
    """The same jobs in two queues: the kueue queue by priority value, the phalanx queue
    by fair share (the high-priority job's tenant is over its allocation)."""
    w = FairShareWeights(age=0.0, share=10.0, qos=1.0, size=0.0)
    engine = _engine(
        EngineConfig(preset="phalanx", weights=w),
        _cq("fair", gpus=1),
        _cq("fifo", gpus=1, **{"phalanx.io/preset": "kueue"}),
        PriorityClass(name="hi", value=100),
        Tenant(name="heavy"),
        Tenant(name="light"),
    )
    engine.apply(TenantUsage("heavy", 10.0, allocation=1.0))
    for base, cq in ((0, "fair"), (10, "fifo")):
        engine.apply(
            Submit(
                Job(
                    id=base + 1,
                    tenant="heavy",
                    cluster_queue=cq,
                    priority_class="hi",
                    pod_sets=[PodSet(requests={GPU: 1})],
                )
            )
        )
        engine.apply(Submit(job(cq, gpus=1, id=base + 2, tenant="light")))
    out = engine.cycle(0.0)
    assert sorted(admitted_ids(out)) == [2, 11]
    assert admits(out)[11].priority == 100.0
    assert engine.priority_factors(12) == {"priority": 0.0}
    assert set(engine.priority_factors(1) or {}) == {"age", "share", "qos", "size"}


def test_slurm_queue_in_a_kueue_cluster() -> None:
    slurm = SlurmPriorityConfig(
        weight_qos=0, weight_age=1000, weight_job_size=0, weight_partition=0, weight_fairshare=0
    )
    engine = _engine(
        EngineConfig(preset="kueue", slurm_priority=slurm, priority_calc_period_s=100.0),
        _cq("batch", gpus=1, **{"phalanx.io/preset": "slurm"}),
        _cq("k", gpus=1),
    )
    engine.apply(Submit(job("batch", gpus=1, id=1, submit=0.0, priority=5)))
    engine.apply(Submit(job("batch", gpus=1, id=2, submit=0.0, priority=5)))
    out = engine.cycle(604800.0)  # a week: age factor 1
    assert admits(out)[1].priority == 1000.0
    # Time-dependent because one queue is slurm: recomputed a period later.
    engine.apply(Submit(job("batch", gpus=1, id=3, submit=604800.0)))
    engine.cycle(604800.0 + 302400.0)
    assert _factor(engine, 3, "age") == pytest.approx(500.0)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("phalanx.io/preset", "fifo"),
        ("slurm.phalanx.io/priority-job-factor", "high"),
        ("slurm.phalanx.io/priority-job-factor", "70000"),
        ("slurm.phalanx.io/tres-billing-weights", "CPU=lots"),
    ],
)
def test_bad_ordering_annotations_are_refused_naming_the_field(key: str, value: str) -> None:
    with pytest.raises(ValueError, match=rf"metadata\.annotations\[{key}\]"):
        _cq(**{key: value})


def test_unknown_preset_in_a_manifest_names_file_and_field() -> None:
    text = (
        "apiVersion: kueue.x-k8s.io/v1beta2\nkind: ClusterQueue\n"
        "metadata:\n  name: q\n  annotations: {phalanx.io/preset: fifo}\nspec: {}\n"
    )
    with pytest.raises(Invalid) as info:
        load_text(text, "q.yaml")
    assert info.value.detail.startswith("q.yaml:")
    assert "metadata.annotations[phalanx.io/preset]: expected one of phalanx, kueue, slurm" in (
        info.value.detail
    )


# --------------------------------------------------------------------------- kueue: AFS

AFS_SCOPE = {
    "phalanx.io/kueue-admission-scope": '{"admissionMode": "UsageBasedAdmissionFairSharing"}'
}


def _afs_engine(
    interval: float = 60.0, heads: int | None = None, afs_queue: bool = True, weight_b: float = 1.0
) -> Engine:
    afs = AdmissionFairSharingConfig(usage_half_life_s=600.0, usage_sampling_interval_s=interval)
    config = EngineConfig.for_preset(
        "kueue",
        admission_fair_sharing=afs,
        heads_per_cycle=heads,
        missing_namespace_selector_matches_all=True,
    )
    return _engine(
        config,
        _cq(gpus=8, **(AFS_SCOPE if afs_queue else {})),
        LocalQueue(name="lq", namespace="a", cluster_queue="cq"),
        LocalQueue(
            name="lq", namespace="b", cluster_queue="cq", fair_sharing=FairSharing(weight=weight_b)
        ),
        nodes=1,
    )


def _lq_job(job_id: int, tenant: str, gpus: int, priority: int = 0, submit: float = 0.0) -> Job:
    return job(
        None, gpus=gpus, id=job_id, tenant=tenant, queue="lq", priority=priority, submit=submit
    )


@pytest.mark.parametrize(("afs_queue", "winner"), [(True, 3), (False, 2)])
def test_afs_orders_by_local_queue_usage_before_priority(afs_queue: bool, winner: int) -> None:
    engine = _afs_engine(afs_queue=afs_queue)
    engine.apply(Submit(_lq_job(1, "a", 4)))
    assert admitted_ids(engine.cycle(0.0)) == [1]
    # a's LocalQueue holds 4 GPUs; its high-priority job waits behind b's at priority 0.
    engine.apply(Submit(_lq_job(2, "a", 4, priority=100, submit=1.0)))
    engine.apply(Submit(_lq_job(3, "b", 4, priority=0, submit=2.0)))
    assert admitted_ids(engine.cycle(60.0)) == [winner]
    if afs_queue:
        alpha = 1 - 0.5 ** (60 / 600)
        assert engine.priority_factors(2) == pytest.approx(
            {"priority": 100.0, "lq_score": alpha * 4}
        )
    else:
        assert engine.priority_factors(3) == {"priority": 0.0}


def test_afs_entry_penalty_alternates_local_queues_between_samples() -> None:
    engine = _afs_engine(interval=3600.0, heads=1)
    for job_id, tenant, submit in ((1, "a", 0.0), (2, "a", 1.0), (3, "a", 2.0)):
        engine.apply(Submit(_lq_job(job_id, tenant, 1, submit=submit)))
    for job_id, tenant, submit in ((4, "b", 3.0), (5, "b", 4.0), (6, "b", 5.0)):
        engine.apply(Submit(_lq_job(job_id, tenant, 1, submit=submit)))
    order = [i for t in range(6) for i in admitted_ids(engine.cycle(10.0 + t))]
    assert order == [1, 4, 2, 5, 3, 6]


def test_afs_without_penalty_queue_would_be_fifo() -> None:
    engine = _afs_engine(interval=3600.0, heads=1, afs_queue=False)
    for job_id, tenant, submit in ((1, "a", 0.0), (2, "a", 1.0), (3, "b", 3.0)):
        engine.apply(Submit(_lq_job(job_id, tenant, 1, submit=submit)))
    order = [i for t in range(3) for i in admitted_ids(engine.cycle(10.0 + t))]
    assert order == [1, 2, 3]


def test_afs_local_queue_weight_divides_the_score() -> None:
    engine = _afs_engine(interval=3600.0, heads=1, weight_b=4.0)
    engine.apply(Submit(_lq_job(1, "a", 1, submit=0.0)))
    engine.apply(Submit(_lq_job(2, "b", 2, submit=1.0)))
    engine.apply(Submit(_lq_job(3, "a", 1, submit=2.0)))
    engine.apply(Submit(_lq_job(4, "b", 1, submit=3.0)))
    # a: one GPU's penalty; b: two GPUs' penalty over weight 4 = half of a's score.
    order = [i for t in range(4) for i in admitted_ids(engine.cycle(10.0 + t))]
    assert order == [1, 2, 4, 3]


def test_afs_state_survives_a_snapshot() -> None:
    engine = _afs_engine(interval=3600.0, heads=1)
    for job_id, tenant, submit in ((1, "a", 0.0), (2, "a", 1.0), (3, "b", 2.0)):
        engine.apply(Submit(_lq_job(job_id, tenant, 1, submit=submit)))
    assert admitted_ids(engine.cycle(10.0)) == [1]
    copy = load_state(export_state(engine))
    assert admitted_ids(copy.cycle(11.0)) == admitted_ids(engine.cycle(11.0)) == [3]


def test_kueue_configuration_turns_admission_fair_sharing_on() -> None:
    text = (
        "apiVersion: config.kueue.x-k8s.io/v1beta2\nkind: Configuration\n"
        "admissionFairSharing:\n  usageHalfLifeTime: 10m\n  usageSamplingInterval: 1m\n"
        "  resourceWeights: {nvidia.com/gpu: 2.0}\n"
    )
    (manifest,) = load_text(text, "config.yaml")
    overrides = manifest.obj.engine_overrides()
    assert overrides["admission_fair_sharing"] == AdmissionFairSharingConfig(
        usage_half_life_s=600.0, usage_sampling_interval_s=60.0, resource_weights={GPU: 2.0}
    )
    assert EngineConfig.for_preset("kueue", **overrides).admission_fair_sharing is not None
