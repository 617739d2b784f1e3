"""Gang placement (BestFit): every task of every pod set on concrete nodes, or nothing.

Covers whole-node tasks, ``tasksPerNode`` spreading, ``exclusive`` nodes,
packing small tasks on the fewest nodes with the tightest fit, the
all-or-nothing rule (a gang that does not fit reserves nothing and reports
NoNodeFit with ``maxTasks``), unschedulable (drain / down) nodes, node
selectors on keys the flavor does not define, node taints, CPU and memory as
constraints next to GPUs, and jobs of several pod sets.
"""

from __future__ import annotations

from typing import Any

import pytest

from phalanx.engine import Admit, Engine, Finish, ReasonCode, Submit, Upsert
from phalanx.model import CPU, MEMORY, NodeState, PodSet
from tests.engine.helpers import (
    GPU,
    admits,
    admitted_ids,
    cluster_queue,
    cq_groups,
    engine_with,
    flavor,
    gang,
    job,
    make_node,
    node,
    node_gpus_used,
    pendings,
    quota,
    quota_usage,
    step,
    taint,
    toleration,
)

BIG = 1024  # quota that never binds


def _placement(adm: Admit, pod_set: int = 0) -> dict[str, int]:
    return {n.node: n.count for n in adm.pod_sets[pod_set].nodes}


def _engine(*nodes: Any, cq: Any = None) -> Engine:
    return engine_with(flavor("f"), *nodes, cq or cluster_queue("cq", {"f": BIG}))


# --------------------------------------------------------------------------- shapes


@pytest.mark.parametrize(
    ("gpus", "count", "podset", "expected"),
    [
        pytest.param(8, 2, {}, [1, 1], id="two-whole-node-tasks"),
        pytest.param(8, 4, {}, [1, 1, 1, 1], id="four-whole-node-tasks"),
        pytest.param(1, 4, {"tasks_per_node": 1}, [1, 1, 1, 1], id="tasks-per-node-1"),
        pytest.param(2, 4, {"tasks_per_node": 2}, [2, 2], id="tasks-per-node-2"),
        pytest.param(1, 6, {"tasks_per_node": 3}, [3, 3], id="tasks-per-node-3"),
        pytest.param(1, 2, {"exclusive": True}, [1, 1], id="exclusive"),
        pytest.param(1, 16, {}, [8, 8], id="small-tasks-packed"),
        pytest.param(1, 4, {}, [4], id="small-tasks-one-node"),
        pytest.param(4, 3, {}, [2, 1], id="half-node-tasks"),
    ],
)
def test_task_distribution_on_idle_nodes(
    gpus: int, count: int, podset: dict[str, Any], expected: list[int]
) -> None:
    engine = _engine(*[node(f"n{i}") for i in range(4)])
    out = step(engine, 0.0, Submit(job("cq", gpus=gpus, count=count, id=1, **podset)))
    placed = _placement(admits(out)[1])
    assert sorted(placed.values(), reverse=True) == expected
    assert sum(placed.values()) == count
    # What the nodes hold matches what was decided.
    used = node_gpus_used(engine)
    for name, tasks in placed.items():
        expect = 8 if podset.get("exclusive") else tasks * gpus
        assert used[name] == expect


def test_tasks_per_node_spreads_even_when_one_node_could_hold_all() -> None:
    engine = _engine(*[node(f"n{i}") for i in range(3)])
    out = step(engine, 0.0, Submit(job("cq", gpus=1, count=3, id=1, tasks_per_node=1)))
    assert sorted(_placement(admits(out)[1])) == ["n0", "n1", "n2"]


def test_tasks_per_node_needs_as_many_nodes_as_groups() -> None:
    engine = _engine(*[node(f"n{i}") for i in range(3)])
    out = step(engine, 0.0, Submit(job("cq", gpus=1, count=4, id=1, tasks_per_node=1)))
    reason = pendings(out)[1]
    assert reason.code is ReasonCode.NO_NODE_FIT
    assert reason.details["maxTasks"] == 3


