"""Scored placement: filter, score, pick, as in the Kubernetes scheduler framework.

A :class:`ScoredPlacement` places a pod set that one node can hold the way the
Kubernetes scheduler places a pod, with the same three extension points:

1. **filter**: the node has room for the whole block (every resource, GPU
   devices one by one, the right GPU model through the node filter), passes
   the engine's node filter (selector, affinity, taints, node lists) and every
   extra :class:`NodeFilterPlugin`;
2. **score**: each scorer of the chain in turn (lexicographically: the next
   scorer only separates nodes the previous ones tie), from the node's free
   state (:mod:`phalanx.engine.placement.scores`);
3. **pick**: among the nodes with the best score, :class:`LowestRank` takes the
   first in the cluster's fixed node order (as the FGD authors' simulator takes
   the lowest node name), :class:`RandomPick` one at random (seeded, so the
   engine stays deterministic).

Scores are functions of the free state, so they are computed per *class* of
identical nodes (:meth:`~phalanx.engine.cache.capacity.FlavorNodes.classes`) and kept
until the class's state or the workload profile changes: a decision costs the
number of distinct node states, not the number of nodes.

Pod sets that need several nodes (a gang over nodes, one unit per node, or no
node big enough for the whole pod set) and exclusive ones go to the ``gang``
policy (:class:`~phalanx.engine.placement.bestfit.BestFit`: fewest nodes,
tightest fit); in a flavor with a Topology the engine sends gangs to
topology-aware placement before they get here.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from phalanx.engine.cache.capacity import MILLI, ClassKey, FlavorNodes, NodeClass, NodeSlot
from phalanx.engine.placement.base import NodeFilter, Overlay, PlacementPolicy, PlacementResult
from phalanx.engine.placement.scores import Block, FlavorView, NodeScorer
from phalanx.engine.placement.workload import task_shape
from phalanx.engine.queueing.shapes import PodSetShape
from phalanx.model import CPU, GPU_MILLI

__all__ = [
    "LowestRank",
    "NodeFilterPlugin",
    "Picker",
    "RandomPick",
    "ScoredPlacement",
]


class NodeFilterPlugin(Protocol):
    """An extra per-node filter a site adds to a chain."""

    name: str

    def admits(self, slot: NodeSlot, pod_set: PodSetShape) -> bool: ...


Shares = frozenset[int] | None
"""Free amounts of the devices a single GPU share may take there (None: the tightest)."""


@dataclass(slots=True)
class Candidates:
    """The best-scored nodes: whole classes (minus nodes an overlay changed) and single
    nodes scored on their own, each with its share devices; ``accept`` is every
    per-node filter together."""

    classes: list[tuple[NodeClass, Shares]] = field(default_factory=list)
    singles: list[tuple[NodeSlot, Shares]] = field(default_factory=list)
    accept: Callable[[NodeSlot], bool] | None = None


class Picker(Protocol):
    """Chooses one node among the best-scored, and the device of a single share."""

    name: str

    def pick(self, found: Candidates, salt: str) -> tuple[NodeSlot, Shares] | None: ...

    def device(self, free: list[int], share: int, shares: Shares, salt: str) -> int: ...


class LowestRank:
    """The first node in the cluster's fixed order (lowest rank); for a share, the
    lowest-numbered device among the best-scored."""

    name = "first"

    def pick(self, found: Candidates, salt: str) -> tuple[NodeSlot, Shares] | None:
        best: tuple[NodeSlot, Shares] | None = None
        accept = found.accept
        for group, shares in found.classes:
            slot = group.first()
            if accept is not None and slot is not None and not accept(slot):
                slot = next((s for s in group.ordered() if accept(s)), None)
            if slot is not None and (best is None or slot.rank < best[0].rank):
                best = (slot, shares)
        for slot, shares in found.singles:
            if best is None or slot.rank < best[0].rank:
                best = (slot, shares)
        return best

    def device(self, free: list[int], share: int, shares: Shares, salt: str) -> int:
        if shares is None:
            return -1
        for i, f in enumerate(free):
            if f >= share and f in shares:
                return i
        return -1


class RandomPick:
    """A node chosen uniformly at random, and a random device for a share; the choice
    is a function of ``seed`` and the flavor's state, so replays repeat it."""

    name = "random"

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed

    def pick(self, found: Candidates, salt: str) -> tuple[NodeSlot, Shares] | None:
        rng = random.Random(f"{self.seed}:{salt}")
        accept = found.accept
        pool: list[tuple[NodeSlot, Shares]]
        if accept is None:
            total = sum(len(g.members) for g, _ in found.classes) + len(found.singles)
            if total == 0:
                return None
            index = rng.randrange(total)
            for group, shares in found.classes:
                if index < len(group.members):
                    return group.ordered()[index], shares
                index -= len(group.members)
            return found.singles[index]
        pool = [(s, sh) for g, sh in found.classes for s in g.ordered() if accept(s)]
        pool.extend(found.singles)
        return rng.choice(pool) if pool else None

    def device(self, free: list[int], share: int, shares: Shares, salt: str) -> int:
        fitting = [i for i, f in enumerate(free) if f >= share]
        return random.Random(f"{self.seed}:{salt}:device").choice(fitting) if fitting else -1


