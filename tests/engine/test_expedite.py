"""Expedited requeue (``--requeue=expedite``): first in order, its healthy nodes held
for it, restarted on them plus a replacement."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from phalanx.engine import (
    Admit,
    Adopt,
    Cancel,
    Delete,
    Engine,
    EngineConfig,
    Expedite,
    Finish,
    Requeue,
    Submit,
    Upsert,
    export_state,
    load_state,
)
from phalanx.engine.expedite import EXPEDITE_HOLD_S
from phalanx.model import Job, Node, PodSet, ResourceFlavor, Topology, TopologyRequest
from tests.engine.helpers import (
    GPU,
    admits,
    admitted_ids,
    cluster_queue,
    decisions_json,
    flavor,
    job,
    make_node,
)

NODES = ("n1", "n2", "n3", "n4")

CONFIGS = {
    "plain": EngineConfig(preset="kueue"),
    "phalanx": EngineConfig.for_preset("phalanx"),  # with backfill
    "slurm": EngineConfig.for_preset("slurm"),
    "kueue": EngineConfig.for_preset("kueue"),  # one head per queue, waitForPodsReady
}
_config = CONFIGS["plain"]


@pytest.fixture(autouse=True, params=list(CONFIGS))
def _each_config(request: pytest.FixtureRequest) -> None:
    global _config
    _config = CONFIGS[request.param]


def _cluster(queues: int = 1) -> Engine:
    engine = Engine(_config)
    for obj in (flavor("f"), *(make_node(n) for n in NODES)):
        engine.apply(Upsert(obj))
    for i in range(queues):
        engine.apply(Upsert(cluster_queue(f"cq{i}", {"f": 1000})))
    return engine


def _settle(engine: Engine, now: float) -> list[int]:
    """Cycles at ``now`` until one admits nothing (``kueue`` admits a head per queue per
    cycle); every job admitted."""
    admitted: list[int] = []
    while ids := admitted_ids(engine.cycle(now)):
        admitted.extend(ids)
    return admitted


def _nodes_of(engine: Engine, job_id: int) -> list[str]:
    rec = engine.jobs[job_id]
    assert rec.admission is not None
    return sorted(n.node for p in rec.admission.decision.pod_sets for n in p.nodes)


def _running_gang(queues: int = 1) -> tuple[Engine, list[str]]:
    """Gang 1 (2 x 8 GPUs) on two nodes, jobs 2 and 3 on the other two, and 50 jobs of
    higher priority waiting (in every queue) for a whole node."""
    engine = _cluster(queues)
    engine.apply(Submit(job("cq0", gpus=8, count=2, id=1, submit=0.0)))
    engine.apply(Submit(job("cq0", gpus=8, id=2, submit=0.0)))
    engine.apply(Submit(job("cq0", gpus=8, id=3, submit=0.0)))
    assert sorted(_settle(engine, 1.0)) == [1, 2, 3]
    for i in range(50):
        engine.apply(Submit(job(f"cq{i % queues}", gpus=8, id=100 + i, submit=2.0, priority=100)))
    assert _settle(engine, 3.0) == []
    return engine, _nodes_of(engine, 1)


def _fail(engine: Engine, lost: str, healthy: str, expedite: bool = True) -> None:
    engine.apply(Upsert(make_node(lost, state="down")))
    engine.apply(Requeue(1, "NodeFail", expedite=expedite, nodes=(healthy,) if expedite else ()))


def test_expedited_job_restarts_first_on_its_healthy_node_plus_a_replacement() -> None:
    engine, (healthy, lost) = _running_gang()
    _fail(engine, lost, healthy)
    engine.apply(Finish(2))  # frees a replacement node
    out = engine.cycle(4.0)
    assert admitted_ids(out) == [1]
    replacement = next(n for n in NODES if n not in (healthy, lost) and n in _nodes_of(engine, 1))
    assert _nodes_of(engine, 1) == sorted([healthy, replacement])
    assert engine.expedite.jobs == {}


def test_without_expedite_the_waiting_jobs_go_first() -> None:
    if _config.backfill is not None or _config.heads_per_cycle is not None:
        pytest.skip("the baseline without reservations or a head per cycle")
    engine, (healthy, lost) = _running_gang()
    _fail(engine, lost, healthy, expedite=False)
    engine.apply(Finish(2))
    out = engine.cycle(4.0)
    # Two nodes are free: two of the higher-priority jobs take them, the gang waits.
    assert len(admitted_ids(out)) == 2
    assert 1 not in admitted_ids(out)


def test_held_nodes_take_no_other_work_until_it_restarts() -> None:
    engine, (healthy, lost) = _running_gang()
    _fail(engine, lost, healthy)
    # No replacement yet: the healthy node is free but held; nobody else gets it.
    assert admitted_ids(engine.cycle(4.0)) == []
    assert engine.cache.nodes[healthy].jobs == {}
    assert engine.reserved.holds.owner[engine.cache.nodes[healthy]] == -2  # job 1's hold
    assert engine.expedite.next_times() == [4.0 + EXPEDITE_HOLD_S]
    wakeup = engine.next_wakeup()
    assert wakeup is not None and wakeup <= 4.0 + EXPEDITE_HOLD_S
    # A replacement comes free: the expedited job, not the 50 others, gets it.
    engine.apply(Finish(3))
    out = engine.cycle(5.0)
    assert admitted_ids(out) == [1]
    assert healthy in _nodes_of(engine, 1)
    assert engine.reserved.holds.owner == {}


def test_hold_is_bounded() -> None:
    engine, (healthy, lost) = _running_gang()
    _fail(engine, lost, healthy)
    assert admitted_ids(engine.cycle(4.0)) == []
    out = [d for _ in range(3) for d in engine.cycle(4.0 + EXPEDITE_HOLD_S)]
    # The hold lapsed: the healthy node goes to the next job in order.
    assert len(admitted_ids(out)) == 1
    assert admits(out)[admitted_ids(out)[0]].pod_sets[0].nodes[0].node == healthy
    assert engine.reserved.holds.owner == {}


def test_cancel_releases_the_hold() -> None:
    engine, (healthy, lost) = _running_gang()
    _fail(engine, lost, healthy)
    assert admitted_ids(engine.cycle(4.0)) == []
    engine.apply(Cancel(1))
    out = engine.cycle(5.0)
    assert len(admitted_ids(out)) == 1
    assert engine.expedite.jobs == {}


def test_first_across_cluster_queues() -> None:
    engine, (healthy, lost) = _running_gang(queues=3)
    _fail(engine, lost, healthy)
    engine.apply(Finish(2))
    engine.apply(Finish(3))
    # The expedited job is decided first; the third free node goes to a waiting job.
    ids = _settle(engine, 4.0)
    assert ids[0] == 1
    assert healthy in _nodes_of(engine, 1)
    assert len(ids) == 2


def test_snapshot_carries_the_hold() -> None:
    engine, (healthy, lost) = _running_gang()
    _fail(engine, lost, healthy)
    assert admitted_ids(engine.cycle(4.0)) == []
    data = json.loads(json.dumps(export_state(engine)))
    assert data["expedite"] == [[1, [healthy], 4.0 + EXPEDITE_HOLD_S, True]]
    loaded = load_state(data)
    assert json.dumps(export_state(loaded)) == json.dumps(export_state(engine))
    for e in (engine, loaded):
        e.apply(Finish(3))
    a, b = engine.cycle(5.0), loaded.cycle(5.0)
    assert decisions_json(a) == decisions_json(b)
    assert admitted_ids(a) == [1]


@settings(max_examples=25, deadline=None)
@given(
    finish=st.lists(st.sampled_from([2, 3]), max_size=2, unique=True),
    waiting=st.integers(min_value=0, max_value=6),
    lost_first=st.booleans(),
)
def test_property_held_nodes_only_go_to_their_job(
    finish: list[int], waiting: int, lost_first: bool
) -> None:
    engine = _cluster()
    engine.apply(Submit(job("cq0", gpus=8, count=2, id=1)))
    engine.apply(Submit(job("cq0", gpus=8, id=2)))
    engine.apply(Submit(job("cq0", gpus=8, id=3)))
    _settle(engine, 1.0)
    for i in range(waiting):
        engine.apply(Submit(job("cq0", gpus=4, id=100 + i, submit=2.0, priority=100)))
    _settle(engine, 2.0)
    nodes = _nodes_of(engine, 1)
    lost, healthy = (nodes[0], nodes[1]) if lost_first else (nodes[1], nodes[0])
    _fail(engine, lost, healthy)
    for j in finish:
        engine.apply(Finish(j))
    _settle(engine, 3.0)
    slot = engine.cache.nodes[healthy]
    # Nothing but the expedited job ever runs on its healthy node while it waits.
    assert set(slot.jobs) <= {1}
    if finish:
        assert engine.jobs[1].admission is not None
        assert healthy in _nodes_of(engine, 1)
    else:
        assert engine.jobs[1].admission is None


def test_backfill_lends_no_held_node_to_short_jobs() -> None:
    """Short jobs that would end long before any plan's start still do not get the
    held node (a backfill reservation's nodes could be lent to them)."""
    engine = _cluster()
    engine.apply(Submit(job("cq0", gpus=8, count=2, id=1)))
    engine.apply(Submit(job("cq0", gpus=8, id=2).model_copy(update={"time_limit": 3600.0})))
    engine.apply(Submit(job("cq0", gpus=8, id=3).model_copy(update={"time_limit": 3600.0})))
    assert sorted(_settle(engine, 1.0)) == [1, 2, 3]
    healthy, lost = _nodes_of(engine, 1)
    _fail(engine, lost, healthy)
    for i in range(5):
        short = job("cq0", gpus=8, id=100 + i, submit=2.0).model_copy(update={"time_limit": 10.0})
        engine.apply(Submit(short))
    for t in (4.0, 5.0, 40.0, 100.0):
        _settle(engine, t)
        assert engine.cache.nodes[healthy].jobs == {}
    engine.apply(Finish(2))
    assert _settle(engine, 101.0)[0] == 1
    assert healthy in _nodes_of(engine, 1)


def test_node_changes_keep_the_hold() -> None:
    engine, (healthy, lost) = _running_gang()
    _fail(engine, lost, healthy)
    assert _settle(engine, 4.0) == []
    # Relabelled (upserted again) and the lost node deleted: the hold stands.
    engine.apply(Upsert(make_node(healthy)))
    engine.apply(Delete("Node", lost))
    assert engine.reserved.holds.owner == {engine.cache.nodes[healthy]: -2}
    assert _settle(engine, 5.0) == []
    assert engine.cache.nodes[healthy].jobs == {}
    engine.apply(Finish(3))
    assert _settle(engine, 6.0)[0] == 1
    assert healthy in _nodes_of(engine, 1)


@settings(max_examples=20, deadline=None)
@given(
    waiting=st.lists(
        st.tuples(
            st.integers(min_value=0, max_value=2),  # ClusterQueue
            st.integers(min_value=-5, max_value=1000),  # priority
            st.sampled_from([4, 8]),  # GPUs
        ),
        max_size=12,
    ),
    finishes=st.lists(st.sampled_from([2, 3]), max_size=2, unique=True),
    lost_first=st.booleans(),
)
def test_property_nothing_is_admitted_before_the_expedited_job_while_it_fits(
    waiting: list[tuple[int, int, int]], finishes: list[int], lost_first: bool
) -> None:
    """Random jobs of any priority wait in three ClusterQueues: in every cycle after the
    requeue, the expedited gang is admitted before anything else, and a cycle that
    admits others without it leaves it no room even counting what they took."""
    engine = _cluster(queues=3)
    engine.apply(Submit(job("cq0", gpus=8, count=2, id=1, submit=0.0)))
    engine.apply(Submit(job("cq0", gpus=8, id=2, submit=0.0)))
    engine.apply(Submit(job("cq0", gpus=8, id=3, submit=0.0)))
    assert sorted(_settle(engine, 1.0)) == [1, 2, 3]
    nodes = _nodes_of(engine, 1)
    lost, healthy = (nodes[0], nodes[1]) if lost_first else (nodes[1], nodes[0])
    for i, (q, prio, gpus) in enumerate(waiting):
        engine.apply(Submit(job(f"cq{q}", gpus=gpus, id=100 + i, submit=2.0, priority=prio)))
    _settle(engine, 2.0)
    _fail(engine, lost, healthy)

    def room(extra: dict[str, int]) -> int:
        """Nodes up and wholly free once ``extra`` GPUs (per node) are given back."""
        count = 0
        for name, slot in engine.cache.nodes.items():
            if slot.node.state.value != "up":
                continue
            if slot.free(GPU) + extra.get(name, 0) >= 8:
                count += 1
        return count

    now = 3.0
    for step in [None, *finishes, None]:
        if step is not None:
            engine.apply(Finish(step))
        while True:
            out = engine.cycle(now)
            ids = admitted_ids(out)
            if 1 in ids:
                assert ids[0] == 1
            elif ids:
                # Give back what this cycle admitted: the gang still would not fit.
                taken: dict[str, int] = {}
                for d in out:
                    if isinstance(d, Admit):
                        for p in d.pod_sets:
                            for n in p.nodes:
                                taken[n.node] = taken.get(n.node, 0) + len(n.gpus)
                assert room(taken) < 2
            if not ids:
                break
        now += 1.0
        if engine.jobs[1].admission is not None:
            break
    if finishes:
        assert engine.jobs[1].admission is not None


# --------------------------------------------------------------------------- rebuilt


def _rebuilt(engine: Engine, lost: str) -> Engine:
    """A new engine built from what ``engine`` knows, as recovery builds one from the
    store: the objects, the admitted jobs adopted, the pending ones submitted."""
    rebuilt = _cluster()
    rebuilt.apply(Upsert(make_node(lost, state="down")))
    for job_id in sorted(engine.jobs):
        rec = engine.jobs[job_id]
        if rec.admission is not None:
            rebuilt.apply(Adopt(rec.job, rec.admission.decision, rec.admission.admitted_at))
        else:
            rebuilt.apply(Submit(rec.job))
    return rebuilt


def test_rebuilt_engine_without_the_event_forgets_the_hold() -> None:
    if _config.backfill is not None:
        pytest.skip("a backfill reservation may hold the node as well")
    engine, (healthy, lost) = _running_gang()
    _fail(engine, lost, healthy)
    rebuilt = _rebuilt(engine, lost)
    # The baseline the Expedite event is for: one of the 50 takes the healthy node.
    out = [d for _ in range(3) for d in rebuilt.cycle(4.0)]
    assert admits(out)[admitted_ids(out)[0]].pod_sets[0].nodes[0].node == healthy


def test_expedite_event_restores_the_hold_after_a_rebuild() -> None:
    engine, (healthy, lost) = _running_gang()
    _fail(engine, lost, healthy)
    rebuilt = _rebuilt(engine, lost)
    rebuilt.apply(Expedite(1, (healthy,), 3.5))
    assert rebuilt.jobs[1].key[:2] == (float("-inf"), float("-inf"))
    assert _settle(rebuilt, 4.0) == []
    assert rebuilt.cache.nodes[healthy].jobs == {}
    assert rebuilt.reserved.holds.owner[rebuilt.cache.nodes[healthy]] == -2
    # Bounded from the requeue's time, not from the rebuild.
    assert rebuilt.expedite.next_times() == [3.5 + EXPEDITE_HOLD_S]
    rebuilt.apply(Finish(3))
    assert _settle(rebuilt, 5.0)[0] == 1
    assert healthy in _nodes_of(rebuilt, 1)
    assert rebuilt.expedite.jobs == {} and rebuilt.reserved.holds.owner == {}


def _placements(engine: Engine) -> dict[int, list[str]]:
    return {j: _nodes_of(engine, j) for j, r in engine.jobs.items() if r.admission is not None}


def test_rebuilt_engine_places_as_the_one_that_saw_the_requeue() -> None:
    engine, (healthy, lost) = _running_gang()
    _fail(engine, lost, healthy)
    rebuilt = _rebuilt(engine, lost)
    # The first engine bounds its hold from its first cycle after the requeue, 4.0.
    rebuilt.apply(Expedite(1, (healthy,), 4.0))
    for now, finished in ((4.0, None), (5.0, 3), (6.0, 2), (4.0 + EXPEDITE_HOLD_S, None)):
        for e in (engine, rebuilt):
            if finished is not None:
                e.apply(Finish(finished))
            _settle(e, now)
        assert _placements(engine) == _placements(rebuilt), now
        assert engine.expedite.next_times() == rebuilt.expedite.next_times()
    assert healthy in _nodes_of(rebuilt, 1)


def test_restored_hold_past_its_bound_frees_the_node_at_once() -> None:
    engine, (healthy, lost) = _running_gang()
    _fail(engine, lost, healthy)
    rebuilt = _rebuilt(engine, lost)
    rebuilt.apply(Expedite(1, (healthy,), 4.0 - EXPEDITE_HOLD_S))
    out = [d for _ in range(3) for d in rebuilt.cycle(4.0)]
    assert len(admitted_ids(out)) == 1 and 1 not in admitted_ids(out)
    assert admits(out)[admitted_ids(out)[0]].pod_sets[0].nodes[0].node == healthy
    # Still first in the order.
    assert 1 in rebuilt.expedite.jobs and rebuilt.jobs[1].key[0] == float("-inf")
    assert rebuilt.reserved.holds.owner == {}


def test_expedite_event_ignores_admitted_and_unknown_jobs() -> None:
    engine, _ = _running_gang()
    before = json.dumps(export_state(engine))
    engine.apply(Expedite(2, ("n1",), 3.0))
    engine.apply(Expedite(999, ("n1",), 3.0))
    assert engine.expedite.jobs == {}
    assert json.dumps(export_state(engine)) == before


def test_snapshot_carries_a_restored_hold() -> None:
    engine, (healthy, lost) = _running_gang()
    _fail(engine, lost, healthy)
    rebuilt = _rebuilt(engine, lost)
    rebuilt.apply(Expedite(1, (healthy,), 3.5))
    data = json.loads(json.dumps(export_state(rebuilt)))
    assert data["expedite"] == [[1, [healthy], 3.5 + EXPEDITE_HOLD_S, True]]
    loaded = load_state(data)
    for e in (rebuilt, loaded):
        e.apply(Finish(3))
    a, b = rebuilt.cycle(5.0), loaded.cycle(5.0)
    assert decisions_json(a) == decisions_json(b)
    assert admitted_ids(a)[0] == 1


# --------------------------------------------------------------------------- topology

BLOCK, RACK, HOST = "example.com/block", "example.com/rack", "kubernetes.io/hostname"
RACKS = {"r0": ("r0n0", "r0n1", "r0n2", "r0n3"), "r1": ("r1n0", "r1n1", "r1n2")}
"""One block; rack r0 of four nodes, rack r1 of three."""


def _rack_node(name: str, state: str = "up") -> Node:
    return make_node(name, labels={"pool": "gpu", BLOCK: "b0", RACK: name[:2]}, state=state)


def _gang_job(request: TopologyRequest | None) -> Job:
    pod_set = PodSet(count=2, tasks_per_node=1, requests={"nvidia.com/gpu": 8}, topology=request)
    return Job(id=1, cluster_queue="cq0", pod_sets=[pod_set])


def _requeued_in_rack_r0(
    levels: tuple[str, ...],
    request: TopologyRequest | None,
    expedite: bool = True,
    r0_full: bool = False,
) -> Engine:
    """The gang on r0n0 and r0n1 (jobs 2, 3 and 4 on r0n2, r0n3 and r1n0), r0n0 lost,
    r0n1 held for it if ``expedite``; then jobs 2 and 3 end, unless ``r0_full`` (r0n1
    is r0's one free node). Rack r1 (r1n1, r1n2) holds the gang alone, tightly."""
    engine = Engine(_config)
    topology = {"name": "fabric", "levels": [{"nodeLabel": label} for label in levels]}
    engine.apply(Upsert(Topology.model_validate(topology)))
    engine.apply(
        Upsert(ResourceFlavor(name="f", node_labels={"pool": "gpu"}, topology_name="fabric"))
    )
    for names in RACKS.values():
        for name in names:
            engine.apply(Upsert(_rack_node(name)))
    engine.apply(Upsert(cluster_queue("cq0", {"f": 1000})))
    engine.apply(Submit(job("cq0", gpus=8, id=2, node_names=["r0n2"])))
    engine.apply(Submit(job("cq0", gpus=8, id=3, node_names=["r0n3"])))
    engine.apply(Submit(job("cq0", gpus=8, id=4, node_names=["r1n0"])))
    assert sorted(_settle(engine, 0.0)) == [2, 3, 4]
    engine.apply(Submit(_gang_job(request)))
    assert _settle(engine, 1.0) == [1]
    assert _nodes_of(engine, 1) == ["r0n0", "r0n1"]
    engine.apply(Upsert(_rack_node("r0n0", state="down")))
    engine.apply(Requeue(1, "NodeFail", expedite=expedite, nodes=("r0n1",) if expedite else ()))
    if not r0_full:
        engine.apply(Finish(2))
        engine.apply(Finish(3))
    return engine


@pytest.mark.parametrize("request_", [None, TopologyRequest(preferred=RACK)], ids=["none", "rack"])
def test_topology_rack_holding_the_held_node_wins_among_those_that_fit(
    request_: TopologyRequest | None,
) -> None:
    # Racks r0 (r0n1 held, r0n2, r0n3) and r1 (r1n1, r1n2) both hold the gang.
    engine = _requeued_in_rack_r0((BLOCK, RACK, HOST), request_)
    assert _settle(engine, 2.0) == [1]
    assert _nodes_of(engine, 1) == ["r0n1", "r0n2"]
    # Without expedite the tightest rack, r1.
    plain = _requeued_in_rack_r0((BLOCK, RACK, HOST), request_, expedite=False)
    assert _settle(plain, 2.0) == [1]
    assert _nodes_of(plain, 1) == ["r1n1", "r1n2"]


def test_topology_required_block_places_on_the_held_node_first() -> None:
    request = TopologyRequest(required=BLOCK)
    engine = _requeued_in_rack_r0((BLOCK, RACK, HOST), request, r0_full=True)
    assert _settle(engine, 2.0) == [1]
    # The held node, plus a replacement from the other rack of the block.
    assert _nodes_of(engine, 1) == ["r0n1", "r1n1"]
    plain = _requeued_in_rack_r0((BLOCK, RACK, HOST), request, expedite=False, r0_full=True)
    assert _settle(plain, 2.0) == [1]
    assert _nodes_of(plain, 1) == ["r1n1", "r1n2"]


def test_topology_level_stands_over_the_held_node() -> None:
    # r0 has only the held node free: a rack that holds the gang (r1) comes first.
    engine = _requeued_in_rack_r0((BLOCK, RACK, HOST), None, r0_full=True)
    assert _settle(engine, 2.0) == [1]
    assert _nodes_of(engine, 1) == ["r1n1", "r1n2"]


def test_topology_unconstrained_takes_the_held_nodes_domain_first() -> None:
    request = TopologyRequest(unconstrained=True)
    engine = _requeued_in_rack_r0((RACK, HOST), request)
    assert _settle(engine, 2.0) == [1]
    assert _nodes_of(engine, 1) == ["r0n1", "r0n2"]
    # Without expedite the least free rack first, r1.
    plain = _requeued_in_rack_r0((RACK, HOST), request, expedite=False)
    assert _settle(plain, 2.0) == [1]
    assert _nodes_of(plain, 1) == ["r1n1", "r1n2"]
