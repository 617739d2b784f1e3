"""What every placement policy shares: its protocol, its result and the unit arithmetic.

A placement policy chooses nodes for one pod set in one flavor. The engine
supplies the flavor's node index, a node filter (schedulability, node
selector and affinity, taints, the labels of the other flavors assigned to the
pod set) and an *overlay* of what earlier pod sets of the same job have
already tentatively taken (per resource, and per GPU device under
:func:`~phalanx.engine.cache.capacity.device_key`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from phalanx.engine.cache.capacity import MILLI, Devices, FlavorNodes, NodeSlot, device_key
from phalanx.engine.queueing.shapes import PodSetShape
from phalanx.model import GPU, GPU_MILLI

__all__ = [
    "NodeFilter",
    "Overlay",
    "PlacementPolicy",
    "PlacementResult",
    "add_to_overlay",
    "plan_devices",
    "unit_amounts",
]

NodeFilter = Callable[[NodeSlot], bool]
Overlay = dict[NodeSlot, dict[str, int]]


@dataclass(frozen=True, slots=True)
class PlacementResult:
    """``nodes`` is ``((slot, units), ...)`` on success; ``max_units`` bounds what fits.

    ``share_devices``, when given, names per node the GPU device the first GPU share
    placed there should take (the one the policy scored), -1 for no preference.
    """

    nodes: tuple[tuple[NodeSlot, int], ...] | None
    max_units: int
    share_devices: tuple[int, ...] | None = None

    @property
    def ok(self) -> bool:
        return self.nodes is not None


class PlacementPolicy(Protocol):
    """Chooses nodes for one pod set in one flavor."""

    name: str

    def place(
        self,
        pod_set: PodSetShape,
        nodes: FlavorNodes,
        node_filter: NodeFilter | None,
        overlay: Overlay,
    ) -> PlacementResult: ...


def unit_amounts(pod_set: PodSetShape, slot: NodeSlot) -> dict[str, int]:
    """What one unit of ``pod_set`` takes from ``slot`` (the whole node when exclusive)."""
    if pod_set.exclusive:
        return dict(slot.capacity)
    return pod_set.unit_request()


def plan_devices(
    slot: NodeSlot,
    pod_set: PodSetShape,
    units: int,
    prefer: int = -1,
    extra: dict[str, int] | None = None,
) -> tuple[Devices, tuple[int, ...]]:
    """The GPU devices ``units`` units of ``pod_set`` take on ``slot``, and each task's
    device indices in task order.

    Whole GPUs go to the lowest-numbered untouched devices (Slurm's and the device
    plugin's order); an exclusive pod set holds every device and its tasks see the
    ones they asked for. A share goes to device ``prefer`` (the scored choice) when it
    still has room, else to the tightest device that holds it.
    """
    tasks = units * pod_set.unit_size
    if pod_set.exclusive:
        every: Devices = tuple((i, MILLI - u) for i, u in enumerate(slot.gpu_used) if u < MILLI)
        per_task = pod_set.request(GPU)
        return every, tuple(i for i, _ in every[: tasks * per_task])
    whole = pod_set.request(GPU)
    if whole:
        chosen = slot.whole_devices(tasks * whole, slot.device_free(extra))
        return tuple((i, MILLI) for i in chosen), tuple(chosen)
    milli = pod_set.request(GPU_MILLI)
    if not milli or not slot.gpu_used:
        return (), ()
    free = slot.device_free(extra)
    picked: list[int] = []
    for _ in range(tasks):
        index = -1
        if prefer >= 0 and not picked and prefer < len(free) and free[prefer] >= milli:
            index = prefer
        if index < 0:
            index = slot.share_device(free, milli)
        if index < 0:
            break
        free[index] -= milli
        picked.append(index)
    return tuple((i, milli) for i in picked), tuple(picked)


def add_to_overlay(
    overlay: Overlay, pod_set: PodSetShape, slot: NodeSlot, units: int, prefer: int = -1
) -> None:
    """Record in ``overlay`` what ``units`` units of ``pod_set`` tentatively take on
    ``slot``, so that later pod sets of the same job see it (GPU shares by device)."""
    extra = overlay.setdefault(slot, {})
    if pod_set.exclusive:
        for resource, amount in slot.capacity.items():
            extra[resource] = extra.get(resource, 0) + amount
        return
    for resource, amount in pod_set.unit_request().items():
        extra[resource] = extra.get(resource, 0) + amount * units
    if pod_set.request(GPU_MILLI) and slot.gpu_used:
        # Against what earlier pod sets took (their devices and whole GPUs).
        devices, _ = plan_devices(slot, pod_set, units, prefer, extra)
        for index, milli in devices:
            key = device_key(index)
            extra[key] = extra.get(key, 0) + milli
