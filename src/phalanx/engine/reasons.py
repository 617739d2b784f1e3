"""Why a job is pending: a machine-readable code, a sentence, and the facts behind it.

Reasons are data built from the record of what the flavor assigner and the
placement policy tried, not strings written ad hoc.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

__all__ = ["Reason", "ReasonCode", "reason_from_dict"]


class ReasonCode(StrEnum):
    PRIORITY = "Priority"
    """Not yet considered: higher-priority jobs of its ClusterQueue go first."""
    INSUFFICIENT_QUOTA = "InsufficientQuota"
    """Quota is short now; it may fit when other jobs finish."""
    EXCEEDS_MAX_QUOTA = "ExceedsMaxQuota"
    """More than the ClusterQueue could ever get, even from an idle cohort."""
    NO_MATCHING_FLAVOR = "NoMatchingFlavor"
    """No flavor's labels and taints suit the job's node selector and tolerations."""
    NO_NODE_FIT = "NoNodeFit"
    """Quota fits but no set of nodes holds the whole gang now."""
    STRICT_FIFO = "StrictFIFO"
    """Behind the blocked head of a StrictFIFO ClusterQueue."""
    CLUSTER_QUEUE_NOT_FOUND = "ClusterQueueNotFound"
    LOCAL_QUEUE_NOT_FOUND = "LocalQueueNotFound"
    INACTIVE = "ClusterQueueInactive"
    """The ClusterQueue references a missing flavor or its cohort tree has a cycle."""
    STOPPED = "Stopped"
    """The ClusterQueue or LocalQueue has a stopPolicy other than None."""
    UNDECLARED_RESOURCE = "UndeclaredResource"
    """The job requests a resource the ClusterQueue has no quota for."""


@dataclass(frozen=True, slots=True)
class Reason:
    code: ReasonCode
    message: str
    details: dict[str, object] = field(default_factory=dict, compare=True, hash=False)

    def to_dict(self) -> dict[str, object]:
        return {"code": self.code.value, "message": self.message, "details": self.details}


def reason_from_dict(data: Mapping[str, Any]) -> Reason:
    return Reason(ReasonCode(data["code"]), str(data["message"]), dict(data.get("details", {})))
