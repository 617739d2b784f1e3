"""Ordering: the priority functions that sort pending jobs.

An :class:`OrderingPolicy` turns a pending job and a :class:`PriorityContext`
into a number; queues sort by that number descending, then submit time, then
job id. Policies that depend on time (``time_dependent``) are re-evaluated by
the engine every ``priority_calc_period_s`` (Slurm's ``PriorityCalcPeriod``)
and when an event changes their inputs (a tenant's usage, the cluster size),
never per decision.

* :class:`FairShareOrdering` (preset ``phalanx``, the default)::

      P = w_age*ln(1+wait_s) + w_share*(1 - U/L) + w_qos*Q - w_size*(gpus/cluster_gpus)

  ``U`` is the tenant's decayed GPU-hours and ``L`` its allocation, both
  supplied by events; ``Q`` is the priority value over the largest priority
  value of any PriorityClass. With ``L == 0`` the share term is 0.
* :class:`KueueOrdering` (preset ``kueue``): the priority value alone, so jobs
  sort by priority then creation time, as Kueue's queues do.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

__all__ = [
    "FairShareOrdering",
    "FairShareWeights",
    "JobFacts",
    "KueueOrdering",
    "OrderingPolicy",
    "PriorityContext",
    "TenantShare",
]


@dataclass(frozen=True, slots=True)
class JobFacts:
    """What an ordering policy may know about a job."""

    id: int
    tenant: str
    submit_time: float
    priority_value: int
    gpus: int


@dataclass(frozen=True, slots=True)
class TenantShare:
    """A tenant's usage ``U`` (decayed GPU-hours) and allocation ``L``."""

    usage: float = 0.0
    allocation: float = 1.0


@dataclass(frozen=True, slots=True)
class PriorityContext:
    """The inputs a priority depends on besides the job itself."""

    now: float
    cluster_gpus: int
    max_priority_value: int
    shares: dict[str, TenantShare]


class OrderingPolicy(Protocol):
    name: str
    time_dependent: bool

    def priority(self, job: JobFacts, ctx: PriorityContext) -> float: ...


@dataclass(frozen=True, slots=True)
class FairShareWeights:
    age: float = 1.0
    share: float = 10.0
    qos: float = 5.0
    size: float = 1.0


class FairShareOrdering:
    """phalanx's default multi-tenant fair-share priority."""

    name = "phalanx"
    time_dependent = True

    def __init__(self, weights: FairShareWeights | None = None) -> None:
        self.weights = weights or FairShareWeights()

    def priority(self, job: JobFacts, ctx: PriorityContext) -> float:
        w = self.weights
        wait = max(0.0, ctx.now - job.submit_time)
        share = ctx.shares.get(job.tenant)
        share_term = 0.0
        if share is None:
            share_term = 1.0
        elif share.allocation > 0:
            share_term = 1.0 - share.usage / share.allocation
        qos = job.priority_value / ctx.max_priority_value if ctx.max_priority_value > 0 else 0.0
        size = job.gpus / ctx.cluster_gpus if ctx.cluster_gpus > 0 else 0.0
        return w.age * math.log1p(wait) + w.share * share_term + w.qos * qos - w.size * size


class KueueOrdering:
    """Priority value, then creation time (Kueue's queue order)."""

    name = "kueue"
    time_dependent = False

    def priority(self, job: JobFacts, ctx: PriorityContext) -> float:
        return float(job.priority_value)
