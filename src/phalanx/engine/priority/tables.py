"""The priority tables: what a recalculation computes once for every job.

Tree-level and queue-level inputs of the orderings
(:mod:`phalanx.engine.priority.ordering`) do not depend on the job, so the engine
computes them here once per recalculation (every ``priority_calc_period_s``,
or when a tenant, ClusterQueue or usage changes) and a job's priority is then a
few look-ups, even with 100k pending jobs:

* phalanx's allocation ``L`` of every tenant: its normalized share of the
  cluster (its ``allocation`` over its siblings' total, times its parent's
  normalized share, down the tenant tree) times the cluster's GPUs times
  ``half_life_h / ln 2``, the decayed integral of that share of the cluster
  (with no decay, the ``priority_calc_period_s`` stands in for the half-life);
* Slurm's fair-share factor of every tenant, Fair Tree or classic
  (``NO_FAIR_TREE``), over the tenant tree with ``allocation`` as raw shares
  and ``TenantUsage.billing`` as raw usage. A tenant's users share its factor,
  as Slurm users with ``Fairshare=parent`` do: in Fair Tree each leaf tenant
  gets one user association with level fair-share ``+inf`` (so it ranks where
  its tenant ranks) and a tenant with children gets the factor of its
  best-ranked descendant (where a ``Fairshare=parent`` user of its own would
  rank); in classic the user takes its tenant's shares and effective usage;
* per ClusterQueue: the preset that orders its jobs, Slurm's partition factor
  (``slurm.phalanx.io/priority-job-factor`` over the largest) and the TRES totals
  of its nominal quota (``cpu``, ``mem`` in MB, ``gres/gpu``, ``node``).

Tenants without a Tenant object have no share: ``L`` 0 and fair-share 0.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from phalanx.engine.cache.cluster import ClusterCache
from phalanx.engine.priority.fairshare import (
    classic_effective_usage,
    classic_factor,
    classic_normalized_shares,
    fair_tree,
)
from phalanx.engine.priority.ordering import PriorityTables, QueueFacts, TenantShare
from phalanx.engine.priority.tree import Association, AssociationTree
from phalanx.model import Tenant
from phalanx.model.priorityannotations import PARTITION_FACTOR_ANNOTATION, PRESET_ANNOTATION
from phalanx.model.quantity import CPU, GPU, MEMORY

__all__ = [
    "ADMISSION_SCOPE_ANNOTATION",
    "PARTITION_FACTOR_ANNOTATION",
    "PRESET_ANNOTATION",
    "build_tables",
    "normalized_shares",
    "tenant_allocations",
    "tenant_fairshare",
]

ADMISSION_SCOPE_ANNOTATION = "phalanx.io/kueue-admission-scope"
"""Where a ClusterQueue keeps Kueue's ``admissionScope`` (as JSON)."""

_ROOT = ""


def _account(tenant: str) -> str:
    return "a:" + tenant


def _user(tenant: str) -> str:
    return "u:" + tenant


def _parents(tenants: Mapping[str, Tenant]) -> dict[str, str | None]:
    """Each tenant's parent; an undeclared parent or a cycle makes a tenant top-level."""
    parents: dict[str, str | None] = {}
    for name, tenant in tenants.items():
        parent = tenant.parent if tenant.parent in tenants else None
        parents[name] = parent
    for name in list(parents):
        seen = {name}
        current = parents[name]
        while current is not None:
            if current in seen:
                parents[name] = None
                break
            seen.add(current)
            current = parents[current]
    return parents


def _tree(tenants: Mapping[str, Tenant], with_users: bool) -> AssociationTree:
    """The tenant tree as Slurm accounts; ``with_users``: one user under each leaf."""
    parents = _parents(tenants)
    has_children = {p for p in parents.values() if p is not None}
    assocs = [Association(_ROOT, None)]
    for name, tenant in tenants.items():
        parent = parents[name]
        assocs.append(
            Association(
                _account(name), _ROOT if parent is None else _account(parent), tenant.allocation
            )
        )
        if with_users and name not in has_children:
            assocs.append(Association(_user(name), _account(name), 0.0, is_user=True))
    return AssociationTree(assocs)


def normalized_shares(tenants: Mapping[str, Tenant]) -> dict[str, float]:
    """Each tenant's share of the whole cluster: its allocation over its siblings'
    total, times its parent's normalized share."""
    if not tenants:
        return {}
    shares = classic_normalized_shares(_tree(tenants, with_users=False))
    return {name: shares[_account(name)] for name in tenants}


def tenant_allocations(
    tenants: Mapping[str, Tenant], cluster_gpus: int, window_s: float
) -> dict[str, float]:
    """phalanx's ``L``: normalized share x cluster GPUs x ``window_h / ln 2``."""
    scale = cluster_gpus * (window_s / 3600.0) / math.log(2)
    return {name: share * scale for name, share in normalized_shares(tenants).items()}


