"""Why a job is pending: a machine-readable code, a sentence, and the facts behind it.

Reasons are data built from the record of what the flavor assigner and the
placement policy tried, not strings written ad hoc.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
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
    PENDING = "Pending"
    """Kueue's generic reason: nominated, then skipped in this cycle (it no longer fit
    after another admission); it is tried again in the next cycle."""
    PENDING_PREEMPTION = "PendingPreemption"
    """Its preemptions are issued: it waits for the victims to release their quota."""
    NAMESPACE_MISMATCH = "NamespaceMismatch"
    """The job's namespace doesn't match the ClusterQueue's namespaceSelector."""
    WAITING_FOR_PODS_READY = "WaitingForPodsReady"
    """waitForPodsReady.blockAdmission: an admitted job's pods are not ready yet."""
    REQUEUE_BACKOFF = "RequeueBackoff"
    """Requeued after a PodsReady timeout: not admissible before ``requeueAt``."""
    # Slurm's limit reasons (squeue.1 JOB REASON CODES): a PriorityClass is a QOS, a
    # Tenant an association. A job held by one does not block its ClusterQueue.
    QOS_MAX_GRES_PER_USER = "QOSMaxGRESPerUser"
    QOS_MAX_CPU_PER_USER = "QOSMaxCpuPerUserLimit"
    QOS_MAX_MEMORY_PER_USER = "QOSMaxMemoryPerUser"
    QOS_MAX_JOBS_PER_USER = "QOSMaxJobsPerUserLimit"
    QOS_MAX_GRES_PER_JOB = "QOSMaxGRESPerJob"
    QOS_MAX_CPU_PER_JOB = "QOSMaxCpuPerJobLimit"
    QOS_MAX_MEMORY_PER_JOB = "QOSMaxMemoryPerJob"
    QOS_MAX_WALL = "QOSMaxWallDurationPerJobLimit"
    QOS_GRP_GRES = "QOSGrpGRES"
    QOS_GRP_CPU = "QOSGrpCpuLimit"
    QOS_GRP_MEMORY = "QOSGrpMemLimit"
    ASSOC_GRP_GRES = "AssocGrpGRES"
    ASSOC_GRP_CPU = "AssocGrpCpuLimit"
    ASSOC_GRP_MEMORY = "AssocGrpMemLimit"
    ASSOC_GRP_JOBS = "AssocGrpJobsLimit"


class Reason:
    """A code, a sentence and the facts behind it.

    The sentence and the details may be given as functions: they are then
    worked out the first time someone reads them, so a reason nobody looks at
    costs nothing. Everything the functions use must already be captured.
    """

    __slots__ = ("_details", "_message", "_render", "code")

    def __init__(
        self,
        code: ReasonCode,
        message: str | Callable[[], str],
        details: Mapping[str, object] | Callable[[], dict[str, object]] | None = None,
    ) -> None:
        self.code = code
        self._details: dict[str, object] | Callable[[], dict[str, object]]
        self._details = details if callable(details) else dict(details or {})
        self._message: str | None
        self._render: Callable[[], str] | None
        if isinstance(message, str):
            self._message, self._render = message, None
        else:
            self._message, self._render = None, message

    @property
    def details(self) -> dict[str, object]:
        if callable(self._details):
            self._details = self._details()
        return self._details

    @property
    def message(self) -> str:
        if self._message is None:
            assert self._render is not None
            self._message, self._render = self._render(), None
        return self._message

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Reason):
            return NotImplemented
        if self is other:
            return True
        return (
            self.code == other.code
            and self.details == other.details
            and self.message == other.message
        )

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Reason(code={self.code!r}, message={self.message!r}, details={self.details!r})"

    def to_dict(self) -> dict[str, object]:
        return {"code": self.code.value, "message": self.message, "details": self.details}


def reason_from_dict(data: Mapping[str, Any]) -> Reason:
    return Reason(ReasonCode(data["code"]), str(data["message"]), dict(data.get("details", {})))
