"""What a simulation run measured: job completion times, waits, utilisation, fairness.

:func:`summarize` turns a :class:`~phalanx.sim.simulator.SimResult` into plain
numbers, overall and per tenant:

- job completion time (JCT: end minus submission) and queueing delay (first
  start minus submission): mean, median, p95, p99 over the jobs that ended;
- GPU utilisation: GPU-seconds used by running jobs over the cluster's
  GPU-seconds, from the first submission to the last end (the makespan);
- preemptions (evictions of running jobs);
- fragmentation: while jobs waited, the mean share of the cluster's GPUs that
  were free on partly allocated nodes (where a job that needs whole nodes
  cannot use them); ``idle_while_waiting``: the mean share free at all while
  jobs waited (fragmentation, reservations, quota and ordering together);
- fairness: Jain's index over the tenants of ``x_i = (GPU time tenant i got) /
  (GPU time it was entitled to)``, 1.0 when every tenant got exactly its
  entitlement, down to ``1/n``. Over a whole run every job's GPU time is used
  sooner or later, so the shares are the demand's whatever the policy; the
  index is therefore taken hour by hour and averaged over the hours weighted
  by the GPU time used in each (hours with fewer than two tenants that had jobs
  left out). A tenant's entitlement in an hour is its weighted max-min fair
  share of the cluster given what every tenant asked for then (the GPUs of
  its jobs, waiting or running): its share of the GPUs, but never more than it
  asked for, what it leaves going to the others by their shares. A tenant that
  asked for little and got it is treated fairly; one that waited while others
  ran beyond their share is not. ``jain_fairness_plain`` is the same index with
  the plain shares (renormalised over the tenants present) as entitlements,
  which counts a tenant that asked for little as short-changed.

- goodput: GPU-hours run (every attempt of every job, at the GPUs it asked
  for), of which useful (the runs of the jobs that ended COMPLETED or TIMEOUT,
  less what they had to run again) and lost: to node failures (what a run on a
  failed node did beyond its last checkpoint) and to evictions (likewise for
  preemption, plus everything run by jobs that never completed);
  ``goodput = useful / (useful + lost)``; useful + lost = run.

Percentiles are nearest-rank (the smallest value with at least p % of the
values at or below it).
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from phalanx.model import JobState
from phalanx.sim.simulator import JobOutcome, SimResult

__all__ = ["goodput", "hourly_jain", "jain", "percentile", "summarize"]

HOUR = 3600.0


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
        **{
            key: round(value, 4 if key == "goodput" else 3)
            for key, value in goodput(outcomes).items()
        },
    }


_COMPLETED = (JobState.COMPLETED.value, JobState.TIMEOUT.value)


def goodput(outcomes: Sequence[JobOutcome]) -> dict[str, float]:
    """GPU-hours run, useful and lost (to node failures, to evictions), and the goodput
    (see the module docstring), unrounded."""
    run = useful = failures = evictions = 0.0
    requeues = 0
    for o in outcomes:
        gpus = o.job.gpu_equivalents / HOUR
        run += o.run_s * gpus
        failures += o.lost_to_failures_s * gpus
        requeues += o.failures
        if o.state in _COMPLETED:
            useful += (o.run_s - o.lost_to_failures_s - o.lost_to_evictions_s) * gpus
            evictions += o.lost_to_evictions_s * gpus
        else:
            evictions += (o.run_s - o.lost_to_failures_s) * gpus
    lost = failures + evictions
    return {
        "gpu_hours_run": run,
        "useful_gpu_hours": useful,
        "lost_gpu_hours": lost,
        "lost_to_failures_gpu_hours": failures,
        "lost_to_evictions_gpu_hours": evictions,
        "goodput": useful / (useful + lost) if useful + lost > 0 else 1.0,
        "failure_requeues": requeues,
    }


def _run(outcome: JobOutcome) -> float:
    """How long a job's last run lasted."""
    limit = outcome.job.time_limit
    return outcome.job.duration if limit is None else min(outcome.job.duration, limit)


def _used(outcome: JobOutcome) -> float:
    """GPU-seconds a job's last (completed) run used, at its requested GPUs."""
    if outcome.end is None or outcome.start is None:
        return 0.0
    return _run(outcome) * outcome.job.gpu_equivalents


