"""Packing replay: pods placed one by one on arrival, nothing leaving.

This is the experiment of the FGD paper (Weng et al., USENIX ATC'23) and of its
authors' Kubernetes scheduler simulator, done through phalanx's engine: each
pod is submitted as a one-task job and the engine's ``cycle`` either admits it
(on the node and GPU device its placement policy picks) or leaves it pending,
in which case it is withdrawn, as the simulator drops a pod it cannot
schedule. The GPU allocation ratio is recorded after every pod, against the
GPU requested so far (the *arrived* load).

The workload is built as the authors build it for a seed: the pod list in a
random order, then pods drawn at random (with replacement) from the list until
the requests would pass ``tune`` (1.3) times the cluster's GPUs (or, for a list
that asks for more already, pods dropped at random until it does not). The nodes are
added in a random order too, which is the tie-break order of the scored
policies (the authors' simulator prefixes node names with a random number and
takes the lowest name among equal scores).
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from phalanx.engine import Admit, Cancel, Engine, EngineConfig, Submit, Upsert
from phalanx.engine.placement import TaskShape, task_shape
from phalanx.engine.queueing.shapes import ShapeInterner
from phalanx.model import (
    CPU,
    GPU,
    GPU_MILLI,
    MEMORY,
    ClusterQueue,
    Job,
    Node,
    PodSet,
    ResourceFlavor,
)
from phalanx.sim.traces.openb import OpenbPod

__all__ = ["PackingRun", "alloc_curve", "profile_of", "replay", "sample_workload"]

FLAVOR = "openb"
QUEUE = "openb"


@dataclass
class PackingRun:
    """One replay: the GPU arrived and allocated (thousandths) after each pod."""

    placement: str
    seed: int
    capacity_milli: int
    arrived: list[int] = field(default_factory=list)
    allocated: list[int] = field(default_factory=list)
    failed: Counter[str] = field(default_factory=Counter)
    """Pods that found no node, by kind (``cpu``, ``share``, ``1-gpu``, ``8-gpu``, ...)."""

    def curve(self) -> dict[int, float]:
        return alloc_curve(self.arrived, self.allocated, self.capacity_milli)


def alloc_curve(
    arrived: Sequence[int], allocated: Sequence[int], capacity_milli: int
) -> dict[int, float]:
    """GPU allocation (% of capacity) at each whole % of arrived load, 0 to 130, as the
    authors compute it: the mean over the pods whose arrival rounds to that %, or to
    one point either side when none does."""
    by_level: dict[int, list[float]] = {}
    gpus = capacity_milli / 1000
    for a, u in zip(arrived, allocated, strict=True):
        level = round(a / gpus / 10)
        by_level.setdefault(level, []).append(round(u / gpus / 10, 2))
    curve: dict[int, float] = {}
    for level in range(131):
        values = by_level.get(level)
        if not values:
            values = by_level.get(level - 1, []) + by_level.get(level + 1, [])
        if values:
            curve[level] = round(sum(values) / len(values), 2)
    return curve


def sample_workload(
    pods: Sequence[OpenbPod], capacity_milli: int, seed: int, tune: float = 1.3
) -> list[OpenbPod]:
    """The pods of one experiment, in arrival order (see the module docstring)."""
    rng = random.Random(seed)
    pool = sorted(pods, key=lambda p: p.name)
    order = list(pool)
    rng.shuffle(order)
    total = sum(p.gpu_total_milli for p in order)
    target = tune * capacity_milli
    if total > target:
        # Too much already: drop pods at random until it is not.
        while total > target and order:
            total -= order.pop(rng.randrange(len(order))).gpu_total_milli
        return order
    while pool:
        pod = pool[rng.randrange(len(pool))]
        # The authors' check adds the pod's per-GPU thousandths, not its total.
        if total + pod.gpu_milli > target:
            break
        total += pod.gpu_total_milli
        order.append(pod)
    return order


def profile_of(pods: Iterable[OpenbPod]) -> dict[TaskShape, float]:
    """How often each task shape occurs in ``pods`` (the authors' typical-pod input)."""
    interner = ShapeInterner()
    counts: Counter[TaskShape] = Counter()
    cache: dict[OpenbPod, TaskShape] = {}
    for pod in pods:
        shape = cache.get(pod)
        if shape is None:
            shape = cache[pod] = task_shape(interner.pod_set(pod.pod_set()))
        counts[shape] += 1
    return {s: float(c) for s, c in counts.items()}


def _kind(pod: OpenbPod) -> str:
    if not pod.num_gpu:
        return "cpu"
    if pod.gpu_milli < 1000:
        return "share"
    return f"{pod.num_gpu}-gpu"


def replay(
    nodes: Sequence[Node],
    pods: Sequence[OpenbPod],
    placement: str,
    seed: int,
    profile: dict[TaskShape, float] | None = None,
) -> PackingRun:
    """Place ``pods`` in order on ``nodes`` (added in an order drawn from ``seed``) with
    the ``placement`` policy; ``profile`` fixes the workload the fragmentation scores
    read (else the engine learns it from the pods as they come)."""
    engine = Engine(EngineConfig(placement=placement, placement_seed=seed))
    if profile is not None:
        engine.workload.set_fixed(profile)
    order = list(nodes)
    random.Random(f"nodes:{seed}").shuffle(order)
    engine.apply(Upsert(ResourceFlavor(name=FLAVOR)))
    total: Counter[str] = Counter()
    for node in order:
        engine.apply(Upsert(node))
        total.update(node.capacity)
    capacity_milli = total[GPU] * 1000
    quota = {CPU: total[CPU], MEMORY: total[MEMORY], GPU: total[GPU], GPU_MILLI: capacity_milli}
    engine.apply(
        Upsert(
            ClusterQueue.model_validate(
                {
                    "name": QUEUE,
                    "resourceGroups": [
                        {
                            "coveredResources": list(quota),
                            "flavors": [
                                {
                                    "name": FLAVOR,
                                    "resources": [
                                        {"name": r, "nominalQuota": _quantity(r, a)}
                                        for r, a in quota.items()
                                    ],
                                }
                            ],
                        }
                    ],
                }
            )
        )
    )
    run = PackingRun(placement, seed, capacity_milli)
    pod_sets: dict[OpenbPod, PodSet] = {}
    arrived = allocated = 0
    for i, pod in enumerate(pods, start=1):
        pod_set = pod_sets.get(pod)
        if pod_set is None:
            pod_set = pod_sets[pod] = pod.pod_set()
        now = float(i)
        engine.apply(
            Submit(
                Job(id=i, name=pod.name, cluster_queue=QUEUE, pod_sets=[pod_set], submit_time=now)
            )
        )
        admitted = any(isinstance(d, Admit) and d.job_id == i for d in engine.cycle(now))
        arrived += pod.gpu_total_milli
        if admitted:
            allocated += pod.gpu_total_milli
        else:
            engine.apply(Cancel(i))
            run.failed[_kind(pod)] += 1
        run.arrived.append(arrived)
        run.allocated.append(allocated)
    return run


def _quantity(resource: str, amount: int) -> str | int:
    return f"{amount}m" if resource == CPU else amount