def tenant_fairshare(
    tenants: Mapping[str, Tenant],
    billing: Mapping[str, float],
    *,
    fair_tree_algorithm: bool = True,
    dampening: float = 1.0,
) -> dict[str, float]:
    """Slurm's fair-share factor of each tenant (and so of each of its users).

    ``billing`` is each tenant's raw usage, its descendants' included; the root's
    is the sum over top-level tenants.
    """
    if not tenants:
        return {}
    parents = _parents(tenants)
    usage = {_account(t): max(0.0, billing.get(t, 0.0)) for t in tenants}
    usage[_ROOT] = sum(usage[_account(t)] for t, p in parents.items() if p is None)
    if fair_tree_algorithm:
        tree = _tree(tenants, with_users=True)
        users = [name for name in tree.users()]
        factors = fair_tree(tree, usage, dict.fromkeys(users, math.inf))
        out: dict[str, float] = {}
        for t in tenants:
            account = _account(t)
            below = [factors[u] for u in (*tree.descendants(account),) if u in factors]
            out[t] = max(below, default=0.0)
        return out
    tree = _tree(tenants, with_users=False)
    root = usage[_ROOT]
    usage_norm = {name: (value / root if root > 0 else 0.0) for name, value in usage.items()}
    shares = classic_normalized_shares(tree)
    effective = classic_effective_usage(tree, usage_norm)
    return {
        t: classic_factor(effective[_account(t)], shares[_account(t)], dampening) for t in tenants
    }


def _job_factor(annotations: Mapping[str, str]) -> int:
    raw = annotations.get(PARTITION_FACTOR_ANNOTATION)
    try:
        return int(raw) if raw is not None else 1
    except ValueError:
        return 1


def _tres_name(resource: str) -> str:
    if resource == GPU:
        return "gres/gpu"
    if resource == CPU:
        return "cpu"
    if resource == MEMORY:
        return "mem"
    return resource


def _tres_amount(resource: str, amount: int) -> float:
    if resource == CPU:
        return amount / 1000.0
    if resource == MEMORY:
        return amount / 2**20
    return float(amount)


def admission_fair_sharing(annotations: Mapping[str, str]) -> bool:
    """Whether a ClusterQueue's ``admissionScope`` asks for usage-based AFS."""
    scope = annotations.get(ADMISSION_SCOPE_ANNOTATION)
    return scope is not None and '"UsageBasedAdmissionFairSharing"' in scope


def build_tables(
    cache: ClusterCache,
    shares: Mapping[str, TenantShare],
    *,
    default_preset: str,
    window_s: float,
    fair_tree_algorithm: bool = True,
    dampening: float = 1.0,
    raw_partition_factor: bool = False,
) -> PriorityTables:
    """Every table, from the engine's cache and the tenants' reported usage."""
    max_factor = max(
        (_job_factor(info.model.annotations) for info in cache.cluster_queues.values()), default=0
    )
    queues: dict[str, QueueFacts] = {}
    for name, info in cache.cluster_queues.items():
        annotations = info.model.annotations
        factor = _job_factor(annotations)
        totals: dict[str, float] = {}
        for (_flavor, resource), amount in info.node.nominal.items():
            key = _tres_name(resource)
            totals[key] = totals.get(key, 0.0) + _tres_amount(resource, amount)
        totals["node"] = float(
            sum(len(cache.flavor_nodes[f].members) for f in info.flavors if f in cache.flavor_nodes)
        )
        queues[name] = QueueFacts(
            preset=annotations.get(PRESET_ANNOTATION, default_preset),
            partition_factor=(
                float(factor)
                if raw_partition_factor
                else factor / max_factor
                if max_factor
                else 0.0
            ),
            tres_totals=totals,
            admission_fair_sharing=admission_fair_sharing(annotations),
        )
    presets = frozenset({default_preset, *(q.preset for q in queues.values())})
    nodes = [slot for slot in cache.nodes.values() if slot.schedulable]
    fairshare: dict[str, float] = {}
    if "slurm" in presets:
        fairshare = tenant_fairshare(
            cache.tenants,
            {t: s.billing for t, s in shares.items()},
            fair_tree_algorithm=fair_tree_algorithm,
            dampening=dampening,
        )
    return PriorityTables(
        allocations=tenant_allocations(cache.tenants, cache.cluster_gpus, window_s),
        fairshare=fairshare,
        queues=queues,
        cluster_nodes=len(nodes),
        cluster_cpus=sum(slot.capacity.get(CPU, 0) for slot in nodes) / 1000.0,
        presets=presets,
    )
