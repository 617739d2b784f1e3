"""Prometheus metrics of the control plane, with Kueue's names where Kueue has one.

Kueue's (``kueue_pending_workloads``, ``kueue_admitted_workloads_total``,
``kueue_admission_wait_time_seconds``, ``kueue_cluster_queue_resource_usage``,
...) keep their label names (``cluster_queue``, ``status``, ``flavor``,
``resource``) so existing dashboards and alerts work; phalanx's own are
prefixed ``phalanx_``. Each control plane has its own registry.
"""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

__all__ = ["Metrics"]

_WAIT_BUCKETS = (0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 1800, 3600, 10800, 86400)
_CYCLE_BUCKETS = (0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.pending = Gauge(
            "kueue_pending_workloads",
            "Pending workloads per ClusterQueue and status (active: queued in the "
            "ClusterQueue; inadmissible: waiting for its queue or ClusterQueue to exist or start)",
            ["cluster_queue", "status"],
            registry=r,
        )
        self.admitted_total = Counter(
            "kueue_admitted_workloads_total",
            "Workloads admitted per ClusterQueue",
            ["cluster_queue"],
            registry=r,
        )
        self.admission_wait = Histogram(
            "kueue_admission_wait_time_seconds",
            "Time from submission (or requeue) to admission",
            ["cluster_queue"],
            buckets=_WAIT_BUCKETS,
            registry=r,
        )
        self.admitted_active = Gauge(
            "kueue_admitted_active_workloads",
            "Admitted workloads that have not finished, per ClusterQueue",
            ["cluster_queue"],
            registry=r,
        )
        self.resource_usage = Gauge(
            "kueue_cluster_queue_resource_usage",
            "Quota in use per ClusterQueue, flavor and resource (cores, bytes, devices)",
            ["cluster_queue", "flavor", "resource"],
            registry=r,
        )
        self.nominal_quota = Gauge(
            "kueue_cluster_queue_nominal_quota",
            "Nominal quota per ClusterQueue, flavor and resource",
            ["cluster_queue", "flavor", "resource"],
            registry=r,
        )
        self.evicted_total = Counter(
            "kueue_evicted_workloads_total",
            "Workloads evicted per ClusterQueue and reason",
            ["cluster_queue", "reason"],
            registry=r,
        )
        self.submitted_total = Counter("phalanx_jobs_submitted_total", "Jobs submitted", registry=r)
        self.finished_total = Counter(
            "phalanx_jobs_finished_total", "Jobs finished per final state", ["state"], registry=r
        )
        self.cycles_total = Counter(
            "phalanx_scheduling_cycles_total", "Scheduling cycles run", registry=r
        )
        self.cycle_seconds = Histogram(
            "phalanx_scheduling_cycle_duration_seconds",
            "Time the engine spent in one scheduling cycle",
            buckets=_CYCLE_BUCKETS,
            registry=r,
        )
        self.commit_seconds = Histogram(
            "phalanx_store_commit_duration_seconds",
            "Time of one control-loop transaction, writes and commit",
            buckets=_CYCLE_BUCKETS,
            registry=r,
        )
        self.node_gpus = Gauge(
            "phalanx_node_gpus",
            "GPUs per node and state (allocated, total)",
            ["node", "state"],
            registry=r,
        )

    def observe_state(
        self,
        cluster_queues: dict[str, dict[str, Any]],
        nodes: dict[str, dict[str, Any]],
        pending: dict[str, tuple[int, int]],
    ) -> None:
        """Set the gauges from a snapshot of the control plane (at scrape time)."""
        for gauge in (self.pending, self.admitted_active, self.resource_usage, self.nominal_quota):
            gauge.clear()
        self.node_gpus.clear()
        for name, status in cluster_queues.items():
            active, inadmissible = pending.get(name, (0, 0))
            self.pending.labels(cluster_queue=name, status="active").set(active)
            self.pending.labels(cluster_queue=name, status="inadmissible").set(inadmissible)
            self.admitted_active.labels(cluster_queue=name).set(status["admitted"])
            for flavor, resources in status["nominal"].items():
                for resource, amount in resources.items():
                    self.nominal_quota.labels(name, flavor, resource).set(_unit(resource, amount))
            for flavor, resources in status["usage"].items():
                for resource, amount in resources.items():
                    self.resource_usage.labels(name, flavor, resource).set(_unit(resource, amount))
        for node, status in nodes.items():
            self.node_gpus.labels(node=node, state="allocated").set(status["gpus_used"])
            self.node_gpus.labels(node=node, state="total").set(status["gpus"])


def _unit(resource: str, amount: int) -> float:
    """CPU is kept in milli-cores internally; Kueue reports cores."""
    return amount / 1000 if resource == "cpu" else float(amount)
