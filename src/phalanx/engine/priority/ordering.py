"""Ordering: the priority functions that sort pending jobs.

An :class:`OrderingPolicy` turns a pending job and a :class:`PriorityContext`
into a number; queues sort by that number descending, then submit time, then
job id. Policies that depend on time (``time_dependent``) are re-evaluated by
the engine every ``priority_calc_period_s`` (Slurm's ``PriorityCalcPeriod``)
and when an event changes their inputs (a tenant's usage, the cluster size),
never per decision. Everything that depends on the tenant tree or on the
ClusterQueues rather than on the job (allocations, fair-share factors,
partition factors) is computed once per recalculation into
:class:`PriorityTables` (see :mod:`phalanx.engine.priority.tables`), so a
job's priority is a few table look-ups.

* :class:`FairShareOrdering` (preset ``phalanx``, the default)::

      P = w_age*ln(1+wait_s) + w_share*(1 - U/L) + w_qos*Q - w_size*(gpus/cluster_gpus)

  ``U`` is the tenant's decayed GPU-hours (from ``TenantUsage`` events) and
  ``L`` its allocation over the same decay window: its normalized share of
  the cluster times ``cluster_gpus`` times ``half_life_h / ln 2``, unless a
  ``TenantUsage`` event gives ``L`` explicitly. ``Q`` is the priority value
  over the largest PriorityClass value, in [0, 1]. With ``L == 0`` the share
  term is 0.
* :class:`SlurmOrdering` (preset ``slurm``): Slurm's priority/multifactor,
  from :mod:`phalanx.engine.priority`.
* :class:`KueueOrdering` (preset ``kueue``): the priority value alone, so jobs
  sort by priority then creation time, as Kueue's queues do.
* :class:`PerQueueOrdering`: what the engine uses; each ClusterQueue's jobs
  are ordered by the preset its ``phalanx.io/preset`` annotation names, the
  cluster-wide preset otherwise.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from phalanx.engine.priority.multifactor import (
    PriorityFactors,
    PriorityWeights,
    age_factor,
    job_priority,
    job_size_factor,
    qos_factor,
    tres_factors,
)
from phalanx.model import Job
from phalanx.model.priorityannotations import PRESET_ANNOTATION
from phalanx.model.quantity import CPU, MEMORY
from phalanx.model.tres import parse_tres_weights

if TYPE_CHECKING:
    from phalanx.engine.config import SlurmPriorityConfig

__all__ = [
    "EMPTY_TABLES",
    "PRESET_ANNOTATION",
    "FairShareOrdering",
    "FairShareWeights",
    "JobFacts",
    "KueueOrdering",
    "OrderingPolicy",
    "PerQueueOrdering",
    "PriorityContext",
    "PriorityTables",
    "QueueFacts",
    "SlurmOrdering",
    "TenantShare",
    "job_facts",
]


@dataclass(frozen=True, slots=True)
class JobFacts:
    """What an ordering policy may know about a job."""

    id: int
    tenant: str
    submit_time: float
    priority_value: int
    gpus: float
    """GPUs asked for, a share counting as its fraction of one GPU."""
    user: str = ""
    cluster_queue: str | None = None
    """The ClusterQueue the job waits in (None until it has one)."""
    local_queue: str | None = None
    """``namespace/name`` of its LocalQueue, if it came through one."""
    nodes: int = 1
    """Slurm's ``min_nodes``."""
    cpus: float = 0.0
    """CPU cores over every task."""
    memory_mb: float = 0.0
    time_limit_s: float | None = None
    nice: int = 0


def job_facts(job: Job, priority_value: int) -> JobFacts:
    """A job's facts; ``nodes`` counts ``count / tasksPerNode`` (or ``count`` for an
    exclusive pod set, else 1) per pod set."""
    nodes = 0
    for p in job.pod_sets:
        if p.tasks_per_node:
            nodes += p.count // p.tasks_per_node
        else:
            nodes += p.count if p.exclusive else 1
    return JobFacts(
        job.id,
        job.tenant,
        job.submit_time,
        priority_value,
        job.gpu_amount,
        user=job.user,
        nodes=max(1, nodes),
        cpus=sum(p.total(CPU) for p in job.pod_sets) / 1000.0,
        memory_mb=sum(p.total(MEMORY) for p in job.pod_sets) / 2**20,
        time_limit_s=job.time_limit,
        nice=job.nice,
    )


@dataclass(frozen=True, slots=True)
class TenantShare:
    """What ``TenantUsage`` events said about a tenant: ``usage`` (U, decayed GPU-hours),
    an explicit allocation ``L`` (None: derived from the tenant tree) and ``billing``
    (decayed billable TRES-seconds, Slurm's RawUsage), descendants included."""

    usage: float = 0.0
    allocation: float | None = None
    billing: float = 0.0


