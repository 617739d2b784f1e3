"""Hot swap: a failed node of a topology-placed job replaced within its rack, or FailFast."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from phalanx.engine import (
    Admit,
    Engine,
    EngineConfig,
    NodesReplaced,
    ReplaceNodes,
    Requeue,
    Submit,
    Upsert,
    export_state,
    load_state,
)
from phalanx.model import AdminState, Job, PodSet, ResourceFlavor, Topology
from tests.engine.helpers import GPU, cluster_queue, node

RACK, HOST = "example.com/rack", "kubernetes.io/hostname"
TOPOLOGY = Topology.model_validate(
    {"name": "fabric", "levels": [{"nodeLabel": RACK}, {"nodeLabel": HOST}]}
)


def _cluster(racks: int = 2, per_rack: int = 3, topology: bool = True) -> Engine:
    engine = Engine(EngineConfig(preset="kueue"))
    engine.apply(Upsert(TOPOLOGY))
    engine.apply(
        Upsert(
            ResourceFlavor(
                name="f", node_labels={"pool": "gpu"}, topology_name="fabric" if topology else None
            )
        )
    )
    for r in range(racks):
        for n in range(per_rack):
            engine.apply(Upsert(node(f"r{r}n{n}", pool="gpu", **{RACK: f"r{r}"})))
    engine.apply(Upsert(cluster_queue("cq", {"f": 8 * racks * per_rack})))
    return engine


def _gang(job_id: int, nodes: int, gpus: int = 8) -> Job:
    pod_set = PodSet(count=nodes, tasks_per_node=1, requests={GPU: gpus})
    return Job(id=job_id, cluster_queue="cq", pod_sets=[pod_set])


def _run(engine: Engine, job: Job, now: float = 1.0) -> list[str]:
    engine.apply(Submit(job))
    for d in engine.cycle(now):
        if isinstance(d, Admit) and d.job_id == job.id:
            return [n.node for p in d.pod_sets for n in p.nodes]
    raise AssertionError(f"job {job.id} not admitted")


def _down(engine: Engine, name: str) -> None:
    slot = engine.cache.nodes[name]
    engine.apply(Upsert(slot.node.model_copy(update={"state": AdminState.DOWN})))


def test_a_failed_node_is_replaced_by_a_free_node_of_its_rack() -> None:
    engine = _cluster()
    placed = _run(engine, _gang(1, 2))
    rack = placed[0][:2]
    assert all(n.startswith(rack) for n in placed)
    failed = placed[1]
    _down(engine, failed)
    plan = engine.node_replacement(1, (failed,))
    assert plan is not None and not plan.failure
    ((lost, new),) = plan.replaced
    assert lost == failed and new.startswith(rack) and new not in placed
    assert plan.domains == (f"{RACK}={rack}",)
    engine.apply(ReplaceNodes(1, plan.replaced))
    out = engine.cycle(2.0)
    swapped = [d for d in out if isinstance(d, NodesReplaced)]
    assert len(swapped) == 1 and swapped[0].replaced == ((failed, new),)
    assert sorted(swapped[0].admit.nodes) == sorted([placed[0], new])
    # The job kept its admission; the failed node holds nothing of it any more.
    assert engine.jobs[1].admission is not None
    assert 1 not in engine.cache.nodes[failed].jobs
    assert 1 in engine.cache.nodes[new].jobs
    assert not [d for d in out if isinstance(d, Admit) and d.job_id == 1]


def test_no_free_node_in_the_rack_is_fail_fast_even_with_room_elsewhere() -> None:
    engine = _cluster(per_rack=2)
    placed = _run(engine, _gang(1, 2))
    _down(engine, placed[0])
    plan = engine.node_replacement(1, (placed[0],))
    assert plan is not None and plan.replaced == ()
    assert plan.failure.startswith(f"no healthy node in {RACK}=")
    assert placed[0] in plan.failure


def test_a_busy_or_held_rack_node_is_not_taken() -> None:
    engine = _cluster()
    placed = _run(engine, _gang(1, 2))
    rack = placed[0][:2]
    spare = next(f"{rack}n{i}" for i in range(3) if f"{rack}n{i}" not in placed)
    _run(
        engine,
        Job(
            id=2,
            cluster_queue="cq",
            pod_sets=[PodSet(count=1, requests={GPU: 4}, node_names=[spare])],
        ),
        1.5,
    )
    _down(engine, placed[1])
    plan = engine.node_replacement(1, (placed[1],))
    assert plan is not None and plan.failure


def test_a_job_without_a_topology_is_not_swapped() -> None:
    engine = _cluster(topology=False)
    placed = _run(engine, _gang(1, 2))
    _down(engine, placed[0])
    assert engine.node_replacement(1, (placed[0],)) is None
    # ... and a node it does not use is no failure of it.
    topo = _cluster()
    on = _run(topo, _gang(1, 2))
    other = next(n for n in topo.cache.nodes if n not in on)
    assert topo.node_replacement(1, (other,)) is None


def test_the_swap_survives_a_snapshot_and_the_job_ends_cleanly() -> None:
    engine = _cluster()
    placed = _run(engine, _gang(1, 2))
    _down(engine, placed[0])
    plan = engine.node_replacement(1, (placed[0],))
    assert plan is not None
    engine.apply(ReplaceNodes(1, plan.replaced))
    engine.cycle(2.0)
    copy = load_state(export_state(engine))
    assert sorted(copy.jobs[1].admission.decision.nodes) == sorted(  # type: ignore[union-attr]
        engine.jobs[1].admission.decision.nodes  # type: ignore[union-attr]
    )
    # Requeued later, it frees exactly what it holds.
    engine.apply(Requeue(1, "NodeFail"))
    assert all(not slot.jobs for slot in engine.cache.nodes.values())
    assert all(not slot.used.get(GPU) for slot in engine.cache.nodes.values())


@settings(max_examples=60, deadline=None)
@given(
    busy=st.lists(st.integers(0, 5), max_size=4, unique=True),
    fail=st.integers(0, 1),
)
def test_a_replacement_is_always_in_the_failed_nodes_rack_healthy_and_free(
    busy: list[int], fail: int
) -> None:
    engine = _cluster()
    placed = _run(engine, _gang(1, 2))
    names = sorted(engine.cache.nodes)
    for i, index in enumerate(busy):
        name = names[index]
        if name not in placed:
            engine.apply(
                Submit(
                    Job(
                        id=10 + i,
                        cluster_queue="cq",
                        pod_sets=[PodSet(count=1, requests={GPU: 8}, node_names=[name])],
                    )
                )
            )
    engine.cycle(1.5)
    failed = placed[fail]
    _down(engine, failed)
    free = [
        n
        for n in names
        if n[:2] == failed[:2] and n not in placed and not engine.cache.nodes[n].jobs
    ]
    plan = engine.node_replacement(1, (failed,))
    assert plan is not None
    if not free:
        assert plan.failure and not plan.replaced
        return
    assert not plan.failure
    ((_, new),) = plan.replaced
    assert new in free
    engine.apply(ReplaceNodes(1, plan.replaced))
    used = {n: engine.cache.nodes[n].used.get(GPU, 0) for n in names}
    assert used[new] == 8 and used[failed] == 0
