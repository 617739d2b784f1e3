"""Pending reasons built from the record of a failed assignment.

Building a sentence costs more than deciding, so the engine first compares a
failure's :func:`signature` with the job's previous one and only builds a new
:class:`Reason` when something a reader would see has changed.
"""

from __future__ import annotations

from collections.abc import Iterable

from phalanx.engine.cache.quota import FlavorResource, QuotaNode, Shortage, binding_limit
from phalanx.engine.explain.reasons import Reason, ReasonCode
from phalanx.engine.placement.assigner import (
    FIT,
    MAX_QUOTA,
    NO_MATCH,
    PLACEMENT,
    QUOTA,
    UNDECLARED,
    FlavorAttempt,
    PodSetResult,
)
from phalanx.model import format_quantity

__all__ = [
    "reason_for_failure",
    "signature",
    "strict_fifo_reason",
    "waiting_reason",
    "wake_conditions",
]


def _amount(resource: str, amount: int) -> str:
    return f"{format_quantity(amount, resource)} {resource}"


def _shortage(node: QuotaNode, attempt: FlavorAttempt) -> Shortage:
    if node.simple and node.top is not None:
        # No limits on the way up: the root's quota is what binds.
        where = node.top
        limit = "nominalQuota" if where.is_cluster_queue else "quota"
    else:
        where, limit = binding_limit(node, (attempt.flavor, attempt.resource))
    return Shortage(where.name, where.kind, limit, attempt.needed - attempt.available)


def _describe(attempt: FlavorAttempt, pod_set: PodSetResult, s: Shortage | None) -> str:
    flavor = attempt.flavor
    if attempt.outcome == QUOTA and s is not None:
        where = f"{s.kind} {s.node}"
        if s.limit == "borrowingLimit":
            where += " (borrowingLimit reached)"
        return (
            f"insufficient quota for {attempt.resource} in flavor {flavor}: {where} is short by "
            f"{_amount(attempt.resource, s.short_by)} (needs "
            f"{format_quantity(attempt.needed, attempt.resource)}, "
            f"{format_quantity(attempt.available, attempt.resource)} available)"
        )
    if attempt.outcome == MAX_QUOTA:
        return (
            f"flavor {flavor}: {_amount(attempt.resource, attempt.needed)} requested is more than "
            f"the {format_quantity(attempt.available, attempt.resource)} the ClusterQueue "
            "could ever get"
        )
    if attempt.outcome == PLACEMENT:
        shape = pod_set.shape
        unit = shape.unit_size
        per = ", ".join(_amount(r, a) for r, a in shape.requests if a) or "no resources"
        return (
            f"quota fits in flavor {flavor} but no set of nodes fits the gang: "
            f"{shape.count} tasks of {per} needed, at most {attempt.max_units * unit} fit now"
        )
    if attempt.outcome == NO_MATCH:
        return f"flavor {flavor} doesn't match the node selector or tolerations"
    if attempt.outcome == UNDECLARED:
        return f"resource {attempt.resource or '(none)'} has no quota in the ClusterQueue"
    return f"flavor {flavor}: {attempt.outcome}"


def signature(pod_set: PodSetResult) -> tuple[object, ...]:
    """Everything a failure's reason is built from, as a cheap comparable value."""
    return (
        pod_set.shape,
        tuple(
            (a.flavor, a.outcome, a.resource, a.needed, a.available, a.max_units)
            for a in pod_set.attempts
        ),
    )


