"""Snapshots and determinism.

``export_state`` -> ``json.dumps`` -> ``json.loads`` -> ``load_state`` gives
an engine indistinguishable from the original: fed the same further events it
makes the same decisions, byte for byte. And the engine is a pure function of
its events: two engines fed the same events emit byte-identical decisions.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from typing import Any

import pytest

from phalanx.engine import (
    Cancel,
    Decision,
    Delete,
    Engine,
    EngineConfig,
    Event,
    Expedite,
    FairShareWeights,
    Finish,
    Requeue,
    Submit,
    TenantUsage,
    Upsert,
    export_state,
    load_state,
)
from phalanx.model import CPU, Job, LocalQueue, PodSet, PriorityClass, Tenant
from tests.engine.helpers import (
    GPU,
    admitted_ids,
    cluster_queue,
    cohort,
    decisions_json,
    flavor,
    local_queue,
    make_node,
    quota,
    taint,
    toleration,
)


def _setup() -> list[Event]:
    """A cluster with most moving parts: cohorts, limits, strategies, taints, tenants."""
    objects: list[Any] = [
        PriorityClass(name="high", value=1000),
        PriorityClass(name="low", value=10),
        Tenant(name="ml", allocation=4.0),
        Tenant(name="sim", allocation=1.0),
        flavor("a100", gpu="a100"),
        flavor("h100", gpu="h100"),
        *[make_node(f"a{i}", labels={"gpu": "a100", "zone": f"z{i % 2}"}) for i in range(6)],
        *[make_node(f"h{i}", gpus=4, labels={"gpu": "h100"}) for i in range(4)],
        make_node("h-tainted", labels={"gpu": "h100"}, taints=(taint("maint", "x"),)),
        make_node("a-drained", labels={"gpu": "a100"}, state="drain"),
        cohort("root", flavors={"h100": 4}),
        cohort("org", parent="root"),
        cluster_queue(
            "ml",
            {
                "a100": [quota(GPU, 24, borrowing=16), quota(CPU, 1000)],
                "h100": [quota(GPU, 8), quota(CPU, 1000)],
            },
            cohort="org",
        ),
        cluster_queue(
            "sim",
            {
                "a100": [quota(GPU, 16, lending=8), quota(CPU, 1000)],
                "h100": [quota(GPU, 4), quota(CPU, 1000)],
            },
            cohort="org",
            strategy="StrictFIFO",
        ),
        cluster_queue(
            "batch",
            {"h100": [quota(GPU, 8), quota(CPU, 1000)]},
            cohort="root",
            flavorFungibility={"whenCanBorrow": "TryNextFlavor"},
        ),
        local_queue("train", "ml", namespace="ml"),
        local_queue("run", "sim", namespace="sim"),
        LocalQueue(name="held", namespace="sim", cluster_queue="sim", stop_policy="Hold"),
    ]
    return [Upsert(o) for o in objects]


_QUEUES = [
    ("ml", "train", None),
    ("sim", "run", None),
    ("sim", "held", None),
    ("ml", "missing", None),
    ("ml", None, "batch"),
    ("sim", None, "ml"),
]


def _random_job(rng: random.Random, job_id: int, now: float) -> Job:
    tenant, queue, cq = rng.choice(_QUEUES)
    gpus = rng.choice([1, 2, 4, 8])
    count = rng.choice([1, 1, 2, 3, 4])
    podset: dict[str, Any] = {}
    roll = rng.random()
    if roll < 0.15:
        podset["tasks_per_node"] = 1
    elif roll < 0.25:
        podset["exclusive"] = True
    elif roll < 0.35:
        podset["node_selector"] = {"zone": rng.choice(["z0", "z1"])}
    elif roll < 0.4:
        podset["tolerations"] = [toleration("maint")]
    pod_sets = [PodSet(name="worker", count=count, requests={GPU: gpus, CPU: "4"}, **podset)]
    if rng.random() < 0.15:
        pod_sets.insert(0, PodSet(name="launcher", requests={CPU: "2"}))
    return Job(
        id=job_id,
        tenant=tenant,
        queue=queue,
        cluster_queue=cq,
        priority_class=rng.choice([None, "high", "low"]),
        submit_time=now - rng.random() * 100,
        pod_sets=pod_sets,
    )


Driver = Callable[[Engine, float], list[Decision]]


def _driver(seed: int, first_id: int) -> Driver:
    """A deterministic workload: each call applies random events to ``engine`` and cycles it.

    Which jobs finish, are requeued or expedited is picked from the engine's own admitted
    jobs, so two engines driven alike diverge at once if they ever disagree.
    """
    rng = random.Random(seed)
    next_id = [first_id]

    def drive(engine: Engine, now: float) -> list[Decision]:
        events: list[Event] = []
        for _ in range(rng.randint(0, 5)):
            events.append(Submit(_random_job(rng, next_id[0], now)))
            next_id[0] += 1
        running = sorted(j for j, r in engine.jobs.items() if r.admission is not None)
        for job_id in rng.sample(running, k=min(len(running), rng.randint(0, 3))):
            events.append(Requeue(job_id) if rng.random() < 0.2 else Finish(job_id))
        roll = rng.random()
        if roll < 0.1:
            events.append(TenantUsage(rng.choice(["ml", "sim"]), rng.random() * 8))
        elif roll < 0.15:
            events.append(Upsert(make_node("a-drained", labels={"gpu": "a100"})))
        elif roll < 0.2:
            events.append(Upsert(make_node("a-drained", labels={"gpu": "a100"}, state="drain")))
        elif roll < 0.23:
            events.append(Upsert(local_queue("missing", "ml", namespace="ml")))
        elif roll < 0.26:
            events.append(Delete("LocalQueue", "ml/missing"))
        pending = sorted(j for j, r in engine.jobs.items() if r.admission is None)
        if pending and rng.random() < 0.05:
            # Expedited again (as after a restart), holding a node or two from ``now - 5``.
            nodes = tuple(rng.sample([f"a{i}" for i in range(6)], k=rng.randint(0, 2)))
            events.append(Expedite(rng.choice(pending), nodes, now - 5.0))
        known = sorted(engine.jobs)
        if known and rng.random() < 0.1:
            events.append(Cancel(rng.choice(known)))  # ignored for admitted jobs
        for event in events:
            engine.apply(event)
        return engine.cycle(now)

    return drive


def _configs() -> list[EngineConfig]:
    return [
        EngineConfig(preset="kueue"),
        EngineConfig(preset="phalanx", priority_calc_period_s=25.0),
        EngineConfig(
            preset="phalanx",
            weights=FairShareWeights(age=0.5, share=20.0, qos=2.0, size=3.0),
            priority_calc_period_s=7.0,
        ),
    ]


def _config_id(config: EngineConfig) -> str:
    return f"{config.preset}-{config.priority_calc_period_s}"


def _fresh(config: EngineConfig) -> Engine:
    engine = Engine(config)
    for event in _setup():
        engine.apply(event)
    return engine


def _round_trip(engine: Engine) -> Engine:
    return load_state(json.loads(json.dumps(export_state(engine))))


# --------------------------------------------------------------------------- determinism


@pytest.mark.parametrize("config", _configs(), ids=_config_id)
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_same_events_give_byte_identical_decisions(config: EngineConfig, seed: int) -> None:
    a, b = _fresh(config), _fresh(config)
    drive_a, drive_b = _driver(seed, 1), _driver(seed, 1)
    admitted = 0
    for step in range(40):
        now = 10.0 * step
        out_a, out_b = drive_a(a, now), drive_b(b, now)
        assert decisions_json(out_a) == decisions_json(out_b), step
        admitted += len(admitted_ids(out_a))
    assert admitted > 10  # the workload is not trivial
    assert json.dumps(export_state(a)) == json.dumps(export_state(b))


# --------------------------------------------------------------------------- snapshots


@pytest.mark.parametrize("config", _configs(), ids=_config_id)
@pytest.mark.parametrize(("seed", "at"), [(11, 5), (12, 15), (13, 30)])
def test_snapshot_round_trip_continues_identically(
    config: EngineConfig, seed: int, at: int
) -> None:
    original = _fresh(config)
    before = _driver(seed, 1)
    for step in range(at):
        before(original, 10.0 * step)
    data = export_state(original)
    text = json.dumps(data)
    loaded = load_state(json.loads(text))
    # The loaded engine exports the same state.
    assert json.dumps(export_state(loaded)) == text
    for job_id in sorted(original.jobs):
        assert loaded.explain(job_id) == original.explain(job_id), job_id
    assert loaded.pending_count() == original.pending_count()
    assert loaded.admitted_count() == original.admitted_count()
    # Fed the same further events, both decide alike.
    drive_a, drive_b = _driver(seed + 1000, 10_000), _driver(seed + 1000, 10_000)
    for step in range(at, at + 30):
        now = 10.0 * step
        assert decisions_json(drive_a(original, now)) == decisions_json(drive_b(loaded, now))


def test_snapshot_keeps_undelivered_decisions() -> None:
    """Pending decisions raised by events but not yet returned by a cycle travel too."""
    original = _fresh(EngineConfig(preset="kueue"))
    original.apply(Submit(Job(id=1, queue="nope", tenant="ml", pod_sets=[PodSet()])))
    original.apply(
        Submit(Job(id=2, queue="held", tenant="sim", pod_sets=[PodSet(requests={GPU: 1})]))
    )
    loaded = _round_trip(original)
    out_a, out_b = original.cycle(0.0), loaded.cycle(0.0)
    assert decisions_json(out_a) == decisions_json(out_b)
    assert {d.job_id for d in out_a} == {1, 2}


def test_snapshot_of_blocked_strict_fifo_and_parked_shapes() -> None:
    original = _fresh(EngineConfig(preset="kueue"))
    jobs = [
        Job(id=1, cluster_queue="sim", pod_sets=[PodSet(count=3, requests={GPU: 8})]),
        Job(id=2, cluster_queue="sim", pod_sets=[PodSet(count=5, requests={GPU: 8})]),
        Job(id=3, cluster_queue="sim", pod_sets=[PodSet(requests={GPU: 1})]),
        Job(id=4, cluster_queue="ml", pod_sets=[PodSet(count=9, requests={GPU: 8})]),
        Job(id=5, cluster_queue="ml", pod_sets=[PodSet(count=9, requests={GPU: 8})]),
        Job(id=6, cluster_queue="ml", pod_sets=[PodSet(requests={GPU: 2})]),
    ]
    for j in jobs:
        original.apply(Submit(j))
    first = original.cycle(0.0)
    assert 1 in admitted_ids(first) and 6 in admitted_ids(first)
    loaded = _round_trip(original)
    for job_id in (2, 3, 4, 5):
        assert loaded.explain(job_id) == original.explain(job_id)
    assert loaded.explain(3).details["blockedBy"] == 2  # type: ignore[union-attr]
    # Nothing changed: neither retries the parked jobs.
    assert original.cycle(1.0) == loaded.cycle(1.0) == []
    for engine in (original, loaded):
        engine.apply(Finish(1))
        engine.apply(Submit(Job(id=7, cluster_queue="sim", pod_sets=[PodSet(requests={GPU: 1})])))
    assert decisions_json(original.cycle(2.0)) == decisions_json(loaded.cycle(2.0))


def test_snapshot_keeps_priority_class_value_at_submission() -> None:
    """A job keeps the priority value it was submitted with (Kueue copies it into the
    Workload), also across a snapshot taken after the PriorityClass changed."""
    original = _fresh(EngineConfig(preset="kueue"))
    blocker = Job(id=1, cluster_queue="batch", pod_sets=[PodSet(count=4, requests={GPU: 4})])
    original.apply(Submit(blocker))
    assert admitted_ids(original.cycle(0.0)) == [1]
    for job_id, pc in ((2, "high"), (3, "low")):
        original.apply(
            Submit(
                Job(
                    id=job_id,
                    cluster_queue="batch",
                    priority_class=pc,
                    pod_sets=[PodSet(count=4, requests={GPU: 4})],
                )
            )
        )
    original.cycle(1.0)
    original.apply(Upsert(PriorityClass(name="high", value=1)))
    loaded = _round_trip(original)
    for engine in (original, loaded):
        # A node change makes priorities be recomputed.
        engine.apply(Upsert(make_node("extra", labels={"gpu": "a100"})))
        engine.apply(Finish(1))
    out_a, out_b = original.cycle(2.0), loaded.cycle(2.0)
    assert admitted_ids(out_a) == [2]
    assert decisions_json(out_a) == decisions_json(out_b)


def test_load_state_rejects_other_formats() -> None:
    data = export_state(_fresh(EngineConfig()))
    data["format"] = "something/v0"
    with pytest.raises(ValueError, match="not a phalanx engine state"):
        load_state(data)


def test_snapshot_is_plain_json() -> None:
    engine = _fresh(EngineConfig(preset="phalanx"))
    drive = _driver(5, 1)
    for step in range(10):
        drive(engine, float(step))
    data = export_state(engine)
    assert json.loads(json.dumps(data)) == data