def hourly_jain(
    outcomes: Sequence[JobOutcome], shares: Mapping[str, float], gpus: float | None = None
) -> float:
    """Jain's index of the tenants' received / entitled GPU time, hour by hour (see the
    module docstring); 1.0 when no hour had two tenants. With the cluster's ``gpus``,
    each hour's entitlements are capped by demand (weighted max-min); without, they
    are the plain shares among the tenants present."""
    used: dict[int, dict[str, float]] = {}
    wanted: dict[int, dict[str, float]] = {}
    for o in outcomes:
        if o.end is None:
            continue
        tenant = o.job.tenant
        gpu = o.job.gpu_equivalents
        _spread(wanted, tenant, o.job.submit, o.end, gpu)
        if o.start is not None:
            _spread(used, tenant, o.end - _run(o), o.end, gpu)
    total = 0.0
    weighted = 0.0
    for hour, demand in wanted.items():
        got = used.get(hour, {})
        present = {t: d for t, d in demand.items() if shares.get(t, 0.0) > 0}
        hour_used = sum(got.get(t, 0.0) for t in present)
        if len(present) < 2 or hour_used <= 0:
            continue
        if gpus is None:
            entitled = sum(shares[t] for t in present)
            fair = {t: shares[t] / entitled * hour_used for t in present}
        else:
            fair = _max_min(present, shares, gpus * HOUR)
        ratios = [got.get(t, 0.0) / fair[t] for t in present if fair[t] > 0]
        weighted += jain(ratios) * hour_used
        total += hour_used
    return weighted / total if total else 1.0


def _spread(
    into: dict[int, dict[str, float]], tenant: str, t0: float, t1: float, gpus: float
) -> None:
    """Add ``gpus`` held from ``t0`` to ``t1`` to each hour's tally, in GPU-seconds
    (a zero-length stretch still marks its hour)."""
    t = t0
    while True:
        hour = int(t // HOUR)
        step = min(t1, (hour + 1) * HOUR) - t
        bucket = into.setdefault(hour, {})
        bucket[tenant] = bucket.get(tenant, 0.0) + step * gpus
        t += step
        if t >= t1:
            return


def _max_min(
    demand: Mapping[str, float], shares: Mapping[str, float], capacity: float
) -> dict[str, float]:
    """Weighted max-min fair division of ``capacity`` (water-filling): no tenant gets
    more than it asked for, the rest is split by ``shares`` among the others."""
    fair: dict[str, float] = {}
    left = dict(demand)
    room = min(capacity, sum(demand.values()))
    while left:
        level = room / sum(shares[t] for t in left)
        sated = [t for t in left if left[t] <= level * shares[t]]
        if not sated:
            fair.update({t: level * shares[t] for t in left})
            break
        for t in sated:
            fair[t] = left.pop(t)
            room -= fair[t]
    return fair


def _while_waiting(result: SimResult) -> tuple[float, float]:
    """While jobs waited: the mean share of the cluster's GPUs free on partly allocated
    nodes (fragmentation), and the mean share idle at all."""
    waited = fragmented = idle = 0.0
    points = list(zip(result.busy, result.queued, result.fragmented, strict=True))
    for ((t0, used), (_, queued), (_, frag)), ((t1, _), _, _) in itertools.pairwise(points):
        if queued <= 0 or t1 <= t0:
            continue
        span = t1 - t0
        waited += span
        fragmented += frag * span
        idle += (result.gpus - used) * span
    if waited <= 0 or not result.gpus:
        return 0.0, 0.0
    scale = waited * result.gpus
    return round(fragmented / scale, 4), round(idle / scale, 4)


def summarize(result: SimResult, shares: Mapping[str, float]) -> dict[str, Any]:
    """The run's numbers (see the module docstring); ``shares``: tenant -> entitlement."""
    outcomes = result.outcomes
    first = min((o.job.submit for o in outcomes), default=0.0)
    last = max((o.end for o in outcomes if o.end is not None), default=first)
    makespan = last - first
    busy_seconds = 0.0
    for (t0, used), (t1, _) in itertools.pairwise(result.busy):
        busy_seconds += used * (t1 - t0)
    fragmented, idle = _while_waiting(result)
    tenants = sorted({o.job.tenant for o in outcomes})
    per_tenant = {t: _block([o for o in outcomes if o.job.tenant == t]) for t in tenants}
    total_used = sum(b["gpu_seconds"] for b in per_tenant.values()) or 1.0
    weight = sum(shares.get(t, 0.0) for t in tenants) or 1.0
    for tenant in tenants:
        per_tenant[tenant]["share_of_gpu_time"] = round(
            per_tenant[tenant]["gpu_seconds"] / total_used, 4
        )
        per_tenant[tenant]["entitlement"] = round(shares.get(tenant, 0.0) / weight, 4)
    return {
        "policy": result.policy,
        "cluster_gpus": result.gpus,
        "makespan_s": round(makespan, 1),
        "gpu_utilization": round(busy_seconds / (result.gpus * makespan), 4)
        if makespan > 0 and result.gpus
        else 0.0,
        "fragmentation": fragmented,
        "idle_while_waiting": idle,
        "jain_fairness": round(hourly_jain(outcomes, shares, result.gpus), 4),
        "jain_fairness_plain": round(hourly_jain(outcomes, shares), 4),
        "events": result.events,
        "cycles": result.cycles,
        "node_failures": len(result.node_failures),
        "failure_model": result.failures,
        **_block(outcomes),
        "tenants": per_tenant,
    }
