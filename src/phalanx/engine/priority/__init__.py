"""Slurm's priority/multifactor plugin as pure math.

``tree`` holds the association tree (accounts over users), ``decay`` usage
decay, charging and ``PriorityUsageResetPeriod``, ``fairshare`` the classic and
Fair Tree fair-share factors, and ``multifactor`` the job priority formula with
its factors and TRES billing. None of it is selected by any engine preset yet.
"""

from phalanx.engine.priority.decay import (
    ResetPeriod,
    apply_reset,
    charge_usage,
    decay_factor,
    decay_multiplier,
    decay_usage,
    last_reset_boundary,
    new_usage,
    normalized_usage,
    resets_at_start,
    usage_reset_due,
)
from phalanx.engine.priority.fairshare import (
    classic_effective_usage,
    classic_factor,
    classic_fair_share,
    classic_normalized_shares,
    fair_tree,
    fair_tree_effective_usage,
    fair_tree_level_fs,
    fair_tree_shares,
    level_fair_share,
)
from phalanx.engine.priority.multifactor import (
    PRIORITY_MAX,
    PriorityFactors,
    PriorityWeights,
    age_factor,
    assoc_factor,
    billable_tres,
    job_priority,
    job_size_factor,
    partition_factor,
    priority_sum,
    qos_factor,
    tres_factors,
)
from phalanx.engine.priority.tree import Association, AssociationTree, aggregate_usage
from phalanx.model.tres import parse_billing_weights, parse_tres_weights

__all__ = [
    "PRIORITY_MAX",
    "Association",
    "AssociationTree",
    "PriorityFactors",
    "PriorityWeights",
    "ResetPeriod",
    "age_factor",
    "aggregate_usage",
    "apply_reset",
    "assoc_factor",
    "billable_tres",
    "charge_usage",
    "classic_effective_usage",
    "classic_factor",
    "classic_fair_share",
    "classic_normalized_shares",
    "decay_factor",
    "decay_multiplier",
    "decay_usage",
    "fair_tree",
    "fair_tree_effective_usage",
    "fair_tree_level_fs",
    "fair_tree_shares",
    "job_priority",
    "job_size_factor",
    "last_reset_boundary",
    "level_fair_share",
    "new_usage",
    "normalized_usage",
    "parse_billing_weights",
    "parse_tres_weights",
    "partition_factor",
    "priority_sum",
    "qos_factor",
    "resets_at_start",
    "tres_factors",
    "usage_reset_due",
]
