"""Recovery: the loop's memory rebuilt from the store, on start and after a failed commit.

Configuration objects go back into the engine and the registry first (in
:data:`~phalanx.control.registry.KIND_ORDER`), then every unfinished job in id
order: a pending one waits at the gate again; an admitted or running one is
adopted with the admission the store recorded and re-attached to its
supervisor, launched if it never was, or marked ``NODE_FAIL`` if its supervisor
is gone. Evictions under way before the restart carry on, and a job requeued
expedited (``--requeue=expedite``) and not admitted since is expedited again,
holding its healthy nodes until the bound counted from its requeue.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from phalanx.control.charging import Charging
from phalanx.control.kueueconfig import CONFIGURATION, engine_config, stored_configuration
from phalanx.control.launch import Launcher
from phalanx.control.registry import KIND_ORDER, MODEL_BY_KIND, object_key
from phalanx.control.runtime_events import RuntimeEvents
from phalanx.control.slurmjobs import gated
from phalanx.control.state import LoopState, job_from_row
from phalanx.engine import Admit, Adopt, Checkpoint, EngineConfig, Evict, PodsReady
from phalanx.engine.decisions import decision_from_dict
from phalanx.model import JobState
from phalanx.runtime.base import Runtime
from phalanx.runtime.spec import Exited, LaunchSpec, TaskSpec
from phalanx.store import JobEventRow, JobRow, Store

__all__ = ["Recovery", "configuration"]

log = logging.getLogger("phalanx.control")


def configuration(store: Store, base: EngineConfig, current: EngineConfig) -> EngineConfig:
    """The engine's configuration as the store leaves it: ``base`` with the stored Kueue
    ``Configuration``'s overrides (``current`` when none is stored)."""
    for stored in store.objects(CONFIGURATION):
        current = engine_config(base, stored_configuration(stored.spec))
    return current


