"""Node scorers: how good a node is for a block of tasks, from the node's free state.

A score is a function of a node's *free state* (its
:data:`~phalanx.engine.cache.capacity.ClassKey`: GPU model, each device's free
thousandths, every resource's free amount) and of the block to place, so the
chain (:mod:`phalanx.engine.placement.chain`) computes it once per class of
identical nodes. Higher is better. A scorer may also say which GPU device a
single share should take, as a set of acceptable free amounts.

The scorers of the FGD paper's comparison (Weng et al., "Beware of
Fragmentation: Scheduling GPU-Sharing Workloads with Fragmentation Gradient
Descent", USENIX ATC'23), with the definitions of the authors' simulator:

* :class:`BestFitScore`: least CPU and GPU left over, weighted half and half,
  each relative to the flavor's largest node;
* :class:`DotProductScore`: least alignment between the request and what the
  node has free (their simulator's reading of Tetris);
* :class:`FragmentationScore` (FGD): the decrease of the node's *fragmentation*,
  the free GPU thousandths that the workload's typical tasks could not use
  there (a task that cannot fit at all, for lack of GPU or CPU or the wrong
  model, sees every free thousandth as fragment; one that fits sees the devices
  too small for it), weighted by how often each typical task is submitted.

And phalanx's own:

* :class:`CapacityScore`: the *usable capacity* a placement takes from the
  workload: for each task shape, how much of it the node could still take
  (devices and CPU together), weighted by the shape's demand over what the whole
  flavor still has for it. Where FGD asks "does one fit?", this asks "how many
  fit, and how scarce are they?", so the last nodes a shape can use (the empty
  8-GPU nodes, the nodes of the one model it may run on) are kept for it.
* :class:`CpuNodesScore`: tasks without GPUs on nodes without GPUs, which both
  fragmentation measures see as equal to any other.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from phalanx.engine.cache.capacity import MILLI, ClassKey, FlavorNodes
from phalanx.engine.placement.workload import TaskShape, WorkloadProfile
from phalanx.model import CPU

__all__ = [
    "BestFitScore",
    "Block",
    "CapacityScore",
    "CpuNodesScore",
    "DotProductScore",
    "FlavorView",
    "FragmentationScore",
    "NodeScorer",
    "Score",
    "after_block",
]

Score = tuple[float, frozenset[int] | None]
"""A value (higher is better) and, for a single GPU share, the free amounts of the
devices it may take (None: the tightest that holds it)."""


@dataclass(frozen=True, slots=True, eq=False)
class Block:
    """``tasks`` tasks of one shape, all to be placed on one node (compared by identity:
    the chain makes one per pod set and unit count)."""

    task: TaskShape
    tasks: int
    amounts: tuple[tuple[str, int], ...]
    """What the block takes, per resource (``phalanx.io/gpu-milli`` included)."""

    @property
    def gpu_milli(self) -> int:
        return self.task.gpu_milli * self.tasks


@dataclass(eq=False, slots=True)
class FlavorView:
    """What scorers know of the flavor: its largest node (to put resources on one
    scale), its nodes, and each scorer's own state for it. ``version`` counts the
    changes of that state that make scores computed before it stale."""

    cpu: int
    gpu_milli: int
    nodes: FlavorNodes | None = None
    state: dict[str, Any] = field(default_factory=dict)
    version: int = 0


class NodeScorer(Protocol):
    """Scores a node's free state for a block. A scorer whose scores depend on nothing
    but the state and the block says so with ``learns = False`` (the chain then skips
    its :meth:`refresh` and :meth:`prepare`)."""

    name: str

    def score(self, key: ClassKey, block: Block, view: FlavorView) -> Score: ...

    def refresh(self) -> bool:
        """Re-read the workload profile; True when scores computed before are stale."""
        ...

    def prepare(self, view: FlavorView) -> bool:
        """Before a placement in the flavor: update what the scorer keeps of it; True
        when scores computed before are stale there."""
        ...


def _free(key: ClassKey, resource: str) -> int:
    for name, amount in key[2]:
        if name == resource:
            return amount
    return 0


def after_block(profile: tuple[int, ...], block: Block) -> tuple[int, ...]:
    """The devices' free thousandths once ``block`` is placed: whole GPUs take untouched
    devices, shares the tightest device that holds each."""
    task = block.task
    if not task.gpus:
        return profile
    free = list(profile)
    if task.milli >= MILLI:
        need = task.gpus * block.tasks
        for i in range(len(free) - 1, -1, -1):
            if need == 0:
                break
            if free[i] == MILLI:
                free[i] = 0
                need -= 1
    else:
        for _ in range(block.tasks):
            i = bisect_left(free, task.milli)
            if i < len(free):
                free[i] -= task.milli
                free.sort()
    return tuple(sorted(free))


def _replace(profile: tuple[int, ...], index: int, amount: int) -> tuple[int, ...]:
    free = list(profile)
    free[index] = amount
    return tuple(sorted(free))


class BestFitScore:
    """``(1 - (cpu left / largest cpu + GPU left / largest GPU) / 2) * 100``, truncated."""

    name = "best-fit"
    learns = False

    def score(self, key: ClassKey, block: Block, view: FlavorView) -> Score:
        cpu_left = _free(key, CPU) - dict(block.amounts).get(CPU, 0)
        gpu_left = sum(key[1]) - block.gpu_milli
        leftover = cpu_left / max(view.cpu, 1) * 0.5 + gpu_left / max(view.gpu_milli, 1) * 0.5
        return float(int((1.0 - leftover) * 100)), None

    def refresh(self) -> bool:
        return False

    def prepare(self, view: FlavorView) -> bool:
        return False


class DotProductScore:
    """``(1 - <free, request> / 2) * 100``, truncated, both vectors over the largest node."""

    name = "dot-product"
    learns = False

    def score(self, key: ClassKey, block: Block, view: FlavorView) -> Score:
        cpu_scale, gpu_scale = max(view.cpu, 1), max(view.gpu_milli, 1)
        dot = (_free(key, CPU) / cpu_scale) * (dict(block.amounts).get(CPU, 0) / cpu_scale) + (
            sum(key[1]) / gpu_scale
        ) * (block.gpu_milli / gpu_scale)
        return float(int(100 * (1.0 - dot / 2))), None

    def refresh(self) -> bool:
        return False

    def prepare(self, view: FlavorView) -> bool:
        return False


class CpuNodesScore:
    """1 for a task without GPUs on a node without GPUs, else 0."""

    name = "cpu-nodes"
    learns = False

    def score(self, key: ClassKey, block: Block, view: FlavorView) -> Score:
        return (1.0 if not block.task.gpus and not key[1] else 0.0), None

    def refresh(self) -> bool:
        return False

    def prepare(self, view: FlavorView) -> bool:
        return False


class _ProfileScorer:
    """A scorer whose values depend on the workload profile (memoised per generation)."""

    def __init__(self, profile: WorkloadProfile) -> None:
        self.profile = profile
        self._generation = -1
        self._frag: dict[tuple[str, tuple[int, ...], int], float] = {}
        self._mix: Sequence[tuple[TaskShape, float]] = ()

    def prepare(self, view: FlavorView) -> bool:
        return False

    def refresh(self) -> bool:
        if self._generation == self.profile.generation:
            return False
        self._generation = self.profile.generation
        self._mix = self._read(self.profile)
        self._frag.clear()
        return True

    def _read(self, profile: WorkloadProfile) -> Sequence[tuple[TaskShape, float]]:
        raise NotImplementedError

    def _measure(self, model: str, profile: tuple[int, ...], cpu: int) -> float:
        raise NotImplementedError

    def fragmentation(self, model: str, profile: tuple[int, ...], cpu: int) -> float:
        key = (model, profile, cpu)
        value = self._frag.get(key)
        if value is None:
            if len(self._frag) > 200_000:
                self._frag.clear()
            value = self._frag[key] = self._measure(model, profile, cpu)
        return value

    def _gain(self, key: ClassKey, block: Block) -> tuple[float, frozenset[int] | None]:
        """The fragmentation the block removes (negative: adds), and for one share the
        free amounts of the devices that remove the most."""
        model, profile = key[0], key[1]
        cpu = _free(key, CPU)
        before = self.fragmentation(model, profile, cpu)
        cpu_after = cpu - block.task.cpu * block.tasks
        task = block.task
        if task.gpus and task.milli < MILLI and block.tasks == 1:
            best: float | None = None
            chosen: set[int] = set()
            seen = -1
            for i, free in enumerate(profile):
                if free < task.milli or free == seen:
                    continue
                seen = free
                after = self.fragmentation(
                    model, _replace(profile, i, free - task.milli), cpu_after
                )
                gain = self._value(before - after)
                if best is None or gain > best:
                    best, chosen = gain, {free}
                elif gain == best:
                    chosen.add(free)
            return (best if best is not None else 0.0), frozenset(chosen)
        after = self.fragmentation(model, after_block(profile, block), cpu_after)
        return self._value(before - after), None

    def _value(self, gain: float) -> float:
        return gain

    def score(self, key: ClassKey, block: Block, view: FlavorView) -> Score:
        return self._gain(key, block)


class FragmentationScore(_ProfileScorer):
    """FGD: ``int(sigmoid(fragmentation removed / 1000) * 100)``.

    The coarse steps are the authors' and part of why FGD works: near-equal choices
    tie and go to the same nodes in the chain's fixed order, which packs. The typical
    tasks are the most frequent shapes that make ``threshold`` of all tasks.
    """

    name = "fgd"

    def __init__(self, profile: WorkloadProfile, threshold: float = 0.95) -> None:
        super().__init__(profile)
        self.threshold = threshold

    def _read(self, profile: WorkloadProfile) -> Sequence[tuple[TaskShape, float]]:
        return profile.typical(self.threshold)

    def _value(self, gain: float) -> float:
        return float(int(100.0 / (1.0 + math.exp(-gain / 1000.0))))

    def _measure(self, model: str, profile: tuple[int, ...], cpu: int) -> float:
        total = sum(profile)
        if total == 0:
            return 0.0
        frag = 0.0
        for task, p in self._mix:
            if not task.gpus or (task.models is not None and model not in task.models):
                frag += p * total
                continue
            small = bisect_left(profile, task.milli)
            if len(profile) - small >= task.gpus and cpu >= task.cpu:
                frag += p * sum(profile[:small])
            else:
                frag += p * total
        return frag


class CapacityScore:
    """The usable capacity a placement takes from the workload, in steps of
    ``resolution``.

    For each task shape of the workload that asks for GPUs: how many of it a node
    could still take (GPU devices and CPU together), times the GPU each takes: its
    *usable* capacity there. A placement's cost is what it removes from every shape's
    usable capacity, each weighted by the shape's share of the GPU demand over the
    shape's usable capacity in the whole flavor, so that capacity a shape has little
    of left (the last empty 8-GPU nodes, the few nodes of the one model a shape may
    run on) costs more than capacity there is plenty of. The flavor-wide sums are
    recomputed every ``every`` placements there.
    """

    name = "capacity"

    def __init__(
        self, profile: WorkloadProfile, every: int = 256, resolution: float = 5e-5
    ) -> None:
        self.profile = profile
        self.every = every
        self.resolution = resolution
        self._generation = -1
        self._mix: list[tuple[TaskShape, float]] = []

    def refresh(self) -> bool:
        if self._generation == self.profile.generation:
            return False
        self._generation = self.profile.generation
        demand = [(s, w * s.gpu_milli) for s, w in self.profile.weights.items() if s.gpus]
        total = sum(w for _, w in demand)
        self._mix = [(s, w / total) for s, w in demand] if total > 0 else []
        return True

    def prepare(self, view: FlavorView) -> bool:
        state = view.state.get(self.name)
        if state is None:
            state = view.state[self.name] = {"calls": 0, "generation": -1}
        calls = state["calls"] = state["calls"] + 1
        if calls < self.every and state["generation"] == self._generation:
            return False
        state["calls"] = 0
        state["generation"] = self._generation
        supply: dict[TaskShape, int] = {}
        if view.nodes is not None:
            for key, group in view.nodes.classes().items():
                cpu, size = _free(key, CPU), len(group.members)
                for task, _ in self._mix:
                    supply[task] = supply.get(task, 0) + size * _usable(task, key[0], key[1], cpu)
        state["weights"] = [(t, share / max(supply.get(t, 0), MILLI)) for t, share in self._mix]
        state["memo"] = {}
        return True

    def _left(self, state: dict[str, Any], model: str, profile: tuple[int, ...], cpu: int) -> float:
        memo: dict[tuple[str, tuple[int, ...], int], float] = state["memo"]
        key = (model, profile, cpu)
        value = memo.get(key)
        if value is None:
            if len(memo) > 200_000:
                memo.clear()
            value = memo[key] = sum(
                w * _usable(task, model, profile, cpu) for task, w in state["weights"]
            )
        return value

    def score(self, key: ClassKey, block: Block, view: FlavorView) -> Score:
        state = view.state.get(self.name)
        if state is None or "weights" not in state:
            return 0.0, None
        model, profile = key[0], key[1]
        cpu = _free(key, CPU)
        before = self._left(state, model, profile, cpu)
        after = self._left(
            state, model, after_block(profile, block), cpu - block.task.cpu * block.tasks
        )
        return float(round((after - before) / self.resolution)), None


def _usable(task: TaskShape, model: str, profile: tuple[int, ...], cpu: int) -> int:
    """The GPU thousandths tasks of ``task`` could take on a node in this state."""
    if task.models is not None and model not in task.models:
        return 0
    if task.milli < MILLI:
        fit = sum(f // task.milli for f in profile)
    else:
        fit = (len(profile) - bisect_left(profile, MILLI)) // task.gpus
    if task.cpu:
        fit = min(fit, cpu // task.cpu)
    return fit * task.gpu_milli


SCORERS = (BestFitScore, DotProductScore, FragmentationScore, CapacityScore, CpuNodesScore)
"""Every built-in scorer class (for documentation and the registry)."""
