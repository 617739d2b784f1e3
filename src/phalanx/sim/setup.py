"""What a simulation runs: a cluster, its queues, a policy, and jobs made from a trace.

A :class:`Cluster` is the nodes (8-GPU nodes, each optionally in one
tenant's pool) and, per tenant, its share of the GPUs. :func:`scenario` turns a
cluster and a policy into the engine configuration and the objects the engine
is given before the first job, the same objects the live system would hold
(ResourceFlavors, Nodes, Cohort, ClusterQueues, Tenants), and a function that
makes each trace job into an engine :class:`~phalanx.model.Job`.

Policies:

``slurm``
    Slurm's model: one partition (ClusterQueue) over every node, the
    multifactor priority with Fair Tree over the tenants (accounts, shares
    by their entitlement), backfill with Slurm's defaults.
``kueue``
    Kueue's: one ClusterQueue per tenant in one Cohort, nominal quota by
    entitlement, borrowing unlimited, BestEffortFIFO, Kueue's ordering, one
    head per ClusterQueue per cycle.
``phalanx``
    The same queues as ``kueue`` with phalanx's preset: its fair-share
    priority over the tenants' decayed usage, every head that fits per cycle.
``fifo`` / ``sjf``
    Reference points: one queue per pool, strict order (the head blocks the
    queue), by submission (``fifo``) or by the true duration (``sjf``,
    an oracle), no backfill, no preemption.

Placement is consolidated for every policy: a job of up to 8 GPUs on one node
(the engine's best fit), a larger one on whole nodes, ``ceil(gpus / 8)`` of them
(the FIFO fidelity rules, see ``docs/simulator.md``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from phalanx.engine import EngineConfig
from phalanx.errors import Invalid
from phalanx.model import ClusterQueue, Cohort, Job, Node, PodSet, ResourceFlavor, Tenant
from phalanx.sim.trace import TraceJob

__all__ = ["POLICIES", "Cluster", "Scenario", "scenario"]

POLICIES = ("phalanx", "slurm", "kueue", "fifo", "sjf")
NODE_GPUS = 8
GPU = "nvidia.com/gpu"
POOL_LABEL = "sim.phalanx.io/pool"


@dataclass(frozen=True, slots=True)
class Cluster:
    """8-GPU nodes, per pool; ``isolated``: each tenant only on its own pool's nodes
    (the Helios setting), else one shared pool and each tenant's entitlement."""

    nodes: Mapping[str, int]
    """Pool (a tenant when isolated, ``shared`` otherwise) -> node count."""
    shares: Mapping[str, float]
    """Tenant -> its entitlement (any positive numbers; normalised)."""
    isolated: bool = False

    @property
    def gpus(self) -> int:
        return sum(self.nodes.values()) * NODE_GPUS

    @classmethod
    def isolated_pools(cls, nodes: Mapping[str, int]) -> Cluster:
        return cls(dict(nodes), {k: float(v) for k, v in nodes.items()}, isolated=True)

    @classmethod
    def shared_pool(cls, node_count: int, shares: Mapping[str, float]) -> Cluster:
        return cls({"shared": node_count}, dict(shares), isolated=False)


@dataclass(slots=True)
class Scenario:
    """The engine configuration, the objects to apply first, and the job maker."""

    policy: str
    config: EngineConfig
    objects: list[Any] = field(default_factory=list)
    make_job: Callable[[TraceJob], Job] = field(default=lambda j: Job(id=0, pod_sets=[]))


def _quotas(total: int, shares: Mapping[str, float]) -> dict[str, int]:
    """``total`` GPUs split by ``shares`` in whole GPUs (largest remainders), summing to it."""
    weight = sum(shares.values())
    exact = {k: total * v / weight for k, v in shares.items()}
    out = {k: math.floor(v) for k, v in exact.items()}
    rest = total - sum(out.values())
    for k in sorted(exact, key=lambda k: (out[k] - exact[k], k))[:rest]:
        out[k] += 1
    return out