_Entry = tuple[tuple[float, ...], frozenset[int] | None] | None
"""A class's memoised score for a block: the scorers' values and the share's devices, or
None when the block does not fit there."""


class ScoredPlacement:
    """Filter, score, pick for pod sets one node holds; ``gang`` for the others."""

    def __init__(
        self,
        name: str,
        scorers: Sequence[NodeScorer],
        picker: Picker,
        gang: PlacementPolicy,
        filters: Sequence[NodeFilterPlugin] = (),
    ) -> None:
        self.name = name
        self.scorers = tuple(scorers)
        self._learning = tuple(s for s in self.scorers if getattr(s, "learns", True))
        """The scorers that read the workload profile or the flavor's state."""
        self.picker = picker
        self.gang = gang
        self.filters = tuple(filters)
        self._generation = 0
        """Bumped when a scorer's inputs change: the classes' memoised scores are stale."""
        self._blocks: dict[tuple[PodSetShape, int], Block] = {}
        self._views: dict[int, tuple[int, FlavorView]] = {}

    def place(
        self,
        pod_set: PodSetShape,
        nodes: FlavorNodes,
        node_filter: NodeFilter | None,
        overlay: Overlay,
    ) -> PlacementResult:
        units = pod_set.units
        if pod_set.exclusive or (pod_set.one_unit_per_node and units > 1):
            return self.gang.place(pod_set, nodes, node_filter, overlay)
        block = self._block(pod_set, units)
        keys = nodes.sorted_keys()
        need = dict(block.amounts).get(nodes.primary, 0) // nodes.scale
        if not keys or keys[-1] < need:
            # No node has enough of the primary resource free for the whole block.
            if units > 1:
                return self.gang.place(pod_set, nodes, node_filter, overlay)
            return PlacementResult(None, 0)
        view = self._view(nodes)
        if self._learning:
            if any([scorer.refresh() for scorer in self._learning]):
                self._generation += 1
            if any([scorer.prepare(view) for scorer in self._learning]):
                view.version += 1
        found = self._best(pod_set, block, nodes, view, node_filter, overlay)
        if found is not None:
            share = block.task.milli if block.task.gpus and block.task.milli < MILLI else 0
            salt = f"{nodes.name}:{nodes.version}:{pod_set.name}:{units}"
            for candidates in found:
                picked = self.picker.pick(candidates, salt)
                if picked is not None:
                    slot, shares = picked
                    device = -1
                    if share:
                        free = slot.device_free(overlay.get(slot))
                        device = self.picker.device(free, share, shares, salt)
                    return PlacementResult(((slot, units),), units, (device,))
        if units > 1:
            # No node holds the whole pod set: spread it over several.
            return self.gang.place(pod_set, nodes, node_filter, overlay)
        return PlacementResult(None, 0)

    def _block(self, pod_set: PodSetShape, units: int) -> Block:
        block = self._blocks.get((pod_set, units))
        if block is None:
            amounts = tuple(sorted((r, a * units) for r, a in pod_set.unit_request().items()))
            block = self._blocks[(pod_set, units)] = Block(
                task_shape(pod_set), units * pod_set.unit_size, amounts
            )
        return block

    def _view(self, nodes: FlavorNodes) -> FlavorView:
        cached = self._views.get(id(nodes))
        if cached is not None and cached[0] == nodes.membership and cached[1].nodes is nodes:
            return cached[1]
        view = FlavorView(
            cpu=max((s.capacity.get(CPU, 0) for s in nodes.members), default=0),
            gpu_milli=max((s.capacity.get(GPU_MILLI, 0) for s in nodes.members), default=0),
            nodes=nodes,
        )
        if cached is not None:
            view.version = cached[1].version + 1
        self._views[id(nodes)] = (nodes.membership, view)
        return view

    def _entry(self, key: ClassKey, block: Block, view: FlavorView) -> _Entry:
        entry: _Entry = None
        if _fits(key, block):
            values: list[float] = []
            shares: frozenset[int] | None = None
            for scorer in self.scorers:
                value, chosen = scorer.score(key, block, view)
                values.append(value)
                if shares is None and chosen is not None:
                    shares = chosen
            entry = (tuple(values), shares)
        return entry

    def _best(
        self,
        pod_set: PodSetShape,
        block: Block,
        nodes: FlavorNodes,
        view: FlavorView,
        node_filter: NodeFilter | None,
        overlay: Overlay,
    ) -> list[Candidates] | None:
        """The feasible candidates grouped by score, best first (None: nothing fits)."""
        accept = self._accept(pod_set, node_filter, overlay)
        generation = (self._generation, view.version)
        scored: list[tuple[tuple[float, ...], NodeClass | NodeSlot, Shares]] = []
        for group in nodes.classes().values():
            memo = group.scores
            cached = memo.get(block)
            if cached is not None and cached[0] == generation:  # type: ignore[index]
                entry: _Entry = cached[1]  # type: ignore[index]
            else:
                if len(memo) > 256:
                    memo.clear()
                entry = self._entry(group.key, block, view)
                memo[block] = (generation, entry)
            if entry is not None:
                scored.append((entry[0], group, entry[1]))
        for slot, extra in overlay.items():
            # Nodes an earlier pod set of the job took from: scored on what is left.
            if slot not in nodes.members or not slot.schedulable:
                continue
            if node_filter is not None and not node_filter(slot):
                continue
            if not all(f.admits(slot, pod_set) for f in self.filters):
                continue
            entry = self._entry(_effective_key(slot, extra), block, view)
            if entry is not None:
                scored.append((entry[0], slot, entry[1]))
        if not scored:
            return None
        grouped: dict[tuple[float, ...], Candidates] = {}
        for value, where, shares in scored:
            found = grouped.get(value)
            if found is None:
                found = grouped[value] = Candidates(accept=accept)
            if isinstance(where, NodeClass):
                found.classes.append((where, shares))
            else:
                found.singles.append((where, shares))
        if len(grouped) == 1:
            return list(grouped.values())
        return [grouped[v] for v in sorted(grouped, reverse=True)]

    def _accept(
        self, pod_set: PodSetShape, node_filter: NodeFilter | None, overlay: Overlay
    ) -> Callable[[NodeSlot], bool] | None:
        filters = self.filters
        if node_filter is None and not filters and not overlay:
            return None

        def accept(slot: NodeSlot) -> bool:
            if slot in overlay:
                return False  # scored apart, on what the overlay leaves
            if node_filter is not None and not node_filter(slot):
                return False
            return all(f.admits(slot, pod_set) for f in filters)

        return accept


def _effective_key(slot: NodeSlot, extra: dict[str, int]) -> ClassKey:
    """``slot``'s free state once ``extra`` is taken."""
    used = slot.used
    return (
        slot.gpu_model,
        tuple(sorted(slot.device_free(extra))),
        tuple((r, c - used.get(r, 0) - extra.get(r, 0)) for r, c in sorted(slot.capacity.items())),
    )


def _fits(key: ClassKey, block: Block) -> bool:
    """Whether a node in free state ``key`` holds the whole block."""
    free = dict(key[2])
    for resource, amount in block.amounts:
        if free.get(resource, 0) < amount:
            return False
    task = block.task
    if task.gpus:
        profile = key[1]
        if task.milli >= MILLI:
            if sum(1 for f in profile if f == MILLI) < task.gpus * block.tasks:
                return False
        elif sum(f // task.milli for f in profile) < block.tasks:
            return False
    return True