def test_exclusive_takes_idle_nodes_only() -> None:
    engine = _engine(*[node(f"n{i}") for i in range(3)])
    first = step(engine, 0.0, Submit(job("cq", gpus=1, id=1)))
    busy = admits(first)[1].nodes[0]
    out = step(engine, 1.0, Submit(job("cq", gpus=1, count=2, id=2, exclusive=True)))
    placed = _placement(admits(out)[2])
    assert busy not in placed and len(placed) == 2
    for name in placed:
        assert engine.node_state(name) is NodeState.ALLOCATED
    assert engine.node_state(busy) is NodeState.MIXED
    # No idle node is left: another exclusive job waits, a small job shares the busy node.
    out = step(engine, 2.0, Submit(job("cq", gpus=1, id=3, exclusive=True)))
    assert pendings(out)[3].code is ReasonCode.NO_NODE_FIT
    out = step(engine, 3.0, Submit(job("cq", gpus=1, id=4)))
    assert admits(out)[4].nodes == [busy]


def test_exclusive_node_takes_no_other_job() -> None:
    engine = _engine(node("n0"))
    assert admitted_ids(step(engine, 0.0, Submit(job("cq", gpus=1, id=1, exclusive=True)))) == [1]
    out = step(engine, 1.0, Submit(job("cq", gpus=1, id=2)))
    assert pendings(out)[2].code is ReasonCode.NO_NODE_FIT
    assert admitted_ids(step(engine, 2.0, Finish(1))) == [2]


# --------------------------------------------------------------------------- best fit


@pytest.mark.parametrize(
    ("gpus", "count", "expected"),
    [
        pytest.param(1, 1, {"free2": 1}, id="1-gpu-to-fullest-node"),
        pytest.param(2, 1, {"free2": 1}, id="exact-fit"),
        pytest.param(3, 1, {"free5": 1}, id="next-tightest"),
        pytest.param(6, 1, {"free8": 1}, id="only-the-idle-one"),
        pytest.param(1, 5, {"free5": 5}, id="gang-on-tightest-single-node"),
        pytest.param(1, 10, {"free8": 8, "free2": 2}, id="largest-then-tightest-rest"),
        pytest.param(1, 15, {"free8": 8, "free5": 5, "free2": 2}, id="everything"),
    ],
)
def test_tightest_fit(gpus: int, count: int, expected: dict[str, int]) -> None:
    # Nodes with 2, 5 and 8 GPUs free (6 and 3 of 8 already used).
    engine = _engine(
        make_node("free2", labels={"h": "free2"}),
        make_node("free5", labels={"h": "free5"}),
        make_node("free8", labels={"h": "free8"}),
    )
    step(
        engine,
        0.0,
        Submit(job("cq", gpus=6, id=101, node_selector={"h": "free2"})),
        Submit(job("cq", gpus=3, id=102, node_selector={"h": "free5"})),
    )
    assert node_gpus_used(engine) == {"free2": 6, "free5": 3, "free8": 0}
    out = step(engine, 1.0, Submit(job("cq", gpus=gpus, count=count, id=1)))
    assert _placement(admits(out)[1]) == expected


def test_best_fit_keeps_large_nodes_for_large_jobs() -> None:
    engine = _engine(node("small", gpus=2), node("large", gpus=8))
    out = step(
        engine,
        0.0,
        Submit(job("cq", gpus=2, id=1, submit=0.0)),
        Submit(job("cq", gpus=8, id=2, submit=1.0)),
    )
    assert admits(out)[1].nodes == ["small"]
    assert admits(out)[2].nodes == ["large"]


# --------------------------------------------------------------------------- all or nothing


