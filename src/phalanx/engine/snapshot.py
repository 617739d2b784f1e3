"""Export an engine's whole state as JSON-compatible data, and load it back.

The loaded engine is indistinguishable from the original: fed the same events
afterwards it makes the same decisions, byte for byte. That takes more than
the objects and jobs: the exact priorities, the parked queues and the order of
nodes inside each capacity bucket (which placement walks) travel too.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from phalanx.engine.cache.capacity import Devices
from phalanx.engine.config import (
    AdmissionFairSharingConfig,
    BackfillConfig,
    EngineConfig,
    FairSharingConfig,
    PreemptionConfig,
    SlurmPriorityConfig,
    UsageConfig,
    WaitForPodsReadyConfig,
)
from phalanx.engine.decisions import Admit, decision_from_dict
from phalanx.engine.engine import Engine
from phalanx.engine.expedite import expedited_key
from phalanx.engine.explain.reasons import reason_from_dict
from phalanx.engine.priority.ordering import FairShareWeights, job_facts
from phalanx.engine.queueing.queues import ClusterQueueQueue, Condition, ShapeQueue
from phalanx.engine.queueing.shapes import PodSetShape
from phalanx.engine.state import Admission, Allocation, JobRecord
from phalanx.model import (
    ClusterQueue,
    Cohort,
    Job,
    LocalQueue,
    Node,
    PriorityClass,
    ResourceFlavor,
    Tenant,
    Topology,
)

__all__ = ["FORMAT", "export_state", "load_state"]

FORMAT = "phalanx.engine/v1"

_KINDS: dict[str, type[Any]] = {
    "Node": Node,
    "ResourceFlavor": ResourceFlavor,
    "Topology": Topology,
    "Cohort": Cohort,
    "ClusterQueue": ClusterQueue,
    "LocalQueue": LocalQueue,
    "Tenant": Tenant,
    "PriorityClass": PriorityClass,
}


def _conditions(conditions: tuple[Condition, ...]) -> list[list[object]]:
    return [[kind, root, f, r, t] for kind, root, (f, r), t in conditions]


def export_state(engine: Engine) -> dict[str, Any]:
    """The engine's state as plain data (``json.dumps`` round-trips it exactly)."""
    cfg = engine.config
    jobs: list[dict[str, Any]] = []
    for rec in engine.jobs.values():
        entry: dict[str, Any] = {
            "job": rec.job.to_dict(),
            "priority": rec.priority,
            "priority_value": rec.facts.priority_value,
            "reason": rec.reason.to_dict() if rec.reason else None,
            "order_time": rec.order_time,
            "requeue": [
                rec.evicted_for,
                rec.evicted_at,
                rec.requeue_count,
                rec.requeue_at,
                rec.deactivate,
            ],
        }
        if rec.reason_sig is not None:
            (shape, attempts), built = rec.reason_sig
            assert isinstance(shape, PodSetShape)
            entry["failure"] = {
                "pod_set": shape.name,
                "attempts": [list(a) for a in attempts],  # type: ignore[attr-defined]
                "reason": built.to_dict(),
                "current": rec.reason is built,
            }
        adm = rec.admission
        if adm is not None:
            entry["admission"] = {
                "cluster_queue": adm.cluster_queue,
                "usage": [[f, r, v] for (f, r), v in adm.usage.items()],
                "allocations": [
                    [s.name, a, x, [list(d) for d in devices]]
                    for s, a, x, devices in adm.allocations
                ],
                "decision": adm.decision.to_dict(),
                "evicting": adm.evicting,
                "admitted_at": adm.admitted_at,
            }
            if adm.checkpoint_at is not None:
                entry["admission"]["checkpoint_at"] = adm.checkpoint_at
        jobs.append(entry)
    parked: list[dict[str, Any]] = []
    for item in engine.queues.parked.items():
        reason = item.park_reason.to_dict() if item.park_reason else None
        if isinstance(item, ShapeQueue):
            head = item.peek()
            if head is not None:
                parked.append(
                    {
                        "shape_of": head.id,
                        "reason": reason,
                        "keys": list(item.park_keys),
                        "conditions": _conditions(item.park_conditions),
                    }
                )
        elif isinstance(item, ClusterQueueQueue) and item.blocked_by is not None:
            parked.append(
                {
                    "sticky": item.sticky,
                    "blocked_by": item.blocked_by.id,
                    "reason": reason,
                    "keys": list(item.park_keys),
                    "conditions": _conditions(item.park_conditions),
                }
            )
    return {
        "format": FORMAT,
        "config": {
            "preset": cfg.preset,
            "weights": dataclasses.asdict(cfg.weights),
            "priority_calc_period_s": cfg.priority_calc_period_s,
            "ignore_undeclared_resources": cfg.ignore_undeclared_resources,
            "heads_per_cycle": cfg.heads_per_cycle,
            "fair_sharing": (
                list(cfg.fair_sharing.preemption_strategies) if cfg.fair_sharing else None
            ),
            "wait_for_pods_ready": (
                dataclasses.asdict(cfg.wait_for_pods_ready) if cfg.wait_for_pods_ready else None
            ),
            "preemption": dataclasses.asdict(cfg.preemption),
            "slurm_priority": {
                **dataclasses.asdict(cfg.slurm_priority),
                "flags": list(cfg.slurm_priority.flags),
            },
            "admission_fair_sharing": (
                dataclasses.asdict(cfg.admission_fair_sharing)
                if cfg.admission_fair_sharing
                else None
            ),
            "backfill": dataclasses.asdict(cfg.backfill) if cfg.backfill else None,
            "usage": dataclasses.asdict(cfg.usage),
            "topology_policy": cfg.topology_policy,
            "placement": cfg.placement,
            "placement_seed": cfg.placement_seed,
            "missing_namespace_selector_matches_all": cfg.missing_namespace_selector_matches_all,
        },
        "workload": {"fixed": engine.workload.fixed, **engine.workload.export()},
        "objects": [
            {"kind": k, "object": o.to_dict()} for (k, _), o in engine.objects.by_key.items()
        ],
        **engine.priorities.export(),
        **engine.afs.export(),
        "jobs": jobs,
        "parked": parked,
        "buckets": {
            name: {
                "members": [s.name for s in index.members],
                "buckets": [[k, [s.name for s in b]] for k, b in index.buckets.items()],
                "version": index.version,
            }
            for name, index in engine.cache.flavor_nodes.items()
        },
        "released": [[r, f, res, v] for (r, (f, res)), v in engine.queues.parked.released.items()],
        "outbox": [d.to_dict() for d in engine.outbox],
        "drain": list(engine.draining),
        "now": engine.now,
        "pinned": {name: cqq.pinned.id for name, cqq in engine.queues.queues.items() if cqq.pinned},
        **engine.pods_ready.export(),
        "backoff": list(engine.lifecycle.backoff),
        **engine.reserved.export(),
        **engine.backfill.export(),
        "limit_held": [[j, *key] for j, key in engine.limits.held()],
        **engine.preemption.export(),
        **engine.expedite.export(),
    }


