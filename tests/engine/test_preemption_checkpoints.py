"""Lost-work-aware victims: among equal candidates, the least work since a checkpoint goes."""

from __future__ import annotations

import itertools
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from phalanx.engine import (
    Cancel,
    Checkpoint,
    Engine,
    EngineConfig,
    Evict,
    Pending,
    PreemptionConfig,
    Requeue,
    Submit,
    Upsert,
    export_state,
    load_state,
)
from phalanx.engine.decisions import decision_from_dict
from tests.engine.helpers import cluster_queue, flavor, job, node


def _engine(gpus: int = 8) -> Engine:
    config = EngineConfig.for_preset(
        "kueue", preemption=PreemptionConfig(), wait_for_pods_ready=None
    )
    engine = Engine(config)
    for obj in (
        node("n0", gpus=gpus),
        flavor("f"),
        cluster_queue("cq", {"f": gpus}, preemption={"withinClusterQueue": "LowerPriority"}),
    ):
        engine.apply(Upsert(obj))
    return engine


def _evicts(decisions: list[Any]) -> dict[int, Evict]:
    return {d.job_id: d for d in decisions if isinstance(d, Evict)}


def _four_running(engine: Engine, priorities: tuple[int, ...] = (0, 0, 0, 0)) -> None:
    """Jobs 1..4, 2 GPUs each, admitted at t=10, 20, 30, 40."""
    for i, prio in enumerate(priorities, start=1):
        engine.apply(Submit(job("cq", gpus=2, id=i, priority=prio, submit=float(i))))
        engine.cycle(10.0 * i)
    assert all(engine.jobs[i].admission is not None for i in range(1, 5))


def test_without_checkpoints_the_most_recently_admitted_goes() -> None:
    engine = _engine()
    _four_running(engine)
    engine.apply(Submit(job("cq", gpus=2, id=9, priority=10, submit=50.0)))
    evicts = _evicts(engine.cycle(3600.0))
    assert list(evicts) == [4]
    assert evicts[4].lost_gpu_hours is None and evicts[4].spared == ()
    assert "lost" not in evicts[4].message


def test_the_job_that_loses_least_since_its_checkpoint_goes() -> None:
    engine = _engine()
    _four_running(engine)
    # Job 2 checkpointed a minute ago: it loses 2 GPUs x 60 s; the others lose hours.
    engine.apply(Checkpoint(2, 3540.0))
    engine.apply(Submit(job("cq", gpus=2, id=9, priority=10, submit=50.0)))
    decisions = engine.cycle(3600.0)
    evicts = _evicts(decisions)
    assert list(evicts) == [2]
    evict = evicts[2]
    assert evict.lost_gpu_hours == round(2 * 60 / 3600, 2)
    assert dict(evict.spared) == {
        1: round(2 * (3600 - 10) / 3600, 2),
        3: round(2 * (3600 - 30) / 3600, 2),
        4: round(2 * (3600 - 40) / 3600, 2),
    }
    assert "lost 0.03 GPU-h since its checkpoint rather than job 4 (1.98 GPU-h)" in evict.message
    assert decision_from_dict(evict.to_dict()) == evict
    pending = next(d for d in decisions if isinstance(d, Pending) and d.job_id == 9)
    lost = pending.reason.details["lostWork"]["2"]
    assert lost["gpuHours"] == 0.03 and lost["rather"]["4"] == round(2 * 3560 / 3600, 2)


def test_priority_still_comes_first() -> None:
    engine = _engine()
    # Job 4 has a lower priority than the others: it goes, though job 2 checkpointed.
    _four_running(engine, priorities=(5, 5, 5, 0))
    engine.apply(Checkpoint(2, 3599.0))
    engine.apply(Submit(job("cq", gpus=2, id=9, priority=10, submit=50.0)))
    assert list(_evicts(engine.cycle(3600.0))) == [4]


