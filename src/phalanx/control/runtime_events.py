"""The runtime's events: a job's tasks started, or its attempt ended.

A start makes the job RUNNING (its gang's pods are ready). An end either sends
the job back to the queue (an eviction, a preemption in ``REQUEUE`` mode, a
lost node, a launch that never started) or ends it in its final state; either
way its GPUs are released and its last stretch is charged. Events of an attempt
that is not the job's current one are only acknowledged.

With node epilogs (:mod:`phalanx.control.epilog`) an attempt's end starts them;
an expedite job's end is recorded when they return (:class:`EpilogDone`), and
requeued expedited if one failed. A failed epilog drains its node.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from phalanx.auth import ADMIN
from phalanx.control.charging import Charging
from phalanx.control.epilog import EPILOG_REASON, EpilogDone, Epilogs
from phalanx.control.health import node_side_failure
from phalanx.control.metrics import Metrics
from phalanx.control.slurmjobs import requeues, requeues_after_preemption
from phalanx.control.state import LoopState
from phalanx.engine import Checkpoint, Engine, Evict, Finish, PodsReady, ReplaceNodes, Requeue
from phalanx.model import AdminState, JobState
from phalanx.runtime.base import Runtime
from phalanx.runtime.spec import Checkpointed, Exited, Started, StepsReported
from phalanx.store import JobRow, Tx

__all__ = ["MAX_LAUNCH_ATTEMPTS", "RuntimeEvents", "attempt_data", "healthy_nodes"]

MAX_LAUNCH_ATTEMPTS = 3
"""Launches of a job whose supervisor never started before it ends NODE_FAIL."""


class RuntimeEvents:
    """Turns the runtime's Started and Exited events into transitions of stored jobs."""

    def __init__(
        self, state: LoopState, runtime: Runtime, metrics: Metrics, charging: Charging
    ) -> None:
        self.state = state
        self.runtime = runtime
        self.metrics = metrics
        self.charging = charging
        self.on_exit: Callable[[Exited, list[str]], None] | None = None
        """Told of every current attempt that ended, with the job's nodes (in the loop:
        it must neither block nor raise; ``--drain-after-failures`` counts them)."""
        self.steps_seen: dict[tuple[int, int, Any], tuple[Any, Any]] = {}
        """The state and end of each step recorded (a step reported again is not)."""
        self.epilogs: Epilogs | None = None
        """Runs the node epilog after each attempt (``--epilog``), if there is one."""

    def handle(
        self,
        tx: Tx,
        event: Started | Exited | Checkpointed | StepsReported | EpilogDone,
        now: float,
    ) -> None:
        """Record a job's start, a checkpoint, or its stop: requeued, or ended in its
        final state; or the epilogs of an attempt that returned."""
        if isinstance(event, EpilogDone):
            self._epilog_done(tx, event, now)
            return
        attempt = self.state.attempts.active.get(event.job_id)
        if isinstance(event, StepsReported):
            self._steps(tx, event, now)
            return
        if attempt is None or attempt != event.attempt:
            if not isinstance(event, Checkpointed):
                self.runtime.forget(event.job_id, event.attempt)
            return
        if isinstance(event, Checkpointed):
            if self.state.attempts.checkpoints.get(event.job_id) == event.time:
                return  # reported again (a re-attached supervisor): recorded already
            self.state.attempts.checkpoints[event.job_id] = event.time
            # What preempting it loses counts from here (the engine's victim choice).
            tx.add_event(event.job_id, "Checkpointed", event.time, data={"attempt": event.attempt})
            self.state.engine.apply(Checkpoint(event.job_id, event.time))
            return
        if isinstance(event, Started):
            if event.job_id in self.state.attempts.running:
                return
            self.state.attempts.running.add(event.job_id)
            tx.update_job(event.job_id, state=JobState.RUNNING.value, start_time=event.time)
            admitted = self.state.attempts.admitted.pop(event.job_id, None)
            self.charging.start(tx, event.job_id, event.time, admitted)
            tx.add_event(event.job_id, "Started", event.time, data={"attempt": event.attempt})
            # Every task of the gang starts together: its pods are all running
            # (the Workload's PodsReady condition is read from the Started event).
            self.state.engine.apply(PodsReady(event.job_id, event.time))
            self.state.dirty = True
            return
        if self.epilogs is not None and self._held_for_epilogs(tx, event):
            return
        self._ended(tx, event, now)

    def _steps(self, tx: Tx, event: StepsReported, now: float) -> None:
        """Record each job step that started or ended (a ``Step`` event per change: sacct's
        step rows are the latest event of each step)."""
        for step in event.steps:
            key = (event.job_id, event.attempt, step.get("step"))
            seen = (step.get("state"), step.get("end"))
            if self.steps_seen.get(key) == seen:
                continue
            self.steps_seen[key] = seen
            when = step.get("end") or step.get("start") or now
            data = {**step, "attempt": event.attempt}
            tx.add_event(event.job_id, "Step", float(when), data=data)
        if len(self.steps_seen) > 100_000:
            self.steps_seen.clear()

    def _held_for_epilogs(self, tx: Tx, event: Exited) -> bool:
        """Start the epilogs of an ended attempt on the job's nodes that are not down;
        whether its end waits for them (an expedite job)."""
        assert self.epilogs is not None
        row = tx.get_job(event.job_id)
        if row is None:
            return False
        nodes = [
            node
            for name in dict.fromkeys(row.nodes)
            if (node := self.state.registry.get("Node", name)) is not None
            and node.state is not AdminState.DOWN
        ]
        if not nodes:
            return False
        wait = bool(row.parsed_submission.requeue_expedite)
        # Reported again while they run (a rebuild): the first run decides.
        self.epilogs.begin(event, row, nodes, wait)
        return wait

    def _epilog_done(self, tx: Tx, done: EpilogDone, now: float) -> None:
        """Drain the nodes whose epilog failed; then record the end held back for them:
        requeued expedited if one failed."""
        drained: list[str] = []
        for name, _ in done.failed:
            node = self.state.registry.get("Node", name)
            if node is None or node.state is not AdminState.UP:
                continue
            drained.append(name)
            new = node.model_copy(
                update={
                    "state": AdminState.DRAIN,
                    "reason": EPILOG_REASON,
                    "reason_user": ADMIN.user,
                    "reason_time": float(int(now)),
                }
            )
            tx.put_object("Node", name, new.to_dict())
            self.state.put_object("Node", name, new)
            self.state.dirty = True
        if done.failed:
            tx.add_event(
                done.job_id,
                "EpilogFailed",
                now,
                reason=EPILOG_REASON,
                data={"attempt": done.attempt, "nodes": dict(done.failed), "drained": drained},
            )
        if done.exited is not None:
            attempt = self.state.attempts.active.get(done.job_id)
            if attempt == done.attempt:
                self._ended(tx, done.exited, now, epilog_failed=bool(done.failed))

    def _ended(self, tx: Tx, event: Exited, now: float, epilog_failed: bool = False) -> None:
        """The current attempt ended: requeue the job or record its end."""
        if (
            event.job_id not in self.state.attempts.running
            and event.start_time is not None
            and event.job_id not in self.state.attempts.evicting
            and event.job_id not in self.state.attempts.deactivating
        ):
            # It ended by itself, having started, but the Started event went with an
            # iteration that did not commit (the store was down): record it now, no
            # transition is lost. (One stopped before it was ready never started.)
            tx.update_job(event.job_id, state=JobState.RUNNING.value, start_time=event.start_time)
            self.charging.start(tx, event.job_id, event.start_time)
            tx.add_event(event.job_id, "Started", event.start_time, data={"attempt": event.attempt})
        del self.state.attempts.active[event.job_id]
        self.state.attempts.checkpoints.pop(event.job_id, None)
        self.state.attempts.admitted.pop(event.job_id, None)
        self.state.attempts.running.discard(event.job_id)
        self.state.usage.stop(event.job_id, event.end_time)
        row = tx.get_job(event.job_id)
        requeue = row is not None and requeues(row, event.state)
        nodes = row.nodes if row is not None else []
        self.state.gpus.release(event.job_id, nodes)
        if self.on_exit is not None:
            self.on_exit(event, list(nodes))
        self.runtime.forget(event.job_id, event.attempt)
        self.state.dirty = True
        evict_reason = self.state.attempts.evicting.pop(event.job_id, None)
        deactivated = self.state.attempts.deactivating.pop(event.job_id, None)
        preempted = self.state.attempts.preempting.pop(event.job_id, None)
        ends_preempted = False
        if (
            preempted is not None
            and row is not None
            and deactivated is None
            and not row.cancel_requested
            and not self._preempted(tx, row, preempted, event)
        ):
            # Not requeued (CANCEL mode, or a Slurm job without --requeue): PREEMPTED.
            evict_reason, ends_preempted = None, True
        node_down = False
        if (
            evict_reason == "NodeDown"
            and row is not None
            and deactivated is None
            and not row.cancel_requested
            and row.parsed_submission.no_requeue
        ):
            # Slurm requeues a job whose node is taken DOWN only if it may be requeued.
            evict_reason, node_down = None, True
        if requeue and evict_reason is None:
            evict_reason = "NodeFail"
        if (
            epilog_failed
            and event.state != JobState.COMPLETED.value
            and evict_reason is None
            and not ends_preempted
            and deactivated is None
            and not (row is not None and row.cancel_requested)
        ):
            # An expedite job whose epilog failed, its script having failed too (Slurm
            # 25.11): requeued rather than ended. One that succeeded just completes.
            evict_reason = "EpilogError"
        if (
            evict_reason is None
            and event.state == JobState.NODE_FAIL.value
            and event.start_time is None
            and row is not None
            and row.attempt < MAX_LAUNCH_ATTEMPTS
        ):
            # Its supervisor never started (the control plane died while starting it):
            # nothing ran, so it is launched again rather than failed.
            evict_reason = "LaunchFailed"
        message = f"requeued: {evict_reason}"
        if (
            evict_reason in ("NodeFail", "NodeDown")
            and row is not None
            and deactivated is None
            and not row.cancel_requested
        ):
            failed = self._lost(nodes, event)
            plan = self.state.engine.node_replacement(event.job_id, failed) if failed else None
            if plan is not None and plan.replaced:
                self._replace_nodes(tx, event, row, plan.replaced, plan.domains, now)
                return
            if plan is not None:
                # FailFast: no healthy node of its domain can replace the failed one.
                evict_reason, message = "NodeFailures", plan.failure
        if (
            evict_reason is not None
            and deactivated is None
            and not (row is not None and row.cancel_requested)
        ):
            expedite = (
                evict_reason in ("NodeFail", "NodeDown", "NodeFailures", "EpilogError")
                and row is not None
                and bool(row.parsed_submission.requeue_expedite)
            )
            healthy = healthy_nodes(self.state.engine, nodes, event.lost_nodes) if expedite else ()
            self.state.engine.apply(
                Requeue(event.job_id, evict_reason, expedite=expedite, nodes=healthy)
            )
            tx.update_job(
                event.job_id,
                state=JobState.PENDING.value,
                reason=evict_reason,
                message=message,
                flavor=None,
                nodes=[],
                start_time=None,
            )
            data = attempt_data(event, row, nodes)
            if expedite:
                data["expedite"] = {"held": list(healthy)}
            tx.add_event(
                event.job_id,
                "Requeued",
                now,
                reason=evict_reason,
                message="" if message == f"requeued: {evict_reason}" else message,
                data=data,
            )
            return
        state = JobState(event.state) if deactivated is None else JobState.FAILED
        if ends_preempted:
            # Even if it ended by itself during its grace time (as in Slurm).
            state = JobState.PREEMPTED
        elif node_down:
            state = JobState.NODE_FAIL
        exit_code, signum = event.exit_code, event.signal
        if (
            state in (JobState.CANCELLED, JobState.TIMEOUT, JobState.PREEMPTED)
            and row is not None
            and (row.submission.get("run") or {}).get("script") is not None
        ):
            # Slurm records the kill on the batch step; the job's own ExitCode is 0:0.
            exit_code, signum = 0, None
        self.state.engine.apply(Finish(event.job_id, state))
        self.state.gate.left(event.job_id, row.array_job_id if row is not None else None)
        tx.update_job(
            event.job_id,
            state=state.value,
            end_time=event.end_time,
            start_time=event.start_time
            if row is None or row.start_time is None
            else row.start_time,
            exit_code=exit_code,
            signal=signum,
            reason=deactivated[0] if deactivated else "NodeDown" if node_down else "",
            message=deactivated[1] if deactivated else event.message,
        )
        tx.add_event(
            event.job_id,
            "Cancelled" if state is JobState.CANCELLED else "Finished",
            event.end_time,
            reason=state.value,
            message=event.message,
            data={
                "exit_code": event.exit_code,
                "signal": event.signal,
                "attempt": event.attempt,
                **_ended_on(event, nodes),
            },
        )
        self.metrics.finished_total.labels(state=state.value).inc()

    def _lost(self, nodes: list[str], event: Exited) -> tuple[str, ...]:
        """The job's nodes that failed: those the runtime found lost, and those down."""
        slots = self.state.engine.cache.nodes
        lost = set(event.lost_nodes)
        return tuple(
            n
            for n in dict.fromkeys(nodes)
            if n in lost or n not in slots or slots[n].node.state is AdminState.DOWN
        )

    def _replace_nodes(
        self,
        tx: Tx,
        event: Exited,
        row: JobRow,
        replaced: tuple[tuple[str, str], ...],
        domains: tuple[str, ...],
        now: float,
    ) -> None:
        """Hot swap: the job keeps its admission and restarts at once on its healthy
        nodes plus the replacements (the engine's NodesReplaced decision launches it)."""
        self.state.engine.apply(ReplaceNodes(event.job_id, replaced))
        words = "; ".join(
            f"{old} replaced by {new}" + (f" in {where}" if where else "")
            for (old, new), where in zip(replaced, domains, strict=False)
        )
        tx.update_job(
            event.job_id,
            state=JobState.PENDING.value,
            reason="NodeFailures",
            message=f"restarting: {words}",
            start_time=None,
        )
        tx.add_event(
            event.job_id,
            "NodeReplaced",
            now,
            reason=event.state,
            message=words,
            data={
                **attempt_data(event, row),
                "replaced": dict(replaced),
                "domains": list(domains),
            },
        )

    def _preempted(self, tx: Tx, row: JobRow, evict: Evict, event: Exited) -> bool:
        """Record a preempted attempt with its preemptor; whether the job is requeued
        (``REQUEUE`` mode and a job that may be requeued) rather than ending PREEMPTED."""
        requeue = evict.mode == "REQUEUE" and requeues_after_preemption(row)
        data: dict[str, Any] = {
            **attempt_data(event, row),
            "preemptor": evict.preemptor,
            "mode": evict.mode,
            "grace_period_s": evict.grace_period_s,
            "requeued": requeue,
        }
        tx.add_event(
            row.id,
            "Preempted",
            event.end_time,
            reason=evict.preemption_reason or "",
            message=evict.message,
            data=data,
        )
        return requeue