def test_gang_larger_than_free_nodes_reserves_nothing() -> None:
    engine = _engine(*[node(f"n{i}") for i in range(4)])
    out = step(engine, 0.0, Submit(job("cq", gpus=8, count=5, id=1, tasks_per_node=1)))
    assert admitted_ids(out) == []
    reason = pendings(out)[1]
    assert reason.code is ReasonCode.NO_NODE_FIT
    assert reason.details["maxTasks"] == 4
    assert "5 tasks" in reason.message and "at most 4" in reason.message
    assert set(node_gpus_used(engine).values()) == {0}
    assert {engine.node_state(f"n{i}") for i in range(4)} == {NodeState.IDLE}
    assert all(not u for u in quota_usage(engine).values())
    # Smaller jobs still use those nodes.
    out = step(engine, 1.0, Submit(job("cq", gpus=8, count=4, id=2)))
    assert admitted_ids(out) == [2]
    # A fifth node appears: once job 2 ends, the gang fits.
    out = step(engine, 2.0, Upsert(node("n4")), Finish(2))
    assert sorted(_placement(admits(out)[1])) == ["n0", "n1", "n2", "n3", "n4"]


def test_partially_used_nodes_limit_the_gang() -> None:
    engine = _engine(*[node(f"n{i}") for i in range(4)])
    step(engine, 0.0, Submit(job("cq", gpus=1, count=2, id=1, tasks_per_node=1)))
    before = node_gpus_used(engine)
    out = step(engine, 1.0, Submit(job("cq", gpus=8, count=3, id=2)))
    reason = pendings(out)[2]
    assert reason.code is ReasonCode.NO_NODE_FIT
    assert reason.details["maxTasks"] == 2
    assert node_gpus_used(engine) == before
    # The blocked gang is woken by the release of node capacity.
    placed = _placement(admits(step(engine, 2.0, Finish(1)))[2])
    assert len(placed) == 3 and set(placed.values()) == {1}


@pytest.mark.parametrize("state", ["drain", "down"])
def test_unschedulable_nodes_are_never_used(state: str) -> None:
    engine = _engine(make_node("bad", state=state), node("good", gpus=4))
    out = step(
        engine,
        0.0,
        Submit(job("cq", gpus=8, id=1)),
        Submit(job("cq", gpus=1, count=4, id=2)),
    )
    assert pendings(out)[1].code is ReasonCode.NO_NODE_FIT
    assert _placement(admits(out)[2]) == {"good": 4}
    assert node_gpus_used(engine)["bad"] == 0
    assert engine.node_state("bad") is NodeState(state)
    # Back up: job 1 lands on it.
    out = step(engine, 1.0, Upsert(node("bad")))
    assert admits(out)[1].nodes == ["bad"]


def test_draining_a_busy_node_keeps_its_job_but_takes_no_more() -> None:
    engine = _engine(node("n0"), node("n1"))
    out = step(engine, 0.0, Submit(job("cq", gpus=2, id=1)))
    busy = admits(out)[1].nodes[0]
    other = "n1" if busy == "n0" else "n0"
    engine.apply(Upsert(make_node(busy, state="drain")))
    out = step(engine, 1.0, Submit(job("cq", gpus=2, count=2, id=2)))
    assert _placement(admits(out)[2]) == {other: 2}
    # Drained while its job runs: draining (sinfo's drng), drained once it is empty.
    assert engine.node_state(busy) is NodeState.DRAINING
    # Capacity of the drained node released by job 1 is not reused either.
    out = step(engine, 2.0, Finish(1), Submit(job("cq", gpus=8, id=3)))
    assert pendings(out)[3].code is ReasonCode.NO_NODE_FIT
    assert engine.node_state(busy) is NodeState.DRAIN


# --------------------------------------------------------------------------- constraints


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        pytest.param({"zone": "b"}, ["zb0", "zb1"], id="matching-nodes"),
        pytest.param({"zone": "a", "rack": "r1"}, None, id="no-node-has-both"),
        pytest.param({"zone": "c"}, None, id="no-such-zone"),
    ],
)
def test_selector_key_unknown_to_flavor_restricts_nodes(
    selector: dict[str, str], expected: list[str] | None
) -> None:
    engine = _engine(
        make_node("za0", labels={"zone": "a"}),
        make_node("zb0", labels={"zone": "b"}),
        make_node("zb1", labels={"zone": "b", "rack": "r1"}),
    )
    out = step(engine, 0.0, Submit(job("cq", gpus=8, count=2, id=1, node_selector=selector)))
    if expected is None:
        reason = pendings(out)[1]
        # The flavor matches (it defines no such key); its nodes don't.
        assert reason.code is ReasonCode.NO_NODE_FIT
        assert reason.details["flavor"] == "f"
    else:
        assert sorted(_placement(admits(out)[1])) == expected


