"""Read queries about jobs: a job as its caller may see it, why it is where it is, its
priority factors, when a submission would start, and a job's environment.

They run on the API's threads. What they read of the engine they read under the
loop's lock, so it never sees half an iteration; a standby, which has no engine,
answers them with :class:`~phalanx.errors.NotLeader` (the API forwards them).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

from phalanx.auth import Principal
from phalanx.control.launch import Launcher
from phalanx.control.state import LoopState, target_queue
from phalanx.control.submissions import resolve_submissions
from phalanx.control.validation import Validator
from phalanx.errors import NotFound
from phalanx.model import CPU, JobSubmission
from phalanx.runtime.spec import TaskSpec
from phalanx.store import JobRow, Store

__all__ = ["JobQueries"]


class JobQueries:
    """Answers about single jobs and submissions, from the store and the engine."""

    def __init__(
        self,
        state: LoopState,
        store: Store,
        lock: threading.RLock,
        launcher: Launcher,
        validator: Validator,
        clock: Callable[[], float],
        require_leader: Callable[[], None],
        leading: Callable[[], bool],
    ) -> None:
        self.state = state
        self.store = store
        self.lock = lock
        """The loop's lock: held while the loop changes the engine."""
        self.launcher = launcher
        self.validator = validator
        self.clock = clock
        self.require_leader = require_leader
        self.leading = leading

    def job(self, principal: Principal, job_id: int) -> JobRow:
        """The job, if ``principal`` may see it (otherwise: not found, as for a missing job)."""
        row = self.store.get_job(job_id)
        if row is None or not principal.may_act_for(row.tenant):
            raise NotFound(f"job {job_id} not found")
        return row

    def explain(self, principal: Principal, job_id: int) -> dict[str, Any]:
        """Why the job is where it is: the engine's facts, the gate's and the stored events'
        (see :mod:`phalanx.control.job_explanation`)."""
        from phalanx.control.job_explanation import explain_answer
        from phalanx.engine.explain.report import explain_job

        self.job(principal, job_id)
        self.require_leader()
        with self.lock:
            explanation = explain_job(self.state.engine, job_id)
            gated = self.state.gate.jobs.get(job_id)
            gate = (gated.reason, gated.message) if gated is not None else None
            # Read under the lock too, so the row agrees with the engine's view.
            row = self.job(principal, job_id)
        return explain_answer(row, explanation, gate, self.store.job_events(job_id), self.clock())

    def priority_factors(
        self, principal: Principal, job_ids: Sequence[int] | None, users: Sequence[str] | None
    ) -> dict[str, Any]:
        """The ordering weights and every visible pending job's priority factors
        (``sprio``); ``job_ids`` and ``users`` narrow the jobs."""
        from phalanx.control.priority import priority_answer

        self.require_leader()
        with self.lock:
            return priority_answer(self.state.engine, principal, job_ids, users)

    def estimate(self, principal: Principal, submission: JobSubmission) -> dict[str, Any]:
        """Validate a submission without submitting it (``sbatch --test-only``).

        The answer names the ClusterQueue (partition), the size, and when the job would
        start if submitted now: the engine's plan around the reservations that stand,
        as for a pending job (``None``, with ``why``, when it cannot be planned).
        """
        self.require_leader()
        with self.lock:
            [job] = resolve_submissions(
                principal,
                [submission],
                self.state.registry,
                max_array_size=self.state.config.max_array_size,
            )
            self.validator.check_accounts([job])
            job, submission = self.validator.partition_defaults(job, submission)
            target = target_queue(self.state.registry, job)
            start, why = (
                self.state.engine.planned_start(job, target, self.clock())
                if target
                else (None, "it has no ClusterQueue to go to")
            )
        cpu_milli = sum(p.count * p.requests.get(CPU, 0) for p in submission.pod_sets)
        answer: dict[str, Any] = {
            "id": None,
            "partition": target,
            "num_cpus": max(1, -(-cpu_milli // 1000)),
            "gpus": job.gpus,
            "nodes": [],
            "start_time": start,
        }
        if why is not None:
            answer["why"] = why
        return answer

    def job_environment(self, principal: Principal, job_id: int) -> dict[str, str]:
        """The variables phalanx sets for the job's first task (its own, ``SLURM_*`` for a
        batch job, rendezvous and ``PHALANX_*``); only its own before it is placed."""
        row = self.job(principal, job_id)
        self.require_leader()
        submission = row.parsed_submission
        env = {str(k): str(v) for k, v in submission.run.env.items()}
        placed = (row.assignment or {}).get("tasks") or []
        if not placed:
            return env
        tasks = [
            TaskSpec(
                node=str(t.get("node", "")),
                rank=int(t.get("rank", i)),
                gpus=tuple(int(g) for g in t.get("gpus", []) or []),
                env={str(k): str(v) for k, v in (t.get("env") or {}).items()},
                pod_set=str(t.get("podSet", "")),
            )
            for i, t in enumerate(placed)
        ]
        with self.lock:
            spec = self.launcher.runnable(
                row, submission, tasks, max(1, row.attempt), self.state.registry
            )
        env.update(spec.env)
        if spec.slurm is not None:
            from phalanx.dialects.slurm.environment import batch_env

            env.update(batch_env(spec.slurm))
        first = spec.tasks[0]
        env.update(first.env)
        env["PHALANX_JOB_ID"] = str(row.id)
        env["PHALANX_NODE_NAME"] = first.node
        env["PHALANX_TASK_RANK"] = str(first.rank)
        if first.gpus:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in first.gpus)
        return env

    def estimated_start(self, job_id: int) -> float | None:
        """A pending job's planned start from the engine's last backfill pass (``None`` on
        a standby, which has no engine)."""
        return self.state.engine.estimated_start(job_id) if self.leading() else None

    def no_estimate(self, job_id: int) -> str | None:
        """Why a pending job has no planned start (``None``: it has one, it is not
        pending, or this is a standby)."""
        return self.state.engine.no_estimate_why(job_id) if self.leading() else None
