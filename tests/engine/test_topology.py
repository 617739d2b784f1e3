"""Topology-aware placement: gangs in the tightest domain their request allows."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from phalanx.engine import Admit, Engine, EngineConfig, Submit, Upsert
from phalanx.model import Job, PodSet, ResourceFlavor, Topology, TopologyRequest
from tests.engine.helpers import GPU, cluster_queue, node

BLOCK, RACK, HOST = "example.com/block", "example.com/rack", "kubernetes.io/hostname"
TOPOLOGY = Topology.model_validate(
    {"name": "fabric", "levels": [{"nodeLabel": BLOCK}, {"nodeLabel": RACK}, {"nodeLabel": HOST}]}
)
_ids = iter(range(1, 10**6))


def _cluster(
    blocks: int = 2, racks: int = 2, per_rack: int = 4, policy: str = "phalanx"
) -> tuple[Engine, dict[str, tuple[str, str]]]:
    """``blocks`` x ``racks`` x ``per_rack`` nodes of 8 GPUs; where each node is."""
    engine = Engine(EngineConfig(preset="kueue", topology_policy=policy))
    engine.apply(Upsert(TOPOLOGY))
    engine.apply(
        Upsert(ResourceFlavor(name="f", node_labels={"pool": "gpu"}, topology_name="fabric"))
    )
    where: dict[str, tuple[str, str]] = {}
    for b in range(blocks):
        for r in range(racks):
            for n in range(per_rack):
                name = f"b{b}r{r}n{n}"
                rack = f"b{b}r{r}"
                engine.apply(
                    Upsert(
                        node(
                            name,
                            **{
                                "pool": "gpu",
                                "example.com/block": f"b{b}",
                                "example.com/rack": rack,
                            },
                        )
                    )
                )
                where[name] = (f"b{b}", rack)
    engine.apply(Upsert(cluster_queue("cq", {"f": 8 * len(where)})))
    return engine, where


def _occupy(engine: Engine, used: dict[str, int]) -> None:
    for name, gpus in used.items():
        if gpus:
            pod_set = PodSet(count=1, requests={GPU: gpus}, node_names=[name])
            engine.apply(
                Submit(Job(id=next(_ids), cluster_queue="cq", pod_sets=[pod_set], priority=100))
            )
    engine.cycle(0.0)


def _gang(
    nodes: int, request: TopologyRequest | None = None, gpus: int = 8, per_node: bool = True
) -> Job:
    pod_set = PodSet(
        count=nodes if per_node else nodes * (8 // gpus),
        tasks_per_node=1 if per_node else None,
        requests={GPU: gpus},
        topology=request,
    )
    return Job(id=next(_ids), cluster_queue="cq", pod_sets=[pod_set])


def _placed(engine: Engine, job: Job, now: float = 1.0) -> list[str] | None:
    engine.apply(Submit(job))
    for d in engine.cycle(now):
        if isinstance(d, Admit) and d.job_id == job.id:
            return sorted(n.node for p in d.pod_sets for n in p.nodes)
    return None


def test_a_gang_goes_to_the_tightest_rack_that_holds_it() -> None:
    engine, where = _cluster()
    # b0r0 has one node busy (3 free), b0r1 and b1r0 are free, b1r1 has two busy.
    _occupy(engine, {"b0r0n0": 8, "b1r1n0": 8, "b1r1n1": 8})
    three = _placed(engine, _gang(3))
    assert three is not None and {where[n][1] for n in three} == {"b0r0"}
    two = _placed(engine, _gang(2))
    assert two is not None and {where[n][1] for n in two} == {"b1r1"}
    four = _placed(engine, _gang(4))
    assert four is not None and len({where[n][1] for n in four}) == 1


def test_required_rack_waits_and_preferred_rack_spreads_within_a_block() -> None:
    engine, where = _cluster()
    assert _placed(engine, _gang(5, TopologyRequest(required=RACK))) is None
    spread = _placed(engine, _gang(5, TopologyRequest(preferred=RACK)))
    assert spread is not None
    assert len({where[n][0] for n in spread}) == 1  # one block
    assert len({where[n][1] for n in spread}) == 2  # over its two racks, 4 + 1


def test_required_block_and_unconstrained() -> None:
    engine, where = _cluster()
    _occupy(engine, {"b0r0n0": 8})
    block = _placed(engine, _gang(8, TopologyRequest(required=BLOCK)))
    assert block is not None and {where[n][0] for n in block} == {"b1"}
    # Unconstrained is Kueue's LeastFreeCapacity: the least free rack first.
    anywhere = _placed(engine, _gang(5, TopologyRequest(unconstrained=True)))
    assert anywhere is not None and len(anywhere) == 5
    racks = [where[n][1] for n in anywhere]
    assert racks.count("b0r0") == 3 and racks.count("b0r1") == 2


def test_a_required_level_the_topology_lacks_never_fits() -> None:
    engine, _ = _cluster()
    assert _placed(engine, _gang(1, TopologyRequest(required="example.com/row"))) is None


def test_loose_tasks_pack_within_one_rack() -> None:
    engine, where = _cluster()
    _occupy(engine, {"b0r0n0": 4, "b0r0n1": 4})
    # 12 single-GPU tasks: room for 8 on b0r0's two half-free nodes plus two free ones.
    placed = _placed(engine, _gang(3, gpus=2, per_node=False))
    assert placed is not None and len({where[n][1] for n in placed}) == 1


@settings(max_examples=80, deadline=None)
@given(
    st.lists(st.sampled_from((0, 0, 2, 4, 8)), min_size=16, max_size=16),
    st.integers(1, 9),
    st.sampled_from((None, "required-rack", "required-block", "preferred-rack", "preferred-block")),
)
def test_required_is_never_violated_and_preferred_takes_the_lowest_feasible_level(
    used: list[int], nodes: int, request: str | None
) -> None:
    engine, where = _cluster()
    names = sorted(where)
    _occupy(engine, dict(zip(names, used, strict=True)))
    free = {n: 8 - u for n, u in zip(names, used, strict=True)}
    topo = None
    if request is not None:
        kind, level = request.split("-")
        label = RACK if level == "rack" else BLOCK
        topo = TopologyRequest(**{kind: label})
    placed = _placed(engine, _gang(nodes, topo))

    def feasible(level: int) -> bool:
        domains: dict[str, int] = {}
        for n, f in free.items():
            domains[where[n][level]] = domains.get(where[n][level], 0) + (f == 8)
        return any(count >= nodes for count in domains.values())

    total = sum(f == 8 for f in free.values())
    if request is not None and request.startswith("required"):
        level = 1 if request.endswith("rack") else 0
        assert (placed is not None) == feasible(level)
        if placed is not None:
            assert len({where[n][level] for n in placed}) == 1
        return
    assert (placed is not None) == (total >= nodes)
    if placed is None:
        return
    start = 0 if request == "preferred-block" else 1
    lowest = next((lv for lv in range(start, -1, -1) if feasible(lv)), None)
    if lowest is not None:
        assert len({where[n][lowest] for n in placed}) == 1
        if lowest < start:
            assert len({where[n][start] for n in placed}) > 1


def _switches(nodes: int, switches: int, wait: float | None) -> Job:
    return _gang(nodes, TopologyRequest(switches=switches, wait_s=wait))


def test_switches_waits_for_one_leaf_domain_then_relaxes() -> None:
    engine, where = _cluster()
    # No rack has four free nodes: each has two busy.
    _occupy(engine, {n: 8 for n in where if n.endswith(("n0", "n1"))})
    job = _switches(4, 1, 100.0)
    assert _placed(engine, job) is None
    assert engine.next_wakeup() == 100.0
    assert [d for d in engine.cycle(99.0) if getattr(d, "job_id", None) == job.id] == []
    admitted = [d for d in engine.cycle(100.0) if isinstance(d, Admit)]
    assert [d.job_id for d in admitted] == [job.id]
    nodes = {n.node for p in admitted[0].pod_sets for n in p.nodes}
    assert len({where[n][1] for n in nodes}) == 2


def test_switches_two_leaf_domains_under_one_parent() -> None:
    engine, where = _cluster()
    _occupy(engine, {n: 8 for n in where if n.endswith(("n0", "n1"))})
    placed = _placed(engine, _switches(4, 2, None))
    assert placed is not None
    assert len({where[n][1] for n in placed}) == 2 and len({where[n][0] for n in placed}) == 1
    # Three racks' worth is more than two leaf domains hold: waits (no wait limit).
    assert _placed(engine, _switches(5, 2, None), now=2.0) is None
    assert engine.next_wakeup() is None


def test_switches_without_a_topology_is_no_constraint() -> None:
    engine = Engine(EngineConfig(preset="kueue"))
    engine.apply(Upsert(ResourceFlavor(name="f")))
    for i in range(3):
        engine.apply(Upsert(node(f"n{i}")))
    engine.apply(Upsert(cluster_queue("cq", {"f": 24})))
    placed = _placed(engine, _switches(3, 1, 1e9))
    assert placed == ["n0", "n1", "n2"]


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.tuples(st.integers(1, 6), st.sampled_from((1, 2, 8)), st.booleans()), max_size=25)
)
def test_what_fits_where_is_kept_up_to_date_as_jobs_come_and_go(
    steps: list[tuple[int, int, bool]],
) -> None:
    from phalanx.engine import Finish
    from phalanx.engine.placement.topology import _room

    engine, _ = _cluster()
    running: list[int] = []
    for t, (nodes, gpus, finish) in enumerate(steps, start=1):
        if finish and running:
            engine.apply(Finish(running.pop(0)))
        job = _gang(nodes, gpus=gpus, per_node=gpus == 8)
        engine.apply(Submit(job))
        running += [d.job_id for d in engine.cycle(float(t)) if isinstance(d, Admit)]
        index = engine.cache.flavor_nodes["f"]
        for domains in engine.assigner._domains.values():
            for key in list(domains.rooms):
                pod_set = key[0]  # type: ignore[index]
                fresh = _room(pod_set, index, domains, None, {}, None)
                # The kept counts, brought up to date from the changes since.
                kept = _room(pod_set, index, domains, None, {}, key)
                assert kept.room == fresh.room
                assert [{p: n for p, n in level.items() if n} for level in kept.sums] == [
                    {p: n for p, n in level.items() if n} for level in fresh.sums
                ]


def test_a_job_one_node_holds_goes_to_the_tightest_node_anywhere() -> None:
    engine, where = _cluster()
    busy = {n: 8 for n in where if n.startswith("b0r0")} | {"b0r0n0": 7, "b0r1n0": 6}
    busy |= {n: 4 for n in where if n.startswith("b1r0")}
    busy |= {n: 8 for n in where if n.startswith("b1r1")}
    _occupy(engine, busy)

    # The tightest rack that holds 2 GPUs is b1r0 (16 free); the tightest node is b0r1n0.
    def two_gpus(request: TopologyRequest | None = None) -> Job:
        pod_set = PodSet(count=1, requests={GPU: 2}, topology=request)
        return Job(id=next(_ids), cluster_queue="cq", pod_sets=[pod_set])

    assert _placed(engine, two_gpus()) == ["b0r1n0"]
    # Slurm's topology/tree: the tightest leaf switch that holds it, then its node.
    slurm, _ = _cluster(policy="slurm-tree")
    _occupy(slurm, busy)
    placed_slurm = _placed(slurm, two_gpus())
    assert placed_slurm is not None and where[placed_slurm[0]][1] == "b1r0"
    # Asked to keep within a rack, it goes to the tightest rack that holds it.
    placed = _placed(engine, two_gpus(TopologyRequest(required=RACK)))
    assert placed is not None and where[placed[0]][1] == "b1r0"


def test_an_unknown_topology_policy_is_refused() -> None:
    import pytest

    with pytest.raises(ValueError, match="topology_policy must be one of phalanx, slurm-tree"):
        EngineConfig(topology_policy="torus")


# --- Kueue's topology slices -----------------------------------------------------------


def _sliced(pods: int, size: int, level: str = RACK, gpus: int = 2, **whole: object) -> Job:
    request = TopologyRequest(slice_required=level, slice_size=size, **whole)  # type: ignore[arg-type]
    pod_set = PodSet(count=pods, requests={GPU: gpus}, topology=request)
    return Job(id=next(_ids), cluster_queue="cq", pod_sets=[pod_set])


def _per(engine: Engine, job: Job, where: dict[str, tuple[str, str]], k: int) -> dict[str, int]:
    """Tasks of ``job`` per domain (``k`` 0: block, 1: rack), or {} when pending."""
    engine.apply(Submit(job))
    counts: dict[str, int] = {}
    for d in engine.cycle(1.0):
        if isinstance(d, Admit) and d.job_id == job.id:
            for p in d.pod_sets:
                for n in p.nodes:
                    counts[where[n.node][k]] = counts.get(where[n.node][k], 0) + n.count
    return counts


def test_each_slice_stays_within_one_rack() -> None:
    engine, where = _cluster(per_rack=2)  # racks of 2 nodes x 8 GPUs: 8 tasks of 2 GPUs
    # Racks b0r0 and b0r1 have room for 6 tasks, b1r0 for 8, b1r1 for 2.
    _occupy(engine, {"b0r0n0": 4, "b0r1n1": 4, "b1r1n0": 8, "b1r1n1": 4})
    counts = _per(engine, _sliced(12, 4), where, 1)
    assert sum(counts.values()) == 12
    assert all(n % 4 == 0 for n in counts.values()), counts


def test_slices_that_fit_nowhere_wait_though_the_tasks_would_fit() -> None:
    engine, where = _cluster(per_rack=2)
    # Every rack has room for exactly 3 tasks of 2 GPUs: 12 tasks fit, no slice of 4 does.
    _occupy(
        engine,
        {f"b{b}r{r}n{n}": (8 if n else 2) for b in range(2) for r in range(2) for n in range(2)},
    )
    assert _per(engine, _sliced(4, 4), where, 1) == {}
    assert sum(_per(engine, _sliced(4, 2), where, 1).values()) == 4


def test_a_required_block_with_rack_slices() -> None:
    engine, where = _cluster(per_rack=2)
    _occupy(engine, {"b0r0n0": 8})
    job = _sliced(16, 8, required=BLOCK)
    blocks = _per(engine, job, where, 0)
    assert blocks == {"b1": 16}
    engine2, where2 = _cluster(per_rack=2)
    racks = _per(engine2, _sliced(16, 8, required=BLOCK), where2, 1)
    assert sorted(racks.values()) == [8, 8] and len({r[:2] for r in racks}) == 1


def test_a_slice_level_below_a_required_level_is_refused_at_placement() -> None:
    engine, where = _cluster(per_rack=2)
    # Slices by block inside a required rack: the slice level is above the pod set's.
    assert _per(engine, _sliced(4, 4, level=BLOCK, required=RACK), where, 1) == {}


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.integers(0, 8), min_size=8, max_size=8),
    st.sampled_from([1, 2, 4]),
    st.integers(1, 4),
    st.sampled_from(["", "required", "preferred"]),
)
def test_slices_are_never_split(used: list[int], size: int, slices: int, whole: str) -> None:
    engine, where = _cluster(per_rack=2)
    _occupy(engine, {name: gpus for name, gpus in zip(sorted(where), used, strict=True)})
    extra = {whole: BLOCK} if whole else {}
    counts = _per(engine, _sliced(size * slices, size, **extra), where, 1)
    assert all(n % size == 0 for n in counts.values()), counts
    if counts and whole == "required":
        assert len({rack[:2] for rack in counts}) == 1


@settings(max_examples=80, deadline=None)
@given(
    st.lists(st.sampled_from((0, 0, 2, 4, 8)), min_size=16, max_size=16),
    st.integers(1, 9),
    st.sampled_from((None, "required-rack", "required-block", "preferred-rack", "preferred-block")),
    st.integers(0, 15),
)
def test_held_nodes_are_taken_first_within_the_level_the_request_picks(
    used: list[int], nodes: int, request: str | None, pick: int
) -> None:
    """An expedited job's held node (placement's ``prefer``): the same jobs fit, the
    request's level is kept, and the held node is placed on whenever a domain of that
    level holds both the gang and it."""
    engine, where = _cluster()
    names = sorted(where)
    _occupy(engine, dict(zip(names, used, strict=True)))
    free = {n: 8 - u for n, u in zip(names, used, strict=True)}
    held = names[pick]
    topo = None
    if request is not None:
        kind, level = request.split("-")
        topo = TopologyRequest(**{kind: RACK if level == "rack" else BLOCK})
    job = _gang(nodes, topo)
    shape, info = engine.shapes.job(job), engine.cache.cluster_queues["cq"]
    plain = engine.assigner.assign(shape, info)
    a = engine.assigner.assign(shape, info, prefer=frozenset({engine.cache.nodes[held]}))
    assert a.ok == plain.ok
    if not a.ok:
        return
    placed = sorted(slot.name for p in a.pod_sets for slot, _ in p.nodes)

    def fitting(level: int) -> set[str]:
        domains: dict[str, int] = {}
        for n, f in free.items():
            domains[where[n][level]] = domains.get(where[n][level], 0) + (f == 8)
        return {d for d, count in domains.items() if count >= nodes}

    if request is not None and request.startswith("required"):
        level: int | None = 1 if request.endswith("rack") else 0
    else:
        start = 0 if request == "preferred-block" else 1
        level = next((lv for lv in range(start, -1, -1) if fitting(lv)), None)
    if level is not None:
        assert len({where[n][level] for n in placed}) == 1
        if free[held] == 8 and where[held][level] in fitting(level):
            assert held in placed, (placed, held)
    elif free[held] == 8:
        assert held in placed, (placed, held)
