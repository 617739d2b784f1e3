"""Hot swap: a failed node of a topology-placed job replaced in its own domain.

Kueue's Topology Aware Scheduling replaces a failed node of an admitted workload
with a healthy node of the same topology domain (``TASFailedNodeReplacement``),
and with ``TASFailedNodeReplacementFailFast`` evicts the workload at once when
there is none. phalanx does the same for every job placed in a flavor that has a
:class:`~phalanx.model.Topology` (Kueue TAS workloads and phalanx's own topology
placement of gangs):

* :meth:`HotSwap.plan` (a query) looks, for each of the job's failed nodes, for a
  healthy node in the failed node's lowest domain (the domain of the level just
  above the nodes: its rack, say) that takes the tasks the failed node had: up,
  not held, passing the pod set's selectors and tolerations, one the job does not
  use yet when its pod set takes one task per node; among them the tightest fit,
  then the first seen. It answers the replacements, or why there is none (then
  the caller evicts and requeues the job: FailFast);
* the :class:`~phalanx.engine.events.ReplaceNodes` event applies a plan: the job
  keeps its admission (quota, its healthy nodes and their devices); what it held
  on the failed nodes goes back and the same amounts are taken on the
  replacements. A :class:`~phalanx.engine.decisions.NodesReplaced` decision (the
  new placement) goes out, and the control plane restarts the job there.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from phalanx.engine.cache.capacity import NodeSlot
from phalanx.engine.decisions import NodeAssignment, NodesReplaced, PodSetAssignment
from phalanx.engine.placement import Overlay
from phalanx.engine.placement.assigner import node_filter
from phalanx.engine.placement.base import add_to_overlay, plan_devices, unit_amounts
from phalanx.engine.placement.topology import DomainIndex
from phalanx.engine.queueing.shapes import PodSetShape
from phalanx.engine.state import Allocation
from phalanx.model import HOSTNAME_LABEL

if TYPE_CHECKING:
    from phalanx.engine.engine import Engine

__all__ = ["HotSwap", "SwapPlan"]


@dataclass(frozen=True, slots=True)
class SwapPlan:
    """The answer of :meth:`HotSwap.plan`."""

    replaced: tuple[tuple[str, str], ...] = ()
    """``(failed node, replacement)``, in the job's placement order."""
    domains: tuple[str, ...] = ()
    """Each replacement's domain, as ``label=value`` pairs (``rack=r1``)."""
    failure: str = ""
    """Why a failed node has no replacement (FailFast); empty when every one has."""


