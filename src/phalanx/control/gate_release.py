"""Releasing held-back jobs: each iteration, the gate's jobs that became eligible go to
the engine, and the reasons of those that still wait are recorded.

A job waits at the gate (:mod:`phalanx.control.gate`) while it is held, before
its begin time, while a dependency is unsatisfied or while its array is
throttled; one whose dependency can never be satisfied is cancelled here. A job
requeued expedited before a restart is expedited again as it enters the engine.
"""

from __future__ import annotations

from typing import Any

from phalanx.control.metrics import Metrics
from phalanx.control.runtime_events import healthy_nodes
from phalanx.control.slurmjobs import dependency_checker
from phalanx.control.state import LoopState
from phalanx.engine import Expedite, Submit
from phalanx.model import JobState
from phalanx.store import Tx

__all__ = ["release_gate"]


def release_gate(tx: Tx, now: float, state: LoopState, metrics: Metrics) -> None:
    """Hand the jobs that became eligible to the engine; record the reasons of the rest."""
    eligible, changed, doomed = state.gate.release(now, dependency_checker(tx, now))
    for g in eligible:
        state.engine.apply(Submit(g.job))
        if g.expedite is not None:
            held, since = g.expedite
            g.expedite = None
            state.engine.apply(Expedite(g.job.id, healthy_nodes(state.engine, held), since))
    updates: list[tuple[int, dict[str, Any]]] = [
        (g.job.id, {"reason": g.reason, "message": g.message}) for g in changed
    ]
    updates += [(g.job.id, {"reason": "", "message": ""}) for g in eligible if g.reason]
    if updates:
        tx.update_jobs(updates)
    for g in doomed:
        tx.update_job(
            g.job.id,
            state=JobState.CANCELLED.value,
            end_time=now,
            reason="DependencyNeverSatisfied",
            message="cancelled: its dependency can never be satisfied",
        )
        tx.add_event(g.job.id, "Cancelled", now, reason="DependencyNeverSatisfied")
        metrics.finished_total.labels(state=JobState.CANCELLED.value).inc()
    if eligible or doomed:
        state.dirty = True