@dataclass(frozen=True, slots=True)
class QueueFacts:
    """Per-ClusterQueue inputs: its preset, Slurm partition factor and TRES totals."""

    preset: str
    partition_factor: float = 0.0
    tres_totals: Mapping[str, float] = field(default_factory=dict)
    admission_fair_sharing: bool = False


@dataclass(frozen=True, slots=True)
class PriorityTables:
    """Inputs computed once per recalculation, not per job."""

    allocations: Mapping[str, float] = field(default_factory=dict)
    """phalanx's ``L`` of every declared tenant."""
    fairshare: Mapping[str, float] = field(default_factory=dict)
    """Slurm's fair-share factor of every declared tenant (empty when no queue uses slurm)."""
    queues: Mapping[str, QueueFacts] = field(default_factory=dict)
    cluster_nodes: int = 0
    cluster_cpus: float = 0.0
    presets: frozenset[str] = frozenset()
    """Presets some ClusterQueue (or the cluster-wide default) uses."""


EMPTY_TABLES = PriorityTables()


@dataclass(frozen=True, slots=True)
class PriorityContext:
    """The inputs a priority depends on besides the job itself."""

    now: float
    cluster_gpus: int
    max_priority_value: int
    shares: Mapping[str, TenantShare]
    tables: PriorityTables = EMPTY_TABLES
    lq_scores: Mapping[str, float] = field(default_factory=dict)
    """Admission Fair Sharing score of each LocalQueue (``namespace/name``)."""


class OrderingPolicy(Protocol):
    name: str
    time_dependent: bool

    def priority(self, job: JobFacts, ctx: PriorityContext) -> float: ...

    def factors(self, job: JobFacts, ctx: PriorityContext) -> dict[str, float]: ...


@dataclass(frozen=True, slots=True)
class FairShareWeights:
    """The weights of :class:`FairShareOrdering`.

    Share outweighs age forty to one: ``ln(1 + wait_s)`` is already about 11 after
    a day's wait, so at a lower share weight a heavy tenant's backlog ages past the
    fair-share standing of tenants below their share, and at high load they queue
    behind it; with reservations each ClusterQueue's top job also holds what it
    needs, so the order decides more. Measured on Philly's shared-cluster sweep
    (``docs/simulator.md``).
    """

    age: float = 1.0
    share: float = 40.0
    qos: float = 5.0
    size: float = 1.0


class FairShareOrdering:
    """phalanx's default multi-tenant fair-share priority."""

    name = "phalanx"
    time_dependent = True

    def __init__(self, weights: FairShareWeights | None = None) -> None:
        self.weights = weights or FairShareWeights()

    def factors(self, job: JobFacts, ctx: PriorityContext) -> dict[str, float]:
        """The four weighted terms (``size`` already negative); they add up to ``P``."""
        w = self.weights
        wait = max(0.0, ctx.now - job.submit_time)
        share = ctx.shares.get(job.tenant)
        usage = share.usage if share is not None else 0.0
        allocation = share.allocation if share is not None else None
        if allocation is None:
            allocation = ctx.tables.allocations.get(job.tenant, 0.0)
        share_term = 1.0 - usage / allocation if allocation > 0 else 0.0
        top = ctx.max_priority_value
        qos = min(1.0, max(0, job.priority_value) / top) if top > 0 else 0.0
        size = job.gpus / ctx.cluster_gpus if ctx.cluster_gpus > 0 else 0.0
        return {
            "age": w.age * math.log1p(wait),
            "share": w.share * share_term,
            "qos": w.qos * qos,
            "size": -w.size * size,
        }

    def priority(self, job: JobFacts, ctx: PriorityContext) -> float:
        f = self.factors(job, ctx)
        return f["age"] + f["share"] + f["qos"] + f["size"]


class KueueOrdering:
    """Priority value, then creation time (Kueue's queue order)."""

    name = "kueue"
    time_dependent = False

    def factors(self, job: JobFacts, ctx: PriorityContext) -> dict[str, float]:
        """The priority value and, under Admission Fair Sharing, the LocalQueue's score."""
        out = {"priority": float(job.priority_value)}
        queue = ctx.tables.queues.get(job.cluster_queue or "")
        if queue is not None and queue.admission_fair_sharing:
            out["lq_score"] = ctx.lq_scores.get(job.local_queue or "", 0.0)
        return out

    def priority(self, job: JobFacts, ctx: PriorityContext) -> float:
        return float(job.priority_value)


