"""Recording the engine's decisions: admissions become launches, evictions stops.

Each cycle's decisions are written in the loop's transaction: an admitted job
gets its GPU indices and tasks (its assignment) and a launch to be made after
the commit; a pending one its reason; an evicted one an ``Evicting`` event and
a stop (a preemption's with its grace time); a deactivated one ends FAILED, or
is stopped first when it still runs.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from phalanx.control.commands import Effects
from phalanx.control.kubejobs import image_events
from phalanx.control.launch import Launcher
from phalanx.control.metrics import Metrics
from phalanx.control.state import LoopState
from phalanx.engine import Admit, Deactivate, Decision, Evict, NodesReplaced, Pending
from phalanx.model import GPU, GPU_MILLI, JobState
from phalanx.runtime.spec import LaunchSpec, TaskSpec
from phalanx.store import Tx
from phalanx.store.records import with_submission

__all__ = ["SHARE_ENV", "Admission"]

SHARE_ENV = "PHALANX_GPU_MILLI"
"""Set in a task that holds a share of a GPU: its thousandths of the device (a job may
cap its memory with it, e.g. ``torch.cuda.set_per_process_memory_fraction``)."""


class Admission:
    """Writes a cycle's decisions and notes the launches and stops they call for."""

    def __init__(self, state: LoopState, metrics: Metrics, launcher: Launcher) -> None:
        self.state = state
        self.metrics = metrics
        self.launcher = launcher

    def record(self, tx: Tx, decisions: list[Decision], now: float, effects: Effects) -> None:
        pending_updates: list[tuple[int, dict[str, Any]]] = []
        tx.prefetch_jobs(d.job_id for d in decisions if isinstance(d, Admit))
        for decision in decisions:
            if isinstance(decision, Admit):
                spec = self._admit(tx, decision, now)
                if spec is not None:
                    effects.launches.append(spec)
            elif isinstance(decision, NodesReplaced):
                # Hot swap: restarted at once on its healthy nodes and the replacements.
                spec = self._admit(tx, decision.admit, now, dict(decision.replaced))
                if spec is not None:
                    effects.launches.append(spec)
            elif isinstance(decision, Pending):
                reason = decision.reason
                pending_updates.append(
                    (decision.job_id, {"reason": reason.code.value, "message": reason.message})
                )
            elif isinstance(decision, Evict):
                self.state.attempts.evicting[decision.job_id] = decision.reason
                data: dict[str, Any] = {}
                if decision.preemptor is not None:
                    data["preemptor"] = decision.preemptor
                    data["mode"] = decision.mode
                    data["grace_period_s"] = decision.grace_period_s
                if decision.preemption_reason is not None:
                    data["preemption_reason"] = decision.preemption_reason
                if decision.lost_gpu_hours is not None:
                    # Chosen among equal candidates for losing least since a checkpoint.
                    data["lost_gpu_hours"] = decision.lost_gpu_hours
                    data["spared"] = [list(s) for s in decision.spared]
                tx.add_event(
                    decision.job_id,
                    "Evicting",
                    now,
                    reason=decision.reason,
                    message=decision.message,
                    data=data or None,
                )
                if decision.preemptor is not None:
                    # SIGTERM now (the job may checkpoint), SIGKILL after its grace time.
                    self.state.attempts.preempting[decision.job_id] = decision
                    effects.preemptions.append((decision.job_id, decision.grace_period_s))
                else:
                    effects.cancels.append(decision.job_id)
            elif isinstance(decision, Deactivate):
                self._deactivate(tx, decision, now, effects)
        if pending_updates:
            tx.update_jobs(pending_updates)

    def _deactivate(self, tx: Tx, decision: Deactivate, now: float, effects: Effects) -> None:
        """Kueue's ``spec.active=false``: the job is over, FAILED with the engine's reason."""
        row = tx.get_job(decision.job_id)
        if row is None or JobState(row.state).finished:
            return
        tx.add_event(
            decision.job_id, "Deactivated", now, reason=decision.reason, message=decision.message
        )
        if decision.job_id in self.state.attempts.active:
            # Still running (its eviction is under way): it ends when its processes do.
            self.state.attempts.evicting.pop(decision.job_id, None)
            self.state.attempts.deactivating[decision.job_id] = (decision.reason, decision.message)
            effects.cancels.append(decision.job_id)
            return
        self.state.gate.remove(decision.job_id)
        self.state.gate.left(decision.job_id, row.array_job_id)
        tx.update_job(
            decision.job_id,
            state=JobState.FAILED.value,
            end_time=now,
            reason=decision.reason,
            message=decision.message,
        )
        self.metrics.finished_total.labels(state=JobState.FAILED.value).inc()
        self.state.dirty = True

    def _admit(
        self, tx: Tx, decision: Admit, now: float, replaced: dict[str, str] | None = None
    ) -> LaunchSpec | None:
        """Record an admission (or, with ``replaced``, the new placement of a job whose
        failed nodes were replaced) and build its launch."""
        row = tx.get_job(decision.job_id)
        if row is None:  # pragma: no cover - the engine only knows stored jobs
            return None
        submission = row.parsed_submission
        tasks: list[TaskSpec] = []
        gpu_map: dict[str, list[int]] = {}
        requests = {p.name: _gpus_per_task(p.requests) for p in submission.pod_sets}
        shares = {p.name: p.requests.get(GPU_MILLI, 0) for p in submission.pod_sets}
        for pod_set in decision.pod_sets:
            per_task = requests.get(pod_set.name, 0)
            share = shares.get(pod_set.name, 0)
            env = {SHARE_ENV: str(share)} if share else {}
            for placed in pod_set.nodes:
                chosen = list(placed.gpus)
                if chosen:
                    self.state.gpus.hold(placed.node, chosen, decision.job_id)
                for task in range(placed.count):
                    if not per_task:
                        indices: list[int] = []
                    elif chosen:
                        indices = chosen[task * per_task : (task + 1) * per_task]
                    else:
                        indices = self.state.gpus.take(placed.node, per_task, decision.job_id)
                    gpu_map.setdefault(placed.node, []).extend(indices)
                    tasks.append(
                        TaskSpec(
                            node=placed.node,
                            rank=len(tasks),
                            gpus=tuple(indices),
                            env=env,
                            pod_set=pod_set.name,
                        )
                    )
        attempt = row.attempt + 1
        assignment = {
            "admit": decision.to_dict(),
            "gpus": gpu_map,
            "tasks": [
                {
                    "node": t.node,
                    "rank": t.rank,
                    "gpus": list(t.gpus),
                    "podSet": t.pod_set,
                    **({"env": t.env} if t.env else {}),
                }
                for t in tasks
            ],
            "attempt": attempt,
        }
        if self._in_topology(decision):
            assignment["topology"] = True
        admitted: dict[str, Any] = {
            "state": JobState.ADMITTED.value,
            "cluster_queue": decision.cluster_queue,
            "flavor": decision.flavor,
            "nodes": decision.nodes,
            "assignment": assignment,
            "attempt": attempt,
            "reason": "",
            "message": "",
        }
        tx.update_job(decision.job_id, **admitted)
        self.state.attempts.admitted[decision.job_id] = with_submission(
            replace(row, **admitted), submission
        )
        data: dict[str, Any] = {
            "cluster_queue": decision.cluster_queue,
            "flavor": decision.flavor,
            "nodes": decision.nodes,
            "borrowing": decision.borrowing,
            "attempt": attempt,
        }
        if replaced:
            data["replaced"] = replaced
        tx.add_event(decision.job_id, "Admitted", now, data=data)
        if not replaced:
            self.metrics.admitted_total.labels(cluster_queue=decision.cluster_queue).inc()
            self.metrics.admission_wait.labels(cluster_queue=decision.cluster_queue).observe(
                max(0.0, now - row.submit_time)
            )
        self.state.attempts.active[decision.job_id] = attempt
        if submission.run.kube is not None and self.launcher.site.container_runtime != "builtin":
            # Without the container runtime the commands run on the host: say so.
            for message in image_events(submission.run.kube):
                tx.add_event(decision.job_id, "ImageNotPulled", now, message=message)
        return self.launcher.launch_spec(row, submission, tasks, attempt, self.state.registry)

    def _in_topology(self, decision: Admit) -> bool:
        """Whether a pod set of the admission is in a flavor with a Topology."""
        for pod_set in decision.pod_sets:
            for _, name in pod_set.flavors:
                flavor = self.state.registry.get("ResourceFlavor", name)
                if flavor is not None and getattr(flavor, "topology_name", None):
                    return True
        return False


def _gpus_per_task(requests: dict[str, int]) -> int:
    """The GPU devices one task sees: its whole GPUs, or the one device of its share."""
    return requests.get(GPU, 0) or (1 if requests.get(GPU_MILLI, 0) else 0)
