"""Jobs that may not be scheduled yet: held, before their begin time, waiting on others.

The engine only sees jobs that are eligible to run. A pending job stays here,
with Slurm's reason, while it is held (``--hold``, ``scontrol hold``), before its
``--begin`` time, while its ``--dependency`` is not satisfied, or while its job
array already has ``%N`` tasks in the engine. Each control-loop iteration
calls :meth:`Gate.release`, which hands the jobs that became eligible to the
engine and reports the reasons that changed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from phalanx.model import Job

__all__ = ["DependencyStatus", "Gate", "GatedJob"]

DependencyStatus = Callable[[str, "GatedJob"], str]
"""``(dependency text, job) -> "satisfied" | "waiting" | "never"``."""


@dataclass(slots=True)
class GatedJob:
    job: Job
    hold: bool = False
    held_by_admin: bool = False
    begin_time: float | None = None
    dependency: str | None = None
    array_job_id: int | None = None
    array_task_id: int | None = None
    throttle: int | None = None
    kill_on_invalid_dependency: bool = False
    reason: str = ""
    message: str = ""
    expedite: tuple[tuple[str, ...], float] | None = None
    """Requeued expedited before a restart, not admitted since: ``(nodes held, requeue
    time)``, for the engine's :class:`~phalanx.engine.Expedite` once it is eligible."""


class Gate:
    """Pending jobs kept out of the engine, and the array tasks in it per array."""

    def __init__(self) -> None:
        self.jobs: dict[int, GatedJob] = {}
        self._array_active: dict[int, set[int]] = {}
        """array job id -> ids of its tasks in the engine or running."""

    def __contains__(self, job_id: int) -> bool:
        return job_id in self.jobs

    def __len__(self) -> int:
        return len(self.jobs)

    def add(self, gated: GatedJob) -> None:
        self.jobs[gated.job.id] = gated

    def remove(self, job_id: int) -> GatedJob | None:
        return self.jobs.pop(job_id, None)

    def entered_engine(self, job_id: int, array_job_id: int | None) -> None:
        """A task of ``array_job_id`` is pending in the engine or running."""
        if array_job_id is not None:
            self._array_active.setdefault(array_job_id, set()).add(job_id)

    def left(self, job_id: int, array_job_id: int | None) -> None:
        """A job finished or went back to waiting: its array has room for another."""
        if array_job_id is not None:
            active = self._array_active.get(array_job_id)
            if active is not None:
                active.discard(job_id)
                if not active:
                    del self._array_active[array_job_id]

    def release(
        self, now: float, dependency_status: DependencyStatus
    ) -> tuple[list[GatedJob], list[GatedJob], list[GatedJob]]:
        """``(now eligible, reason changed, dependency never satisfiable and to cancel)``."""
        eligible: list[GatedJob] = []
        changed: list[GatedJob] = []
        doomed: list[GatedJob] = []
        for gated in self._in_order():
            reason, message = self._reason(gated, now, dependency_status)
            if reason == "DependencyNeverSatisfied" and gated.kill_on_invalid_dependency:
                doomed.append(gated)
                continue
            if reason:
                if (reason, message) != (gated.reason, gated.message):
                    gated.reason, gated.message = reason, message
                    changed.append(gated)
                continue
            eligible.append(gated)
            self.entered_engine(gated.job.id, gated.array_job_id)
        for gated in eligible:
            del self.jobs[gated.job.id]
        for gated in doomed:
            del self.jobs[gated.job.id]
        return eligible, changed, doomed

    def _in_order(self) -> Iterator[GatedJob]:
        # Lower ids first, so an array's throttle lets its lowest tasks through first.
        return iter(sorted(self.jobs.values(), key=lambda g: g.job.id))

    def _reason(
        self, gated: GatedJob, now: float, dependency_status: DependencyStatus
    ) -> tuple[str, str]:
        if gated.hold:
            if gated.held_by_admin:
                return "JobHeldAdmin", "held by the admin: scontrol release"
            return "JobHeldUser", "held: scontrol release to let it run"
        if gated.begin_time is not None and gated.begin_time > now:
            return "BeginTime", "not eligible before its --begin time"
        if gated.dependency:
            status = dependency_status(gated.dependency, gated)
            if status == "waiting":
                return "Dependency", f"waiting for its dependency {gated.dependency}"
            if status == "never":
                return (
                    "DependencyNeverSatisfied",
                    f"its dependency {gated.dependency} can never be satisfied",
                )
        if gated.array_job_id is not None and gated.throttle is not None:
            active = self._array_active.get(gated.array_job_id, set())
            if len(active) >= gated.throttle:
                return (
                    "JobArrayTaskLimit",
                    f"array {gated.array_job_id} runs its limit of {gated.throttle} tasks",
                )
        return "", ""
