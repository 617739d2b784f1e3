"""A small discrete-event driver for engine tests: submissions and completions on a
virtual clock, a cycle after every batch of events, and what happened to each job."""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from dataclasses import dataclass, field

from phalanx.engine import Admit, Engine, Finish, Submit
from phalanx.model import Job


@dataclass
class Run:
    start: dict[int, float] = field(default_factory=dict)
    end: dict[int, float] = field(default_factory=dict)
    gpus: dict[int, int] = field(default_factory=dict)
    planned: dict[int, float] = field(default_factory=dict)
    """The first reservation start each job was given."""

    def busy_gpu_seconds(self, until: float) -> float:
        return sum(
            self.gpus[j] * max(0.0, min(self.end[j], until) - s) for j, s in self.start.items()
        )


def drive(engine: Engine, jobs: Iterable[tuple[Job, float]], horizon: float = 1e9) -> Run:
    """Submit each ``(job, runtime)`` at its ``submit_time``; each admitted job runs for
    its runtime, then finishes. Returns start and end times."""
    run = Run()
    runtime = {}
    events: list[tuple[float, int, int]] = []  # (time, kind 0=finish 1=submit, index)
    pending = list(jobs)
    for i, (job, rt) in enumerate(pending):
        runtime[job.id] = rt
        run.gpus[job.id] = job.gpus
        heapq.heappush(events, (job.submit_time, 1, i))
    while events:
        now = events[0][0]
        if now > horizon:
            break
        while events and events[0][0] == now:
            _, kind, ref = heapq.heappop(events)
            if kind == 1:
                engine.apply(Submit(pending[ref][0]))
            else:
                engine.apply(Finish(ref))
                run.end[ref] = now
        for decision in engine.cycle(now):
            if isinstance(decision, Admit):
                run.start[decision.job_id] = now
                heapq.heappush(events, (now + runtime[decision.job_id], 0, decision.job_id))
        for r in engine.reservations():
            run.planned.setdefault(r.job_id, r.start)
    return run
