"""QOS (PriorityClass) and tenant limits: a job over one waits with Slurm's reason code.

A held job leaves its queue: jobs behind it start, it gets no reservation, and
it is offered again when a job charged to the same user, class or tenant ends,
or when the limit changes. Running jobs are never stopped by a lowered limit.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from phalanx.engine import (
    Cancel,
    Delete,
    Engine,
    EngineConfig,
    Evict,
    Finish,
    ReasonCode,
    Submit,
    Upsert,
    export_state,
    load_state,
)
from phalanx.model import CPU, MEMORY, Job, PodSet, PriorityClass, Tenant
from tests.engine.helpers import GPU, admitted_ids, cluster_queue, flavor, node, pendings

_ids = iter(range(1, 10**6))


def qjob(
    gpus: int = 0,
    user: str = "alice",
    pc: str | None = "normal",
    tenant: str = "default",
    cq: str = "cq",
    submit: float = 0.0,
    count: int = 1,
    time: float | None = None,
    extra: dict[str, str] | None = None,
    **requests: str,
) -> Job:
    wanted: dict[str, Any] = {GPU: gpus, **requests, **(extra or {})}
    return Job(
        id=next(_ids),
        tenant=tenant,
        user=user,
        cluster_queue=cq,
        priority_class=pc,
        submit_time=submit,
        time_limit=time,
        pod_sets=[PodSet(count=count, requests=wanted)],
    )


def pclass(name: str = "normal", value: int = 0, **limits: Any) -> PriorityClass:
    return PriorityClass.model_validate({"name": name, "value": value, "limits": limits})


def cluster(*extra: Any, gpus: int = 64, preset: str = "phalanx", **cq: Any) -> Engine:
    """Eight 8-GPU nodes under one ClusterQueue ``cq`` with GPU, cpu and memory quota."""
    engine = Engine(EngineConfig.for_preset(preset))
    resources = [
        {"name": GPU, "nominalQuota": gpus},
        {"name": CPU, "nominalQuota": 768},
        {"name": MEMORY, "nominalQuota": "8000Gi"},
    ]
    objects = [
        flavor("f"),
        *(node(f"n{i}") for i in range(8)),
        cluster_queue("cq", {"f": resources}, **cq),
        *extra,
    ]
    for obj in objects:
        engine.apply(Upsert(obj))
    return engine


def submit(engine: Engine, *jobs: Job) -> list[Job]:
    for j in jobs:
        engine.apply(Submit(j))
    return list(jobs)


def test_max_gres_per_user_pends_with_slurm_reason_and_does_not_block_lower_jobs() -> None:
    engine = cluster(pclass(maxTRESPerUser={GPU: 16}))
    a1, a2, a3, b1 = submit(
        engine,
        qjob(8, submit=1),
        qjob(4, submit=2),
        qjob(8, submit=3),
        qjob(8, user="bob", submit=4),
    )
    out = engine.cycle(10)
    assert admitted_ids(out) == [a1.id, a2.id, b1.id]
    reason = pendings(out)[a3.id]
    assert reason.code is ReasonCode.QOS_MAX_GRES_PER_USER
    assert reason.message == (
        "QOSMaxGRESPerUser: user alice would use 20 nvidia.com/gpu in PriorityClass normal, "
        "limit 16 (12 in use)"
    )
    assert reason.details["inUse"] == 12 and reason.details["max"] == 16
    assert engine.explain(a3.id) == reason
    assert engine.estimated_start(a3.id) is None
    assert engine.reservation(a3.id) is None


def test_a_held_job_is_offered_again_when_a_job_of_its_user_ends() -> None:
    engine = cluster(pclass(maxTRESPerUser={GPU: 16}))
    a1, a2, a3 = submit(engine, qjob(8, submit=1), qjob(8, submit=2), qjob(8, submit=3))
    assert admitted_ids(engine.cycle(10)) == [a1.id, a2.id]
    # Another user's job ending changes nothing for alice.
    (b1,) = submit(engine, qjob(8, user="bob", submit=4))
    assert admitted_ids(engine.cycle(11)) == [b1.id]
    engine.apply(Finish(b1.id))
    assert admitted_ids(engine.cycle(12)) == []
    assert engine.explain(a3.id).code is ReasonCode.QOS_MAX_GRES_PER_USER  # type: ignore[union-attr]
    engine.apply(Finish(a1.id))
    assert admitted_ids(engine.cycle(13)) == [a3.id]
    assert engine.explain(a3.id) is None


@pytest.mark.parametrize(
    ("resource", "limit", "each", "code", "shown"),
    [
        (CPU, "64", "48", ReasonCode.QOS_MAX_CPU_PER_USER, "96 cpu"),
        (MEMORY, "100Gi", "60Gi", ReasonCode.QOS_MAX_MEMORY_PER_USER, "120Gi memory"),
    ],
)
def test_cpu_and_memory_per_user_have_their_own_codes(
    resource: str, limit: str, each: str, code: ReasonCode, shown: str
) -> None:
    engine = cluster(pclass(maxTRESPerUser={resource: limit}))
    first, second = submit(
        engine, qjob(submit=1, extra={resource: each}), qjob(submit=2, extra={resource: each})
    )
    out = engine.cycle(10)
    assert admitted_ids(out) == [first.id]
    reason = pendings(out)[second.id]
    assert reason.code is code
    assert f"would use {shown} in PriorityClass normal, limit {limit}" in reason.message


def test_max_jobs_per_user_counts_running_jobs_of_the_class_only() -> None:
    engine = cluster(pclass(maxJobsPerUser=2), pclass("other"))
    a1, a2, a3, other = submit(
        engine,
        qjob(1, submit=1),
        qjob(1, submit=2),
        qjob(1, submit=3),
        qjob(1, pc="other", submit=4),
    )
    out = engine.cycle(10)
    assert admitted_ids(out) == [a1.id, a2.id, other.id]
    reason = pendings(out)[a3.id]
    assert reason.code is ReasonCode.QOS_MAX_JOBS_PER_USER
    assert reason.message == (
        "QOSMaxJobsPerUserLimit: user alice would run 3 jobs in PriorityClass normal, "
        "limit 2 (2 running)"
    )
    engine.apply(Finish(a2.id))
    assert admitted_ids(engine.cycle(11)) == [a3.id]


def test_grp_tres_limits_all_running_jobs_of_the_class() -> None:
    engine = cluster(pclass(grpTRES={GPU: 16, CPU: 40}))
    a1, b1, c1, d1 = submit(
        engine,
        qjob(8, submit=1),
        qjob(8, user="bob", submit=2),
        qjob(8, user="carol", submit=3),
        qjob(0, user="dave", submit=4, cpu="48"),
    )
    out = engine.cycle(10)
    assert admitted_ids(out) == [a1.id, b1.id]
    gres = pendings(out)[c1.id]
    assert gres.code is ReasonCode.QOS_GRP_GRES
    assert gres.message == (
        "QOSGrpGRES: PriorityClass normal would use 24 nvidia.com/gpu, limit 16 (16 in use)"
    )
    assert pendings(out)[d1.id].code is ReasonCode.QOS_GRP_CPU
    engine.apply(Finish(b1.id))
    assert admitted_ids(engine.cycle(11)) == [c1.id]


def test_tenant_limits_charge_ancestors() -> None:
    physics = Tenant.model_validate({"name": "physics", "limits": {"grpTRES": {GPU: 16}}})
    hep = Tenant(name="hep", parent="physics")
    astro = Tenant.model_validate(
        {"name": "astro", "parent": "physics", "limits": {"maxJobs": 1, "grpTRES": {CPU: 10}}}
    )
    engine = cluster(physics, hep, astro)
    h1, a1, h2, a2, a3 = submit(
        engine,
        qjob(8, pc=None, tenant="hep", submit=1),
        qjob(4, pc=None, tenant="astro", submit=2),
        qjob(8, pc=None, tenant="hep", submit=3),
        qjob(0, pc=None, tenant="astro", submit=4),
        qjob(0, pc=None, tenant="astro", submit=5, cpu="12"),
    )
    out = engine.cycle(10)
    assert admitted_ids(out) == [h1.id, a1.id]
    reasons = pendings(out)
    assert reasons[h2.id].code is ReasonCode.ASSOC_GRP_GRES
    assert reasons[h2.id].message == (
        "AssocGrpGRES: tenant physics would use 20 nvidia.com/gpu, limit 16 (12 in use)"
    )
    assert reasons[a2.id].code is ReasonCode.ASSOC_GRP_JOBS
    assert reasons[a2.id].message == (
        "AssocGrpJobsLimit: tenant astro would run 2 jobs, limit 1 (1 running)"
    )
    # The sub-tenant's own limit comes first, in Slurm's order from the job's account up.
    assert reasons[a3.id].code is ReasonCode.ASSOC_GRP_JOBS
    engine.apply(Finish(a1.id))
    out = engine.cycle(11)
    # astro's job ended: its tenant and physics are re-checked; hep's job now fits physics.
    assert admitted_ids(out) == [h2.id, a2.id]
    # Checked again when astro's job ended, after a2 (before it) took astro's one job.
    assert engine.explain(a3.id).message == (  # type: ignore[union-attr]
        "AssocGrpJobsLimit: tenant astro would run 2 jobs, limit 1 (1 running)"
    )


def test_held_head_of_a_strict_fifo_queue_does_not_block_it() -> None:
    engine = cluster(pclass(maxJobsPerUser=1), strategy="StrictFIFO")
    a1, a2, b1 = submit(engine, qjob(1, submit=1), qjob(1, submit=2), qjob(1, user="bob", submit=3))
    out = engine.cycle(10)
    assert admitted_ids(out) == [a1.id, b1.id]
    assert pendings(out)[a2.id].code is ReasonCode.QOS_MAX_JOBS_PER_USER


def test_the_same_round_counts_earlier_admissions() -> None:
    """Heads of two ClusterQueues, each alone under the limit, together over it."""
    engine = cluster(pclass(maxTRESPerUser={GPU: 8}))
    engine.apply(Upsert(cluster_queue("cq2", {"f": 64})))
    first, second = submit(engine, qjob(8, submit=1), qjob(8, cq="cq2", submit=2))
    out = engine.cycle(10)
    assert admitted_ids(out) == [first.id]
    assert pendings(out)[second.id].code is ReasonCode.QOS_MAX_GRES_PER_USER


def test_kueue_preset_one_head_per_cycle() -> None:
    engine = cluster(pclass(maxJobsPerUser=1), preset="kueue")
    a1, a2, b1 = submit(engine, qjob(1, submit=1), qjob(1, submit=2), qjob(1, user="bob", submit=3))
    admitted: list[int] = []
    for t in range(10, 15):
        admitted += admitted_ids(engine.cycle(t))
    assert admitted == [a1.id, b1.id]
    assert engine.explain(a2.id).code is ReasonCode.QOS_MAX_JOBS_PER_USER  # type: ignore[union-attr]


def test_raising_a_limit_at_runtime_starts_held_jobs() -> None:
    engine = cluster(pclass(maxTRESPerUser={GPU: 8}))
    a1, a2 = submit(engine, qjob(8, submit=1), qjob(8, submit=2))
    assert admitted_ids(engine.cycle(10)) == [a1.id]
    engine.apply(Upsert(pclass(maxTRESPerUser={GPU: 16})))
    assert admitted_ids(engine.cycle(11)) == [a2.id]


def test_lowering_a_limit_keeps_running_jobs_and_holds_new_ones() -> None:
    engine = cluster(pclass(maxJobsPerUser=3))
    running = submit(engine, qjob(1, submit=1), qjob(1, submit=2))
    assert admitted_ids(engine.cycle(10)) == [j.id for j in running]
    engine.apply(Upsert(pclass(maxJobsPerUser=1)))
    (late,) = submit(engine, qjob(1, submit=3))
    out = engine.cycle(11)
    assert not [d for d in out if isinstance(d, Evict)]
    assert admitted_ids(out) == []
    assert pendings(out)[late.id].message.endswith("limit 1 (2 running)")
    engine.apply(Finish(running[0].id))
    assert admitted_ids(engine.cycle(12)) == []
    engine.apply(Finish(running[1].id))
    assert admitted_ids(engine.cycle(13)) == [late.id]


def test_limits_set_after_jobs_started_count_the_running_jobs() -> None:
    # Without limits nothing is charged; the first limit charges what already runs.
    engine = cluster(PriorityClass(name="normal", value=0))
    running = submit(engine, qjob(1, submit=1), qjob(1, submit=2))
    assert admitted_ids(engine.cycle(10)) == [j.id for j in running]
    for _ in range(2):
        engine.apply(Upsert(pclass(maxJobsPerUser=2)))
        (late,) = submit(engine, qjob(1, submit=3))
        out = engine.cycle(11)
        assert admitted_ids(out) == []
        assert pendings(out)[late.id].message.endswith("limit 2 (2 running)")
        # Gone and set again: counted afresh, not twice.
        engine.apply(Upsert(PriorityClass(name="normal", value=0)))
        assert admitted_ids(engine.cycle(12)) == [late.id]
        engine.apply(Finish(late.id))
        engine.cycle(13)


def test_removing_the_limits_starts_held_jobs() -> None:
    engine = cluster(pclass(maxJobsPerUser=1))
    a1, a2 = submit(engine, qjob(1, submit=1), qjob(1, submit=2))
    assert admitted_ids(engine.cycle(10)) == [a1.id]
    engine.apply(Delete("PriorityClass", "normal"))
    assert admitted_ids(engine.cycle(11)) == [a2.id]


def test_a_lowered_per_job_limit_holds_a_queued_job() -> None:
    engine = cluster(pclass())
    (big,) = submit(engine, qjob(8, count=2, submit=1, time=7200))
    engine.apply(Upsert(pclass(maxTRESPerJob={GPU: 8})))
    out = engine.cycle(10)
    assert pendings(out)[big.id].code is ReasonCode.QOS_MAX_GRES_PER_JOB
    engine.apply(Upsert(pclass(maxWall=3600)))
    out = engine.cycle(11)
    reason = pendings(out)[big.id]
    assert reason.code is ReasonCode.QOS_MAX_WALL
    assert "time limit 02:00:00 is over PriorityClass normal's maxWall 01:00:00" in reason.message
    engine.apply(Upsert(pclass(maxWall="3:00:00")))
    assert admitted_ids(engine.cycle(12)) == [big.id]


def test_cancelling_a_held_job_forgets_it() -> None:
    engine = cluster(pclass(maxJobsPerUser=1))
    a1, a2 = submit(engine, qjob(1, submit=1), qjob(1, submit=2))
    engine.cycle(10)
    engine.apply(Cancel(a2.id))
    assert engine.limits.held() == []
    engine.apply(Finish(a1.id))
    assert engine.cycle(11) == []
    assert engine.pending_count() == 0


def test_snapshot_keeps_usage_and_held_jobs() -> None:
    engine = cluster(pclass(maxTRESPerUser={GPU: 8}))
    a1, a2 = submit(engine, qjob(8, submit=1), qjob(8, submit=2))
    engine.cycle(10)
    copy = load_state(json.loads(json.dumps(export_state(engine))))
    assert copy.limits.held() == engine.limits.held() == [(a2.id, ("user", "normal", "alice"))]
    assert copy.limits.usage(("user", "normal", "alice")).tres == {GPU: 8}
    assert copy.explain(a2.id) == engine.explain(a2.id)
    for e in (engine, copy):
        e.apply(Finish(a1.id))
        assert admitted_ids(e.cycle(11)) == [a2.id]


def test_partial_admission_charges_what_was_admitted() -> None:
    engine = cluster(pclass(maxTRESPerUser={GPU: 64}), gpus=24)
    job = Job(
        id=next(_ids),
        user="alice",
        cluster_queue="cq",
        priority_class="normal",
        pod_sets=[PodSet(count=8, min_count=2, requests={GPU: 4})],
    )
    submit(engine, job)
    out = engine.cycle(10)
    assert admitted_ids(out) == [job.id]
    assert engine.limits.usage(("user", "normal", "alice")).tres[GPU] == 24
    engine.apply(Finish(job.id))
    assert engine.limits.usage(("user", "normal", "alice")).jobs == 0


def test_squeue_shows_the_limit_codes_as_slurm_names_them() -> None:
    from phalanx.dialects.slurm.reasons import slurm_reason

    codes = [c for c in ReasonCode if c.value.startswith(("QOS", "Assoc"))]
    assert len(codes) == 15
    for code in codes:
        assert slurm_reason("PENDING", code.value) == code.value


def test_a_held_job_gets_no_backfill_reservation() -> None:
    from phalanx.engine.config import BackfillConfig

    engine = Engine(EngineConfig(preset="kueue", backfill=BackfillConfig(interval_s=0)))
    objects: list[Any] = [
        flavor("f"),
        *(node(f"n{i}") for i in range(1, 5)),
        cluster_queue("cq", {"f": 32}),
        pclass(maxJobsPerUser=1),
    ]
    for obj in objects:
        engine.apply(Upsert(obj))

    def gang(nodes: int, user: str, limit: float, submit: float) -> Job:
        return Job(
            id=next(_ids),
            user=user,
            cluster_queue="cq",
            priority_class="normal",
            submit_time=submit,
            time_limit=limit,
            pod_sets=[PodSet(count=nodes, tasks_per_node=1, requests={GPU: 8})],
        )

    running, held, short = (
        gang(2, "alice", 100, 1),
        gang(3, "alice", 600, 2),
        gang(1, "bob", 200, 3),
    )
    submit(engine, running, held)
    assert admitted_ids(engine.cycle(0.0)) == [running.id]
    assert engine.reservation(held.id) is None and engine.estimated_start(held.id) is None
    # Nothing is reserved for the held gang, so bob's job takes a free node at once.
    submit(engine, short)
    assert admitted_ids(engine.cycle(1.0)) == [short.id]
    engine.apply(Finish(running.id))
    engine.apply(Finish(short.id))
    assert admitted_ids(engine.cycle(2.0)) == [held.id]


def test_a_release_under_a_job_count_limit_starts_one_of_many_held_jobs() -> None:
    engine = cluster(pclass(maxJobsPerUser=2))
    jobs = submit(engine, *(qjob(1, submit=float(i)) for i in range(40)))
    assert admitted_ids(engine.cycle(10)) == [jobs[0].id, jobs[1].id]
    assert len(engine.limits.held()) == 38
    engine.apply(Finish(jobs[0].id))
    assert admitted_ids(engine.cycle(11)) == [jobs[2].id]
    assert len(engine.limits.held()) == 37
    for j in jobs[3:]:
        assert engine.explain(j.id).code is ReasonCode.QOS_MAX_JOBS_PER_USER  # type: ignore[union-attr]


def test_backfill_does_not_plan_a_held_job_behind_its_queues_head() -> None:
    from phalanx.engine.config import BackfillConfig

    engine = Engine(EngineConfig(preset="kueue", backfill=BackfillConfig(interval_s=0)))
    objects: list[Any] = [
        flavor("f"),
        *(node(f"n{i}") for i in range(1, 5)),
        cluster_queue("cq", {"f": 32}),
        pclass(maxJobsPerUser=1),
    ]
    for obj in objects:
        engine.apply(Upsert(obj))

    def gang(nodes: int, user: str, limit: float, submit: float) -> Job:
        return Job(
            id=next(_ids),
            user=user,
            cluster_queue="cq",
            priority_class="normal",
            submit_time=submit,
            time_limit=limit,
            pod_sets=[PodSet(count=nodes, tasks_per_node=1, requests={GPU: 8})],
        )

    alice_runs, bob_runs = gang(1, "alice", 100, 1), gang(2, "bob", 100, 2)
    submit(engine, alice_runs, bob_runs)
    assert admitted_ids(engine.cycle(0.0)) == [alice_runs.id, bob_runs.id]
    head, behind = gang(3, "carol", 600, 3), gang(3, "alice", 600, 4)
    submit(engine, head, behind)
    out = engine.cycle(1.0)
    assert engine.reservation(head.id) is not None
    assert engine.reservation(behind.id) is None
    assert engine.estimated_start(behind.id) is None
    assert pendings(out)[behind.id].code is ReasonCode.QOS_MAX_JOBS_PER_USER
