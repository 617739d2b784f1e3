"""Topology-aware placement: a pod set in the tightest domain of its flavor's Topology.

A ResourceFlavor that names a :class:`~phalanx.model.Topology` (levels of node
labels, highest first, e.g. block > rack > hostname) places pod sets the way
Kueue's Topology Aware Scheduling does (reference: kueue.md §2.11):

1. Count, for every node of the flavor that passes the filter, how many of the
   pod set's units fit (one at most with ``tasksPerNode``); sum the counts per
   domain, level by level. Nodes without every level's label are outside the
   topology and take nothing (``kubernetes.io/hostname`` defaults to the node's
   name).
2. Pick the domain. ``required`` level: the domain of that level that holds the
   whole pod set with the least room to spare (best fit, so large free domains
   stay whole for later gangs), or nothing. ``preferred`` level: the same, else
   one level up, and so on; at the top, across top-level domains. No request:
   ``preferred`` at the lowest level above the nodes (phalanx's default: every
   gang in the lowest domain that can hold it). ``unconstrained``: Kueue's
   LeastFreeCapacity, the least free domains and nodes first, anywhere.
3. Descend: at each level below, the fewest child domains that hold what the
   domain must take (the roomiest first, the last one the tightest that holds the
   rest), down to nodes chosen the same way.

With ``prefer`` (the nodes an expedited job holds, opened for its own attempt)
the level stays the one the request picks, but among the domains of that level
that hold the pod set, those with the most room on the held nodes win, and the
descent takes the domains and nodes holding them first (``unconstrained``: the
held nodes' domains and the held nodes first). Slices and ``switches`` keep
their choice: the held nodes could cost them a domain.

The domain index of a flavor is rebuilt only when its nodes or the Topology
change.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from phalanx.engine.cache.capacity import FlavorNodes, NodeSlot
from phalanx.engine.placement import NodeFilter, Overlay, PlacementResult
from phalanx.engine.queueing.shapes import PodSetShape
from phalanx.model import HOSTNAME_LABEL, Topology

__all__ = ["DomainIndex", "place_in_topology"]

Path = tuple[str, ...]


@dataclass(frozen=True)
class DomainIndex:
    """Every node of a flavor with its domain at each level of the Topology."""

    levels: tuple[str, ...]
    paths: dict[NodeSlot, Path]
    key: tuple[object, ...]
    leaves: dict[Path, list[NodeSlot]] = field(default_factory=dict)
    """The nodes of each domain of the lowest level."""
    most: int = 0
    """The most of the flavor's bucketed resource one node has."""
    rooms: dict[object, Room] = field(default_factory=dict, compare=False)
    """Per pod set (and filter), what fits where, kept up to date incrementally."""

    @classmethod
    def build(cls, nodes: FlavorNodes, topology: Topology) -> DomainIndex:
        levels = tuple(level.node_label for level in topology.levels)
        paths: dict[NodeSlot, Path] = {}
        for slot in nodes.members:
            labels = slot.node.labels
            # A node's hostname is its name unless a label says otherwise.
            values = [
                labels.get(label, slot.name if label == HOSTNAME_LABEL else None)
                for label in levels
            ]
            if all(v is not None for v in values):
                paths[slot] = tuple(v for v in values if v is not None)
        leaves: dict[Path, list[NodeSlot]] = {}
        for slot, path in paths.items():
            leaves.setdefault(path, []).append(slot)
        most = max((s.capacity.get(nodes.primary, 0) for s in nodes.members), default=0)
        return cls(levels, paths, (id(nodes), nodes.membership, levels), leaves, most)

    def spans_nodes(self, pod_set: PodSetShape, primary: str) -> bool:
        """Whether ``pod_set`` needs more than one node (a gang the topology matters
        for): several one-per-node units, or more than a node has."""
        if pod_set.one_unit_per_node:
            return pod_set.units > 1
        return pod_set.total(primary) > self.most

    def level_of(self, label: str) -> int | None:
        try:
            return self.levels.index(label)
        except ValueError:
            return None


@dataclass
class Room:
    """How many units of one pod set fit on each node, summed per domain and level;
    valid as of the flavor index's ``position``."""

    room: dict[NodeSlot, int]
    sums: list[dict[Path, int]]
    position: int


