"""Slurm's names for why a job is pending, from phalanx's reason codes.

squeue shows ``(Reason)`` with Slurm's names (squeue.1 JOB REASON CODES);
phalanx's engine speaks Kueue's vocabulary. This is the one place the two meet.
"""

from __future__ import annotations

__all__ = ["GATE_REASONS", "slurm_reason"]

GATE_REASONS = frozenset(
    {
        "JobHeldUser",
        "JobHeldAdmin",
        "BeginTime",
        "Dependency",
        "DependencyNeverSatisfied",
        "JobArrayTaskLimit",
    }
)
"""Reasons the control plane gives jobs it keeps out of the engine (already Slurm's names)."""

_FROM_ENGINE = {
    "Priority": "Priority",
    "StrictFIFO": "Priority",
    "InsufficientQuota": "Resources",
    "NoNodeFit": "Resources",
    "ExceedsMaxQuota": "PartitionConfig",
    "NoMatchingFlavor": "BadConstraints",
    "UndeclaredResource": "BadConstraints",
    "ClusterQueueNotFound": "PartitionConfig",
    "LocalQueueNotFound": "PartitionConfig",
    "ClusterQueueInactive": "PartitionInactive",
    "Stopped": "PartitionDown",
}


def slurm_reason(state: str, reason: str) -> str:
    """The reason squeue would show for a job in ``state`` with phalanx ``reason``."""
    if state == "NODE_FAIL":
        # Slurm's FAIL_DOWN_NODE: the job was killed with its node.
        return "NodeDown"
    if state != "PENDING":
        return "None"
    if not reason:
        return "None"
    if reason in GATE_REASONS:
        return reason
    return _FROM_ENGINE.get(reason, reason)
