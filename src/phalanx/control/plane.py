"""The control plane: one loop that owns the engine, the store's writes and the runtime.

API handlers call the public methods from any thread. Each command turns its
request into a :class:`~phalanx.control.commands.Command` on the loop's inbox
and waits for the answer; reads are answered at once
(:mod:`phalanx.control.queries`, :mod:`phalanx.control.cluster_status`). The
loop takes every queued command at once and, in one store transaction, applies
them, takes the runtime's events, runs a scheduling cycle and records every
transition; only after the commit does it answer the callers and act (launch
supervisors, signal cancellations). A failed commit rolls back and rebuilds
everything from the store. See ``docs/control-plane.md``.

This module is the loop and its life cycle; each step's work is in the module
that owns it:

- :mod:`~phalanx.control.tokens`: bearer tokens;
- :mod:`~phalanx.control.commands`, :mod:`~phalanx.control.validation`: commands;
- :mod:`~phalanx.control.runtime_events`: the runtime's started/exited events;
- :mod:`~phalanx.control.charging`: usage charging;
- :mod:`~phalanx.control.gate_release`: held-back jobs released to the engine;
- :mod:`~phalanx.control.admission`, :mod:`~phalanx.control.launch`: the
  engine's decisions and the launches they call for;
- :mod:`~phalanx.control.recovery`: the rebuild from the store;
- :mod:`~phalanx.control.state`: the memory they share.
"""

from __future__ import annotations

import dataclasses
import logging
import queue
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from phalanx.auth import Principal
from phalanx.control.admission import SHARE_ENV, Admission
from phalanx.control.charging import Charging
from phalanx.control.cluster_status import ClusterStatus
from phalanx.control.commands import (
    ApplyCmd,
    CancelCmd,
    Command,
    CommandApplier,
    DeleteCmd,
    Effects,
    HoldCmd,
    MetaCmd,
    NodeStateCmd,
    RequeueCmd,
    SignalCmd,
    SubmitCmd,
    UpdateCmd,
)
from phalanx.control.epilog import EpilogDone
from phalanx.control.gate_release import release_gate
from phalanx.control.kubejobs import split_kube
from phalanx.control.kueueconfig import is_configuration
from phalanx.control.launch import Launcher, Site
from phalanx.control.metrics import Metrics
from phalanx.control.queries import JobQueries
from phalanx.control.recovery import Recovery, configuration
from phalanx.control.runtime_events import RuntimeEvents
from phalanx.control.state import LoopState
from phalanx.control.steps import STEP_EVENT, latest_steps
from phalanx.control.tokens import Tokens
from phalanx.control.validation import Validator
from phalanx.engine import Admit, Decision, Engine, EngineConfig
from phalanx.errors import Conflict, Forbidden, Invalid, NotLeader, PhalanxError
from phalanx.model import JobState, JobSubmission, Node
from phalanx.runtime.base import Runtime
from phalanx.runtime.spec import (
    Account,
    Checkpointed,
    Exited,
    LaunchSpec,
    Started,
    StepsReported,
)
from phalanx.store import JobRow, Store, TokenRow
from phalanx.store.lease import Lease
from phalanx.usage.ledger import UsageLedger

__all__ = ["SHARE_ENV", "ControlPlane"]

_JOB_FIELDS = [f.name for f in dataclasses.fields(JobRow)]
_ID, _TENANT, _ATTEMPT = (_JOB_FIELDS.index(n) for n in ("id", "tenant", "attempt"))
"""Where a :meth:`~phalanx.store.Store.list_job_records` record holds these fields."""

log = logging.getLogger("phalanx.control")

_MAX_JOBS_PER_ITERATION = 20_000
_IDLE_CYCLE_S = 5.0
"""Even when nothing happens a cycle runs this often: priorities age with time."""
_GATE_PERIOD_S = 1.0
"""Held-back jobs are looked at on every change, and this often for begin times."""


