"""The commands API callers queue for the loop, and how the loop applies them in its transaction.

A public method of the control plane turns its request into a :class:`Command`
and waits on its future. The loop validates the commands it took
(:mod:`phalanx.control.validation`), then :class:`CommandApplier` applies the
accepted ones inside the iteration's transaction: it writes the rows and
changes the loop's memory, and notes in :class:`Effects` what is to be done
(answers, cancellations, signals) once the transaction has committed.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from phalanx.auth import Principal
from phalanx.control.kubejobs import KubeApply, kube_identity
from phalanx.control.kueueconfig import CONFIGURATION, engine_config
from phalanx.control.metrics import Metrics
from phalanx.control.registry import object_key
from phalanx.control.slurmjobs import gated
from phalanx.control.state import LoopState, job_from_row, target_queue
from phalanx.engine import Cancel, EngineConfig
from phalanx.errors import Conflict, Forbidden, Invalid, NotFound, PhalanxError
from phalanx.model import AdminState, Job, JobState, JobSubmission, Node
from phalanx.runtime.spec import LaunchSpec
from phalanx.store import JobRow, NewJob, Tx

__all__ = [
    "ApplyCmd",
    "CancelCmd",
    "Command",
    "CommandApplier",
    "DeleteCmd",
    "Effects",
    "HoldCmd",
    "MetaCmd",
    "NodeStateCmd",
    "RequeueCmd",
    "SignalCmd",
    "SubmitCmd",
    "UpdateCmd",
]


@dataclass
class Command:
    principal: Principal
    future: Future[Any] = field(default_factory=Future, init=False)


@dataclass
class SubmitCmd(Command):
    submissions: list[JobSubmission]
    jobs: list[Job] = field(default_factory=list, init=False)


@dataclass
class CancelCmd(Command):
    job_id: int


@dataclass
class ApplyCmd(Command):
    objects: list[Any]
    jobs: list[KubeApply] = field(default_factory=list)
    """Kubernetes jobs among the documents (created as jobs, in document order)."""
    configuration: Any = None
    """A Kueue ``Configuration`` (:class:`~phalanx.dialects.kueue.KueueConfiguration`)."""
    meta: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    """Kubernetes metadata to store with objects (by kind and name) and with the jobs
    created (by ``("job", "kind/namespace/name")``), in the same transaction."""


@dataclass
class DeleteCmd(Command):
    kind: str
    name: str


@dataclass
class MetaCmd(Command):
    """Store an object's or a job's Kubernetes metadata (``kind`` ``job``: ``name`` is
    the job id); the Kubernetes API checked who may."""

    kind: str
    name: str
    meta: dict[str, Any]


@dataclass
class HoldCmd(Command):
    job_id: int
    hold: bool


@dataclass
class RequeueCmd(Command):
    job_id: int


@dataclass
class SignalCmd(Command):
    job_id: int
    signal: int
    batch_only: bool


@dataclass
class UpdateCmd(Command):
    job_id: int
    changes: dict[str, Any]


@dataclass
class NodeStateCmd(Command):
    """``scontrol update NodeName=... State=... Reason=...``: every node or none."""

    names: list[str]
    state: str
    """``drain``, ``down``, ``resume``, ``undrain``, ``idle``; ``""``: the reason only."""
    reason: str


NODE_STATES = ("drain", "down", "resume", "undrain", "idle")
"""The states ``scontrol update NodeName=`` sets (Slurm's names, lower case)."""


@dataclass
class Effects:
    """What to do once the iteration's transaction has committed."""

    launches: list[LaunchSpec] = field(default_factory=list)
    cancels: list[int] = field(default_factory=list)
    preemptions: list[tuple[int, float]] = field(default_factory=list)
    """(job, grace seconds): preempted jobs to stop (SIGTERM now, SIGKILL after the grace)."""
    signals: list[tuple[int, int, bool]] = field(default_factory=list)
    limits: list[tuple[int, float | None]] = field(default_factory=list)
    answers: list[tuple[Future[Any], Any]] = field(default_factory=list)
    reconfigure: bool = False
    """The engine's configuration changed: rebuild the engine from the store."""


class CommandApplier:
    """Applies validated commands in the loop's transaction, to the store and the loop's memory."""

    def __init__(self, state: LoopState, metrics: Metrics, base_config: EngineConfig) -> None:
        self.state = state
        self.metrics = metrics
        self.base_config = base_config
        """The configuration from the command line; a Kueue ``Configuration`` overrides parts."""

    def apply(self, tx: Tx, commands: list[Command], now: float, effects: Effects) -> None:
        for cmd in commands:
            if isinstance(cmd, SubmitCmd):
                self._insert(tx, cmd, now, effects)
            elif isinstance(cmd, CancelCmd):
                self._cancel(tx, cmd.job_id, now, effects)
                effects.answers.append((cmd.future, None))
            elif isinstance(cmd, HoldCmd | RequeueCmd | SignalCmd | UpdateCmd):
                try:
                    self._job_command(tx, cmd, now, effects)
                except PhalanxError as exc:
                    effects.answers.append((cmd.future, exc))
                else:
                    effects.answers.append((cmd.future, None))
            elif isinstance(cmd, ApplyCmd):
                results: list[tuple[str, str, str]] = []
                for obj in cmd.objects:
                    kind, name = object_key(obj)
                    if isinstance(obj, Node):
                        obj = _stamped(obj, self.state.registry.get("Node", name), cmd, now)
                    outcome = tx.put_object(kind, name, obj.to_dict())
                    if outcome != "unchanged":
                        self.state.put_object(kind, name, obj)
                        self.state.dirty = True
                    meta = cmd.meta.get((kind, name))
                    if meta is not None:
                        tx.put_meta(kind, name, meta)
                    results.append((kind, name, outcome))
                if cmd.configuration is not None:
                    results.append(self._configure(tx, cmd.configuration, effects))
                results.extend(self._create_kube_jobs(tx, cmd, now, effects))
                effects.answers.append((cmd.future, results))
            elif isinstance(cmd, NodeStateCmd):
                try:
                    answer: Any = self._node_state(tx, cmd, now, effects)
                except PhalanxError as exc:
                    answer = exc
                effects.answers.append((cmd.future, answer))
            elif isinstance(cmd, MetaCmd):
                tx.put_meta(cmd.kind, cmd.name, cmd.meta)
                effects.answers.append((cmd.future, None))
            elif isinstance(cmd, DeleteCmd):
                tx.delete_object(cmd.kind, cmd.name)
                self.state.delete_object(cmd.kind, cmd.name)
                self.state.dirty = True
                effects.answers.append((cmd.future, None))

    def _node_state(
        self, tx: Tx, cmd: NodeStateCmd, now: float, effects: Effects
    ) -> list[tuple[str, str, str]]:
        """Apply the nodes with their new state and reason, stamped with who and when;
        a node taken DOWN has its jobs requeued (as Slurm does), but for those submitted
        with ``--no-requeue``, which end NODE_FAIL."""

        nodes: list[Node] = []
        for name in cmd.names:
            node = self.state.registry.get("Node", name)
            if node is None:
                raise NotFound(f"node {name} not found")
            nodes.append(node)
        if cmd.state == "idle":
            for node in nodes:
                slot = self.state.engine.cache.nodes.get(node.name)
                if slot is not None and slot.jobs:
                    raise Conflict(f"node {node.name} runs jobs: it cannot be made idle")
        results: list[tuple[str, str, str]] = []
        for node in nodes:
            new = _node_update(node, cmd.state, cmd.reason)
            if new.state is not AdminState.UP and (
                new.reason != node.reason or new.state is not node.state
            ):
                new = new.model_copy(
                    update={"reason_user": cmd.principal.user, "reason_time": float(int(now))}
                )
            outcome = tx.put_object("Node", new.name, new.to_dict())
            if outcome != "unchanged":
                self.state.put_object("Node", new.name, new)
                self.state.dirty = True
            results.append(("Node", new.name, outcome))
            if cmd.state == "down":
                slot = self.state.engine.cache.nodes.get(new.name)
                for job_id in sorted(slot.jobs) if slot is not None else []:
                    if job_id in self.state.attempts.evicting:
                        continue
                    self.state.attempts.evicting[job_id] = "NodeDown"
                    row = tx.get_job(job_id)
                    no_requeue = row is not None and bool(row.parsed_submission.no_requeue)
                    tx.add_event(
                        job_id,
                        # --no-requeue: it ends NODE_FAIL (see RuntimeEvents).
                        "Evicting" if no_requeue else "RequeueRequested",
                        now,
                        reason="NodeDown",
                        data={"by": cmd.principal.user, "node": new.name},
                    )
                    effects.cancels.append(job_id)
        return results

    def _configure(self, tx: Tx, configuration: Any, effects: Effects) -> tuple[str, str, str]:
        """Store a Kueue ``Configuration``; the engine is rebuilt with it after the commit."""
        name = str(configuration.name)
        outcome = tx.put_object(CONFIGURATION, name, dict(configuration.manifest))
        if outcome != "unchanged":
            self.state.config = engine_config(self.base_config, configuration)
            effects.reconfigure = True
        return CONFIGURATION, name, outcome

    def _create_kube_jobs(
        self, tx: Tx, cmd: ApplyCmd, now: float, effects: Effects
    ) -> list[tuple[str, str, str]]:
        made = [i for i in cmd.jobs if i.existing is None and i.engine_job is not None]
        if made:
            fresh = [(item.engine_job, item.job.submission) for item in made]
            ids = self.store_new(tx, fresh, now)  # type: ignore[arg-type]
            for item, job_id in zip(made, ids, strict=True):
                meta = cmd.meta.get(("job", "/".join(kube_identity(item.job))))
                if meta is not None:
                    tx.put_meta("job", str(job_id), meta)
        results: list[tuple[str, str, str]] = []
        for item in cmd.jobs:
            kind, namespace, name = kube_identity(item.job)
            created = item.existing is None and item.engine_job is not None
            results.append((kind, f"{namespace}/{name}", "created" if created else "unchanged"))
        return results

    def _insert(self, tx: Tx, cmd: SubmitCmd, now: float, effects: Effects) -> None:
        """Store new jobs (one per array task) and hold them at the gate."""
        ids = self.store_new(tx, list(zip(cmd.jobs, cmd.submissions, strict=True)), now)
        effects.answers.append((cmd.future, ids))

    def store_new(self, tx: Tx, jobs: Sequence[tuple[Job, JobSubmission]], now: float) -> list[int]:
        """Insert jobs (one row per array task), hold them at the gate; each job's first id."""
        rows: list[NewJob] = []
        owners: list[tuple[Job, JobSubmission, int | None]] = []
        firsts: list[int] = []
        for job, sub in jobs:
            firsts.append(len(rows))
            target = target_queue(self.state.registry, job)
            tasks: list[int | None] = list(sub.array.indices) if sub.array is not None else [None]
            for n, task in enumerate(tasks):
                rows.append(_new_job(job, sub, now, target, task, n == 0))
                owners.append((job, sub, task))
        ids = tx.insert_jobs(rows)
        array_id: int | None = None
        for row, (job, sub, task), job_id in zip(rows, owners, ids, strict=True):
            if task is None:
                array_id = None
            elif row.array_start:
                array_id = job_id
            engine_job = job.model_copy(
                update={
                    "id": job_id,
                    "submit_time": now,
                    "time_limit": sub.run.time_limit,
                    "nice": sub.nice,
                }
            )
            self.state.gate.add(gated(engine_job, sub, array_id, task))
        self.metrics.submitted_total.inc(len(ids))
        self.state.dirty = True
        return [ids[i] for i in firsts]

    def _job_command(
        self,
        tx: Tx,
        cmd: HoldCmd | RequeueCmd | SignalCmd | UpdateCmd,
        now: float,
        effects: Effects,
    ) -> None:
        row = tx.get_job(cmd.job_id)
        if row is None:
            raise NotFound(f"job {cmd.job_id} not found")
        state = JobState(row.state)
        if isinstance(cmd, HoldCmd):
            if state is not JobState.PENDING:
                raise Conflict(
                    f"job {row.id} is not pending ({row.state}): only pending jobs are held"
                )
            waiting = self.state.gate.jobs.get(row.id)
            admin_held = waiting is not None and waiting.hold and waiting.held_by_admin
            if not cmd.hold and admin_held and not cmd.principal.admin:
                raise Forbidden(
                    f"job {row.id} is held by the admin (JobHeldAdmin): only the admin releases it"
                )
            # The admin's hold on a job its user held makes it an admin hold.
            upgrade = cmd.hold and cmd.principal.admin and row.hold and not admin_held
            if row.hold == cmd.hold and not upgrade:
                return
            if cmd.hold and waiting is None:
                # Pending in the engine: withdraw it; it waits at the gate from now on.
                self.state.engine.apply(Cancel(row.id))
                self.state.gate.left(row.id, row.array_job_id)
                waiting = gated(
                    job_from_row(row, row.parsed_submission),
                    row.parsed_submission,
                    row.array_job_id,
                    row.array_task_id,
                )
                self.state.gate.add(waiting)
            if waiting is not None:
                waiting.hold = cmd.hold
                if cmd.hold:
                    waiting.expedite = None  # as a hold withdraws it from the engine
                waiting.held_by_admin = cmd.principal.admin and cmd.hold
            tx.update_job(row.id, hold=cmd.hold)
            data: dict[str, Any] = {"by": cmd.principal.user}
            if cmd.hold and cmd.principal.admin:
                data["admin"] = True
            tx.add_event(row.id, "Held" if cmd.hold else "Released", now, data=data)
            self.state.dirty = True
        elif isinstance(cmd, RequeueCmd):
            if state in (JobState.ADMITTED, JobState.RUNNING):
                self.state.attempts.evicting[row.id] = "Requeued"
                tx.add_event(row.id, "RequeueRequested", now, data={"by": cmd.principal.user})
                effects.cancels.append(row.id)
            elif state.finished:
                tx.update_job(
                    row.id,
                    state=JobState.PENDING.value,
                    reason="",
                    message="",
                    flavor=None,
                    nodes=[],
                    start_time=None,
                    end_time=None,
                    exit_code=None,
                    signal=None,
                    cancel_requested=False,
                )
                tx.add_event(row.id, "Requeued", now, reason="RequeuedByUser")
                sub = row.parsed_submission
                self.state.gate.add(
                    gated(job_from_row(row, sub), sub, row.array_job_id, row.array_task_id)
                )
                self.state.dirty = True
        elif isinstance(cmd, SignalCmd):
            if state is not JobState.RUNNING:
                raise Conflict(f"job {row.id} is not running ({row.state})")
            tx.add_event(
                row.id, "Signalled", now, data={"signal": cmd.signal, "batch_only": cmd.batch_only}
            )
            effects.signals.append((row.id, cmd.signal, cmd.batch_only))
        else:
            self._update(tx, row, cmd.changes, now, effects, cmd.principal)

    def _update(
        self,
        tx: Tx,
        row: JobRow,
        changes: dict[str, Any],
        now: float,
        effects: Effects,
        principal: Principal,
    ) -> None:
        if JobState(row.state).finished:
            raise Conflict(f"job {row.id} has already finished ({row.state})")
        submission = dict(row.submission)
        run = dict(submission.get("run") or {})
        fields: dict[str, Any] = {}
        if "time_limit" in changes:
            limit = changes["time_limit"]
            if limit is not None and (not isinstance(limit, int) or limit < 1):
                raise Invalid("time_limit: seconds >= 1, or null for no limit")
            current = run.get("timeLimit")
            raised = current is not None and (limit is None or limit > current)
            if raised and not principal.admin:
                # As in Slurm: users may shorten their jobs, only the admin extends them.
                raise Forbidden(
                    f"time_limit: only the admin raises job {row.id}'s time limit "
                    f"({current} s); a user may only lower it"
                )
            run["timeLimit"] = limit
            if row.state in (JobState.ADMITTED.value, JobState.RUNNING.value):
                effects.limits.append((row.id, float(limit) if limit is not None else None))
        if "nice" in changes:
            if int(changes["nice"]) < 0 and not principal.admin:
                raise Forbidden("nice: only the admin sets a negative nice value")
            submission["nice"] = int(changes["nice"])
        if "comment" in changes:
            submission["comment"] = str(changes["comment"])
        if "name" in changes:
            fields["name"] = submission["name"] = str(changes["name"])
        submission["run"] = run
        JobSubmission.model_validate(submission)  # still a valid submission
        tx.update_job(row.id, submission=submission, **fields)
        self.state.attempts.admitted.pop(row.id, None)  # as admitted no more
        tx.add_event(row.id, "Updated", now, data={k: changes[k] for k in sorted(changes)})

    def _cancel(self, tx: Tx, job_id: int, now: float, effects: Effects) -> None:
        row = tx.get_job(job_id)
        if row is None:
            raise NotFound(f"job {job_id} not found")
        if JobState(row.state).finished:
            return
        if row.state == JobState.PENDING.value:
            self.state.gate.remove(job_id)
            self.state.gate.left(job_id, row.array_job_id)
            self.state.engine.apply(Cancel(job_id))
            tx.update_job(
                job_id, state=JobState.CANCELLED.value, end_time=now, reason="", message=""
            )
            tx.add_event(job_id, "Cancelled", now, reason="CancelledByUser")
            self.metrics.finished_total.labels(state=JobState.CANCELLED.value).inc()
            self.state.dirty = True
            return
        if not row.cancel_requested:
            tx.update_job(job_id, cancel_requested=True)
            tx.add_event(job_id, "CancelRequested", now, reason="CancelledByUser")
        effects.cancels.append(job_id)


def _stamped(node: Node, old: Node | None, cmd: Command, now: float) -> Node:
    """A drained or down node's reason with who set it and when: as the manifest says,
    else as before when the state and reason are the same, else the caller, now."""
    if node.state is AdminState.UP or node.reason_user or node.reason_time is not None:
        return node
    if old is not None and old.state is node.state and old.reason == node.reason:
        user, when = old.reason_user, old.reason_time
    else:
        user, when = cmd.principal.user, float(int(now))
    return node.model_copy(update={"reason_user": user, "reason_time": when})


def _node_update(node: Node, state: str, reason: str) -> Node:
    """The node with Slurm's ``State=``/``Reason=`` applied; raises :class:`Conflict` where
    Slurm answers "Invalid node state specified"."""

    current: AdminState = node.state
    if state in ("drain", "down") and not reason:
        raise Invalid("a reason is required to drain or down a node")
    if state == "drain":
        # Slurm keeps a down node down (DOWN+DRAIN); here it stays down, with the reason.
        target = AdminState.DOWN if current is AdminState.DOWN else AdminState.DRAIN
    elif state == "down":
        target = AdminState.DOWN
    elif state == "resume":
        if current is AdminState.UP:
            raise Conflict(f"node {node.name} is neither drained nor down: nothing to resume")
        target = AdminState.UP
    elif state == "undrain":
        target = AdminState.UP if current is AdminState.DRAIN else current
    elif state == "idle":
        target = AdminState.UP
    elif state == "":
        if current is AdminState.UP or not reason:
            return node
        target = current
    else:
        raise Invalid(f"state {state!r}: one of {', '.join(NODE_STATES)}")
    if target is AdminState.UP:
        return node.model_copy(
            update={"state": target, "reason": "", "reason_user": "", "reason_time": None}
        )
    return node.model_copy(update={"state": target, "reason": reason or node.reason})


def _new_job(
    job: Job,
    submission: JobSubmission,
    now: float,
    cluster_queue: str | None,
    array_task: int | None = None,
    array_start: bool = False,
) -> NewJob:
    resolved = submission.model_copy(
        update={
            "tenant": job.tenant,
            "user": job.user,
            "queue": job.queue,
            "cluster_queue": job.cluster_queue,
        }
    )
    return NewJob(
        name=job.name,
        tenant=job.tenant,
        user=job.user,
        queue=job.queue,
        cluster_queue=cluster_queue,
        priority_class=job.priority_class,
        priority=job.priority,
        gpus=job.gpus,
        submission=resolved.to_dict(),
        parsed=resolved,
        submit_time=now,
        array_task_id=array_task,
        array_start=array_start,
        hold=submission.hold,
        id_span=len(submission.slurm.parts()) if submission.slurm is not None else 1,
    )