class SlurmOrdering:
    """Slurm's priority/multifactor: the weighted factors of
    :mod:`phalanx.engine.priority.multifactor`, kept within ``[1, 2^32 - 1]``.

    Age runs from the submit time; fair-share is the tenant's factor from the
    tables (users share their tenant's, as Slurm's ``Fairshare=parent`` users
    do); partition is the ClusterQueue's ``slurm.phalanx.io/priority-job-factor``
    over the largest; QOS the PriorityClass value over the largest; TRES the
    job's CPUs, memory, nodes and GPUs over the ClusterQueue's nominal quota.
    """

    name = "slurm"
    time_dependent = True

    def __init__(self, config: SlurmPriorityConfig) -> None:
        self.config = config
        flags = set(config.flags)
        no_normal_all = "NO_NORMAL_ALL" in flags
        self._no_normal_qos = no_normal_all or "NO_NORMAL_QOS" in flags
        self._no_normal_tres = no_normal_all or "NO_NORMAL_TRES" in flags
        self._relative_to_time = "SMALL_RELATIVE_TO_TIME" in flags
        self._basic = config.priority_type == "priority/basic"
        self.weights = PriorityWeights(
            age=config.weight_age,
            assoc=config.weight_assoc,
            fairshare=config.weight_fairshare,
            job_size=config.weight_job_size,
            partition=config.weight_partition,
            qos=config.weight_qos,
            tres=parse_tres_weights(config.weight_tres),
        )

    def _factors(self, job: JobFacts, ctx: PriorityContext) -> PriorityFactors:
        c, tables = self.config, ctx.tables
        queue = tables.queues.get(job.cluster_queue or "")
        size = 0.0
        if tables.cluster_nodes > 0 and tables.cluster_cpus >= 1:
            limit = job.time_limit_s
            size = job_size_factor(
                min_nodes=job.nodes,
                cpu_count=math.ceil(job.cpus),
                node_count=tables.cluster_nodes,
                cluster_cpus=int(tables.cluster_cpus),
                favor_small=c.favor_small,
                small_relative_to_time=self._relative_to_time,
                time_limit_min=None if limit is None else max(1, math.ceil(limit / 60)),
            )
        tres: dict[str, float] = {}
        if self.weights.tres:
            requested = {
                "cpu": job.cpus,
                "mem": job.memory_mb,
                "node": float(job.nodes),
                "gres/gpu": float(job.gpus),
            }
            tres = tres_factors(
                {k: v for k, v in requested.items() if k in self.weights.tres},
                queue.tres_totals if queue is not None else {},
                self._no_normal_tres,
            )
        return PriorityFactors(
            age=max(0.0, age_factor(ctx.now, job.submit_time, c.max_age_s)),
            fairshare=ctx.tables.fairshare.get(job.tenant, 0.0),
            job_size=size,
            partition=queue.partition_factor if queue is not None else 0.0,
            qos=qos_factor(
                max(0, job.priority_value), max(0, ctx.max_priority_value), self._no_normal_qos
            ),
            tres=tres,
        )

    def factors(self, job: JobFacts, ctx: PriorityContext) -> dict[str, float]:
        """sprio's columns: each factor times its weight, the nice value and the site factor;
        ``tres`` is the sum of the weighted TRES factors, ``tres:<name>`` each of them."""
        if self._basic:
            return {}
        f, w = self._factors(job, ctx), self.weights
        per_tres = {
            f"tres:{name}": weight * f.tres.get(name, 0.0) for name, weight in w.tres.items()
        }
        return {
            **per_tres,
            "site": 0.0,
            "age": w.age * f.age,
            "assoc": w.assoc * f.assoc,
            "fairshare": w.fairshare * f.fairshare,
            "jobsize": w.job_size * f.job_size,
            "partition": w.partition * f.partition,
            "qos": w.qos * f.qos,
            "tres": sum(weight * f.tres.get(name, 0.0) for name, weight in w.tres.items()),
            "nice": float(job.nice),
        }

    def priority(self, job: JobFacts, ctx: PriorityContext) -> float:
        if self._basic:
            # priority/basic: FIFO; every job gets the same priority.
            return 1.0
        return float(job_priority(self.weights, self._factors(job, ctx), 0, job.nice))


class PerQueueOrdering:
    """Each ClusterQueue's jobs ordered by its own preset (``phalanx.io/preset``),
    the cluster-wide ``default`` otherwise; jobs without a ClusterQueue yet use the default."""

    name = "per-queue"
    time_dependent = True

    def __init__(self, default: str, policies: Mapping[str, OrderingPolicy]) -> None:
        self.default = default
        self.policies = dict(policies)

    def policy_for(self, job: JobFacts, ctx: PriorityContext) -> OrderingPolicy:
        queue = ctx.tables.queues.get(job.cluster_queue or "")
        return self.policies[queue.preset if queue is not None else self.default]

    def time_dependent_for(self, presets: frozenset[str]) -> bool:
        """Whether any of ``presets`` needs recalculation as time passes."""
        return any(self.policies[p].time_dependent for p in presets | {self.default})

    def priority(self, job: JobFacts, ctx: PriorityContext) -> float:
        return self.policy_for(job, ctx).priority(job, ctx)

    def factors(self, job: JobFacts, ctx: PriorityContext) -> dict[str, float]:
        return self.policy_for(job, ctx).factors(job, ctx)