def test_checkpoints_before_admission_or_of_pending_jobs_change_nothing() -> None:
    engine = _engine()
    _four_running(engine)
    engine.apply(Checkpoint(2, 5.0))  # before its admission at 20
    engine.apply(Checkpoint(77, 5.0))  # no such job
    assert engine.jobs[2].admission is not None
    assert engine.jobs[2].admission.checkpoint_at is None
    engine.apply(Checkpoint(2, 100.0))
    engine.apply(Checkpoint(2, 50.0))  # older than the last: ignored
    assert engine.jobs[2].admission.checkpoint_at == 100.0


def test_snapshot_carries_the_checkpoint() -> None:
    engine = _engine()
    _four_running(engine)
    engine.apply(Checkpoint(3, 3500.0))
    data = export_state(engine)
    again = load_state(data)
    adm = again.jobs[3].admission
    assert adm is not None and adm.checkpoint_at == 3500.0
    assert export_state(again) == data
    again.apply(Submit(job("cq", gpus=2, id=9, priority=10, submit=50.0)))
    assert list(_evicts(again.cycle(3600.0))) == [3]


def test_requeue_starts_a_new_attempt_without_a_checkpoint() -> None:
    engine = _engine()
    _four_running(engine)
    engine.apply(Checkpoint(2, 3540.0))
    engine.apply(Submit(job("cq", gpus=2, id=9, priority=10, submit=50.0)))
    assert list(_evicts(engine.cycle(3600.0))) == [2]
    engine.apply(Requeue(2))
    engine.cycle(3601.0)
    assert engine.jobs[9].admission is not None
    assert engine.jobs[2].admission is None


def test_one_checkpointed_job_rather_than_two_that_lose_more() -> None:
    """Greedy by lost work would take jobs 3 and 4 (the least each); together they lose
    more than job 2, which alone frees enough."""
    engine = _engine(gpus=4)
    for i, (gpus, at) in enumerate(((2, 10.0), (1, 20.0), (1, 30.0)), start=2):
        engine.apply(Submit(job("cq", gpus=gpus, id=i, priority=0, submit=at)))
        engine.cycle(at)
    # Jobs 3 and 4 lose about 1 GPU-hour each; job 2, 2 GPUs x 1800 s.
    engine.apply(Checkpoint(2, 1800.0))
    engine.apply(Submit(job("cq", gpus=2, id=9, priority=10, submit=40.0)))
    assert sorted(_evicts(engine.cycle(3600.0))) == [2]


@settings(max_examples=40, deadline=None)
@given(
    gpus=st.lists(st.integers(min_value=1, max_value=4), min_size=2, max_size=4),
    checkpoints=st.lists(
        st.one_of(st.none(), st.floats(min_value=0, max_value=1000)), min_size=4, max_size=4
    ),
    need=st.integers(min_value=1, max_value=4),
)
def test_victims_are_admissible_and_lose_least(
    gpus: list[int], checkpoints: list[float | None], need: int
) -> None:
    """Every candidate has the same priority and each alone frees enough: the victim is
    the one that loses least, or, without any checkpoint, the most recently admitted."""
    total = 16
    engine = _engine(gpus=total)
    for i, g in enumerate(gpus, start=1):
        engine.apply(Submit(job("cq", gpus=g, id=i, priority=0, submit=float(i))))
        engine.cycle(float(i))
    # Fill the rest with a higher-priority job that is never a candidate.
    free = total - sum(gpus)
    if free:
        engine.apply(Submit(job("cq", gpus=free, id=50, priority=20, submit=10.0)))
        engine.cycle(10.0)
    now = 2000.0
    for i, at in zip(range(1, len(gpus) + 1), checkpoints, strict=False):
        if at is not None:
            engine.apply(Checkpoint(i, at))
    need = min(need, min(gpus))
    engine.apply(Submit(job("cq", gpus=need, id=9, priority=10, submit=20.0)))
    victims = list(_evicts(engine.cycle(now)))
    assert len(victims) == 1
    victim = victims[0]
    assert victim != 50
    fitting = range(1, len(gpus) + 1)

    def lost(i: int) -> float:
        adm = engine.jobs[i].admission
        assert adm is not None
        return adm.lost_work(now)

    # A checkpoint before the job's admission is no checkpoint.
    if any(engine.jobs[i].admission.checkpoint_at is not None for i in fitting):  # type: ignore[union-attr]
        assert lost(victim) == min(lost(i) for i in fitting)
    else:
        assert victim == max(fitting)