def healthy_nodes(
    engine: Engine, nodes: Sequence[str], lost: Sequence[str] = ()
) -> tuple[str, ...]:
    """A job's nodes that are still up: held for its expedited restart. The nodes the
    runtime found ``lost`` are not, even while the inventory still has them up (the Ray
    runtime reads its nodes once a second: the job's end can come first)."""
    slots = engine.cache.nodes
    return tuple(
        n for n in dict.fromkeys(nodes) if n in slots and slots[n].schedulable and n not in lost
    )


def attempt_data(event: Exited, row: JobRow | None, nodes: Sequence[str] = ()) -> dict[str, Any]:
    """An attempt that ended, as the Requeued and Preempted events keep it (``sacct -D``)."""
    start = row.start_time if row is not None and row.start_time is not None else None
    return {
        "attempt": event.attempt,
        "start_time": start if start is not None else event.start_time,
        "end_time": event.end_time,
        "exit_code": event.exit_code,
        "signal": event.signal,
        **_ended_on(event, nodes),
    }


def _ended_on(event: Exited, nodes: Sequence[str]) -> dict[str, Any]:
    """Where and how a node-side failure ended an attempt: what the failure counts
    (:class:`~phalanx.control.health.NodeFailures`) are rebuilt from after a restart.
    Nothing for other ends."""
    if not nodes or not node_side_failure(event):
        return {}
    out: dict[str, Any] = {
        "failed_on": list(nodes),
        "exit_state": event.state,
        "exit_message": event.message,
    }
    if event.lost_nodes:
        out["exit_lost"] = list(event.lost_nodes)
    return out