class Recovery:
    """Fills a fresh :class:`~phalanx.control.state.LoopState` from the store."""

    def __init__(
        self,
        state: LoopState,
        store: Store,
        runtime: Runtime,
        launcher: Launcher,
        charging: Charging,
        events: RuntimeEvents,
        clock: Callable[[], float],
    ) -> None:
        self.state = state
        self.store = store
        self.runtime = runtime
        self.launcher = launcher
        self.charging = charging
        self.events = events
        self.clock = clock

    def run(self) -> list[LaunchSpec]:
        """Rebuild engine and registry from the store; returns the launches still owed."""
        by_kind: dict[str, list[Any]] = {}
        for stored in self.store.objects():
            if stored.kind == CONFIGURATION:
                continue
            model = MODEL_BY_KIND.get(stored.kind)
            if model is None:
                log.warning(
                    "ignoring stored object %s/%s of unknown kind", stored.kind, stored.name
                )
                continue
            by_kind.setdefault(stored.kind, []).append(model.model_validate(stored.spec))
        for kind in KIND_ORDER:
            for obj in by_kind.get(kind, []):
                self.state.put_object(kind, object_key(obj)[1], obj)
        launches: list[LaunchSpec] = []
        lost: list[JobRow] = []
        expedited: list[int] = []
        now = self.clock()
        self.charging.load(now)
        for row in self.store.unfinished_jobs():
            submission = row.parsed_submission
            job = job_from_row(row, submission)
            if row.state == JobState.PENDING.value or row.assignment is None:
                waiting = gated(job, submission, row.array_job_id, row.array_task_id)
                waiting.hold = row.hold
                waiting.held_by_admin = row.hold and held_by_admin(self.store.job_events(row.id))
                self.state.gate.add(waiting)
                if submission.requeue_expedite and row.attempt > 0:
                    expedited.append(row.id)
                continue
            self.state.gate.entered_engine(row.id, row.array_job_id)
            admission = decision_from_dict(row.assignment["admit"])
            assert isinstance(admission, Admit)
            admitted_at, checkpoint = _attempt_times(self.store.job_events(row.id), row.attempt)
            # Its minimum runtime counts from its admission, also when it had not started.
            self.state.engine.apply(
                Adopt(job, admission, admitted_at=row.start_time or admitted_at)
            )
            if checkpoint is not None:
                self.state.engine.apply(Checkpoint(row.id, checkpoint))
                self.state.attempts.checkpoints[row.id] = checkpoint
            for node, indices in row.assignment.get("gpus", {}).items():
                self.state.gpus.hold(node, list(indices), row.id)
            self.state.attempts.active[row.id] = row.attempt
            if row.state == JobState.RUNNING.value:
                self.state.attempts.running.add(row.id)
                # It started before the restart: its pods are ready (no PodsReady timeout).
                self.state.engine.apply(PodsReady(row.id, row.start_time or row.submit_time))
            if self.runtime.adopt(row.id, row.attempt):
                if row.cancel_requested:
                    self.runtime.cancel(row.id)
            elif row.state == JobState.ADMITTED.value:
                tasks = [
                    TaskSpec(
                        node=t["node"],
                        rank=t["rank"],
                        gpus=tuple(t["gpus"]),
                        env=dict(t.get("env") or {}),
                        pod_set=t.get("podSet", ""),
                    )
                    for t in row.assignment.get("tasks", [])
                ]
                launches.append(
                    self.launcher.launch_spec(
                        row, submission, tasks, row.attempt, self.state.registry
                    )
                )
            else:
                lost.append(row)
        self._resume_expedited(expedited)
        self._resume_evictions(list(self.state.attempts.active))
        if lost:
            with self.store.begin() as tx:
                for row in lost:
                    self.events.handle(
                        tx,
                        Exited(
                            job_id=row.id,
                            attempt=row.attempt,
                            state=JobState.NODE_FAIL.value,
                            exit_code=None,
                            signal=None,
                            start_time=row.start_time,
                            end_time=now,
                            message="the job's supervisor was not found after a restart",
                        ),
                        now,
                    )
                self.charging.charge(tx, now)
        self.state.dirty = True
        return launches

    def _resume_expedited(self, job_ids: list[int]) -> None:
        """Jobs requeued expedited before the restart and not admitted since: expedited
        again as they enter the engine, their hold bounded from the requeue."""
        for job_id, events in self.store.events_of(job_ids).items():
            held = expedited_requeue(events)
            waiting = self.state.gate.jobs.get(job_id)
            if held is not None and waiting is not None:
                waiting.expedite = held

    def _resume_evictions(self, job_ids: list[int]) -> None:
        """Evictions under way before a restart (an ``Evicting`` event after the last
        admission): the stopping jobs are still handled as their eviction says."""
        for job_id, events in self.store.events_of(job_ids).items():
            last: JobEventRow | None = None
            for event in events:
                if event.kind == "Admitted":
                    last = None
                elif event.kind == "Evicting":
                    last = event
            if last is None:
                continue
            self.state.attempts.evicting[job_id] = last.reason
            preemptor = last.data.get("preemptor")
            if preemptor is not None:
                self.state.attempts.preempting[job_id] = Evict(
                    job_id,
                    last.reason,
                    last.message,
                    int(preemptor),
                    last.data.get("preemption_reason"),
                    str(last.data.get("mode", "REQUEUE")),
                    float(last.data.get("grace_period_s", 0.0)),
                )


def expedited_requeue(events: Sequence[JobEventRow]) -> tuple[tuple[str, ...], float] | None:
    """``(nodes held, time)`` of the job's last requeue if it was expedited and the job
    was neither admitted nor held since (a hold withdraws it from the engine, and with
    it the expedite), else None."""
    last: JobEventRow | None = None
    for event in events:
        if event.kind == "Requeued":
            last = event if isinstance(event.data.get("expedite"), dict) else None
        elif event.kind in ("Admitted", "Held"):
            last = None
    if last is None:
        return None
    held = last.data["expedite"].get("held") or []
    return tuple(str(n) for n in held), last.time


def held_by_admin(events: Sequence[JobEventRow]) -> bool:
    """Whether the job's last hold was the admin's (its Held event says so)."""
    for event in reversed(events):
        if event.kind == "Held":
            return bool(event.data.get("admin"))
    return False


def _attempt_times(
    events: Sequence[JobEventRow], attempt: int
) -> tuple[float | None, float | None]:
    """When the job's current attempt was admitted and when it last checkpointed, from
    its history (None where it does not say)."""
    admitted: float | None = None
    checkpoint: float | None = None
    for event in events:
        if event.data.get("attempt") != attempt:
            continue
        if event.kind == "Admitted":
            admitted = event.time
        elif event.kind == "Checkpointed":
            checkpoint = event.time
    return admitted, checkpoint
