"""GPU sharing in the engine: shares of one device, whole GPUs on untouched devices only,
device indices in the decisions, GPU models, and the accounting never over 1000 per device."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from phalanx.engine import Admit, Cancel, Engine, EngineConfig, Finish, Submit, Upsert
from phalanx.engine.snapshot import export_state, load_state
from phalanx.model import GPU_MILLI, GPU_PRODUCT_LABEL, Job, Node, PodSet
from tests.engine.helpers import (
    GPU,
    admits,
    cluster_queue,
    decisions_json,
    engine_with,
    flavor,
    pendings,
    quota,
    step,
)

SHARED = (GPU, GPU_MILLI, "cpu")


def _cq(gpus: int = 64, milli: int = 64_000) -> Any:
    return cluster_queue(
        "cq", {"f": [quota(GPU, gpus), quota(GPU_MILLI, milli), quota("cpu", 1000)]}
    )


def _node(name: str, gpus: int, cpu: str = "64", **labels: str) -> Node:
    return Node(name=name, labels=labels, capacity={GPU: gpus, "cpu": cpu, "memory": "256Gi"})


def _job(id: int, *, gpus: int | str = 0, count: int = 1, **pod_set: Any) -> Job:
    requests: dict[str, Any] = {"cpu": "1", **pod_set.pop("requests", {})}
    if gpus:
        requests[GPU] = gpus
    return Job(
        id=id,
        cluster_queue="cq",
        submit_time=float(id),
        pod_sets=[PodSet(count=count, requests=requests, **pod_set)],
    )


def _engine(*nodes: Node, placement: str = "phalanx") -> Engine:
    engine = Engine(EngineConfig(placement=placement))
    for obj in (flavor("f"), *nodes, _cq()):
        engine.apply(Upsert(obj))
    return engine


def _gpus(adm: Admit) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for pod_set in adm.pod_sets:
        for n in pod_set.nodes:
            out.setdefault(n.node, []).extend(n.gpus)
    return out


def test_shares_fill_one_device_and_wait_for_room() -> None:
    engine = _engine(_node("n0", 1))
    out = step(engine, 1.0, *(Submit(_job(i, gpus="0.5")) for i in (1, 2, 3)))
    assert sorted(admits(out)) == [1, 2]
    assert {i: _gpus(a) for i, a in admits(out).items()} == {1: {"n0": [0]}, 2: {"n0": [0]}}
    assert 3 in pendings(out)
    slot = engine.cache.nodes["n0"]
    assert slot.gpu_used == [1000]
    assert slot.used[GPU] == 1 and slot.used[GPU_MILLI] == 1000
    out = step(engine, 2.0, Finish(1))
    assert list(admits(out)) == [3]


def test_a_device_with_shares_is_not_given_whole() -> None:
    engine = _engine(_node("n0", 2))
    out = step(engine, 1.0, Submit(_job(1, requests={GPU_MILLI: 300})), Submit(_job(2, gpus=2)))
    assert list(admits(out)) == [1] and 2 in pendings(out)
    out = step(engine, 2.0, Submit(_job(3, gpus=1)))
    # The whole GPU gets the untouched device, the share keeps its own.
    assert _gpus(admits(out)[3]) == {"n0": [1]}
    assert engine.cache.nodes["n0"].gpu_used == [300, 1000]
    out = step(engine, 3.0, Finish(1))
    assert admits(out) == {}  # job 2 still needs both devices: device 1 is taken
    out = step(engine, 4.0, Finish(3))
    assert _gpus(admits(out)[2]) == {"n0": [0, 1]}


def test_whole_gpu_tasks_get_the_lowest_free_devices() -> None:
    engine = _engine(_node("n0", 8))
    out = step(engine, 1.0, Submit(_job(1, gpus=2, count=2, tasks_per_node=2)))
    assert _gpus(admits(out)[1]) == {"n0": [0, 1, 2, 3]}
    out = step(engine, 2.0, Submit(_job(2, gpus=3)))
    assert _gpus(admits(out)[2]) == {"n0": [4, 5, 6]}


def test_shares_of_one_job_may_share_a_device() -> None:
    engine = _engine(_node("n0", 1))
    out = step(engine, 1.0, Submit(_job(1, gpus="0.25", count=4)))
    assert _gpus(admits(out)[1]) == {"n0": [0, 0, 0, 0]}
    assert engine.cache.nodes["n0"].gpu_used == [1000]


def test_two_pod_sets_sharing_a_node_do_not_overcommit_a_device() -> None:
    engine = _engine(_node("n0", 2))
    job = Job(
        id=1,
        cluster_queue="cq",
        pod_sets=[
            PodSet(name="a", requests={GPU_MILLI: 700, "cpu": "1"}),
            PodSet(name="b", count=2, requests={GPU_MILLI: 600, "cpu": "1"}),
        ],
    )
    out = step(engine, 1.0, Submit(job))
    # Three shares of 700, 600, 600 need three devices; the node has two.
    assert 1 in pendings(out)
    engine.apply(Upsert(_node("n1", 2)))
    out = step(engine, 2.0)
    placed = {p.name: [(n.node, n.gpus) for n in p.nodes] for p in admits(out)[1].pod_sets}
    for slot in engine.cache.nodes.values():
        assert all(u <= 1000 for u in slot.gpu_used)
    assert sum(len(g) for nodes in placed.values() for _, g in nodes) == 3


def test_gpu_models_select_nodes_by_affinity() -> None:
    engine = _engine(
        _node("t4", 2, **{GPU_PRODUCT_LABEL: "T4"}),
        _node("v100", 8, **{GPU_PRODUCT_LABEL: "V100M32"}),
    )
    affinity = [
        {
            "matchExpressions": [
                {"key": GPU_PRODUCT_LABEL, "operator": "In", "values": ["V100M16", "V100M32"]}
            ]
        }
    ]
    out = step(engine, 1.0, Submit(_job(1, gpus="0.5", node_affinity=affinity)))
    assert _gpus(admits(out)[1]) == {"v100": [0]}
    out = step(engine, 2.0, Submit(_job(2, gpus=4, node_selector={GPU_PRODUCT_LABEL: "T4"})))
    assert 2 in pendings(out)


def test_shares_need_quota_for_gpu_milli() -> None:
    engine = engine_with(
        flavor("f"),
        _node("n0", 1),
        cluster_queue("cq", {"f": [quota(GPU, 8), quota("cpu", 64)]}),
        preset="phalanx",
    )
    out = step(engine, 1.0, Submit(_job(1, gpus="0.5")))
    reason = pendings(out)[1]
    assert GPU_MILLI in reason.message


def test_quota_counts_shares_in_thousandths() -> None:
    engine = engine_with(
        flavor("f"),
        _node("n0", 4),
        cluster_queue("cq", {"f": [quota(GPU, 8), quota(GPU_MILLI, 1000), quota("cpu", 64)]}),
        preset="phalanx",
    )
    out = step(engine, 1.0, *(Submit(_job(i, gpus="0.4")) for i in (1, 2, 3)))
    assert sorted(admits(out)) == [1, 2]  # 800 of 1000 thousandths; a third would be 1200
    assert 3 in pendings(out)


@pytest.mark.parametrize("placement", ["phalanx", "tight", "fgd", "best-fit", "random"])
def test_every_policy_packs_shares_within_devices(placement: str) -> None:
    engine = _engine(_node("a", 2), _node("b", 4), placement=placement)
    out = step(engine, 1.0, *(Submit(_job(i, gpus="0.3")) for i in range(1, 21)))
    assert len(admits(out)) == 18  # 3 shares of 300 fit a device, 6 devices
    for slot in engine.cache.nodes.values():
        assert all(0 <= u <= 1000 for u in slot.gpu_used)


def test_snapshot_keeps_devices_and_continues_identically() -> None:
    engine = _engine(_node("a", 2), _node("b", 2))
    step(engine, 1.0, *(Submit(_job(i, gpus=g)) for i, g in ((1, "0.6"), (2, "0.3"), (3, 1))))
    copy = load_state(export_state(engine))
    assert {n: s.gpu_used for n, s in copy.cache.nodes.items()} == {
        n: s.gpu_used for n, s in engine.cache.nodes.items()
    }
    events = [Submit(_job(4, gpus="0.3")), Submit(_job(5, gpus=1)), Finish(1)]
    assert decisions_json(step(copy, 2.0, *events)) == decisions_json(step(engine, 2.0, *events))


# --- the accounting, property-tested ----------------------------------------------------

Op = tuple[str, int, int | str]


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[list[int], list[Op]]:
    sizes = draw(st.lists(st.sampled_from([1, 2, 4, 8]), min_size=1, max_size=4))
    ops: list[Op] = []
    for i in range(1, draw(st.integers(5, 40))):
        kind = draw(st.sampled_from(["whole", "share", "share", "finish", "cancel"]))
        if kind == "whole":
            ops.append(("submit", i, draw(st.sampled_from([1, 2, 4]))))
        elif kind == "share":
            ops.append(("submit", i, str(draw(st.integers(1, 1000)) / 1000)))
        else:
            ops.append((kind, draw(st.integers(1, i)), 0))
    return sizes, ops


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(), st.sampled_from(["phalanx", "tight", "random", "fgd"]))
def test_device_accounting_never_exceeds_a_device(
    scenario: tuple[list[int], list[Op]], placement: str
) -> None:
    sizes, ops = scenario
    engine = _engine(*(_node(f"n{i}", g) for i, g in enumerate(sizes)), placement=placement)
    holding: dict[int, dict[str, list[tuple[int, int]]]] = {}
    submitted: dict[int, Job] = {}
    now = 0.0
    for op, ident, value in ops:
        now += 1
        if op == "submit":
            submitted[ident] = job = _job(ident, gpus=value)
            engine.apply(Submit(job))
        elif op == "finish" and ident in holding:
            engine.apply(Finish(ident))
            del holding[ident]
        elif op == "cancel" and ident in submitted and ident not in holding:
            engine.apply(Cancel(ident))
        for adm in admits(engine.cycle(now)).values():
            share = submitted[adm.job_id].pod_sets[0].requests.get(GPU_MILLI, 0)
            holding[adm.job_id] = {
                n: [(g, share or 1000) for g in gs] for n, gs in _gpus(adm).items()
            }
        # Recompute every device from the decisions and compare with the engine's.
        for name, slot in engine.cache.nodes.items():
            expect = [0] * len(slot.gpu_used)
            owners: dict[int, set[int]] = {}
            for job_id, nodes in holding.items():
                for device, milli in nodes.get(name, []):
                    expect[device] += milli
                    owners.setdefault(device, set()).add(job_id)
            assert slot.gpu_used == expect
            assert all(0 <= u <= 1000 for u in slot.gpu_used)
            assert slot.used.get(GPU, 0) == sum(1 for u in expect if u)
            assert slot.used.get(GPU_MILLI, 0) == sum(expect)
            for device, jobs in owners.items():
                whole = [j for j in jobs if GPU in submitted[j].pod_sets[0].requests]
                assert not whole or len(jobs) == 1, f"whole GPU {device} on {name} shared"
