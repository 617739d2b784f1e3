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
    priority over the tenants' decayed usage, every head that fits per cycle,
    and backfill with a reservation for each ClusterQueue's top blocked job
    (jobs within their nominal quota planned before borrowers).
``fifo`` / ``sjf``
    Reference points: one queue per pool, strict order (the head blocks the
    queue), by submission (``fifo``) or by the true duration (``sjf``,
    an oracle), no backfill, no preemption.

Placement is consolidated for every policy: a job of up to 8 GPUs on one node
(the engine's best fit), a larger one on whole nodes, ``ceil(gpus / 8)`` of them
(the FIFO fidelity rules, see ``docs/simulator.md``). On a cluster of explicit
nodes (Node manifests, openb's node list) "8" is the largest node's GPU count,
and the queues cover CPU, memory and GPU shares as well as GPUs.

Given queue objects (``--queues``: ResourceFlavors, Cohorts, ClusterQueues,
LocalQueues, Tenants, Topologies, as the live system reads them), the policies
run on those instead of generated ones; a trace tenant's jobs go to the
ClusterQueue of that name, else to the LocalQueue of that namespace, else to
the only ClusterQueue. ``fifo`` and ``sjf`` make every ClusterQueue StrictFIFO.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from phalanx.engine import EngineConfig
from phalanx.errors import Invalid
from phalanx.model import (
    CPU,
    GPU_MILLI,
    GPU_PRODUCT_LABEL,
    MEMORY,
    ClusterQueue,
    Cohort,
    Job,
    LocalQueue,
    Node,
    PodSet,
    ResourceFlavor,
    Tenant,
)
from phalanx.model.queue import QueueingStrategy
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
    machines: tuple[Node, ...] = ()
    """Explicit nodes of any sizes, one shared pool (``nodes`` is then
    ``{"shared": len(machines)}``)."""
    queues: tuple[Any, ...] = ()
    """Queue objects to run on instead of the generated ones (``--queues``)."""

    @property
    def gpus(self) -> int:
        if self.machines:
            return sum(int(n.capacity.get(GPU, 0)) for n in self.machines)
        return sum(self.nodes.values()) * NODE_GPUS

    @property
    def node_gpus(self) -> int:
        """GPUs of the largest node: a job asking for more takes whole nodes."""
        if self.machines:
            return max((int(n.capacity.get(GPU, 0)) for n in self.machines), default=0) or 1
        return NODE_GPUS

    @classmethod
    def isolated_pools(cls, nodes: Mapping[str, int]) -> Cluster:
        return cls(dict(nodes), {k: float(v) for k, v in nodes.items()}, isolated=True)

    @classmethod
    def shared_pool(cls, node_count: int, shares: Mapping[str, float]) -> Cluster:
        return cls({"shared": node_count}, dict(shares), isolated=False)

    @classmethod
    def from_nodes(cls, machines: Sequence[Node], shares: Mapping[str, float]) -> Cluster:
        if not machines:
            raise Invalid("--cluster: no nodes")
        return cls({"shared": len(machines)}, dict(shares), machines=tuple(machines))


@dataclass(slots=True)
class Scenario:
    """The engine configuration, the objects to apply first, and the job maker."""

    policy: str
    config: EngineConfig
    objects: list[Any] = field(default_factory=list)
    make_job: Callable[[TraceJob], Job] = field(default=lambda j: Job(id=0, pod_sets=[]))
    node_gpus: int = NODE_GPUS
    """GPUs of the largest node (a job asking for more takes whole nodes)."""


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
    name: str, flavor: str, quota: Mapping[str, int], *, cohort: str | None, strict: bool
) -> ClusterQueue:
    resources = [{"name": r, "nominalQuota": f"{a}m" if r == CPU else a} for r, a in quota.items()]
    spec: dict[str, Any] = {
        "name": name,
        "namespaceSelector": {},
        "queueingStrategy": "StrictFIFO" if strict else "BestEffortFIFO",
        "resourceGroups": [
            {
                "coveredResources": list(quota),
                "flavors": [{"name": flavor, "resources": resources}],
            }
        ],
    }
    if cohort is not None:
        spec["cohortName"] = cohort
    return ClusterQueue.model_validate(spec)


def pod_sets(gpus: int, node_gpus: int = NODE_GPUS) -> list[PodSet]:
    """Consolidated: up to ``node_gpus`` GPUs on one node; more on ``ceil(gpus /
    node_gpus)`` whole nodes."""
    if gpus <= node_gpus:
        return [PodSet(count=1, requests={GPU: gpus} if gpus else {})]
    nodes = -(-gpus // node_gpus)
    return [PodSet(count=nodes, tasks_per_node=1, requests={GPU: node_gpus})]


def job_pod_sets(job: TraceJob, node_gpus: int = NODE_GPUS) -> list[PodSet]:
    """The trace job's pod set: :func:`pod_sets`, with its CPU, memory, GPU share and
    GPU models when the trace has them (split evenly over the nodes of a larger job)."""
    if not (job.cpus or job.memory_mib or job.gpu_milli < 1000 or job.gpu_models):
        return pod_sets(job.gpus, node_gpus)
    tasks = 1 if job.gpus <= node_gpus else -(-job.gpus // node_gpus)
    requests: dict[str, Any] = {}
    if job.cpus:
        requests[CPU] = f"{math.ceil(job.cpus * 1000 / tasks)}m"
    if job.memory_mib:
        requests[MEMORY] = f"{math.ceil(job.memory_mib / tasks)}Mi"
    if job.gpus and job.gpu_milli < 1000:
        requests[GPU_MILLI] = job.gpu_milli
    elif job.gpus:
        requests[GPU] = job.gpus if tasks == 1 else node_gpus
    spec: dict[str, Any] = {"count": tasks, "requests": requests}
    if tasks > 1:
        spec["tasksPerNode"] = 1
    if job.gpus and job.gpu_models:
        spec["nodeAffinity"] = [
            {
                "matchExpressions": [
                    {"key": GPU_PRODUCT_LABEL, "operator": "In", "values": list(job.gpu_models)}
                ]
            }
        ]
    return [PodSet.model_validate(spec)]


def _quota(cluster: Cluster) -> dict[str, int]:
    """The cluster's resources a generated ClusterQueue covers."""
    if not cluster.machines:
        return {GPU: cluster.gpus}
    total: dict[str, int] = {GPU: 0, GPU_MILLI: 0, CPU: 0, MEMORY: 0}
    for node in cluster.machines:
        gpus = int(node.capacity.get(GPU, 0))
        total[GPU] += gpus
        total[GPU_MILLI] += gpus * 1000
        total[CPU] += int(node.capacity.get(CPU, 0))
        total[MEMORY] += int(node.capacity.get(MEMORY, 0))
    return total


def _split(quota: Mapping[str, int], shares: Mapping[str, float]) -> dict[str, dict[str, int]]:
    """Each tenant's part of every resource, by ``shares``."""
    parts = {r: _quotas(a, shares) for r, a in quota.items()}
    return {t: {r: parts[r][t] for r in quota} for t in shares}


def _nodes(cluster: Cluster) -> list[Node]:
    if cluster.machines:
        return [
            n.model_copy(update={"labels": {**n.labels, POOL_LABEL: "shared"}})
            for n in cluster.machines
        ]
    return [
        Node(
            name=f"{pool}-{i:03d}",
            labels={POOL_LABEL: pool},
            capacity={GPU: NODE_GPUS, "cpu": "96", "memory": "1000Gi"},
        )
        for pool in sorted(cluster.nodes)
        for i in range(cluster.nodes[pool])
    ]


def _config(policy: str) -> EngineConfig:
    if policy == "kueue":
        # Pods start as soon as they are admitted in a simulation: no PodsReady wait.
        return EngineConfig.for_preset(policy, wait_for_pods_ready=None)
    if policy in ("slurm", "phalanx"):
        return EngineConfig.for_preset(policy)
    return EngineConfig.for_preset(
        "kueue", heads_per_cycle=None, wait_for_pods_ready=None, placement="tight"
    )


def scenario(cluster: Cluster, policy: str) -> Scenario:
    """The engine setup for ``policy`` on ``cluster`` (see the module docstring)."""
    if policy not in POLICIES:
        raise Invalid(f"--policy: {policy!r} is not known (known: {', '.join(POLICIES)})")
    reference = policy in ("fifo", "sjf")
    config = _config(policy)
    objects: list[Any] = []
    if not cluster.queues:
        for pool in sorted(cluster.nodes):
            objects.append(ResourceFlavor(name=f"pool-{pool}", node_labels={POOL_LABEL: pool}))
    objects.extend(_nodes(cluster))
    if cluster.queues:
        queue_of = _given_queues(cluster, objects, strict=reference)
    else:
        queue_of = _generated_queues(cluster, policy, objects, strict=reference)
    node_gpus = cluster.node_gpus

    def make_job(job: TraceJob) -> Job:
        target = queue_of.get(job.tenant) or queue_of.get("")
        if target is None:
            raise Invalid(f"job {job.id}: tenant {job.tenant!r} has no queue in this cluster")
        cluster_queue, local_queue = target
        return Job(
            id=job.id,
            tenant=job.tenant,
            queue=local_queue,
            cluster_queue=cluster_queue,
            submit_time=job.submit,
            pod_sets=job_pod_sets(job, node_gpus),
            time_limit=job.time_limit,
            priority=-math.ceil(job.duration) if policy == "sjf" else None,
        )

    return Scenario(policy, config, objects, make_job, node_gpus)


Target = tuple[str, str | None]
"""A job's ClusterQueue and LocalQueue."""


def _tenants(cluster: Cluster) -> list[Tenant]:
    weight = sum(cluster.shares.values()) or 1.0
    return [Tenant(name=t, allocation=cluster.shares[t] / weight) for t in sorted(cluster.shares)]


def _generated_queues(
    cluster: Cluster, policy: str, objects: list[Any], *, strict: bool
) -> dict[str, Target]:
    """The policy's own queues (see the module docstring); tenant -> target."""
    objects.extend(_tenants(cluster))
    tenants = sorted(cluster.shares)
    queue_of: dict[str, Target] = {}
    if cluster.isolated:
        for tenant in tenants:
            quota = {GPU: cluster.nodes[tenant] * NODE_GPUS}
            objects.append(
                _cluster_queue(tenant, f"pool-{tenant}", quota, cohort=None, strict=strict)
            )
            queue_of[tenant] = (tenant, None)
    elif policy in ("kueue", "phalanx"):
        objects.append(Cohort(name="all"))
        for tenant, quota in _split(_quota(cluster), cluster.shares).items():
            objects.append(_cluster_queue(tenant, "pool-shared", quota, cohort="all", strict=False))
            queue_of[tenant] = (tenant, None)
    else:
        objects.append(
            _cluster_queue("all", "pool-shared", _quota(cluster), cohort=None, strict=strict)
        )
        queue_of = {t: ("all", None) for t in tenants}
    return queue_of


def _given_queues(cluster: Cluster, objects: list[Any], *, strict: bool) -> dict[str, Target]:
    """``cluster.queues`` (StrictFIFO for the reference policies); tenant -> target."""
    given = list(cluster.queues)
    if not any(isinstance(o, Tenant) for o in given):
        given.extend(_tenants(cluster))
    cluster_queues = [o for o in given if isinstance(o, ClusterQueue)]
    if not cluster_queues:
        raise Invalid("--queues: no ClusterQueue to run the jobs in")
    if strict:
        given = [
            o.model_copy(update={"queueing_strategy": QueueingStrategy.STRICT_FIFO})
            if isinstance(o, ClusterQueue)
            else o
            for o in given
        ]
    objects.extend(given)
    queue_of: dict[str, Target] = {}
    for lq in sorted((o for o in given if isinstance(o, LocalQueue)), key=lambda q: q.name):
        queue_of.setdefault(lq.namespace, (lq.cluster_queue, lq.name))
    for cq in cluster_queues:
        queue_of[cq.name] = (cq.name, None)
    if len(cluster_queues) == 1:
        queue_of[""] = (cluster_queues[0].name, None)
    return queue_of
