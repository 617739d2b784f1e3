"""Slurm's priority/multifactor job priority: the factors, their normalization,
the weighted sum, and TRES billing.

Follows ``_get_priority_internal`` (site factor plus each weight times its
factor plus the weighted TRES factors, minus nice; then at least 1, since 0
means held, and at most ``2^32 - 1``) and ``set_priority_factors`` (age, job
size, partition, QOS, association and TRES factors and their ``NO_NORMAL_*``
flags) in ``src/plugins/priority/multifactor/priority_multifactor.c``, and
``assoc_mgr_tres_weighted`` in ``src/common/assoc_mgr.c`` for billable TRES
(``TRESBillingWeights`` with ``PriorityFlags=MAX_TRES`` / ``MAX_TRES_GRES``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from phalanx.model.scheduling import DEFAULT_MAX_AGE_S

PRIORITY_MAX: int = 2**32 - 1


@dataclass(frozen=True, slots=True)
class PriorityWeights:
    """``PriorityWeight*``; TRES weights are keyed by TRES name, e.g. ``gres/gpu``."""

    age: int = 0
    assoc: int = 0
    fairshare: int = 0
    job_size: int = 0
    partition: int = 0
    qos: int = 0
    tres: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class PriorityFactors:
    """A job's factors, each normally in [0, 1] (raw under ``NO_NORMAL_*``)."""

    age: float = 0.0
    assoc: float = 0.0
    fairshare: float = 0.0
    job_size: float = 0.0
    partition: float = 0.0
    qos: float = 0.0
    tres: Mapping[str, float] = field(default_factory=dict)


def _clamp01(value: float) -> float:
    return min(1.0, max(0.0, value))


def age_factor(now: float, accrue_time: float, max_age_s: float = DEFAULT_MAX_AGE_S) -> float:
    """``min(1, (now - accrue_time) / PriorityMaxAge)``; 0 before accrual starts."""
    if max_age_s <= 0:
        raise ValueError("PriorityMaxAge must be > 0")
    return _clamp01((now - accrue_time) / max_age_s)


def job_size_factor(
    *,
    min_nodes: int,
    cpu_count: int,
    node_count: int,
    cluster_cpus: int,
    favor_small: bool = False,
    small_relative_to_time: bool = False,
    time_limit_min: int | None = None,
) -> float:
    """The job size factor, favoring large jobs unless ``favor_small``.

    With ``small_relative_to_time`` the size in CPUs (at least ``min_nodes``
    times the average CPUs per node) is divided by the time limit in minutes
    (``None``: no limit known, taken as 1) and by the cluster's CPUs.
    """
    if node_count <= 0 or cluster_cpus <= 0:
        raise ValueError("node_count and cluster_cpus must be > 0")
    if small_relative_to_time:
        limit = 1 if time_limit_min is None else time_limit_min
        if limit <= 0:
            raise ValueError("time limit must be >= 1 minute")
        size = max(min_nodes * cluster_cpus / node_count, float(cpu_count))
        value = size / limit / cluster_cpus
        if favor_small:
            value = 1.0 - value
        return _clamp01(value)
    if favor_small:
        value = (node_count - min_nodes) / node_count
        if cpu_count:
            value = (value + (cluster_cpus - cpu_count) / cluster_cpus) / 2
    else:
        value = min_nodes / node_count
        if cpu_count:
            value = (value + cpu_count / cluster_cpus) / 2
    return _clamp01(value)


def _normalized(value: float, maximum: float, no_normal: bool) -> float:
    if no_normal:
        return value
    return value / maximum if maximum > 0 else 0.0


def partition_factor(job_factor: int, max_job_factor: int, no_normal: bool = False) -> float:
    """``PriorityJobFactor`` over the largest of all partitions (raw with
    ``NO_NORMAL_PART``)."""
    return _normalized(job_factor, max_job_factor, no_normal)


def qos_factor(qos_priority: int, max_qos_priority: int, no_normal: bool = False) -> float:
    """QOS ``Priority`` over the largest QOS priority (raw with ``NO_NORMAL_QOS``)."""
    return _normalized(qos_priority, max_qos_priority, no_normal)


def assoc_factor(assoc_priority: int, max_assoc_priority: int, no_normal: bool = False) -> float:
    """Association ``Priority`` over the largest (raw with ``NO_NORMAL_ASSOC``)."""
    return _normalized(assoc_priority, max_assoc_priority, no_normal)


def tres_factors(
    requested: Mapping[str, float], totals: Mapping[str, float], no_normal: bool = False
) -> dict[str, float]:
    """Per TRES type, the job's amount over the partition's total (raw with
    ``NO_NORMAL_TRES``; 0 where the total is 0)."""
    return {
        name: _normalized(amount, totals.get(name, 0.0), no_normal)
        for name, amount in requested.items()
    }


def priority_sum(
    weights: PriorityWeights, factors: PriorityFactors, site_factor: int = 0, nice: int = 0
) -> float:
    """The unclamped weighted sum."""
    total = (
        float(site_factor)
        + weights.age * factors.age
        + weights.assoc * factors.assoc
        + weights.fairshare * factors.fairshare
        + weights.job_size * factors.job_size
        + weights.partition * factors.partition
        + weights.qos * factors.qos
    )
    for name, weight in weights.tres.items():
        total += weight * factors.tres.get(name, 0.0)
    return total - nice


def job_priority(
    weights: PriorityWeights, factors: PriorityFactors, site_factor: int = 0, nice: int = 0
) -> int:
    """The job's priority: the weighted sum truncated into ``[1, 2^32 - 1]``."""
    total = priority_sum(weights, factors, site_factor, nice)
    if math.isnan(total) or total < 1.0:
        return 1
    if total >= PRIORITY_MAX:
        return PRIORITY_MAX
    return int(total)


_NODE_TRES = frozenset({"cpu", "mem", "node"})


def billable_tres(
    allocated: Mapping[str, float],
    weights: Mapping[str, float],
    *,
    max_tres: bool = False,
    max_tres_gres: bool = False,
) -> float:
    """Billable TRES of an allocation (memory in megabytes).

    Without a MAX flag every weighted TRES is summed. ``MAX_TRES`` takes the
    largest weighted node TRES (cpu, mem, node, gres/*) plus the sum of the
    others (licenses, burst buffers); ``MAX_TRES_GRES`` instead sums GRES with
    the others and takes the largest of cpu, mem and node.
    """
    node_part = 0.0
    global_part = 0.0
    for name, amount in allocated.items():
        if name == "billing":
            continue
        value = amount * weights.get(name, 0.0)
        is_gres = name.startswith("gres/") or name == "gres"
        at_node = name in _NODE_TRES or (is_gres and not max_tres_gres)
        if (max_tres or max_tres_gres) and at_node:
            node_part = max(node_part, value)
        else:
            global_part += value
    return node_part + global_part