def _room(
    pod_set: PodSetShape,
    nodes: FlavorNodes,
    index: DomainIndex,
    node_filter: NodeFilter | None,
    overlay: Overlay,
    memo: object | None,
) -> Room:
    depth = len(index.levels)
    paths = index.paths
    cached = index.rooms.get(memo) if memo is not None and not overlay else None
    if cached is not None:
        changed = nodes.changed_since(cached.position)
        if changed is not None:
            room, totals = cached.room, cached.sums
            for slot in dict.fromkeys(changed):
                path = paths.get(slot)
                if path is None:
                    continue
                n = _units(slot, pod_set, node_filter, overlay)
                delta = n - room.get(slot, 0)
                if not delta:
                    continue
                if n:
                    room[slot] = n
                else:
                    del room[slot]
                for k in range(depth):
                    prefix = path[: k + 1]
                    left = totals[k].get(prefix, 0) + delta
                    if left:
                        totals[k][prefix] = left
                    else:
                        totals[k].pop(prefix, None)
            cached.position = nodes.position
            return cached
    room = {}
    # Only nodes with a unit's worth of the flavor's bucketed resource free can take one.
    amount = pod_set.unit_request().get(nodes.primary, 0)
    candidates = nodes.candidates_ascending(amount // nodes.scale) if amount else nodes.members
    for slot in candidates:
        if slot in paths:
            n = _units(slot, pod_set, node_filter, overlay)
            if n:
                room[slot] = n
    sums: list[dict[Path, int]] = [{} for _ in range(depth)]
    for slot, n in room.items():
        path = paths[slot]
        for k in range(depth):
            prefix = path[: k + 1]
            sums[k][prefix] = sums[k].get(prefix, 0) + n
    found = Room(room, sums, nodes.position)
    if memo is not None and not overlay:
        index.rooms[memo] = found
    return found


def _units(
    slot: NodeSlot, pod_set: PodSetShape, filter_: NodeFilter | None, overlay: Overlay
) -> int:
    if filter_ is not None and not filter_(slot):
        return 0
    if pod_set.exclusive:
        return 1 if slot.idle and slot not in overlay else 0
    n = slot.fit_units(pod_set.unit_request(), overlay.get(slot), pod_set.share)
    return min(n, 1) if pod_set.one_unit_per_node else n


def _pick(children: list[tuple[int, Path]], need: int) -> list[tuple[Path, int]]:
    """The fewest children that hold ``need``: the roomiest first, then the tightest
    one that holds the rest."""
    ordered = sorted(children, key=lambda c: (-c[0], c[1]))
    chosen: list[tuple[Path, int]] = []
    for i, (room, key) in enumerate(ordered):
        if room >= need:
            tight = min((c for c in ordered[i:] if c[0] >= need), key=lambda c: (c[0], c[1]))
            chosen.append((tight[1], need))
            return chosen
        chosen.append((key, room))
        need -= room
    return chosen


class Held:
    """The room on the nodes an expedited job holds: per node, and summed per domain
    and level as :class:`Room` sums it."""

    def __init__(self, prefer: frozenset[NodeSlot], room: dict[NodeSlot, int], index: DomainIndex):
        self.nodes = {s: room[s] for s in prefer if s in room and s in index.paths}
        self.sums: list[dict[Path, int]] = [{} for _ in index.levels]
        for slot, n in self.nodes.items():
            path = index.paths[slot]
            for k in range(len(index.levels)):
                self.sums[k][path[: k + 1]] = self.sums[k].get(path[: k + 1], 0) + n


def place_in_topology(
    pod_set: PodSetShape,
    nodes: FlavorNodes,
    index: DomainIndex,
    node_filter: NodeFilter | None,
    overlay: Overlay,
    memo: object | None = None,
    prefer: frozenset[NodeSlot] = frozenset(),
) -> PlacementResult:
    """Nodes for every unit of ``pod_set`` within the domain its request allows, or
    None with the most units one such domain could take. ``memo``: a key for the pod
    set and filter under which what fits where is kept and updated from the flavor's
    capacity changes (without an overlay). ``prefer``: held nodes to place on first."""
    need = pod_set.units
    depth = len(index.levels)
    found = _room(pod_set, nodes, index, node_filter, overlay, memo)
    room, sums = found.room, found.sums  # sums[k][path[: k + 1]]: per domain and level
    held = Held(prefer, room, index) if prefer else None
    if held is not None and not held.nodes:
        held = None
    total = sum(sums[0].values())
    mode, label = pod_set.topology or ("preferred", "")
    lowest = depth - 2 if index.levels[-1] == HOSTNAME_LABEL and depth > 1 else depth - 1
    if pod_set.slice is not None:
        return _in_slices(pod_set.slice, mode, label, need, sums, room, index)
    if mode == "switches":
        return _on_few_domains(int(label), lowest, need, sums, room, index)
    if mode == "unconstrained":
        if total < need:
            return PlacementResult(None, total)
        return _result(_least_free(lowest, need, sums, room, index, held), need)
    if label:
        start = index.level_of(label)
        if start is None:
            return PlacementResult(None, 0)
    else:
        start = lowest  # the lowest level above the nodes themselves
    for k in range(start, -1, -1):
        fitting = [(s, p) for p, s in sums[k].items() if s >= need]
        if fitting:
            if held is not None:
                # The held nodes' domain first, then the tightest.
                _, _, domain = min((-held.sums[k].get(p, 0), s, p) for s, p in fitting)
            else:
                _, domain = min(fitting)
            return _result(_descend(domain, k, need, sums, room, index, held), need)
        if mode == "required":
            return PlacementResult(None, max(sums[k].values(), default=0))
    if total < need:
        return PlacementResult(None, total)
    return _result(_descend((), -1, need, sums, room, index, held), need)


def _least_free(
    level: int,
    need: int,
    sums: list[dict[Path, int]],
    room: dict[NodeSlot, int],
    index: DomainIndex,
    held: Held | None = None,
) -> list[tuple[NodeSlot, int]]:
    """Kueue's LeastFreeCapacity (``unconstrained``): the domains of ``level`` with
    the least room first, and in each the nodes with the least room first (with
    ``held``: the held nodes' domains first, and in each the held nodes first)."""
    out: list[tuple[NodeSlot, int]] = []
    if held is not None:
        ordered = [
            (p, n)
            for _, n, p in sorted(
                (-held.sums[level].get(p, 0), n, p) for p, n in sums[level].items() if n > 0
            )
        ]
        for domain, _ in ordered:
            need -= _least_free_nodes(domain, level, need, room, index, out, held)
            if not need:
                return out
        return out
    for _, domain in sorted((n, p) for p, n in sums[level].items() if n > 0):
        need -= _least_free_nodes(domain, level, need, room, index, out)
        if not need:
            return out
    return out


def _least_free_nodes(
    domain: Path,
    level: int,
    need: int,
    room: dict[NodeSlot, int],
    index: DomainIndex,
    out: list[tuple[NodeSlot, int]],
    held: Held | None = None,
) -> int:
    """Up to ``need`` units on the nodes of ``domain``, least room first (the held
    nodes before all); how many."""
    placed = 0
    nodes = sorted((room[s], s.name, s) for s in room if index.paths[s][: level + 1] == domain)
    if held is not None:
        nodes.sort(key=lambda t: t[2] not in held.nodes)  # stable: least room first still
    for n, _, slot in nodes:
        take = min(n, need - placed)
        out.append((slot, take))
        placed += take
        if placed == need:
            break
    return placed


def _in_slices(
    slice_: tuple[str, int],
    mode: str,
    label: str,
    need: int,
    sums: list[dict[Path, int]],
    room: dict[NodeSlot, int],
    index: DomainIndex,
) -> PlacementResult:
    """Kueue's topology slices: the pod set's units in slices of ``per``, each slice
    within one domain of the slice level; the whole pod set as its request says
    (``required`` / ``preferred`` a level at or above the slice level, or
    ``unconstrained``: the least free slice domains first)."""
    slice_label, per = slice_
    level = index.level_of(slice_label)
    if level is None:
        return PlacementResult(None, 0)
    # Slices each domain holds: what its nodes hold, in whole slices, summed upwards.
    caps: list[dict[Path, int]] = [{} for _ in range(level + 1)]
    for domain, units in sums[level].items():
        if units >= per:
            caps[level][domain] = units // per
    for k in range(level - 1, -1, -1):
        for domain, n in caps[k + 1].items():
            caps[k][domain[: k + 1]] = caps[k].get(domain[: k + 1], 0) + n
    wanted = need // per
    total = sum(caps[0].values())
    chosen: list[tuple[Path, int]]
    if mode == "unconstrained":
        if total < wanted:
            return PlacementResult(None, total * per)
        chosen = []
        left = wanted
        for n, domain in sorted((n, p) for p, n in caps[level].items()):
            take = min(n, left)
            chosen.append((domain, take))
            left -= take
            if not left:
                break
        out: list[tuple[NodeSlot, int]] = []
        for domain, n in chosen:
            _least_free_nodes(domain, level, n * per, room, index, out)
        return _result(out, need)
    start = index.level_of(label) if label else level
    if start is None or start > level:
        return PlacementResult(None, 0)  # unknown level, or below the slices'
    for k in range(start, -1, -1):
        fitting = [(n, p) for p, n in caps[k].items() if n >= wanted]
        if fitting:
            _, domain = min(fitting)
            chosen = _slice_domains(domain, k, wanted, level, caps)
            break
        if mode == "required":
            return PlacementResult(None, max(caps[k].values(), default=0) * per)
    else:
        if total < wanted:
            return PlacementResult(None, total * per)
        chosen = _slice_domains((), -1, wanted, level, caps)
    placed: list[tuple[NodeSlot, int]] = []
    for domain, n in chosen:
        placed.extend(_descend(domain, level, n * per, sums, room, index))
    return _result(placed, need)


def _slice_domains(
    domain: Path, k: int, wanted: int, level: int, caps: list[dict[Path, int]]
) -> list[tuple[Path, int]]:
    """The domains of the slice level under ``domain`` (at level ``k``) that take
    ``wanted`` slices: the fewest at each level, as :func:`_descend` does for units."""
    if k == level:
        return [(domain, wanted)]
    children = [(n, p) for p, n in caps[k + 1].items() if p[: k + 1] == domain]
    out: list[tuple[Path, int]] = []
    for child, take in _pick(children, wanted):
        out.extend(_slice_domains(child, k + 1, take, level, caps))
    return out


def _on_few_domains(
    most: int,
    level: int,
    need: int,
    sums: list[dict[Path, int]],
    room: dict[NodeSlot, int],
    index: DomainIndex,
) -> PlacementResult:
    """At most ``most`` domains of ``level``, under one domain of the level above
    (Slurm's ``--switches``: leaf switches under a common switch), the tightest such
    set."""
    by_parent: dict[Path, list[int]] = {}
    for path, n in sums[level].items():
        by_parent.setdefault(path[:level], []).append(n)
    best: tuple[int, Path] | None = None
    top = 0
    for parent, rooms in by_parent.items():
        held = sum(sorted(rooms, reverse=True)[:most])
        top = max(top, held)
        if held >= need and (best is None or (held, parent) < best):
            best = (held, parent)
    if best is None:
        return PlacementResult(None, top)
    return _result(_descend(best[1], level - 1, need, sums, room, index), need)


def _descend(
    domain: Path,
    k: int,
    need: int,
    sums: list[dict[Path, int]],
    room: dict[NodeSlot, int],
    index: DomainIndex,
    held: Held | None = None,
) -> list[tuple[NodeSlot, int]]:
    depth = len(index.levels)
    if k == depth - 1:
        return _nodes([s for s in index.leaves.get(domain, ()) if s in room], need, room, held)
    children = [(s, p) for p, s in sums[k + 1].items() if p[: k + 1] == domain]
    out: list[tuple[NodeSlot, int]] = []
    if held is not None:
        # The children holding held nodes first (the most held room first), filled.
        first = sorted(
            ((held.sums[k + 1][p], s, p) for s, p in children if p in held.sums[k + 1]),
            key=lambda c: (-c[0], c[2]),
        )
        for _, s, p in first:
            take = min(s, need)
            out.extend(_descend(p, k + 1, take, sums, room, index, held))
            need -= take
            if not need:
                return out
        children = [c for c in children if c[1] not in held.sums[k + 1]]
    for child, take in _pick(children, need):
        out.extend(_descend(child, k + 1, take, sums, room, index))
    return out


def _nodes(
    slots: list[NodeSlot], need: int, room: dict[NodeSlot, int], held: Held | None = None
) -> list[tuple[NodeSlot, int]]:
    out: list[tuple[NodeSlot, int]] = []
    if held is not None:
        for slot in sorted((s for s in slots if s in held.nodes), key=lambda s: s.name):
            take = min(room[slot], need)
            out.append((slot, take))
            need -= take
            if not need:
                return out
        slots = [s for s in slots if s not in held.nodes]
    by_name: dict[Path, NodeSlot] = {(s.name,): s for s in slots}
    picked = _pick([(room[s], (s.name,)) for s in slots], need)
    return out + [(by_name[key], take) for key, take in picked]


def _result(chosen: list[tuple[NodeSlot, int]], need: int) -> PlacementResult:
    return PlacementResult(tuple(chosen), need)