def _victim_nodes(engine: Engine, job_id: int) -> dict[str, int]:
    adm = engine.jobs[job_id].admission
    assert adm is not None
    out: dict[str, int] = {}
    for pod_set in adm.decision.pod_sets:
        for placed in pod_set.nodes:
            out[placed.node] = out.get(placed.node, 0) + len(placed.gpus)
    return out


@settings(max_examples=60, deadline=None)
@given(
    gpus=st.lists(st.integers(min_value=1, max_value=5), min_size=2, max_size=7),
    checkpoints=st.lists(
        st.one_of(st.none(), st.floats(min_value=0, max_value=1900)), min_size=7, max_size=7
    ),
    need=st.integers(min_value=1, max_value=8),
    nodes=st.integers(min_value=1, max_value=2),
)
def test_victim_set_loses_no_more_than_any_other_valid_set(
    gpus: list[int], checkpoints: list[float | None], need: int, nodes: int
) -> None:
    """Equal candidates (one priority, one ClusterQueue), several of which may be needed:
    where any reported a checkpoint, the chosen victims lose no more GPU-seconds than any
    other set of candidates whose removal lets the preemptor fit."""
    engine = Engine(
        EngineConfig.for_preset("kueue", preemption=PreemptionConfig(), wait_for_pods_ready=None)
    )
    names = [f"n{i}" for i in range(nodes)]
    for obj in (
        *(node(n, gpus=8) for n in names),
        flavor("f"),
        cluster_queue("cq", {"f": 8 * nodes}, preemption={"withinClusterQueue": "LowerPriority"}),
    ):
        engine.apply(Upsert(obj))
    for i, g in enumerate(gpus, start=1):
        engine.apply(Submit(job("cq", gpus=g, id=i, priority=0, submit=float(i))))
        engine.cycle(float(i))
    running = [i for i in range(1, len(gpus) + 1) if engine.jobs[i].admission is not None]
    for i in range(1, len(gpus) + 1):
        if i not in running:
            # Out of the way: a parked shape queue is not retried for a new head of
            # the same shape, such as the preemptor's.
            engine.apply(Cancel(i))
    # What is left free is taken by higher-priority jobs, never candidates.
    for n, j in zip(names, (50, 51), strict=False):
        used = sum(_victim_nodes(engine, i).get(n, 0) for i in engine.admitted_by_cq["cq"])
        if used < 8:
            engine.apply(Submit(job("cq", gpus=8 - used, id=j, priority=20, submit=10.0)))
            engine.cycle(10.0)
    now = 2000.0
    for i, at in zip(running, checkpoints, strict=False):
        if at is not None:
            engine.apply(Checkpoint(i, at))
    free = {n: 8 for n in names}
    for i in engine.admitted_by_cq["cq"]:
        for n, g in _victim_nodes(engine, i).items():
            free[n] -= g
    placed = {i: _victim_nodes(engine, i) for i in running}

    def fits(chosen: tuple[int, ...]) -> bool:
        return any(free[n] + sum(placed[i].get(n, 0) for i in chosen) >= need for n in names)

    def lost(chosen: tuple[int, ...]) -> float:
        total = 0.0
        for i in chosen:
            adm = engine.jobs[i].admission
            assert adm is not None
            total += adm.lost_work(now)
        return total

    valid = [
        s for k in range(1, len(running) + 1) for s in itertools.combinations(running, k) if fits(s)
    ]
    engine.apply(Submit(job("cq", gpus=need, id=9, priority=10, submit=20.0)))
    victims = tuple(sorted(_evicts(engine.cycle(now))))
    if fits(()):
        assert victims == ()
        return
    if not valid:
        assert victims == ()
        return
    assert victims in valid
    assert all(v in running for v in victims)
    checkpointed = any(engine.jobs[i].admission.checkpoint_at is not None for i in running)  # type: ignore[union-attr]
    if checkpointed:
        assert lost(victims) <= min(lost(s) for s in valid) + 1e-6
