"""The scored placement chain: the scorers' formulas (the FGD authors' definitions), the
workload profile, and the filter / score / pick stages."""

from __future__ import annotations

import math

import pytest

from phalanx.engine import Engine, EngineConfig, Submit, Upsert
from phalanx.engine.cache.capacity import ClassKey
from phalanx.engine.placement import (
    BestFit,
    BestFitScore,
    CapacityScore,
    DotProductScore,
    FragmentationScore,
    LowestRank,
    RandomPick,
    ScoredPlacement,
    TaskShape,
    WorkloadProfile,
    check_placement,
)
from phalanx.engine.placement.scores import Block, FlavorView
from phalanx.engine.queueing.shapes import PodSetShape
from phalanx.model import GPU_MILLI, Job, Node, PodSet
from tests.engine.helpers import GPU, admits, cluster_queue, flavor, quota, step

SCALE = FlavorView(cpu=128_000, gpu_milli=8_000)


def _key(devices: list[int], cpu: int, model: str = "") -> ClassKey:
    return (model, tuple(sorted(devices)), (("cpu", cpu),))


def _block(
    cpu: int, gpus: int = 0, milli: int = 1000, models: frozenset[str] | None = None
) -> Block:
    task = TaskShape(cpu, gpus, milli if gpus else 0, models)
    amounts = [("cpu", cpu)]
    if gpus and milli < 1000:
        amounts.append((GPU_MILLI, milli))
    elif gpus:
        amounts.append((GPU, gpus))
    return Block(task, 1, tuple(amounts))


def _profile(weights: dict[TaskShape, float]) -> WorkloadProfile:
    profile = WorkloadProfile()
    profile.set_fixed(weights)
    return profile


def test_best_fit_score_is_the_authors_formula() -> None:
    # Free 64 cores and 5 GPUs; a 1-GPU 16-core task leaves 48 cores and 4 GPUs.
    value, device = BestFitScore().score(
        _key([1000] * 5 + [0] * 3, 64_000), _block(16_000, 1), SCALE
    )
    assert value == int((1 - (48_000 / 128_000 * 0.5 + 4_000 / 8_000 * 0.5)) * 100) == 56
    assert device is None


def test_dot_product_score_is_the_authors_formula() -> None:
    value, _ = DotProductScore().score(_key([1000] * 8, 96_000), _block(12_000, 2), SCALE)
    dot = (96_000 / 128_000) * (12_000 / 128_000) + (8_000 / 8_000) * (2_000 / 8_000)
    assert value == int(100 * (1 - dot / 2))


def test_fgd_fragmentation_by_hand() -> None:
    typical = {
        TaskShape(4_000, 1, 500): 0.5,  # a half-GPU share
        TaskShape(10_000, 2, 1000): 0.3,  # two whole GPUs
        TaskShape(8_000, 0, 0): 0.2,  # CPU only: every free GPU counts as fragment
    }
    fgd = FragmentationScore(_profile(typical), threshold=1.0)
    fgd.refresh()
    # Devices free 1000, 400, 300; 12 cores. The share fits (on the 1000), so the devices
    # below 500 are its fragment (700); two whole GPUs do not fit: all 1700 are.
    frag = fgd.fragmentation("", (300, 400, 1000), 12_000)
    assert frag == pytest.approx(0.5 * 700 + 0.3 * 1700 + 0.2 * 1700)
    # Too little CPU for the share: everything is fragment for it too.
    assert fgd.fragmentation("", (300, 400, 1000), 3_000) == pytest.approx(1700)
    # The score of a share: sigmoid of the fragmentation it removes, in steps of 1/100,
    # and the devices that remove the most (here the 400: 400 - 300 leaves the 1000 whole).
    value, devices = fgd.score(_key([300, 400, 1000], 12_000), _block(4_000, 1, 300), SCALE)
    after = fgd.fragmentation("", (100, 300, 1000), 8_000)
    assert value == int(100 / (1 + math.exp(-(frag - after) / 1000)))
    assert devices == frozenset({300, 400})


def test_fgd_reads_only_the_typical_shapes() -> None:
    common, rare = TaskShape(1_000, 1, 1000), TaskShape(1_000, 8, 1000)
    profile = _profile({common: 96.0, rare: 4.0})
    assert [s for s, _ in profile.typical(0.95)] == [common]
    assert profile.typical(1.0) == [(common, 0.96), (rare, 0.04)]


def _view(*nodes: tuple[str, int, str]) -> FlavorView:
    """A flavor of nodes ``(name, gpus, cpu)``, as the chain sees it."""
    engine = _engine("phalanx", *(_node(n, g, c) for n, g, c in nodes))
    return FlavorView(cpu=0, gpu_milli=0, nodes=engine.cache.flavor_nodes["f"])


