"""What a simulation run measured: job completion times, waits, utilisation, fairness.

:func:`summarize` turns a :class:`~phalanx.sim.simulator.SimResult` into plain
numbers, overall and per tenant:

- job completion time (JCT: end minus submission) and queueing delay (first
  start minus submission): mean, median, p95, p99 over the jobs that ended;
- GPU utilisation: GPU-seconds used by running jobs over the cluster's
  GPU-seconds, from the first submission to the last end (the makespan);
- preemptions (evictions of running jobs);
- fairness: Jain's index over the tenants of ``x_i = (tenant i's share of the
  GPU time used) / (its entitlement)``, 1.0 when every tenant got exactly its
  entitlement's share, down to ``1/n``.

Percentiles are nearest-rank (the smallest value with at least p % of the
values at or below it).
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from phalanx.sim.simulator import JobOutcome, SimResult

__all__ = ["jain", "percentile", "summarize"]


def percentile(values: Sequence[float], p: float) -> float:
    """Nearest-rank percentile of ``values`` (sorted or not); 0.0 for none."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(1, math.ceil(p / 100 * len(ordered)))
    return ordered[rank - 1]


def jain(values: Sequence[float]) -> float:
    """Jain's fairness index of ``values``: (sum x)^2 / (n * sum x^2)."""
    if not values:
        return 1.0
    square = sum(v * v for v in values)
    return 1.0 if square == 0 else sum(values) ** 2 / (len(values) * square)


def _stats(values: Sequence[float]) -> dict[str, float]:
    if not values:
        return {"mean": 0.0, "median": 0.0, "p95": 0.0, "p99": 0.0}
    return {
        "mean": round(statistics.fmean(values), 3),
        "median": round(statistics.median(values), 3),
        "p95": round(percentile(values, 95), 3),
        "p99": round(percentile(values, 99), 3),
    }


def _block(outcomes: Sequence[JobOutcome]) -> dict[str, Any]:
    ended = [o for o in outcomes if o.end is not None]
    return {
        "jobs": len(outcomes),
        "ended": len(ended),
        "jct_s": _stats([o.jct for o in ended if o.jct is not None]),
        "queueing_delay_s": _stats([o.queue_delay for o in ended if o.queue_delay is not None]),
        "preemptions": sum(o.preemptions for o in outcomes),
        "gpu_seconds": round(sum(_used(o) for o in outcomes), 1),
    }


def _used(outcome: JobOutcome) -> float:
    """GPU-seconds a job's last (completed) run used, at its requested GPUs."""
    if outcome.end is None or outcome.start is None:
        return 0.0
    limit = outcome.job.time_limit
    run = outcome.job.duration if limit is None else min(outcome.job.duration, limit)
    return run * outcome.job.gpus


def summarize(result: SimResult, shares: Mapping[str, float]) -> dict[str, Any]:
    """The run's numbers (see the module docstring); ``shares``: tenant -> entitlement."""
    outcomes = result.outcomes
    first = min((o.job.submit for o in outcomes), default=0.0)
    last = max((o.end for o in outcomes if o.end is not None), default=first)
    makespan = last - first
    busy_seconds = 0.0
    for (t0, used), (t1, _) in itertools.pairwise(result.busy):
        busy_seconds += used * (t1 - t0)
    tenants = sorted({o.job.tenant for o in outcomes})
    per_tenant = {t: _block([o for o in outcomes if o.job.tenant == t]) for t in tenants}
    total_used = sum(b["gpu_seconds"] for b in per_tenant.values()) or 1.0
    weight = sum(shares.get(t, 0.0) for t in tenants) or 1.0
    ratios = []
    for tenant in tenants:
        entitled = shares.get(tenant, 0.0) / weight
        got = per_tenant[tenant]["gpu_seconds"] / total_used
        per_tenant[tenant]["share_of_gpu_time"] = round(got, 4)
        per_tenant[tenant]["entitlement"] = round(entitled, 4)
        if entitled > 0:
            ratios.append(got / entitled)
    return {
        "policy": result.policy,
        "cluster_gpus": result.gpus,
        "makespan_s": round(makespan, 1),
        "gpu_utilization": round(busy_seconds / (result.gpus * makespan), 4)
        if makespan > 0 and result.gpus
        else 0.0,
        "jain_fairness": round(jain(ratios), 4),
        "events": result.events,
        "cycles": result.cycles,
        **_block(outcomes),
        "tenants": per_tenant,
    }