def test_selector_restricts_nodes_within_a_labelled_flavor() -> None:
    a100 = flavor("a100", gpu="a100")
    engine = engine_with(
        a100,
        make_node("a-z1", labels={"gpu": "a100", "zone": "z1"}),
        make_node("a-z2", labels={"gpu": "a100", "zone": "z2"}),
        cluster_queue("cq", {"a100": BIG}),
    )
    out = step(
        engine, 0.0, Submit(job("cq", gpus=8, id=1, node_selector={"gpu": "a100", "zone": "z2"}))
    )
    assert admits(out)[1].nodes == ["a-z2"]


@pytest.mark.parametrize(
    ("tolerations", "expected"),
    [
        pytest.param([], ["clean"], id="untolerated-node-avoided"),
        pytest.param([toleration("gpu-maint")], ["clean", "tainted"], id="tolerated"),
    ],
)
def test_node_taints_respected(tolerations: list[Any], expected: list[str]) -> None:
    engine = _engine(
        make_node("tainted", taints=(taint("gpu-maint", "yes"),)),
        node("clean"),
    )
    out = step(engine, 0.0, Submit(job("cq", gpus=8, count=2, id=1, tolerations=tolerations)))
    if expected == ["clean"]:
        reason = pendings(out)[1]
        assert reason.code is ReasonCode.NO_NODE_FIT
        assert reason.details["maxTasks"] == 1
        out = step(engine, 1.0, Submit(job("cq", gpus=8, id=2)))
        assert admits(out)[2].nodes == ["clean"]
    else:
        assert sorted(_placement(admits(out)[1])) == expected


@pytest.mark.parametrize(
    ("requests", "expected"),
    [
        pytest.param({CPU: "8"}, [2, 2], id="cpu-two-per-node"),
        pytest.param({CPU: "16"}, [1, 1, 1, 1], id="cpu-one-per-node"),
        pytest.param({MEMORY: "100Gi"}, [2, 2], id="memory-two-per-node"),
        pytest.param({CPU: "4", MEMORY: "64Gi"}, [3, 1], id="memory-binds-before-cpu"),
    ],
)
def test_cpu_and_memory_constrain_placement(requests: dict[str, str], expected: list[int]) -> None:
    cq = cluster_queue("cq", {"f": [quota(GPU, BIG), quota(CPU, BIG), quota(MEMORY, "100Ti")]})
    nodes = [node(f"n{i}", gpus=8, cpu="16", memory="200Gi") for i in range(4)]
    engine = _engine(*nodes, cq=cq)
    out = step(engine, 0.0, Submit(job("cq", gpus=1, count=4, id=1, requests=requests)))
    assert sorted(_placement(admits(out)[1]).values(), reverse=True) == expected


def test_cpu_exhausted_node_rejects_gpu_task() -> None:
    cq = cluster_queue("cq", {"f": [quota(GPU, BIG), quota(CPU, BIG)]})
    engine = _engine(node("n0", gpus=8, cpu="16"), cq=cq)
    assert admitted_ids(step(engine, 0.0, Submit(job("cq", gpus=1, id=1, requests={CPU: "16"}))))
    out = step(engine, 1.0, Submit(job("cq", gpus=1, id=2, requests={CPU: "1"})))
    assert pendings(out)[2].code is ReasonCode.NO_NODE_FIT


# --------------------------------------------------------------------------- pod sets


def _mpi_cq() -> Any:
    return cq_groups(
        "cq",
        [([CPU, MEMORY, GPU], {"f": [quota(CPU, BIG), quota(MEMORY, "100Ti"), quota(GPU, BIG)]})],
    )