class HotSwap:
    """Replacement of failed nodes for topology-placed jobs."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def plan(self, job_id: int, failed: tuple[str, ...]) -> SwapPlan | None:
        """Where the tasks of ``job_id`` on ``failed`` would go; None when the job is
        not admitted, is being evicted, or has no task in a Topology on those nodes
        (it is requeued as before)."""
        engine = self._engine
        rec = engine.jobs.get(job_id)
        adm = rec.admission if rec is not None else None
        if rec is None or adm is None or adm.evicting:
            return None
        lost = set(failed)
        shapes = {p.name: p for p in rec.shape.pod_sets}
        in_use = {n.node for ps in adm.decision.pod_sets for n in ps.nodes}
        overlay: Overlay = {}
        replaced: list[tuple[str, str]] = []
        domains: list[str] = []
        topology = False
        for assigned in adm.decision.pod_sets:
            shape = shapes.get(assigned.name)
            found = self._domain_index(assigned) if shape is not None else None
            if shape is None or found is None:
                continue
            flavor_name, index = found
            accept = engine.cache.node_filters.get(
                shape,
                engine.cache.flavors[flavor_name],
                engine.cache.flavor_nodes[flavor_name].tainted > 0,
                (),
                node_filter,
            )
            for placed in assigned.nodes:
                if placed.node not in lost:
                    continue
                topology = True
                domain = _lowest_domain(index, placed.node, engine.cache.nodes.get(placed.node))
                where = _describe(index, domain)
                units = placed.count // shape.unit_size
                best: NodeSlot | None = None
                best_room = 0
                for slot, path in index.paths.items():
                    if (
                        domain is None
                        or path[: len(domain)] != domain
                        or not slot.schedulable
                        or slot.name in lost
                        or (shape.one_unit_per_node and slot.name in in_use)
                        or (accept is not None and not accept(slot))
                    ):
                        continue
                    room = _room(slot, shape, overlay)
                    if room < units:
                        continue
                    if best is None or (room, slot.rank) < (best_room, best.rank):
                        best, best_room = slot, room
                if best is None:
                    return SwapPlan(
                        failure=f"no healthy node in {where or 'its topology'} can take the "
                        f"{placed.count} task(s) of failed node {placed.node}"
                    )
                add_to_overlay(overlay, shape, best, units)
                in_use.add(best.name)
                replaced.append((placed.node, best.name))
                domains.append(where)
        if not topology:
            return None
        return SwapPlan(tuple(replaced), tuple(domains))

    def replace(self, job_id: int, replaced: tuple[tuple[str, str], ...]) -> None:
        """Apply a plan of :meth:`plan`: the failed nodes' shares go back, the same are
        taken on the replacements, and :class:`NodesReplaced` goes out."""
        engine = self._engine
        rec = engine.jobs.get(job_id)
        adm = rec.admission if rec is not None else None
        if rec is None or adm is None or not replaced:
            return
        mapping = dict(replaced)
        nodes = engine.cache.nodes
        if any(new not in nodes for new in mapping.values()):
            return
        kept: list[Allocation] = []
        for allocation in adm.allocations:
            slot, amounts, exclusive, devices = allocation
            if slot.name in mapping:
                slot.give_back(rec.id, amounts, exclusive, devices)
                engine.cache.reindex(slot)
            else:
                kept.append(allocation)
        shapes = {p.name: p for p in rec.shape.pod_sets}
        pod_sets: list[PodSetAssignment] = []
        for assigned in adm.decision.pod_sets:
            shape = shapes[assigned.name]
            placed_nodes: list[NodeAssignment] = []
            for placed in assigned.nodes:
                new = mapping.get(placed.node)
                if new is None:
                    placed_nodes.append(placed)
                    continue
                slot = nodes[new]
                units = placed.count // shape.unit_size
                amounts = unit_amounts(shape, slot)
                if not shape.exclusive:
                    amounts = {r: a * units for r, a in amounts.items()}
                devices, gpus = plan_devices(slot, shape, units)
                slot.take(rec.id, amounts, shape.exclusive, devices)
                engine.cache.reindex(slot)
                kept.append((slot, amounts, shape.exclusive, devices))
                placed_nodes.append(NodeAssignment(new, placed.count, gpus))
            pod_sets.append(replace(assigned, nodes=tuple(placed_nodes)))
        adm.allocations = kept
        adm.decision = replace(adm.decision, pod_sets=tuple(pod_sets))
        # It restarts: its minimum runtime, and the work preempting it would lose (its
        # last checkpoint was from before the failure), count from now.
        adm.admitted_at = engine.now
        adm.checkpoint_at = None
        engine.assigner.generation += 1
        engine.ends.changed()
        ready = engine.config.wait_for_pods_ready
        if ready is not None:
            engine.pods_ready.unready[rec.id] = engine.now + ready.timeout_s
        engine.outbox.append(NodesReplaced(rec.id, tuple(replaced), adm.decision))

    def _domain_index(self, assigned: PodSetAssignment) -> tuple[str, DomainIndex] | None:
        """The pod set's flavor with a Topology, and its domain index."""
        cache = self._engine.cache
        for _, flavor_name in assigned.flavors:
            flavor = cache.flavors.get(flavor_name)
            index = cache.flavor_nodes.get(flavor_name)
            if flavor is None or index is None or not flavor.topology_name:
                continue
            domains = self._engine.assigner.domain_index(flavor, index)
            if domains is not None:
                return flavor_name, domains
        return None


def _lowest_domain(index: DomainIndex, name: str, slot: NodeSlot | None) -> tuple[str, ...] | None:
    """The failed node's domain of the level just above the nodes (its whole path when
    the Topology's lowest level is not the hostname); None when it is outside."""
    path = index.paths.get(slot) if slot is not None else None
    if path is None and slot is not None:
        labels = slot.node.labels
        values = [
            labels.get(label, name if label == HOSTNAME_LABEL else None) for label in index.levels
        ]
        if all(v is not None for v in values):
            path = tuple(v for v in values if v is not None)
    if path is None:
        return None
    if index.levels[-1] == HOSTNAME_LABEL and len(path) > 1:
        return path[:-1]
    return path


def _describe(index: DomainIndex, domain: tuple[str, ...] | None) -> str:
    if not domain:
        return ""
    return ", ".join(f"{label}={value}" for label, value in zip(index.levels, domain, strict=False))


def _room(slot: NodeSlot, shape: PodSetShape, overlay: Overlay) -> int:
    """How many units of ``shape`` ``slot`` takes now (beyond what ``overlay`` took)."""
    if shape.exclusive:
        return 1 if slot.idle and slot not in overlay else 0
    return slot.fit_units(shape.unit_request(), overlay.get(slot), shape.share)
