"""Preemption modes, grace period and minimum runtime; victim order; no preemption loops."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from phalanx.engine import (
    Admit,
    Adopt,
    Engine,
    EngineConfig,
    Evict,
    FairSharingConfig,
    PreemptionConfig,
    Requeue,
    Submit,
    Upsert,
    WaitForPodsReadyConfig,
    export_state,
    load_state,
)
from phalanx.model import ClusterQueue
from tests.engine.helpers import admits, cluster_queue, cohort, flavor, job, node


def _evicts(decisions: list[Any]) -> dict[int, Evict]:
    return {d.job_id: d for d in decisions if isinstance(d, Evict)}


def _engine(*objects: Any, preemption: PreemptionConfig | None = None) -> Engine:
    config = EngineConfig.for_preset(
        "kueue", preemption=preemption or PreemptionConfig(), wait_for_pods_ready=None
    )
    engine = Engine(config)
    for obj in objects:
        engine.apply(Upsert(obj))
    return engine


def _cq(
    name: str,
    gpus: int,
    cohort_name: str | None = None,
    annotations: dict[str, str] | None = None,
    **preemption: Any,
) -> ClusterQueue:
    extra: dict[str, Any] = {"annotations": annotations or {}}
    if preemption:
        extra["preemption"] = preemption
    return cluster_queue(name, {"f": gpus}, cohort=cohort_name, **extra)


def _within(annotations: dict[str, str] | None = None) -> ClusterQueue:
    return _cq("cq", 8, annotations=annotations, withinClusterQueue="LowerPriority")


# --------------------------------------------------------------------------- modes


def test_default_evict_requeues_without_grace() -> None:
    engine = _engine(node("n0"), flavor("f"), _within())
    engine.apply(Submit(job("cq", gpus=8, id=1, priority=0)))
    engine.cycle(1.0)
    engine.apply(Submit(job("cq", gpus=8, id=2, priority=10, submit=2.0)))
    evict = _evicts(engine.cycle(3.0))[1]
    assert (evict.mode, evict.grace_period_s, evict.preemptor) == ("REQUEUE", 0.0, 2)


def test_engine_settings_reach_the_evict() -> None:
    settings = PreemptionConfig(mode="CANCEL", grace_period_s=3.0)
    engine = _engine(node("n0"), flavor("f"), _within(), preemption=settings)
    engine.apply(Submit(job("cq", gpus=8, id=1, priority=0)))
    engine.cycle(1.0)
    engine.apply(Submit(job("cq", gpus=8, id=2, priority=10, submit=2.0)))
    evict = _evicts(engine.cycle(3.0))[1]
    assert (evict.mode, evict.grace_period_s) == ("CANCEL", 3.0)
    assert evict.to_dict()["mode"] == "CANCEL"


def test_victim_cluster_queue_annotations_override_the_engine() -> None:
    annotations = {"slurm.phalanx.io/preempt-mode": "cancel", "slurm.phalanx.io/grace-time": "5"}
    engine = _engine(
        node("n0"), flavor("f"), _within(annotations), preemption=PreemptionConfig(mode="REQUEUE")
    )
    engine.apply(Submit(job("cq", gpus=8, id=1, priority=0)))
    engine.cycle(1.0)
    engine.apply(Submit(job("cq", gpus=8, id=2, priority=10, submit=2.0)))
    evict = _evicts(engine.cycle(3.0))[1]
    assert (evict.mode, evict.grace_period_s) == ("CANCEL", 5.0)


def test_mode_off_is_never_preempted() -> None:
    engine = _engine(node("n0"), flavor("f"), _within({"slurm.phalanx.io/preempt-mode": "OFF"}))
    engine.apply(Submit(job("cq", gpus=8, id=1, priority=0)))
    engine.cycle(1.0)
    engine.apply(Submit(job("cq", gpus=8, id=2, priority=100, submit=2.0)))
    for t in (3.0, 100.0, 10_000.0):
        assert not _evicts(engine.cycle(t))
    reason = engine.explain(2)
    assert reason is not None and reason.code == "InsufficientQuota"


def test_mode_off_applies_to_the_victims_queue_not_the_preemptors() -> None:
    # Two borrowers; the one in the OFF queue was admitted last, so it would go first.
    engine = _engine(
        node("n0"),
        flavor("f"),
        cohort("co"),
        _cq("prod", 8, "co", reclaimWithinCohort="Any"),
        _cq("spot-b", 0, "co"),
        _cq("spot-a", 0, "co", annotations={"slurm.phalanx.io/preempt-mode": "OFF"}),
    )
    engine.apply(Submit(job("spot-b", gpus=4, id=1, priority=0, submit=1.0)))
    engine.cycle(1.0)
    engine.apply(Submit(job("spot-a", gpus=4, id=2, priority=0, submit=2.0)))
    engine.cycle(2.0)
    engine.apply(Submit(job("prod", gpus=4, id=3, priority=0, submit=3.0)))
    assert sorted(_evicts(engine.cycle(3.0))) == [1]


@pytest.mark.parametrize("annotations", [{"slurm.phalanx.io/preempt-mode": "OFF"}, {}])
def test_fair_sharing_reclaim_spares_an_off_queue(annotations: dict[str, str]) -> None:
    engine = Engine(
        EngineConfig.for_preset("kueue", fair_sharing=FairSharingConfig(), wait_for_pods_ready=None)
    )
    policy = {"withinClusterQueue": "LowerPriority", "reclaimWithinCohort": "Any"}
    for obj in (
        node("n0", gpus=16),
        flavor("f"),
        cohort("co"),
        _cq("a", 8, "co", **policy),
        _cq("b", 8, "co", annotations=annotations),
    ):
        engine.apply(Upsert(obj))
    engine.apply(Submit(job("b", gpus=8, count=2, id=1)))
    engine.cycle(1.0)
    engine.apply(Submit(job("a", gpus=4, id=2, submit=2.0)))
    assert sorted(_evicts(engine.cycle(3.0))) == ([] if annotations else [1])


# --------------------------------------------------------------------------- minimum runtime


def test_min_runtime_protects_a_young_job_then_expires() -> None:
    engine = _engine(node("n0"), flavor("f"), _within({"phalanx.io/min-runtime": "60"}))
    engine.apply(Submit(job("cq", gpus=8, id=1, priority=0)))
    assert 1 in admits(engine.cycle(10.0))
    engine.apply(Submit(job("cq", gpus=8, id=2, priority=10, submit=20.0)))
    assert not _evicts(engine.cycle(20.0))
    assert not _evicts(engine.cycle(69.0))
    # The pending job is parked: the engine asks to be woken when the protection ends.
    assert engine.next_wakeup() == 70.0
    assert sorted(_evicts(engine.cycle(70.0))) == [1]


def test_min_runtime_from_the_engine_settings() -> None:
    engine = _engine(
        node("n0"), flavor("f"), _within(), preemption=PreemptionConfig(min_runtime_s=30)
    )
    engine.apply(Submit(job("cq", gpus=8, id=1, priority=0)))
    engine.cycle(0.0)
    engine.apply(Submit(job("cq", gpus=8, id=2, priority=10, submit=1.0)))
    assert not _evicts(engine.cycle(29.0))
    assert sorted(_evicts(engine.cycle(30.0))) == [1]


def test_min_runtime_picks_an_older_victim_over_a_protected_one() -> None:
    engine = _engine(node("n0"), flavor("f"), _within({"phalanx.io/min-runtime": "50"}))
    engine.apply(Submit(job("cq", gpus=4, id=1, priority=0, submit=0.0)))
    engine.cycle(0.0)
    engine.apply(Submit(job("cq", gpus=4, id=2, priority=0, submit=40.0)))
    engine.cycle(40.0)
    # Job 2 was admitted last (it would go first) but has run 20 s of its 50.
    engine.apply(Submit(job("cq", gpus=4, id=3, priority=10, submit=60.0)))
    assert sorted(_evicts(engine.cycle(60.0))) == [1]


def test_a_protected_job_already_being_evicted_still_counts_as_a_victim() -> None:
    engine = Engine(
        EngineConfig.for_preset("kueue", wait_for_pods_ready=WaitForPodsReadyConfig(timeout_s=10.0))
    )
    for obj in (node("n0"), flavor("f"), _within({"phalanx.io/min-runtime": "1000"})):
        engine.apply(Upsert(obj))
    engine.apply(Submit(job("cq", gpus=8, id=1, priority=0)))
    engine.cycle(0.0)
    # Its pods never get ready: it is evicted, and holds its GPUs until it stops.
    assert _evicts(engine.cycle(10.0))[1].reason == "PodsReadyTimeout"
    engine.apply(Submit(job("cq", gpus=8, id=2, priority=10, submit=11.0)))
    assert not _evicts(engine.cycle(11.0))
    reason = engine.explain(2)
    assert reason is not None and reason.code == "PendingPreemption"
    engine.apply(Requeue(1))
    assert 2 in admits(engine.cycle(12.0))


def test_settings_and_protections_survive_a_state_round_trip() -> None:
    settings = PreemptionConfig(mode="CANCEL", grace_period_s=2.0, min_runtime_s=60.0)
    engine = _engine(node("n0"), flavor("f"), _within(), preemption=settings)
    engine.apply(Submit(job("cq", gpus=8, id=1, priority=0)))
    engine.cycle(10.0)
    engine.apply(Submit(job("cq", gpus=8, id=2, priority=10, submit=20.0)))
    engine.cycle(20.0)
    copy = load_state(export_state(engine))
    assert copy.config.preemption == settings
    assert copy.next_wakeup() == engine.next_wakeup() == 70.0
    evict = _evicts(copy.cycle(70.0))[1]
    assert (evict.mode, evict.grace_period_s) == ("CANCEL", 2.0)


def test_an_adopted_job_is_protected_from_its_admission_time() -> None:
    objects = (node("n0"), flavor("f"), _within({"phalanx.io/min-runtime": "60"}))
    low = job("cq", gpus=8, id=1, priority=0, submit=0.0)
    before = _engine(*objects)
    before.apply(Submit(low))
    [admit] = [d for d in before.cycle(100.0) if isinstance(d, Admit)]
    # A restarted engine adopts the job: its protection counts from its admission.
    engine = _engine(*objects)
    engine.apply(Adopt(low, admit, admitted_at=100.0))
    engine.apply(Submit(job("cq", gpus=8, id=2, priority=10, submit=120.0)))
    assert not _evicts(engine.cycle(120.0))
    assert sorted(_evicts(engine.cycle(160.0))) == [1]


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("slurm.phalanx.io/preempt-mode", "SUSPEND"),
        ("slurm.phalanx.io/grace-time", "soon"),
        ("phalanx.io/min-runtime", "-5"),
    ],
)
def test_bad_annotations_are_refused_naming_the_field(key: str, value: str) -> None:
    with pytest.raises(ValueError, match=rf"metadata\.annotations\[{key}\]"):
        _within({key: value})


def test_bad_engine_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="REQUEUE, CANCEL, OFF"):
        PreemptionConfig(mode="SUSPEND")
    with pytest.raises(ValueError, match=">= 0"):
        PreemptionConfig(grace_period_s=-1)


# --------------------------------------------------------------------------- victim order


def _running(engine: Engine, specs: list[tuple[int, int, int, float]]) -> None:
    """Admit ``(id, gpus, priority, time)`` one by one, each at its own time."""
    for job_id, gpus, prio, at in specs:
        engine.apply(Submit(job("cq", gpus=gpus, id=job_id, priority=prio, submit=at)))
        assert job_id in admits(engine.cycle(at))


def test_most_recently_admitted_goes_first_among_equals() -> None:
    engine = _engine(node("n0"), flavor("f"), _within())
    _running(engine, [(1, 2, 0, 1.0), (2, 2, 0, 2.0), (3, 2, 0, 3.0), (4, 2, 0, 4.0)])
    engine.apply(Submit(job("cq", gpus=4, id=9, priority=5, submit=5.0)))
    assert sorted(_evicts(engine.cycle(5.0))) == [3, 4]


def test_lowest_priority_goes_first_even_if_older() -> None:
    engine = _engine(node("n0"), flavor("f"), _within())
    _running(engine, [(1, 4, 0, 1.0), (2, 4, 1, 2.0)])
    engine.apply(Submit(job("cq", gpus=4, id=9, priority=5, submit=5.0)))
    assert sorted(_evicts(engine.cycle(5.0))) == [1]


def test_fewest_victims_one_big_job_rather_than_it_and_a_small_one() -> None:
    engine = _engine(node("n0"), flavor("f"), _within())
    # The small job is tried first (most recent) but is not enough; the big one is,
    # and then the small one is given back.
    _running(engine, [(1, 6, 0, 1.0), (2, 2, 0, 2.0)])
    engine.apply(Submit(job("cq", gpus=6, id=9, priority=5, submit=5.0)))
    assert sorted(_evicts(engine.cycle(5.0))) == [1]


def test_a_fitting_job_preempts_nothing() -> None:
    engine = _engine(node("n0"), flavor("f"), _within())
    _running(engine, [(1, 4, 0, 1.0)])
    engine.apply(Submit(job("cq", gpus=4, id=9, priority=5, submit=5.0)))
    decisions = engine.cycle(5.0)
    assert 9 in admits(decisions) and not _evicts(decisions)


# --------------------------------------------------------------------------- no loops


def _settle(engine: Engine, start: float, rounds: int) -> list[Evict]:
    """Cycle, requeueing every evicted job at once as the control plane does."""
    evicts: list[Evict] = []
    for i in range(rounds):
        for d in engine.cycle(start + i):
            if isinstance(d, Evict):
                evicts.append(d)
                engine.apply(Requeue(d.job_id))
    return evicts


def test_a_requeued_victim_never_preempts_its_preemptor_back() -> None:
    # Equal priorities: the older queued job may take the place of a newer one, once.
    engine = _engine(
        node("n0"), flavor("f"), _cq("cq", 8, withinClusterQueue="LowerOrNewerEqualPriority")
    )
    engine.apply(Submit(job("cq", gpus=8, id=1, priority=5, submit=10.0)))
    engine.cycle(11.0)
    engine.apply(Submit(job("cq", gpus=8, id=2, priority=5, submit=5.0)))
    evicts = _settle(engine, 12.0, 20)
    assert [(e.job_id, e.preemptor) for e in evicts] == [(1, 2)]
    assert engine.jobs[2].admission is not None and engine.jobs[1].admission is None


def test_equal_priorities_never_preempt_each_other() -> None:
    engine = _engine(node("n0"), flavor("f"), _within())
    engine.apply(Submit(job("cq", gpus=8, id=1, priority=5, submit=10.0)))
    engine.cycle(11.0)
    engine.apply(Submit(job("cq", gpus=8, id=2, priority=5, submit=5.0)))
    assert not _settle(engine, 12.0, 10)


def test_reclaim_in_a_cohort_settles_after_one_preemption() -> None:
    engine = _engine(
        node("n0"),
        flavor("f"),
        cohort("co"),
        _cq("a", 4, "co", reclaimWithinCohort="Any"),
        _cq("b", 4, "co", reclaimWithinCohort="Any"),
    )
    engine.apply(Submit(job("a", gpus=8, id=1, priority=0, submit=1.0)))
    engine.cycle(1.0)
    engine.apply(Submit(job("b", gpus=4, id=2, priority=0, submit=2.0)))
    evicts = _settle(engine, 2.0, 20)
    assert [(e.job_id, e.preemptor) for e in evicts] == [(1, 2)]
    assert engine.jobs[2].admission is not None


# --------------------------------------------------------------- minimum runtime, every path

_PATHS = ("within", "reclaim", "fair")


def _protected_cluster(path: str, min_runtime: float) -> tuple[Engine, str, str]:
    """A cluster of 16 GPUs for one preemption path; the victims' ClusterQueue and the
    preemptor's. The victims' queue protects its jobs for ``min_runtime`` seconds."""
    protect = {"phalanx.io/min-runtime": str(min_runtime)}
    fair = FairSharingConfig() if path == "fair" else None
    config = EngineConfig.for_preset(
        "kueue", preemption=PreemptionConfig(), wait_for_pods_ready=None, fair_sharing=fair
    )
    engine = Engine(config)
    objects: list[Any] = [node("n0"), node("n1"), flavor("f")]
    if path == "within":
        objects.append(_cq("cq", 16, annotations=protect, withinClusterQueue="LowerPriority"))
        victims = preemptor = "cq"
    else:
        policy = {"withinClusterQueue": "LowerPriority", "reclaimWithinCohort": "Any"}
        objects += [
            cohort("co"),
            _cq("prod", 12, "co", **policy),
            _cq("spot", 4, "co", annotations=protect, **policy),
        ]
        victims, preemptor = "spot", "prod"
    for obj in objects:
        engine.apply(Upsert(obj))
    return engine, victims, preemptor


@settings(max_examples=25, deadline=None)
@given(
    path=st.sampled_from(_PATHS),
    min_runtime=st.integers(min_value=0, max_value=300),
    running=st.lists(
        st.tuples(st.integers(min_value=0, max_value=200), st.sampled_from([2, 4, 8])),
        min_size=1,
        max_size=6,
    ),
    arrives=st.integers(min_value=0, max_value=300),
    need=st.sampled_from([4, 8, 16]),
)
def test_property_no_job_within_its_min_runtime_is_a_victim(
    path: str, min_runtime: int, running: list[tuple[int, int]], arrives: int, need: int
) -> None:
    """Whichever path preempts (within the ClusterQueue, reclaim in the cohort, fair
    sharing), no job is evicted before it has run its minimum runtime; once every
    protection has ended, the preemptor is not kept waiting by them."""
    engine, victims, preemptor = _protected_cluster(path, float(min_runtime))
    for i, (at, gpus) in enumerate(sorted(running), start=1):
        engine.apply(Submit(job(victims, gpus=gpus, id=i, priority=0, submit=float(at))))
        engine.cycle(float(at))
    start = float(max(arrives, max(at for at, _ in running)))
    gang = job(preemptor, gpus=min(need, 8), count=max(1, need // 8), id=99, priority=100)
    engine.apply(Submit(gang.model_copy(update={"submit_time": start})))
    evicted: set[int] = set()
    now = start
    while now <= start + min_runtime + 40:
        for d in engine.cycle(now):
            if isinstance(d, Evict):
                assert d.reason == "Preempted"
                adm = engine.jobs[d.job_id].admission
                assert adm is not None
                assert now >= adm.admitted_at + min_runtime, (d.job_id, adm.admitted_at, now)
                evicted.add(d.job_id)
        for j in sorted(evicted):
            if engine.jobs[j].admission is not None:
                engine.apply(Requeue(j))
        wakeup = engine.next_wakeup()
        now = now + 10.0 if wakeup is None or wakeup <= now else min(wakeup, now + 10.0)
    if path == "within" or need <= 12:
        # Within its nominal quota (or its own queue's lower priorities): room is made.
        assert engine.jobs[99].admission is not None