def _mpi_job(job_id: int, workers: int = 2) -> Any:
    return gang(
        "cq",
        job_id,
        [
            PodSet(name="launcher", count=1, requests={CPU: "2", MEMORY: "4Gi"}),
            PodSet(name="worker", count=workers, requests={GPU: 8, CPU: "16"}),
        ],
    )


def test_launcher_and_workers_placed_together() -> None:
    engine = _engine(node("g0"), node("g1"), node("c0", gpus=0), cq=_mpi_cq())
    out = step(engine, 0.0, Submit(_mpi_job(1)))
    adm = admits(out)[1]
    assert [p.name for p in adm.pod_sets] == ["launcher", "worker"]
    assert dict(adm.pod_sets[0].flavors) == {CPU: "f", MEMORY: "f"}
    assert dict(adm.pod_sets[1].flavors) == {CPU: "f", GPU: "f"}
    # The launcher takes the CPU-only node and leaves the GPU nodes to the workers.
    assert _placement(adm, 0) == {"c0": 1}
    assert _placement(adm, 1) == {"g0": 1, "g1": 1}
    assert quota_usage(engine)["cq:cq"] == {
        ("f", CPU): 2000 + 2 * 16000,
        ("f", MEMORY): 4 * 2**30,
        ("f", GPU): 16,
    }


def test_pod_sets_share_node_capacity() -> None:
    """The launcher's CPU on a node counts when the workers are placed on it."""
    engine = _engine(node("g0", cpu="20"), node("g1", cpu="20"), cq=_mpi_cq())
    out = step(
        engine,
        0.0,
        Submit(
            gang(
                "cq",
                1,
                [
                    PodSet(name="launcher", count=1, requests={CPU: "8"}),
                    PodSet(name="worker", count=2, requests={GPU: 8, CPU: "16"}),
                ],
            )
        ),
    )
    # Launcher + worker need 24 cores; each node has 20: no placement exists.
    reason = pendings(out)[1]
    assert reason.code is ReasonCode.NO_NODE_FIT
    assert reason.details["podSet"] == "worker"
    assert node_gpus_used(engine) == {"g0": 0, "g1": 0}
    assert all(not slot.used for slot in engine.cache.nodes.values())


def test_multi_pod_set_gang_is_all_or_nothing() -> None:
    engine = _engine(node("g0"), node("g1"), node("c0", gpus=0), cq=_mpi_cq())
    out = step(engine, 0.0, Submit(_mpi_job(1, workers=3)))
    reason = pendings(out)[1]
    assert reason.code is ReasonCode.NO_NODE_FIT
    assert reason.details["podSet"] == "worker"
    assert reason.details["maxTasks"] == 2
    # The launcher, which fits on its own, was not placed either.
    assert all(not slot.used for slot in engine.cache.nodes.values())
    assert all(not u for u in quota_usage(engine).values())
    out = step(engine, 1.0, Upsert(node("g2")))
    adm = admits(out)[1]
    assert sum(_placement(adm, 1).values()) == 3


def test_node_names_and_exclusions_limit_where_tasks_go() -> None:
    from tests.engine.helpers import admits, cluster_queue, engine_with, flavor, job, node

    engine = engine_with(
        flavor("f"), *(node(f"n{i}") for i in range(4)), cluster_queue("cq", {"f": 32})
    )
    engine.apply(Submit(job("cq", gpus=8, count=2, id=1, node_names=["n2", "n3"])))
    engine.apply(Submit(job("cq", gpus=8, count=1, id=2, exclude_nodes=["n0"])))
    engine.apply(Submit(job("cq", gpus=1, count=1, id=3, node_names=["n2"])))
    out = admits(engine.cycle(0.0))
    assert sorted(n.node for n in out[1].pod_sets[0].nodes) == ["n2", "n3"]
    assert [n.node for n in out[2].pod_sets[0].nodes] == ["n1"]
    assert 3 not in out  # n2 is full: the job waits rather than going elsewhere
