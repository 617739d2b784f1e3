"""The ``Active`` condition Kueue writes in a ClusterQueue's and a LocalQueue's status.

A ClusterQueue that names a missing ResourceFlavor, or that is stopped, is
accepted but admits nothing; a LocalQueue whose ClusterQueue is missing or
inactive is accepted but takes no workloads. ``get cq -o yaml`` and ``get lq
-o yaml`` show this as Kueue does, in ``status.conditions`` (type, status,
reason, message; phalanx keeps no transition times for these).
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["cluster_queue_conditions", "local_queue_conditions"]

Condition = dict[str, str]


def _active(ok: bool, reason: str, message: str) -> list[Condition]:
    return [
        {
            "type": "Active",
            "status": "True" if ok else "False",
            "reason": reason,
            "message": message,
        }
    ]


def cluster_queue_conditions(
    missing_flavors: Iterable[str], stopped: bool, other_inactive: str | None = None
) -> list[Condition]:
    """``Active``: ``Ready``, or ``Stopped`` / ``FlavorNotFound`` with Kueue's message.

    ``other_inactive`` is phalanx's own sentence for any other reason the queue
    admits nothing (a cohort cycle), reported with reason ``Unknown``.
    """
    missing = list(missing_flavors)
    reasons: list[str] = []
    messages: list[str] = []
    if stopped:
        reasons.append("Stopped")
        messages.append("is stopped")
    if missing:
        reasons.append("FlavorNotFound")
        messages.append(f"references missing ResourceFlavor(s): {','.join(missing)}")
    if reasons:
        return _active(False, reasons[0], f"Can't admit new workloads: {', '.join(messages)}.")
    if other_inactive:
        return _active(False, "Unknown", other_inactive)
    return _active(True, "Ready", "Can admit new workloads")


def local_queue_conditions(
    cluster_queue_exists: bool, cluster_queue_active: bool, stopped: bool
) -> list[Condition]:
    """``Active`` of a LocalQueue, as Kueue's LocalQueue controller sets it."""
    if stopped:
        return _active(False, "Stopped", "LocalQueue is stopped")
    if not cluster_queue_exists:
        return _active(
            False, "ClusterQueueDoesNotExist", "Can't submit new workloads to clusterQueue"
        )
    if not cluster_queue_active:
        return _active(
            False, "ClusterQueueIsInactive", "Can't submit new workloads to clusterQueue"
        )
    return _active(True, "Ready", "Can submit new workloads to localQueue")