class ControlPlane:
    """The engine, the store and the runtime, kept consistent by one loop thread."""

    def __init__(
        self,
        store: Store,
        runtime: Runtime,
        *,
        state_dir: Path,
        config: EngineConfig | None = None,
        clock: Callable[[], float] = time.time,
        poll_interval_s: float = 0.02,
    ) -> None:
        self.store = store
        self.runtime = runtime
        self.state_dir = Path(state_dir)
        self.base_config = config or EngineConfig()
        """The configuration from the command line; a Kueue ``Configuration`` overrides parts."""
        self.clock = clock
        self.poll_interval_s = poll_interval_s
        self.metrics = Metrics()
        self.site = Site()
        """The URL, accounts and container runtime jobs run with (set by the server)."""
        self.ready = False
        self.lease: Lease | None = None
        """With several servers on one PostgreSQL: this server's side of the leader lease
        (:mod:`phalanx.store.lease`); the loop runs only while it leads. ``None``: the
        only server, it always leads."""
        self.leader_url: str | None = None
        """The leading server's URL, as a standby last saw it (``None``: none leads)."""
        self.on_lost_lead: Callable[[], None] | None = None
        """Called from the loop when a write was fenced off (another server leads now)."""
        self._inbox: queue.SimpleQueue[Command | None] = queue.SimpleQueue()
        self._inbox_lock = threading.Lock()
        """Held to queue a command and to stop the loop: none is queued after it stopped."""
        self._lock = threading.RLock()
        """Held while the loop changes the engine; status readers take it too."""
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()
        self._replay: list[Started | Exited | Checkpointed | StepsReported | EpilogDone] = []
        """The runtime's events of the last iteration, until it commits."""
        self.state = LoopState(self.base_config)
        """The loop's memory, shared by the parts below; rebuilt from the store on start."""
        self._stale = False
        """The last rebuild from the store failed: rebuild before the next iteration."""
        self._last_cycle = 0.0
        self._last_gate = 0.0

        # The parts the loop drives; each gets what it needs, the state they share is one.
        self.tokens = Tokens(store, clock, self._require_leader)
        self.launcher = Launcher(runtime, self.site)
        self.validator = Validator(self.state, store, self.site)
        self.commands = CommandApplier(self.state, self.metrics, self.base_config)
        self.charging = Charging(self.state, store)
        self.runtime_events = RuntimeEvents(self.state, runtime, self.metrics, self.charging)
        self.admission = Admission(self.state, self.metrics, self.launcher)
        self.recovery = Recovery(
            self.state, store, runtime, self.launcher, self.charging, self.runtime_events, clock
        )
        self.queries = JobQueries(
            self.state,
            store,
            self._lock,
            self.launcher,
            self.validator,
            clock,
            self._require_leader,
            lambda: self.leading,
        )
        self.status = ClusterStatus(self.state, self._lock, self.metrics, self._require_leader)

    def _reset_state(self, config: EngineConfig) -> None:
        self.state.reset(config)
        self._stale = False
        self._last_cycle = 0.0
        self._last_gate = 0.0

    @property
    def config(self) -> EngineConfig:
        """The engine's configuration: the server's, with a Kueue ``Configuration``'s overrides."""
        return self.state.config

    @property
    def engine(self) -> Engine:
        return self.state.engine

    @property
    def usage(self) -> UsageLedger:
        return self.state.usage

    @property
    def url(self) -> str:
        """The API's URL, for the jobs' environment (set by the server)."""
        return self.site.url

    @url.setter
    def url(self, url: str) -> None:
        self.site.url = url

    @property
    def container_runtime(self) -> str | None:
        """``host``: ``srun --container-image`` steps run on the host, without the image."""
        return self.site.container_runtime

    @container_runtime.setter
    def container_runtime(self, name: str | None) -> None:
        self.site.container_runtime = name

    @property
    def accounts(self) -> Callable[[str], Account] | None:
        """The Unix account a user's jobs run as (raises :class:`Forbidden` when there is
        none); set by a server that runs jobs as their users (``None``: as itself)."""
        return self.site.accounts

    @accounts.setter
    def accounts(self, accounts: Callable[[str], Account] | None) -> None:
        self.site.accounts = accounts

    # ------------------------------------------------------------------ life cycle

    def start(self) -> None:
        """Rebuild everything from the store, re-attach running jobs, start the loop."""
        self._stopping.clear()
        with self._lock:
            launches = self._recover()
        self._publish_node_names()
        for spec in launches:
            self.launcher.launch(spec)
        self._thread = threading.Thread(target=self._run, name="phalanx-control", daemon=True)
        self._thread.start()
        self.ready = True

    def stand_by(self) -> None:
        """Serve reads without leading (another server leads): no loop, no jobs watched."""
        self.ready = True

    @property
    def leading(self) -> bool:
        """Whether this server's loop runs (always, without a lease, once started)."""
        return self._thread is not None and not self._stopping.is_set()

    def stop(self) -> None:
        """Stop the loop; running jobs keep running under their supervisors."""
        self.ready = False
        self._halt()

    def step_down(self) -> None:
        """Stop leading (the lease was lost or given up) and stand by: the loop stops,
        the runtime stops watching jobs (their supervisors run on, for the new leader to
        adopt), and the memory of the engine is dropped."""
        self._halt()
        self.runtime.close()
        with self._lock:
            self._replay = []
            self._reset_state(self.state.config)
        self.ready = True

    def _halt(self) -> None:
        with self._inbox_lock:
            self._stopping.set()
            self._inbox.put(None)
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=30)
        self._drain()

    def _drain(self) -> None:
        """Answer every command still queued: the loop will not run them."""
        while True:
            try:
                left = self._inbox.get_nowait()
            except queue.Empty:
                break
            if left is not None and not left.future.done():
                left.future.set_exception(self._gone())

    def _require_leader(self) -> None:
        """Raise :class:`NotLeader` on a standby (the API forwards the request)."""
        if self.lease is not None and not self.leading:
            leader = self.leader_url if self.leader_url != self.site.url else None
            raise NotLeader(
                "this server stands by and another leads; the request goes to the leader",
                leader=leader,
            )

    # ------------------------------------------------------------------ tokens

    def authenticate(self, token: str) -> Principal:
        """The principal of a bearer token (:meth:`Tokens.authenticate`)."""
        return self.tokens.authenticate(token)

    def cached_principal(self, token: str) -> Principal | None:
        """The principal of a token authenticated lately, without reading the store
        (:meth:`Tokens.cached`); None: call :meth:`authenticate`."""
        return self.tokens.cached(token)

    def create_token(
        self,
        principal: Principal,
        *,
        user: str,
        tenants: Sequence[str],
        admin: bool = False,
        name: str = "",
        expires: float | None = None,
    ) -> tuple[str, TokenRow]:
        """A new bearer token for ``user`` acting for ``tenants``; its plaintext is shown once."""
        return self.tokens.create(
            principal, user=user, tenants=tenants, admin=admin, name=name, expires=expires
        )

    def revoke_tokens(self, principal: Principal, name: str) -> list[TokenRow]:
        """Revoke every token named ``name`` (admin only); they stop working at once."""
        return self.tokens.revoke(principal, name)

    # ------------------------------------------------------------------ commands

    def submit(self, principal: Principal, submissions: Sequence[JobSubmission]) -> list[int]:
        """Durably queue jobs; returns their ids once committed."""
        if not submissions:
            return []
        result: list[int] = self._call(SubmitCmd(principal, list(submissions)))
        return result

    def submit_later(
        self, principal: Principal, submissions: Sequence[JobSubmission]
    ) -> Future[list[int]]:
        """:meth:`submit` without waiting: the future holds the ids once they are committed
        (for a caller on an event loop). Raises at once when the loop does not run."""
        cmd = SubmitCmd(principal, list(submissions))
        if not submissions:
            cmd.future.set_result([])
            return cmd.future
        self._queue(cmd)
        return cmd.future

    def cancel(self, principal: Principal, job_id: int) -> JobRow:
        """Cancel a job: a pending one at once, a running one through its supervisor."""
        row = self.job(principal, job_id)
        if JobState(row.state).finished:
            raise Conflict(f"job {job_id} has already finished ({row.state})")
        self._call(CancelCmd(principal, job_id))
        return self.job(principal, job_id)

    def apply(
        self,
        principal: Principal,
        manifests: Sequence[Any],
        meta: dict[tuple[str, str], dict[str, Any]] | None = None,
    ) -> list[tuple[str, str, str]]:
        """Create or update configuration objects and Kubernetes jobs (all of them or
        none). Users may apply jobs in their own tenants' namespaces; configuration is
        the admin's. ``meta``: Kubernetes metadata to store with them
        (:attr:`~phalanx.control.commands.ApplyCmd.meta`)."""
        if not principal.admin:
            from phalanx.dialects.kueue.jobs import KubeJob

            for m in manifests:
                obj = getattr(m, "obj", m)
                if not isinstance(obj, KubeJob):
                    raise Forbidden("only the admin changes cluster configuration")
                if not principal.may_act_for(obj.namespace):
                    raise Forbidden(
                        f"{obj.kind}/{obj.namespace}/{obj.name}: user {principal.user} "
                        f"may not create jobs in namespace {obj.namespace}"
                    )
        objects, jobs = split_kube([getattr(m, "obj", m) for m in manifests])
        configurations = [o for o in objects if is_configuration(o)]
        if len(configurations) > 1:
            raise Invalid("Configuration: give one Kueue Configuration per apply")
        objects = [o for o in objects if not is_configuration(o)]
        cmd = ApplyCmd(principal, objects, jobs)
        cmd.meta = dict(meta or {})
        cmd.configuration = configurations[0] if configurations else None
        result: list[tuple[str, str, str]] = self._call(cmd)
        return result

    def delete(self, principal: Principal, kind: str, name: str) -> None:
        """Delete a configuration object that nothing uses."""
        if not principal.admin:
            raise Forbidden("only the admin changes cluster configuration")
        self._call(DeleteCmd(principal, kind, name))

    def put_meta(self, principal: Principal, kind: str, name: str, meta: dict[str, Any]) -> None:
        """Store the Kubernetes metadata of an object, or of a job (``kind`` ``job``, ``name``
        its id): labels and annotations set through the Kubernetes API, its managed
        fields, its deletion. The Kubernetes API decides who may."""
        self._call(MetaCmd(principal, kind, name, dict(meta)))

    def update_nodes(
        self, principal: Principal, names: Sequence[str], state: str, reason: str = ""
    ) -> list[tuple[str, str, str]]:
        """Drain, down or resume nodes (``scontrol update NodeName= State= Reason=``), all
        of them or none (admin only): an apply of each Node with its new state and reason,
        stamped with the caller and the time. A node taken down has its jobs requeued."""
        from phalanx.control.commands import NODE_STATES

        if not principal.admin:
            raise Forbidden("only the admin changes a node's state")
        state = state.strip().lower()
        if state and state not in NODE_STATES:
            raise Invalid(f"state: {state!r} is not one of {', '.join(NODE_STATES)}")
        if not names:
            raise Invalid("nodes: name at least one node")
        result: list[tuple[str, str, str]] = self._call(
            NodeStateCmd(principal, list(dict.fromkeys(names)), state, reason)
        )
        return result

    def hold(self, principal: Principal, job_id: int) -> JobRow:
        """Keep a pending job from starting until :meth:`release` (``scontrol hold``)."""
        self.job(principal, job_id)
        self._call(HoldCmd(principal, job_id, True))
        return self.job(principal, job_id)

    def release(self, principal: Principal, job_id: int) -> JobRow:
        """Let a held job start again (``scontrol release``)."""
        self.job(principal, job_id)
        self._call(HoldCmd(principal, job_id, False))
        return self.job(principal, job_id)

    def requeue(self, principal: Principal, job_id: int) -> JobRow:
        """Stop a running job and queue it again, or queue a finished one again."""
        self.job(principal, job_id)
        self._call(RequeueCmd(principal, job_id))
        return self.job(principal, job_id)

    def signal(
        self, principal: Principal, job_id: int, signal: int, *, batch_only: bool = False
    ) -> JobRow:
        """Send ``signal`` to a running job's tasks (or only its batch shell)."""
        row = self.job(principal, job_id)
        if row.state != JobState.RUNNING.value:
            raise Conflict(f"job {job_id} is not running ({row.state})")
        self._call(SignalCmd(principal, job_id, signal, batch_only))
        return row

    def update(self, principal: Principal, job_id: int, changes: dict[str, Any]) -> JobRow:
        """Change a job's time limit, nice value, comment or name (``scontrol update``)."""
        allowed = {"time_limit", "nice", "comment", "name"}
        unknown = sorted(set(changes) - allowed)
        if unknown:
            raise Invalid(f"{unknown[0]}: cannot be changed (one of: {', '.join(sorted(allowed))})")
        self.job(principal, job_id)
        self._call(UpdateCmd(principal, job_id, dict(changes)))
        return self.job(principal, job_id)

    # ------------------------------------------------------------------ reads

    def job(self, principal: Principal, job_id: int) -> JobRow:
        """The job, if ``principal`` may see it (otherwise: not found, as for a missing job)."""
        return self.queries.job(principal, job_id)

    def explain(self, principal: Principal, job_id: int) -> dict[str, Any]:
        """Why the job is where it is (:meth:`JobQueries.explain`)."""
        return self.queries.explain(principal, job_id)

    def priority_factors(
        self, principal: Principal, job_ids: Sequence[int] | None, users: Sequence[str] | None
    ) -> dict[str, Any]:
        """The ordering weights and the visible pending jobs' priority factors (``sprio``)."""
        return self.queries.priority_factors(principal, job_ids, users)

    def estimate(self, principal: Principal, submission: JobSubmission) -> dict[str, Any]:
        """Validate a submission without submitting it (``sbatch --test-only``)."""
        return self.queries.estimate(principal, submission)

    def job_environment(self, principal: Principal, job_id: int) -> dict[str, str]:
        """The variables phalanx sets for the job's first task."""
        return self.queries.job_environment(principal, job_id)

    def estimated_start(self, job_id: int) -> float | None:
        """A pending job's planned start (``None`` on a standby)."""
        return self.queries.estimated_start(job_id)

    def no_estimate(self, job_id: int) -> str | None:
        """Why a pending job has no planned start (``None``: it has one, or a standby)."""
        return self.queries.no_estimate(job_id)

    def output_owner(self, job: JobRow) -> int | None:
        """The uid whose files the job's output must be, to be served back (``None``: any)."""
        return self.launcher.output_owner(job)

    def output_paths(self, job: JobRow) -> tuple[Path, Path | None]:
        """Where the job's standard output and standard error go (error None: merged)."""
        return self.launcher.output_paths(job)

    def job_steps(
        self, principal: Principal, job_id: int, *, environment: bool = False
    ) -> dict[str, Any]:
        """The job's steps (its current attempt's) and, while it runs, its step socket
        (and with ``environment`` its batch environment: what ``salloc`` gives its shell)."""
        row = self.job(principal, job_id)
        steps = latest_steps(self.store.job_events(job_id), row.attempt)
        answer: dict[str, Any] = {"jobId": job_id, "attempt": row.attempt, "steps": steps}
        answer["state"] = row.state
        answer["socket"] = None
        finder = getattr(self.runtime, "step_socket", None)
        owner = principal.admin or principal.user == row.user
        answer["owner"] = owner
        if row.state == JobState.RUNNING.value and finder is not None and owner:
            # Only the job's own user (or the admin) starts steps in it or attaches.
            answer["socket"] = finder(job_id)
            if environment:
                answer["environment"] = self.job_environment(principal, job_id)
        return answer

    def steps_of(self, principal: Principal, job_ids: list[int]) -> dict[int, list[dict[str, Any]]]:
        """The steps of each of the jobs ``principal`` may see (``sacct``)."""
        # Records, not rows: the id, tenant and attempt are all this needs, and the
        # records skip decoding every job's submission.
        return self.steps_of_records(principal, self.store.list_job_records(ids=job_ids))

    def steps_of_records(
        self, principal: Principal, records: Sequence[tuple[Any, ...]]
    ) -> dict[int, list[dict[str, Any]]]:
        """:meth:`steps_of` for jobs already read (as ``Store.list_job_records`` gives
        them: a list page does not read them twice)."""
        rows = [(r[_ID], r[_ATTEMPT]) for r in records if principal.may_act_for(r[_TENANT])]
        histories = self.store.events_of([job_id for job_id, _ in rows], kinds=[STEP_EVENT])
        return {
            job_id: latest_steps(histories.get(job_id, []), attempt) for job_id, attempt in rows
        }

    def step_usage(self, principal: Principal, job_id: int) -> list[dict[str, Any]]:
        """The running steps' usage, task by task (``sstat``); [] when none runs."""
        row = self.job(principal, job_id)
        sampler = getattr(self.runtime, "step_usage", None)
        if row.state != JobState.RUNNING.value or sampler is None:
            return []
        usage: list[dict[str, Any]] = sampler(job_id)
        return usage

    def cluster_queue_status(self) -> dict[str, dict[str, Any]]:
        return self.status.cluster_queue_status()

    def node_status(self, principal: Principal | None = None) -> dict[str, dict[str, Any]]:
        """Each node's state, GPUs in use and jobs (those ``principal`` may see)."""
        return self.status.node_status(principal)

    def nodes(self) -> list[Node]:
        """The cluster's nodes as configured (admin state and reason included)."""
        with self._lock:
            return list(self.state.registry.all("Node").values())

    def usage_report(self) -> dict[str, Any]:
        """The tenant tree with shares, decayed usage and fair-share factors (``sshare``)."""
        return self.status.usage_report()

    def render_metrics(self) -> bytes:
        return self.status.render_metrics()

    # ------------------------------------------------------------------ the loop

    def _call(self, command: Command) -> Any:
        self._queue(command)
        return command.future.result()

    def _queue(self, command: Command) -> None:
        with self._inbox_lock:
            self._require_leader()
            if self._stopping.is_set() or self._thread is None:
                from phalanx.errors import Unavailable

                raise Unavailable("the control plane is not running")
            self._inbox.put(command)

    def _run(self) -> None:
        try:
            self._loop()
        except NotLeader:
            # A write was fenced off: another server took the lease. Nothing of the
            # iteration was committed; the commands go to the new leader.
            log.warning("another server leads now: this one stops scheduling and stands by")
            with self._inbox_lock:
                self._stopping.set()
            if self.on_lost_lead is not None:
                self.on_lost_lead()
        self._drain()

    def _gone(self) -> PhalanxError:
        """The answer to a command the loop will not run: with a lease, another server
        may lead (the API forwards it there); without, the server is stopping."""
        if self.lease is None:
            return _stopped()
        leader: str | None = None
        try:
            row = self.lease.current()
        except Exception:
            row = None
        if row is not None and not row.free and row.url != self.site.url:
            leader = row.url
        return NotLeader(
            "this server stopped leading; the request goes to the leader", leader=leader
        )

    def _loop(self) -> None:
        """Run iterations until stopped; :class:`NotLeader` (a fenced write) ends it."""
        while not self._stopping.is_set():
            commands = self._take_commands()
            if self._stopping.is_set():
                for cmd in commands:
                    cmd.future.set_exception(self._gone())
                break
            try:
                self._step(commands)
            except NotLeader:
                for cmd in commands:
                    if not cmd.future.done():
                        cmd.future.set_exception(self._gone())
                raise

    def _step(self, commands: list[Command]) -> None:
        """One iteration, rebuilding from the store first when the last one failed."""
        if self._stale:
            # The last rebuild failed (the store is unreachable): nothing runs on
            # the memory of an iteration that did not commit until one succeeds.
            self._stale = not self._rebuild()
            if self._stale:
                for cmd in commands:
                    if not cmd.future.done():
                        cmd.future.set_exception(_store_down())
                return
        try:
            self._iterate(commands)
        except NotLeader:
            raise
        except Exception as exc:  # the loop must survive anything a store can throw
            log.exception("control loop iteration failed; rebuilding from the store")
            # Rebuilt before answering: a caller that retries finds the recovered state.
            self._stale = not self._rebuild()
            for cmd in commands:
                if not cmd.future.done():
                    cmd.future.set_exception(_internal(exc))

    def _take_commands(self) -> list[Command]:
        commands: list[Command] = []
        try:
            first = self._inbox.get(block=not self.state.dirty, timeout=self._poll_timeout())
        except queue.Empty:
            return commands
        if first is None:
            return commands
        commands.append(first)
        jobs = len(first.submissions) if isinstance(first, SubmitCmd) else 0
        while jobs < _MAX_JOBS_PER_ITERATION:
            try:
                more = self._inbox.get_nowait()
            except queue.Empty:
                break
            if more is None:
                self._stopping.set()
                break
            commands.append(more)
            if isinstance(more, SubmitCmd):
                jobs += len(more.submissions)
        return commands

    def _poll_timeout(self) -> float:
        """How long to wait for a command: the poll interval, or less if a runtime timer is due."""
        due = self.runtime.next_event_time()
        if due is None:
            return self.poll_interval_s
        return max(0.0, min(self.poll_interval_s, due - self.clock()))

    def _iterate(self, commands: list[Command]) -> None:
        """One iteration; each numbered step is one part's work, all in one transaction."""
        # 1. Take the runtime's events. Events taken by an iteration that did not commit
        #    are handled again (after the rebuild); the runtime reports each one once.
        #    With them, the attempts whose node epilogs returned.
        events: list[Started | Exited | Checkpointed | StepsReported | EpilogDone] = [
            *self._replay,
            *self.runtime.poll(),
        ]
        epilogs = self.runtime_events.epilogs
        if epilogs is not None:
            events.extend(epilogs.poll())
        self._replay = events
        now = self.clock()
        # A waitForPodsReady deadline, a requeue backoff's end, or Kueue's next head.
        wakeup = self.state.engine.next_wakeup()
        due = wakeup is not None and now >= wakeup
        if not commands and not events and not due and self._idle(now):
            return
        effects = Effects()
        with self._lock:
            # 2. Validate the commands: bad ones are answered now, outside the transaction.
            accepted = self.validator.validate(commands)
            with self.store.begin() as tx:
                # 3. Apply the commands: new jobs, cancellations, holds, manifests.
                self.commands.apply(tx, accepted, now, effects)
                # 4. Record the runtime's events: jobs started, requeued or ended.
                tx.prefetch_jobs(e.job_id for e in events if isinstance(e, Exited))
                tx.prefetch_job_charges(e.job_id for e in events if isinstance(e, Started))
                for event in events:
                    self.runtime_events.handle(tx, event, now)
                # 5. Charge usage, when a calc period passed or a job stopped.
                self.charging.charge(tx, now)
                # 6. Hand the held-back jobs that became eligible to the engine.
                gate_due = now - self._last_gate >= _GATE_PERIOD_S
                if self.state.gate.jobs and (self.state.dirty or gate_due):
                    self._last_gate = now
                    release_gate(tx, now, self.state, self.metrics)
                # 7. Run a scheduling cycle and record its decisions.
                if self.state.dirty or due or now - self._last_cycle >= _IDLE_CYCLE_S:
                    decisions = self._cycle(now)
                    self.admission.record(tx, decisions, now, effects)
                commit_started = time.perf_counter()
            # 8. Committed: nothing of this iteration is replayed.
            self._replay = []
            self.metrics.commit_seconds.observe(time.perf_counter() - commit_started)
        # 9. Only now act on it: answer the callers, launch, stop and signal jobs.
        self._act(effects)

    def _idle(self, now: float) -> bool:
        """Nothing changed and nothing is due: the iteration is skipped."""
        return (
            not self.state.dirty
            and now - self._last_cycle < _IDLE_CYCLE_S
            and not (self.state.gate.jobs and now - self._last_gate >= _GATE_PERIOD_S)
            and not self.state.usage.due(now)
        )

    def _cycle(self, now: float) -> list[Decision]:
        started = time.perf_counter()
        decisions = self.state.engine.cycle(now)
        self.metrics.cycles_total.inc()
        self.metrics.cycle_seconds.observe(time.perf_counter() - started)
        # Kueue's cycle takes one head per ClusterQueue: after one that
        # admitted, the next runs at once, not after the poll interval.
        self.state.dirty = self.state.config.heads_per_cycle is not None and any(
            isinstance(d, Admit) for d in decisions
        )
        self._last_cycle = now
        return decisions

    def _act(self, effects: Effects) -> None:
        """What a committed iteration calls for."""
        if effects.reconfigure:
            # Before answering: the caller sees the engine with its new configuration.
            self._rebuild()
        for future, value in effects.answers:
            if isinstance(value, PhalanxError):
                future.set_exception(value)
            else:
                future.set_result(value)
        self._publish_node_names()
        for spec in effects.launches:
            self.launcher.launch(spec)
        for job_id in effects.cancels:
            self.runtime.cancel(job_id)
        for job_id, grace in effects.preemptions:
            self.runtime.cancel(job_id, preempt_grace_s=grace)
        for job_id, signum, batch_only in effects.signals:
            self.runtime.signal(job_id, signum, batch_only=batch_only)
        for job_id, limit in effects.limits:
            self.runtime.set_time_limit(job_id, limit)

    def _publish_node_names(self) -> None:
        if self.state.nodes_changed:
            self.state.nodes_changed = False
            self.runtime.set_node_names(self.state.registry.all("Node"))

    # ------------------------------------------------------------------ recovery

    def _recover(self) -> list[LaunchSpec]:
        """Rebuild the loop's memory from the store; returns the launches still owed."""
        if self.lease is not None:
            # Fenced: a server that no longer leads rebuilds (and launches) nothing.
            with self.store.begin():
                pass
        self._reset_state(configuration(self.store, self.base_config, self.state.config))
        return self.recovery.run()

    def _rebuild(self) -> bool:
        """Engine, runtime and caches again from the store (what an iteration that failed
        to commit had changed in memory is thrown away; the runtime reports again what
        it had reported); False if the store could not be read."""
        try:
            with self._lock:
                launches = self._recover()
            self._publish_node_names()
            for spec in launches:
                self.launcher.launch(spec)
        except NotLeader:
            raise
        except Exception:
            log.exception("rebuilding from the store failed; retrying before anything else")
            time.sleep(1.0)
            return False
        return True


def _stopped() -> PhalanxError:
    from phalanx.errors import Unavailable

    return Unavailable("the control plane is shutting down")


def _store_down() -> PhalanxError:
    from phalanx.errors import Unavailable

    return Unavailable("the store is unreachable; nothing was applied: try again")


def _internal(exc: Exception) -> PhalanxError:
    from phalanx.errors import Unavailable

    return Unavailable(f"the store rejected the change ({type(exc).__name__}); nothing was applied")