def _cluster_queue(
    name: str, flavor: str, gpus: int, *, cohort: str | None, strict: bool
) -> ClusterQueue:
    spec: dict[str, Any] = {
        "name": name,
        "namespaceSelector": {},
        "queueingStrategy": "StrictFIFO" if strict else "BestEffortFIFO",
        "resourceGroups": [
            {
                "coveredResources": [GPU],
                "flavors": [{"name": flavor, "resources": [{"name": GPU, "nominalQuota": gpus}]}],
            }
        ],
    }
    if cohort is not None:
        spec["cohortName"] = cohort
    return ClusterQueue.model_validate(spec)


def pod_sets(gpus: int) -> list[PodSet]:
    """Consolidated: up to 8 GPUs on one node; more on ``ceil(gpus / 8)`` whole nodes."""
    if gpus <= NODE_GPUS:
        return [PodSet(count=1, requests={GPU: gpus} if gpus else {})]
    nodes = -(-gpus // NODE_GPUS)
    return [PodSet(count=nodes, tasks_per_node=1, requests={GPU: NODE_GPUS})]


def scenario(cluster: Cluster, policy: str) -> Scenario:
    """The engine setup for ``policy`` on ``cluster`` (see the module docstring)."""
    if policy not in POLICIES:
        raise Invalid(f"--policy: {policy!r} is not known (known: {', '.join(POLICIES)})")
    reference = policy in ("fifo", "sjf")
    if policy in ("slurm", "kueue", "phalanx"):
        config = EngineConfig.for_preset(policy)
        if policy == "kueue":
            # Pods start as soon as they are admitted in a simulation: no PodsReady wait.
            config = EngineConfig.for_preset(policy, wait_for_pods_ready=None)
    else:
        config = EngineConfig.for_preset(
            "kueue", heads_per_cycle=None, wait_for_pods_ready=None, placement="tight"
        )
    objects: list[Any] = []
    pools = sorted(cluster.nodes)
    for pool in pools:
        objects.append(ResourceFlavor(name=f"pool-{pool}", node_labels={POOL_LABEL: pool}))
    for pool in pools:
        for i in range(cluster.nodes[pool]):
            objects.append(
                Node(
                    name=f"{pool}-{i:03d}",
                    labels={POOL_LABEL: pool},
                    capacity={GPU: NODE_GPUS, "cpu": "96", "memory": "1000Gi"},
                )
            )
    tenants = sorted(cluster.shares)
    weight = sum(cluster.shares.values())
    objects.extend(Tenant(name=t, allocation=cluster.shares[t] / weight) for t in tenants)
    queue_of: dict[str, str] = {}
    if cluster.isolated:
        for tenant in tenants:
            objects.append(
                _cluster_queue(
                    tenant,
                    f"pool-{tenant}",
                    cluster.nodes[tenant] * NODE_GPUS,
                    cohort=None,
                    strict=reference,
                )
            )
            queue_of[tenant] = tenant
    elif policy in ("kueue", "phalanx"):
        objects.append(Cohort(name="all"))
        for tenant, gpus in _quotas(cluster.gpus, cluster.shares).items():
            objects.append(_cluster_queue(tenant, "pool-shared", gpus, cohort="all", strict=False))
            queue_of[tenant] = tenant
    else:
        objects.append(
            _cluster_queue("all", "pool-shared", cluster.gpus, cohort=None, strict=reference)
        )
        queue_of = dict.fromkeys(tenants, "all")

    def make_job(job: TraceJob) -> Job:
        queue = queue_of.get(job.tenant)
        if queue is None:
            raise Invalid(f"job {job.id}: tenant {job.tenant!r} has no queue in this cluster")
        return Job(
            id=job.id,
            tenant=job.tenant,
            cluster_queue=queue,
            submit_time=job.submit,
            pod_sets=pod_sets(job.gpus),
            time_limit=job.time_limit,
            priority=-math.ceil(job.duration) if policy == "sjf" else None,
        )

    return Scenario(policy, config, objects, make_job)