def reason_for_failure(cluster_queue: str, node: QuotaNode, pod_set: PodSetResult) -> Reason:
    """The pending reason of a pod set that got no flavor in ``cluster_queue``."""
    attempts = pod_set.attempts
    outcomes = {a.outcome for a in attempts}
    if PLACEMENT in outcomes:
        code, outcome = ReasonCode.NO_NODE_FIT, PLACEMENT
    elif QUOTA in outcomes:
        code, outcome = ReasonCode.INSUFFICIENT_QUOTA, QUOTA
    elif MAX_QUOTA in outcomes:
        code, outcome = ReasonCode.EXCEEDS_MAX_QUOTA, MAX_QUOTA
    elif UNDECLARED in outcomes:
        code, outcome = ReasonCode.UNDECLARED_RESOURCE, UNDECLARED
    else:
        code, outcome = ReasonCode.NO_MATCHING_FLAVOR, NO_MATCH
    # Where a shortage binds depends on the tree as it is now: under limits, find it now;
    # without limits it is the root, whatever happens later.
    if node.simple:
        shortages: dict[int, Shortage] | None = None
    else:
        shortages = {id(a): _shortage(node, a) for a in attempts if a.outcome == QUOTA}

    top = node.top if node.simple else None
    root_name, root_kind = (top.name, top.kind) if top is not None else ("", "")
    root_limit = "nominalQuota" if top is not None and top.is_cluster_queue else "quota"

    def shortage(attempt: FlavorAttempt) -> Shortage:
        if shortages is not None:
            return shortages[id(attempt)]
        return Shortage(root_name, root_kind, root_limit, attempt.needed - attempt.available)

    def message() -> str:
        parts = [
            _describe(a, pod_set, shortage(a) if a.outcome == QUOTA else None)
            for a in attempts
            if a.outcome != FIT
        ]
        return f"couldn't assign flavors to pod set {pod_set.shape.name}: " + "; ".join(parts)

    def details() -> dict[str, object]:
        # The details describe the attempt that gave the reason its code.
        first = next(
            (a for a in attempts if a.outcome == outcome),
            attempts[0] if attempts else None,
        )
        facts: dict[str, object] = {"clusterQueue": cluster_queue, "podSet": pod_set.shape.name}
        if first is not None:
            facts["flavor"] = first.flavor
            if first.resource:
                facts["resource"] = first.resource
            if first.outcome == QUOTA:
                s = shortage(first)
                facts["shortBy"] = s.short_by
                facts["shortIn"] = f"{s.kind}/{s.node}"
            if first.outcome == PLACEMENT:
                facts["maxTasks"] = first.max_units * pod_set.shape.unit_size
        return facts

    return Reason(code, message, details)


def wake_conditions(
    pod_set: PodSetResult, placed: Iterable[PodSetResult] = ()
) -> tuple[list[tuple[FlavorResource, int, int]], tuple[str, ...]]:
    """What could make a failed pod set fit, as park conditions.

    * ``(flavor-resource, needed, short_by)`` for each flavor that was short of
      quota: it cannot fit that flavor before its availability reaches
      ``needed``, which takes at least ``short_by`` released in its tree;
    * ``flavor:<name>`` for each flavor whose nodes were short.

    ``placed`` are the pod sets of the same job assigned before the failed one.
    Their shortages count too, and so do the flavors they took: quota or nodes
    freed there can move them to another flavor or other nodes, which makes room
    for the failed pod set (placed in a busy flavor's stead, a pod set can take
    the very nodes the next one needs).

    With none of these, only a configuration change can help.
    """
    placed = list(placed)
    results = [*placed, pod_set]
    quota = [
        ((a.flavor, a.resource), a.needed, a.needed - a.available)
        for r in results
        for a in r.attempts
        if a.outcome == QUOTA
    ]
    keys = [f"flavor:{a.flavor}" for r in results for a in r.attempts if a.outcome == PLACEMENT]
    keys.extend(f"flavor:{f}" for r in placed for f in r.flavors.values())
    return quota, tuple(dict.fromkeys(keys))


def strict_fifo_reason(cluster_queue: str, head_id: int) -> Reason:
    return Reason(
        ReasonCode.STRICT_FIFO,
        f"waiting behind job {head_id}, the blocked head of StrictFIFO ClusterQueue "
        f"{cluster_queue}",
        {"clusterQueue": cluster_queue, "blockedBy": head_id},
    )


def waiting_reason(code: ReasonCode, message: str, **details: object) -> Reason:
    return Reason(code, message, dict(details))
