"""Read queries about the cluster: ClusterQueues, nodes, the fair-share tree, and the
Prometheus metrics built from them.

Like :mod:`phalanx.control.queries`, they read the engine under the loop's
lock and are refused on a standby.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from phalanx.auth import Principal
from phalanx.control.metrics import Metrics
from phalanx.control.state import LoopState
from phalanx.model import GPU

__all__ = ["ClusterStatus"]


class ClusterStatus:
    """Answers about ClusterQueues, nodes and usage, from the engine and the ledger."""

    def __init__(
        self,
        state: LoopState,
        lock: threading.RLock,
        metrics: Metrics,
        require_leader: Callable[[], None],
    ) -> None:
        self.state = state
        self.lock = lock
        """The loop's lock: held while the loop changes the engine."""
        self.metrics = metrics
        self.require_leader = require_leader

    def cluster_queue_status(self) -> dict[str, dict[str, Any]]:
        self.require_leader()
        with self.lock:
            engine = self.state.engine
            status: dict[str, dict[str, Any]] = {}
            pending: dict[str, int] = {}
            admitted: dict[str, int] = {}
            for rec in engine.jobs.values():
                cq = rec.admission.cluster_queue if rec.admission else rec.cluster_queue
                if cq is None:
                    continue
                target = admitted if rec.admission else pending
                target[cq] = target.get(cq, 0) + 1
            for name, info in engine.cache.cluster_queues.items():
                node = info.node
                usage: dict[str, dict[str, int]] = {}
                nominal: dict[str, dict[str, int]] = {}
                borrowed: dict[str, dict[str, int]] = {}
                for (flavor, resource), amount in node.nominal.items():
                    nominal.setdefault(flavor, {})[resource] = amount
                for (flavor, resource), amount in node.usage.items():
                    usage.setdefault(flavor, {})[resource] = amount
                    over = amount - node.nominal.get((flavor, resource), 0)
                    if over > 0:
                        borrowed.setdefault(flavor, {})[resource] = over
                status[name] = {
                    "cohort": info.model.cohort_name,
                    "active": info.inactive is None,
                    "inactive_reason": info.inactive.message if info.inactive else None,
                    "pending": pending.get(name, 0),
                    "admitted": admitted.get(name, 0),
                    "usage": usage,
                    "nominal": nominal,
                    "borrowed": borrowed,
                }
            return status

    def node_status(self, principal: Principal | None = None) -> dict[str, dict[str, Any]]:
        """Each node's state, GPUs in use and jobs, its state from its jobs alone
        (``alloc_state``: idle, mixed, allocated) and its reason with who set it and when;
        with ``principal``, only the jobs it may see are named (the others' ids are not
        shown, as everywhere else)."""
        self.require_leader()
        with self.lock:
            status: dict[str, dict[str, Any]] = {}
            for name, slot in self.state.engine.cache.nodes.items():
                jobs = sorted(slot.jobs)
                if principal is not None and not principal.admin:
                    jobs = [j for j in jobs if self._visible_to(principal, j)]
                status[name] = {
                    "state": slot.state().value,
                    "gpus": slot.capacity.get(GPU, 0),
                    "gpus_used": slot.used.get(GPU, 0),
                    "gpu_indices_used": self.state.gpus.taken(name),
                    "jobs": jobs,
                    "alloc_state": slot.usage_state().value,
                    "reason": slot.node.reason,
                    "reason_user": slot.node.reason_user,
                    "reason_time": slot.node.reason_time,
                }
            return status

    def _visible_to(self, principal: Principal, job_id: int) -> bool:
        rec = self.state.engine.jobs.get(job_id)
        return rec is not None and principal.may_act_for(rec.job.tenant)

    def usage_report(self) -> dict[str, Any]:
        """The tenant tree with shares, decayed usage and fair-share factors (``sshare``)."""
        from phalanx.control.share_report import share_report

        self.require_leader()
        priority = getattr(self.state.config, "slurm_priority", None)
        fair_tree = self.state.config.usage.fair_tree and getattr(priority, "fair_tree", True)
        with self.lock:
            usage = self.state.usage.usage()
            tenants = dict(self.state.registry.all("Tenant"))
        rows = share_report(
            tenants,
            usage,
            fair_tree_mode=fair_tree,
            dampening=float(getattr(priority, "fairshare_dampening", 1.0)),
        )
        return {
            "fair_tree": fair_tree,
            "half_life_s": self.state.config.usage.half_life_s,
            "associations": rows,
        }

    def render_metrics(self) -> bytes:
        from prometheus_client import generate_latest

        self.require_leader()
        with self.lock:
            self.metrics.observe_state(
                self.cluster_queue_status(), self.node_status(), self._pending_by_cq()
            )
        return generate_latest(self.metrics.registry)

    def _pending_by_cq(self) -> dict[str, tuple[int, int]]:
        """ClusterQueue -> (active pending, inadmissible pending), as Kueue counts them.

        Active jobs are candidates for the next cycle; inadmissible ones wait for a
        change (quota freed, a stopped queue started) before they are tried again.
        """
        counts: dict[str, tuple[int, int]] = {}
        for rec in self.state.engine.jobs.values():
            if rec.admission is not None or rec.cluster_queue is None:
                continue
            active, inadmissible = counts.get(rec.cluster_queue, (0, 0))
            sq = rec.queue
            blocked = (
                rec.waiting is not None
                or sq is None
                or sq.parked
                or sq.cq.parked
                or sq.cq.stopped is not None
            )
            if blocked:
                inadmissible += 1
            else:
                active += 1
            counts[rec.cluster_queue] = (active, inadmissible)
        return counts