def _slurm_priority(data: dict[str, Any] | None) -> SlurmPriorityConfig:
    if not data:
        return SlurmPriorityConfig()
    return SlurmPriorityConfig(**{**data, "flags": tuple(data.get("flags", ()))})


def load_state(data: dict[str, Any]) -> Engine:
    """Rebuild an engine from :func:`export_state` output."""
    if data.get("format") != FORMAT:
        raise ValueError(f"not a phalanx engine state (format {data.get('format')!r})")
    c = data["config"]
    fair = c.get("fair_sharing")
    ready = c.get("wait_for_pods_ready")
    engine = Engine(
        EngineConfig(
            preset=c["preset"],
            weights=FairShareWeights(**c["weights"]),
            priority_calc_period_s=c["priority_calc_period_s"],
            ignore_undeclared_resources=c["ignore_undeclared_resources"],
            heads_per_cycle=c.get("heads_per_cycle"),
            fair_sharing=FairSharingConfig(tuple(fair)) if fair is not None else None,
            wait_for_pods_ready=WaitForPodsReadyConfig(**ready) if ready is not None else None,
            preemption=PreemptionConfig(**c.get("preemption", {})),
            slurm_priority=_slurm_priority(c.get("slurm_priority")),
            admission_fair_sharing=(
                AdmissionFairSharingConfig(**c["admission_fair_sharing"])
                if c.get("admission_fair_sharing")
                else None
            ),
            backfill=BackfillConfig(**c["backfill"]) if c.get("backfill") else None,
            usage=UsageConfig(**c.get("usage", {})),
            topology_policy=c.get("topology_policy", "phalanx"),
            placement=c.get("placement", "phalanx"),
            placement_seed=int(c.get("placement_seed", 0)),
            missing_namespace_selector_matches_all=c.get(
                "missing_namespace_selector_matches_all", True
            ),
        )
    )
    workload = data.get("workload")
    if workload:
        engine.workload.fixed = bool(workload.get("fixed", False))
        engine.workload.load(workload)
    from phalanx.engine.events import Upsert

    for entry in data["objects"]:
        engine.apply(Upsert(_KINDS[entry["kind"]].model_validate(entry["object"])))
    engine.priorities.load(data)
    engine.afs.load(data)
    engine.expedite.load_jobs(data)
    cache = engine.cache
    engine.now = float(data.get("now", 0.0))
    backoff = set(data.get("backoff", []))
    limit_held = {int(j): (kind, name, user) for j, kind, name, user in data.get("limit_held", [])}
    for entry in data["jobs"]:
        job = Job.model_validate(entry["job"])
        # The value is the one resolved at submission: later PriorityClass edits don't apply.
        facts = job_facts(job, entry["priority_value"])
        rec = JobRecord(job=job, shape=engine.shapes.job(job), facts=facts)
        # Known queues keep the saved priority when the job is enqueued again.
        cq_name, lq_key, _ = engine.objects.resolve(rec)
        rec.facts = dataclasses.replace(facts, cluster_queue=cq_name, local_queue=lq_key)
        rec.priority = entry["priority"]
        rec.order_time = entry.get("order_time", job.submit_time)
        rec.key = (0.0, -rec.priority, rec.order_time, job.id)
        if job.id in engine.expedite.jobs:
            rec.key = expedited_key(rec)
        if "requeue" in entry:
            (
                rec.evicted_for,
                rec.evicted_at,
                rec.requeue_count,
                rec.requeue_at,
                rec.deactivate,
            ) = entry["requeue"]
        rec.reason = reason_from_dict(entry["reason"]) if entry["reason"] else None
        failure = entry.get("failure")
        if failure is not None:
            shape = next(p for p in rec.shape.pod_sets if p.name == failure["pod_set"])
            attempts = tuple(tuple(a) for a in failure["attempts"])
            built = reason_from_dict(failure["reason"])
            rec.reason_sig = ((shape, attempts), built)
            if failure["current"]:
                rec.reason = built
        engine.jobs[job.id] = rec
        adm = entry.get("admission")
        if adm is None:
            engine.pending_by_tenant.setdefault(job.tenant, {})[job.id] = rec
            if job.id in backoff:
                engine.lifecycle.hold_for_backoff(rec)
            elif job.id in limit_held and rec.reason is not None:
                rec.local_queue = engine.objects.resolve(rec)[1]
                rec.waiting = rec.reason
                engine.limits.hold(rec, limit_held[job.id])
            else:
                engine.lifecycle.enqueue(rec)
            continue
        info = cache.cluster_queues[adm["cluster_queue"]]
        usage = {(f, r): v for f, r, v in adm["usage"]}
        for fr, amount in usage.items():
            info.node.add_usage(fr, amount)
        allocations: list[Allocation] = []
        for name, amounts, exclusive, *rest in adm["allocations"]:
            slot = cache.nodes[name]
            devices: Devices = tuple((int(i), int(m)) for i, m in (rest[0] if rest else ()))
            slot.take(job.id, amounts, bool(exclusive), devices)
            cache.reindex(slot)
            allocations.append((slot, dict(amounts), bool(exclusive), devices))
        decision = decision_from_dict(adm["decision"])
        assert isinstance(decision, Admit)
        rec.local_queue = engine.objects.resolve(rec)[1]
        rec.cluster_queue = info.name
        rec.admission = Admission(
            info.name,
            info.node,
            usage,
            allocations,
            decision,
            bool(adm["evicting"]),
            float(adm.get("admitted_at", 0.0)),
            None if adm.get("checkpoint_at") is None else float(adm["checkpoint_at"]),
        )
        engine.admitted_by_cq.setdefault(info.name, {})[job.id] = rec
        engine.limits.charge(rec, cache.tenants, {p.name: p.count for p in decision.pod_sets})
    engine.queues.parked.released = {(r, (f, res)): v for r, f, res, v in data["released"]}
    for entry in data["parked"]:
        reason = reason_from_dict(entry["reason"])
        keys = tuple(entry["keys"])
        conditions = tuple((kind, root, (f, r), t) for kind, root, f, r, t in entry["conditions"])
        if "shape_of" in entry:
            sq = engine.jobs[entry["shape_of"]].queue
            assert sq is not None
            engine.queues.parked.park(sq, reason, keys, conditions)
        else:
            head = engine.jobs[entry["blocked_by"]]
            assert head.queue is not None
            cqq = head.queue.cq
            cqq.blocked_by = head
            cqq.sticky = bool(entry.get("sticky", False))
            engine.queues.parked.park(cqq, reason, keys, conditions)
    engine.reserved.load(data)
    engine.expedite.load()
    engine.backfill.load(data)
    for name, layout in data["buckets"].items():
        index = cache.flavor_nodes[name]
        index.members = {cache.nodes[n]: None for n in layout["members"]}
        index.buckets = {k: {cache.nodes[n]: None for n in names} for k, names in layout["buckets"]}
        index._where = {slot: k for k, b in index.buckets.items() for slot in b}
        index._keys = None
        index._classes, index._class_of, index._unclassified = None, {}, {}
        index.version = int(layout.get("version", index.version))
    engine.outbox = [decision_from_dict(d) for d in data["outbox"]]
    engine.draining = dict.fromkeys(data["drain"])
    # Loading the jobs marked the priorities stale: the saved flag wins.
    engine.priorities.dirty = data["priority_dirty"]
    engine.pods_ready.load(data)
    engine.preemption.load(data)
    for name, job_id in data.get("pinned", {}).items():
        engine.queues.queues[name].pinned = engine.jobs[job_id]
    return engine