def test_capacity_counts_how_many_fit_and_how_scarce_they_are() -> None:
    one, eight = TaskShape(10_000, 1, 1000), TaskShape(10_000, 8, 1000)
    # Equal GPU demand for 1-GPU and 8-GPU tasks; one node of 8, four of 2.
    cap = CapacityScore(_profile({one: 8.0, eight: 1.0}))
    cap.refresh()
    view = _view(("big", 8, "96"), *((f"s{i}", 2, "64") for i in range(4)))
    assert cap.prepare(view) and not cap.prepare(view)
    # Taking a GPU of the only 8-GPU node costs the 8-GPU shape all its room: worse
    # than taking one of the plentiful small nodes', whatever fits of 1-GPU tasks.
    on_big, _ = cap.score(_key([1000] * 8, 96_000), _block(10_000, 1), view)
    on_small, _ = cap.score(_key([1000] * 2, 64_000), _block(10_000, 1), view)
    assert on_small > on_big
    # Four free GPUs but CPU for two tasks: a CPU-only task there takes room from
    # the 1-GPU shape; with CPU to spare it takes none.
    tight, _ = cap.score(_key([1000] * 4, 25_000), _block(6_000, 0), view)
    roomy, _ = cap.score(_key([1000] * 4, 96_000), _block(6_000, 0), view)
    assert tight < roomy == 0


def test_profile_learns_from_submissions_and_refreshes() -> None:
    profile = WorkloadProfile(refresh=4)
    shape = PodSetShape("main", 3, ((GPU, 1), ("cpu", 2000)), (), (), None, False)
    generation = profile.generation
    profile.observe([shape])
    assert profile.generation > generation
    assert profile.weights == {TaskShape(2000, 1, 1000): 3.0}


def _engine(placement: str, *nodes: Node) -> Engine:
    engine = Engine(EngineConfig(placement=placement))
    for obj in (
        flavor("f"),
        *nodes,
        cluster_queue("cq", {"f": [quota(GPU, 100), quota("cpu", 1000)]}),
    ):
        engine.apply(Upsert(obj))
    return engine


def _node(name: str, gpus: int, cpu: str = "64") -> Node:
    return Node(name=name, capacity={GPU: gpus, "cpu": cpu})


def _one(id: int, gpus: int, cpu: str = "1") -> Job:
    return Job(id=id, cluster_queue="cq", pod_sets=[PodSet(requests={GPU: gpus, "cpu": cpu})])


def test_ties_go_to_the_first_node_seen() -> None:
    engine = _engine("best-fit", _node("late", 8), _node("early", 8))
    out = step(engine, 1.0, Submit(_one(1, 1)))
    assert [n.node for n in admits(out)[1].pod_sets[0].nodes] == ["late"]


def test_best_fit_takes_the_tightest_node() -> None:
    engine = _engine("best-fit", _node("a", 8), _node("b", 2))
    out = step(engine, 1.0, Submit(_one(1, 2)))
    assert [n.node for n in admits(out)[1].pod_sets[0].nodes] == ["b"]


def test_random_placement_repeats_with_its_seed() -> None:
    def run(seed: int) -> list[str]:
        engine = Engine(EngineConfig(placement="random", placement_seed=seed))
        for obj in (flavor("f"), *(_node(f"n{i}", 8) for i in range(8))):
            engine.apply(Upsert(obj))
        engine.apply(Upsert(cluster_queue("cq", {"f": [quota(GPU, 100), quota("cpu", 1000)]})))
        out = step(engine, 1.0, *(Submit(_one(i, 1)) for i in range(1, 9)))
        return [a.pod_sets[0].nodes[0].node for a in admits(out).values()]

    assert run(1) == run(1)
    assert len({tuple(run(s)) for s in range(4)}) > 1


def test_a_filter_plugin_takes_part() -> None:
    class NotA:
        name = "not-a"

        def admits(self, slot: object, pod_set: object) -> bool:
            return getattr(slot, "name", "") != "a"

    engine = _engine("phalanx", _node("a", 8), _node("b", 8))
    engine.assigner.placement = ScoredPlacement(
        "custom", [BestFitScore()], LowestRank(), BestFit(), filters=[NotA()]
    )
    out = step(engine, 1.0, Submit(_one(1, 1)))
    assert [n.node for n in admits(out)[1].pod_sets[0].nodes] == ["b"]


def test_a_gang_over_nodes_goes_to_the_gang_policy() -> None:
    engine = _engine("fgd", _node("a", 8), _node("b", 8), _node("c", 4))
    job = Job(id=1, cluster_queue="cq", pod_sets=[PodSet(count=2, requests={GPU: 6, "cpu": "1"})])
    out = step(engine, 1.0, Submit(job))
    assert sorted(n.node for n in admits(out)[1].pod_sets[0].nodes) == ["a", "b"]


def test_placement_names_are_checked() -> None:
    check_placement("fgd,best-fit")
    with pytest.raises(ValueError, match="placement must be one of"):
        check_placement("fgd,nope")
    with pytest.raises(ValueError, match="placement must be one of"):
        EngineConfig(placement="tightest")


def test_random_pick_is_a_picker() -> None:
    assert RandomPick(3).name == "random" and LowestRank().name == "first"
