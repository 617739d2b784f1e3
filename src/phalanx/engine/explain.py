"""Pending reasons built from the record of a failed assignment."""

from __future__ import annotations

from phalanx.engine.assigner import (
    MAX_QUOTA,
    NO_MATCH,
    PLACEMENT,
    QUOTA,
    UNDECLARED,
    FlavorAttempt,
    PodSetResult,
)
from phalanx.engine.reasons import Reason, ReasonCode
from phalanx.model import format_quantity

__all__ = ["reason_for_failure", "strict_fifo_reason", "waiting_reason"]


def _amount(resource: str, amount: int) -> str:
    return f"{format_quantity(amount, resource)} {resource}"


def _describe(attempt: FlavorAttempt, pod_set: PodSetResult) -> str:
    flavor = attempt.flavor
    if attempt.outcome == QUOTA and attempt.shortage is not None:
        s = attempt.shortage
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


def reason_for_failure(cluster_queue: str, pod_set: PodSetResult) -> tuple[Reason, tuple[str, ...]]:
    """The pending reason of a pod set that got no flavor, and the park keys that can wake it.

    Keys: ``quota`` when some flavor was short of quota (wakes on quota released
    in the cohort tree) and ``flavor:<name>`` for each flavor whose nodes were
    short (wakes on capacity released there). Neither: only a configuration
    change can help.
    """
    attempts = pod_set.attempts
    outcomes = {a.outcome for a in attempts}
    if PLACEMENT in outcomes:
        code = ReasonCode.NO_NODE_FIT
    elif QUOTA in outcomes:
        code = ReasonCode.INSUFFICIENT_QUOTA
    elif MAX_QUOTA in outcomes:
        code = ReasonCode.EXCEEDS_MAX_QUOTA
    elif UNDECLARED in outcomes:
        code = ReasonCode.UNDECLARED_RESOURCE
    else:
        code = ReasonCode.NO_MATCHING_FLAVOR
    parts = [_describe(a, pod_set) for a in attempts]
    message = f"couldn't assign flavors to pod set {pod_set.shape.name}: " + "; ".join(parts)
    first = next(
        (a for a in attempts if a.outcome in (PLACEMENT, QUOTA)),
        attempts[0] if attempts else None,
    )
    details: dict[str, object] = {"clusterQueue": cluster_queue, "podSet": pod_set.shape.name}
    if first is not None:
        details["flavor"] = first.flavor
        if first.resource:
            details["resource"] = first.resource
        if first.outcome == QUOTA and first.shortage is not None:
            details["shortBy"] = first.shortage.short_by
            details["shortIn"] = f"{first.shortage.kind}/{first.shortage.node}"
        if first.outcome == PLACEMENT:
            details["maxTasks"] = first.max_units * pod_set.shape.unit_size
    keys: list[str] = []
    if QUOTA in outcomes:
        keys.append("quota")
    keys.extend(f"flavor:{a.flavor}" for a in attempts if a.outcome == PLACEMENT)
    return Reason(code, message, details), tuple(dict.fromkeys(keys))


def strict_fifo_reason(cluster_queue: str, head_id: int) -> Reason:
    return Reason(
        ReasonCode.STRICT_FIFO,
        f"waiting behind job {head_id}, the blocked head of StrictFIFO ClusterQueue "
        f"{cluster_queue}",
        {"clusterQueue": cluster_queue, "blockedBy": head_id},
    )


def waiting_reason(code: ReasonCode, message: str, **details: object) -> Reason:
    return Reason(code, message, dict(details))
