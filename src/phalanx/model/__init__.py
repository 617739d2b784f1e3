"""The phalanx vocabulary: nodes, flavors, cohorts, queues, tenants, jobs and quantities.

Everything here is a frozen pydantic v2 model whose wire names follow Kueue's
v1beta2 spelling; quantities are exact integers (milli-cores, bytes, devices).
"""

from phalanx.model.affinity import (
    NodeSelectorOperator,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    affinity_matches,
)
from phalanx.model.flavor import HOSTNAME_LABEL, ResourceFlavor, Topology, TopologyLevel
from phalanx.model.job import Job, JobState, PodSet, TopologyRequest
from phalanx.model.limits import PriorityClassLimits, TenantLimits
from phalanx.model.node import (
    GPU_MODEL_LABELS,
    GPU_PRODUCT_LABEL,
    GPU_TYPE_LABEL,
    AdminState,
    Node,
    NodeState,
    Taint,
    Toleration,
    tolerates,
)
from phalanx.model.quantity import (
    CPU,
    GPU,
    GPU_MILLI,
    MEMORY,
    PODS,
    QuantityError,
    format_quantity,
    parse_quantity,
)
from phalanx.model.queue import (
    BorrowWithinCohort,
    ClusterQueue,
    ClusterQueuePreemption,
    Cohort,
    FairSharing,
    FlavorFungibility,
    FungibilityPreference,
    LocalQueue,
    QueueingStrategy,
    StopPolicy,
    WhenCanBorrow,
    WhenCanPreempt,
)
from phalanx.model.resources import FlavorQuotas, ResourceGroup, ResourceQuota
from phalanx.model.slurmrequest import SlurmComponent, SlurmRequest, SlurmSwitches
from phalanx.model.submission import (
    DEFAULT_KILL_WAIT_S,
    ArraySpec,
    JobSubmission,
    RunSpec,
    SignalSpec,
)
from phalanx.model.tenant import PriorityClass, Tenant

__all__ = [
    "CPU",
    "DEFAULT_KILL_WAIT_S",
    "GPU",
    "GPU_MILLI",
    "GPU_MODEL_LABELS",
    "GPU_PRODUCT_LABEL",
    "GPU_TYPE_LABEL",
    "HOSTNAME_LABEL",
    "MEMORY",
    "PODS",
    "AdminState",
    "ArraySpec",
    "BorrowWithinCohort",
    "ClusterQueue",
    "ClusterQueuePreemption",
    "Cohort",
    "FairSharing",
    "FlavorFungibility",
    "FlavorQuotas",
    "FungibilityPreference",
    "Job",
    "JobState",
    "JobSubmission",
    "LocalQueue",
    "Node",
    "NodeSelectorOperator",
    "NodeSelectorRequirement",
    "NodeSelectorTerm",
    "NodeState",
    "PodSet",
    "PriorityClass",
    "PriorityClassLimits",
    "QuantityError",
    "QueueingStrategy",
    "ResourceFlavor",
    "ResourceGroup",
    "ResourceQuota",
    "RunSpec",
    "SignalSpec",
    "SlurmComponent",
    "SlurmRequest",
    "SlurmSwitches",
    "StopPolicy",
    "Taint",
    "Tenant",
    "TenantLimits",
    "Toleration",
    "Topology",
    "TopologyLevel",
    "TopologyRequest",
    "WhenCanBorrow",
    "WhenCanPreempt",
    "affinity_matches",
    "format_quantity",
    "parse_quantity",
    "tolerates",
]
