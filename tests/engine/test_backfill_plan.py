"""The backfill planner against brute force: the earliest time a pod set's units are
free, over random node timelines (jobs of every size, CPU sometimes the tighter
resource, some without a time limit)."""

from __future__ import annotations

import math

from hypothesis import example, given, settings
from hypothesis import strategies as st

from phalanx.engine import Engine, EngineConfig, Submit, Upsert
from phalanx.engine.backfill.plans import plan_nodes
from phalanx.engine.config import BackfillConfig
from phalanx.engine.queueing.shapes import ShapeInterner
from phalanx.model import Job, PodSet, parse_quantity
from tests.engine.helpers import GPU, cluster_queue, flavor, node, quota

_NOW = 50.0


@st.composite
def _timeline(draw: st.DrawFn) -> tuple[int, list[tuple[int, int, float | None]]]:
    """Nodes, and running jobs as (GPUs, CPUs, time limit) on one node each."""
    nodes = draw(st.integers(1, 5))
    jobs = draw(
        st.lists(
            st.tuples(
                st.sampled_from((0, 1, 2, 4, 8)),
                st.sampled_from((1, 8, 16, 40)),
                st.sampled_from((10.0, 60.0, 90.0, 200.0, None)),
            ),
            max_size=4 * nodes,
        )
    )
    return nodes, jobs


def _engine(nodes: int, jobs: list[tuple[int, int, float | None]]) -> Engine:
    engine = Engine(EngineConfig(preset="kueue", backfill=BackfillConfig(interval_s=1e9)))
    engine.apply(Upsert(flavor("f")))
    for i in range(nodes):
        engine.apply(Upsert(node(f"n{i}")))
    engine.apply(
        Upsert(cluster_queue("cq", {"f": [quota(GPU, 8 * nodes), quota("cpu", 96 * nodes)]}))
    )
    for i, (gpus, cpus, limit) in enumerate(jobs):
        requests = {"cpu": cpus, **({GPU: gpus} if gpus else {})}
        pod_set = PodSet(count=1, requests=requests)
        engine.apply(
            Submit(Job(id=i + 1, cluster_queue="cq", time_limit=limit, pod_sets=[pod_set]))
        )
        engine.cycle(0.0)
    # A job that did not fit was reserved for at once: the plan here is over the running
    # jobs alone, as the brute force's.
    engine.replan()
    return engine


def _brute_force(engine: Engine, unit: dict[str, int], need: int, one_per_node: bool) -> float:
    """The earliest of now and the jobs' ends at which ``need`` units fit, trying
    every node with what is still running then."""
    running = [r for r in engine.jobs.values() if r.admission is not None]
    ends = {max(_NOW, r.job.time_limit) for r in running if r.job.time_limit is not None}
    for t in sorted({_NOW, *ends}):
        total = 0
        for slot in engine.cache.nodes.values():
            free = dict(slot.capacity)
            for rec in running:
                if rec.job.time_limit is not None and rec.job.time_limit <= t:
                    continue
                for on, amounts, _, _ in rec.admission.allocations:  # type: ignore[union-attr]
                    if on is slot:
                        for resource, amount in amounts.items():
                            free[resource] -= amount
            fits = min(free.get(r, 0) // a for r, a in unit.items())
            total += min(fits, 1) if one_per_node else fits
        if total >= need:
            return t
    return math.inf


@settings(max_examples=150, deadline=None)
@given(
    _timeline(),
    st.integers(1, 6),
    st.sampled_from((1, 2, 4, 8)),
    st.sampled_from((1, 8, 48, 90)),
    st.booleans(),
)
# Found by this property: a job without a time limit started on a node after the
# whole-node order was made, which still said the node's GPUs were free at 10.
@example(
    (3, [(1, 1, 10.0), (2, 1, 10.0), (4, 1, 10.0), (2, 1, 10.0), (8, 1, 10.0), (1, 1, None)]),
    3,
    8,
    1,
    False,
)
def test_the_plan_is_the_earliest_time_the_units_fit(
    timeline: tuple[int, list[tuple[int, int, float | None]]],
    count: int,
    gpus: int,
    cpus: int,
    per_node: bool,
) -> None:
    nodes, jobs = timeline
    engine = _engine(nodes, jobs)
    engine.now = _NOW
    pod_set = ShapeInterner(with_time_limits=True).pod_set(
        PodSet(
            count=count, tasks_per_node=1 if per_node else None, requests={GPU: gpus, "cpu": cpus}
        )
    )
    found = plan_nodes(
        pod_set,
        "f",
        engine.cache,
        engine.ends.timeline_now(),
        _NOW,
        lambda slot: False,
        set(),
        None,
    )
    unit = {GPU: gpus, "cpu": parse_quantity(cpus, "cpu")}
    expected = _brute_force(engine, unit, count, per_node)
    if expected == math.inf:
        assert found is None
    else:
        assert found is not None
        assert found[0] == expected
        assert len(set(found[1])) == len(found[1]) <= count
