"""The control plane: one loop that owns the engine, the store's writes and the runtime.

API handlers call the public methods from any thread. Each method turns its
request into a *command* on the loop's inbox and waits for the answer. The
loop takes every queued command at once and, in one store transaction, applies
them, takes the runtime's events, runs a scheduling cycle and records every
transition; only after the commit does it answer the callers and act
(launch supervisors, signal cancellations). See ``docs/control-plane.md``.
"""

from __future__ import annotations

import hmac
import logging
import queue
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from phalanx.auth import Principal, hash_token, new_token
from phalanx.control.gate import Gate
from phalanx.control.gpus import GpuAllocator
from phalanx.control.kubejobs import (
    KubeApply,
    image_events,
    kube_identity,
    kube_launch,
    split_kube,
)
from phalanx.control.limits import SubmitCounts, store_counter, wall_default
from phalanx.control.metrics import Metrics
from phalanx.control.registry import KIND_ORDER, MODEL_BY_KIND, Registry, object_key
from phalanx.control.slurmjobs import (
    dependency_checker,
    expand_output,
    gated,
    requeues,
    requeues_after_preemption,
    slurm_launch,
)
from phalanx.control.submissions import DEF_MEM_PER_CPU, DEFAULT_TIME, resolve_submissions
from phalanx.engine import (
    Admit,
    Adopt,
    Cancel,
    Deactivate,
    Decision,
    Delete,
    Engine,
    EngineConfig,
    Evict,
    Finish,
    Pending,
    PodsReady,
    Requeue,
    Submit,
    Upsert,
)
from phalanx.engine.decisions import decision_from_dict
from phalanx.errors import (
    Conflict,
    Forbidden,
    Invalid,
    NotFound,
    NotLeader,
    PhalanxError,
    Unauthorized,
)
from phalanx.model import CPU, GPU, GPU_MILLI, MEMORY, Job, JobState, JobSubmission
from phalanx.runtime.base import Runtime
from phalanx.runtime.spec import Account, AlreadyLaunched, Exited, LaunchSpec, Started, TaskSpec
from phalanx.store import JobEventRow, JobRow, NewJob, Store, TokenRow, Tx
from phalanx.store.lease import Lease
from phalanx.usage.ledger import UsageLedger

__all__ = ["SHARE_ENV", "ControlPlane"]

SHARE_ENV = "PHALANX_GPU_MILLI"
"""Set in a task that holds a share of a GPU: its thousandths of the device (a job may
cap its memory with it, e.g. ``torch.cuda.set_per_process_memory_fraction``)."""

log = logging.getLogger("phalanx.control")

_ACTIVE = (JobState.ADMITTED.value, JobState.RUNNING.value, JobState.COMPLETING.value)
_MAX_JOBS_PER_ITERATION = 20_000
_IDLE_CYCLE_S = 5.0
"""Even when nothing happens a cycle runs this often: priorities age with time."""
_TOKEN_CACHE_S = 5.0
_MAX_TOKEN_LIFE_S = 100 * 365 * 86400.0
_GATE_PERIOD_S = 1.0
"""Held-back jobs are looked at on every change, and this often for begin times."""


# ---------------------------------------------------------------------- commands


@dataclass
class _Command:
    principal: Principal
    future: Future[Any] = field(default_factory=Future, init=False)


@dataclass
class _SubmitCmd(_Command):
    submissions: list[JobSubmission]
    jobs: list[Job] = field(default_factory=list, init=False)


@dataclass
class _CancelCmd(_Command):
    job_id: int


@dataclass
class _ApplyCmd(_Command):
    objects: list[Any]
    jobs: list[KubeApply] = field(default_factory=list)
    """Kubernetes jobs among the documents (created as jobs, in document order)."""
    configuration: Any = None
    """A Kueue ``Configuration`` (:class:`~phalanx.dialects.kueue.KueueConfiguration`)."""


@dataclass
class _DeleteCmd(_Command):
    kind: str
    name: str


@dataclass
class _HoldCmd(_Command):
    job_id: int
    hold: bool


@dataclass
class _RequeueCmd(_Command):
    job_id: int


@dataclass
class _SignalCmd(_Command):
    job_id: int
    signal: int
    batch_only: bool


@dataclass
class _UpdateCmd(_Command):
    job_id: int
    changes: dict[str, Any]


@dataclass
class _Effects:
    """What to do once the iteration's transaction has committed."""

    launches: list[LaunchSpec] = field(default_factory=list)
    cancels: list[int] = field(default_factory=list)
    preemptions: list[tuple[int, float]] = field(default_factory=list)
    """(job, grace seconds): preempted jobs to stop (SIGTERM now, SIGKILL after the grace)."""
    signals: list[tuple[int, int, bool]] = field(default_factory=list)
    limits: list[tuple[int, float | None]] = field(default_factory=list)
    answers: list[tuple[Future[Any], Any]] = field(default_factory=list)
    cycled: bool = False
    reconfigure: bool = False
    """The engine's configuration changed: rebuild the engine from the store."""


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
        self.config = config or EngineConfig()
        self.base_config = self.config
        """The configuration from the command line; a Kueue ``Configuration`` overrides parts."""
        self.clock = clock
        self.poll_interval_s = poll_interval_s
        self.metrics = Metrics()
        self.url = ""
        """The API's URL, for the jobs' environment (set by the server)."""
        self.container_runtime: str | None = None
        """``host``: ``srun --container-image`` steps run on the host, without the image."""
        self.accounts: Callable[[str], Account] | None = None
        """The Unix account a user's jobs run as (raises :class:`Forbidden` when there is
        none); set by a server that runs jobs as their users (``None``: as itself)."""
        self.ready = False
        self.lease: Lease | None = None
        """With several servers on one PostgreSQL: this server's side of the leader lease
        (:mod:`phalanx.store.lease`); the loop runs only while it leads. ``None``: the
        only server, it always leads."""
        self.leader_url: str | None = None
        """The leading server's URL, as a standby last saw it (``None``: none leads)."""
        self.on_lost_lead: Callable[[], None] | None = None
        """Called from the loop when a write was fenced off (another server leads now)."""
        self._inbox: queue.SimpleQueue[_Command | None] = queue.SimpleQueue()
        self._inbox_lock = threading.Lock()
        """Held to queue a command and to stop the loop: none is queued after it stopped."""
        self._lock = threading.RLock()
        """Held while the loop changes the engine; status readers take it too."""
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()
        self._tokens: dict[str, tuple[float, float | None, Principal]] = {}
        """Token hash -> (when looked up, its expiry, its principal)."""
        self._tokens_lock = threading.Lock()
        self._token_generation = 0
        """Bumped by every revocation: a lookup that raced one is not cached."""
        self._replay: list[Started | Exited] = []
        """The runtime's events of the last iteration, until it commits."""
        self._reset_state()

    def _reset_state(self) -> None:
        self.engine = Engine(self.config)
        self.registry = Registry()
        self.gpus = GpuAllocator()
        self._active: dict[int, int] = {}
        """Admitted or running job id -> its current attempt."""
        self._running: set[int] = set()
        """Active jobs whose start is recorded (a re-attached supervisor reports it again)."""
        self._evicting: dict[int, str] = {}
        self._deactivating: dict[int, tuple[str, str]] = {}
        self._preempting: dict[int, Evict] = {}
        """Jobs being preempted: the engine's Evict (preemptor, mode), until they stop."""
        """Jobs the engine deactivated while they ran: (reason, message) once they stop."""
        self.gate = Gate()
        self.usage = UsageLedger(self.config)
        self._nodes_changed = False
        self._dirty = True
        self._stale = False
        """The last rebuild from the store failed: rebuild before the next iteration."""
        self._last_cycle = 0.0
        self._last_gate = 0.0

    # ------------------------------------------------------------------ life cycle

    def start(self) -> None:
        """Rebuild everything from the store, re-attach running jobs, start the loop."""
        self._stopping.clear()
        with self._lock:
            launches = self._recover()
        self._publish_node_names()
        for spec in launches:
            self._launch(spec)
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
            self._reset_state()
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
            leader = self.leader_url if self.leader_url != self.url else None
            raise NotLeader(
                "this server stands by and another leads; the request goes to the leader",
                leader=leader,
            )

    # ------------------------------------------------------------------ public API

    def authenticate(self, token: str) -> Principal:
        """The principal of a bearer token; :class:`Unauthorized` for an unknown, revoked
        or expired one. Answers are cached for a few seconds, never past the token's
        expiry, and :meth:`revoke_tokens` empties the cache."""
        digest = hash_token(token)
        now = time.monotonic()
        cached = self._tokens.get(digest)
        if (
            cached is not None
            and now - cached[0] < _TOKEN_CACHE_S
            and (cached[1] is None or cached[1] > self.clock())
        ):
            return cached[2]
        generation = self._token_generation
        row = self.store.find_token(digest)
        # The lookup is by the hash's index; the comparison that decides is constant-time.
        if (
            row is None
            or not hmac.compare_digest(row.token_hash.encode(), digest.encode())
            or row.revoked
            or (row.expires is not None and row.expires <= self.clock())
        ):
            self._tokens.pop(digest, None)
            raise Unauthorized("invalid or expired token")
        principal = Principal(user=row.user, tenants=frozenset(row.tenants), admin=row.admin)
        with self._tokens_lock:
            # A revocation that committed since the lookup must not be undone by caching.
            if generation == self._token_generation:
                self._tokens[digest] = (now, row.expires, principal)
        return principal

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
        if not principal.admin:
            raise Forbidden("only the admin creates tokens")
        self._require_leader()
        if not user:
            raise Invalid("user: required")
        if not admin and not tenants:
            raise Invalid("tenants: a user token needs at least one tenant")
        if expires is not None:
            now = self.clock()
            if not expires > now:  # NaN too
                raise Invalid("expires: the time is already past (epoch seconds in the future)")
            if not expires <= now + _MAX_TOKEN_LIFE_S:
                raise Invalid(
                    "expires: at most 100 years ahead (omit it for a token that never expires)"
                )
        token = new_token()
        with self.store.begin() as tx:
            row = tx.create_token(
                name=name or user,
                user=user,
                tenants=list(tenants),
                admin=admin,
                token_hash=hash_token(token),
                created=self.clock(),
                expires=expires,
            )
        return token, row

    def revoke_tokens(self, principal: Principal, name: str) -> list[TokenRow]:
        """Revoke every token named ``name`` (admin only); they stop working at once.

        Refused (409) when it would leave no working admin token: make another admin
        token first. Revoking a revoked token again is fine."""
        if not principal.admin:
            raise Forbidden("only the admin revokes tokens")
        self._require_leader()
        rows = self.store.tokens()
        named = [row for row in rows if row.name == name]
        if not named:
            raise NotFound(f"no token named {name!r}")
        now = self.clock()
        ids = {row.id for row in named}
        live_admins = [
            row
            for row in rows
            if row.admin and not row.revoked and (row.expires is None or row.expires > now)
        ]
        if live_admins and all(row.id in ids for row in live_admins):
            raise Conflict(
                f"revoking {name!r} would leave no working admin token: create another "
                "admin token first (phalanx token create --admin --user NAME --name NAME)"
            )
        with self.store.begin() as tx:
            for row in named:
                if not row.revoked:
                    tx.revoke_token(row.id)
        with self._tokens_lock:
            self._token_generation += 1
            self._tokens.clear()
        return [replace(row, revoked=True) for row in named]

    def submit(self, principal: Principal, submissions: Sequence[JobSubmission]) -> list[int]:
        """Durably queue jobs; returns their ids once committed."""
        if not submissions:
            return []
        result: list[int] = self._call(_SubmitCmd(principal, list(submissions)))
        return result

    def cancel(self, principal: Principal, job_id: int) -> JobRow:
        """Cancel a job: a pending one at once, a running one through its supervisor."""
        row = self.job(principal, job_id)
        if JobState(row.state).finished:
            raise Conflict(f"job {job_id} has already finished ({row.state})")
        self._call(_CancelCmd(principal, job_id))
        return self.job(principal, job_id)

    def job(self, principal: Principal, job_id: int) -> JobRow:
        """The job, if ``principal`` may see it (otherwise: not found, as for a missing job)."""
        row = self.store.get_job(job_id)
        if row is None or not principal.may_act_for(row.tenant):
            raise NotFound(f"job {job_id} not found")
        return row

    def explain(self, principal: Principal, job_id: int) -> dict[str, Any]:
        """Why the job is where it is: the engine's facts, the gate's and the stored events'
        (see :mod:`phalanx.control.explain`)."""
        from phalanx.control.explain import explain_answer
        from phalanx.engine.explain.report import explain_job

        self.job(principal, job_id)
        self._require_leader()
        with self._lock:
            explanation = explain_job(self.engine, job_id)
            gated = self.gate.jobs.get(job_id)
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

        self._require_leader()
        with self._lock:
            return priority_answer(self.engine, principal, job_ids, users)

    def apply(self, principal: Principal, manifests: Sequence[Any]) -> list[tuple[str, str, str]]:
        """Create or update configuration objects (all of them or none)."""
        if not principal.admin:
            raise Forbidden("only the admin changes cluster configuration")
        objects, jobs = split_kube([getattr(m, "obj", m) for m in manifests])
        configurations = [o for o in objects if _is_configuration(o)]
        if len(configurations) > 1:
            raise Invalid("Configuration: give one Kueue Configuration per apply")
        objects = [o for o in objects if not _is_configuration(o)]
        cmd = _ApplyCmd(principal, objects, jobs)
        cmd.configuration = configurations[0] if configurations else None
        result: list[tuple[str, str, str]] = self._call(cmd)
        return result

    def delete(self, principal: Principal, kind: str, name: str) -> None:
        if not principal.admin:
            raise Forbidden("only the admin changes cluster configuration")
        self._call(_DeleteCmd(principal, kind, name))

    def estimate(self, principal: Principal, submission: JobSubmission) -> dict[str, Any]:
        """Validate a submission without submitting it (``sbatch --test-only``).

        The answer names the ClusterQueue (partition), the size, and when the job would
        start if submitted now: the engine's plan around the reservations that stand,
        as for a pending job (``None``, with ``why``, when it cannot be planned).
        """
        self._require_leader()
        with self._lock:
            [job] = resolve_submissions(
                principal, [submission], self.registry, max_array_size=self.config.max_array_size
            )
            self._check_accounts([job])
            job, submission = self._partition_defaults(job, submission)
            target = self._target_queue(job)
            start, why = (
                self.engine.planned_start(job, target, self.clock())
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

    def hold(self, principal: Principal, job_id: int) -> JobRow:
        """Keep a pending job from starting until :meth:`release` (``scontrol hold``)."""
        self.job(principal, job_id)
        self._call(_HoldCmd(principal, job_id, True))
        return self.job(principal, job_id)

    def release(self, principal: Principal, job_id: int) -> JobRow:
        self.job(principal, job_id)
        self._call(_HoldCmd(principal, job_id, False))
        return self.job(principal, job_id)

    def requeue(self, principal: Principal, job_id: int) -> JobRow:
        """Stop a running job and queue it again, or queue a finished one again."""
        self.job(principal, job_id)
        self._call(_RequeueCmd(principal, job_id))
        return self.job(principal, job_id)

    def signal(
        self, principal: Principal, job_id: int, signal: int, *, batch_only: bool = False
    ) -> JobRow:
        """Send ``signal`` to a running job's tasks (or only its batch shell)."""
        row = self.job(principal, job_id)
        if row.state != JobState.RUNNING.value:
            raise Conflict(f"job {job_id} is not running ({row.state})")
        self._call(_SignalCmd(principal, job_id, signal, batch_only))
        return row

    def update(self, principal: Principal, job_id: int, changes: dict[str, Any]) -> JobRow:
        """Change a job's time limit, nice value, comment or name (``scontrol update``)."""
        allowed = {"time_limit", "nice", "comment", "name"}
        unknown = sorted(set(changes) - allowed)
        if unknown:
            raise Invalid(f"{unknown[0]}: cannot be changed (one of: {', '.join(sorted(allowed))})")
        self.job(principal, job_id)
        self._call(_UpdateCmd(principal, job_id, dict(changes)))
        return self.job(principal, job_id)

    def job_environment(self, principal: Principal, job_id: int) -> dict[str, str]:
        """The variables phalanx sets for the job's first task (its own, ``SLURM_*`` for a
        batch job, rendezvous and ``PHALANX_*``); only its own before it is placed."""
        row = self.job(principal, job_id)
        self._require_leader()
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
        with self._lock:
            spec = self._runnable(row, submission, tasks, max(1, row.attempt))
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
        return self.engine.estimated_start(job_id) if self.leading else None

    def no_estimate(self, job_id: int) -> str | None:
        """Why a pending job has no planned start (``None``: it has one, it is not
        pending, or this is a standby)."""
        return self.engine.no_estimate_why(job_id) if self.leading else None

    def output_owner(self, job: JobRow) -> int | None:
        """The uid whose files the job's output must be, to be served back; ``None``:
        any (the jobs run as the server's own user)."""
        return self.accounts(job.user).uid if self.accounts is not None else None

    def output_paths(self, job: JobRow) -> tuple[Path, Path | None]:
        """Where the job's standard output and standard error go (error None: merged)."""
        run = job.submission.get("run", {})
        workdir = Path(run.get("workingDir") or "/")
        output = run.get("output")
        if output is None and run.get("script") is not None:
            output = "slurm-%j.out"  # sbatch's default
        out = expand_output(output, job, workdir) if output else self.runtime.default_output(job.id)
        error = run.get("error")
        return out, (expand_output(error, job, workdir) if error else None)

    def cluster_queue_status(self) -> dict[str, dict[str, Any]]:
        self._require_leader()
        with self._lock:
            engine = self.engine
            status: dict[str, dict[str, Any]] = {}
            pending: dict[str, int] = {}
            admitted: dict[str, int] = {}
            for rec in engine.jobs.values():
                cq = rec.admission.cluster_queue if rec.admission else rec.cluster_queue
                if cq is None:
                    continue
                target = admitted if rec.admission else pending
                target[cq] = target.get(cq, 0) + 1
            for name, info in engine.cache.cluster_queues.items():
                node = info.node
                usage: dict[str, dict[str, int]] = {}
                nominal: dict[str, dict[str, int]] = {}
                borrowed: dict[str, dict[str, int]] = {}
                for (flavor, resource), amount in node.nominal.items():
                    nominal.setdefault(flavor, {})[resource] = amount
                for (flavor, resource), amount in node.usage.items():
                    usage.setdefault(flavor, {})[resource] = amount
                    over = amount - node.nominal.get((flavor, resource), 0)
                    if over > 0:
                        borrowed.setdefault(flavor, {})[resource] = over
                status[name] = {
                    "cohort": info.model.cohort_name,
                    "active": info.inactive is None,
                    "inactive_reason": info.inactive.message if info.inactive else None,
                    "pending": pending.get(name, 0),
                    "admitted": admitted.get(name, 0),
                    "usage": usage,
                    "nominal": nominal,
                    "borrowed": borrowed,
                }
            return status

    def node_status(self, principal: Principal | None = None) -> dict[str, dict[str, Any]]:
        """Each node's state, GPUs in use and jobs; with ``principal``, only the jobs it
        may see are named (the others' ids are not shown, as everywhere else)."""
        self._require_leader()
        with self._lock:
            status: dict[str, dict[str, Any]] = {}
            for name, slot in self.engine.cache.nodes.items():
                jobs = sorted(slot.jobs)
                if principal is not None and not principal.admin:
                    jobs = [j for j in jobs if self._visible_to(principal, j)]
                status[name] = {
                    "state": slot.state().value,
                    "gpus": slot.capacity.get(GPU, 0),
                    "gpus_used": slot.used.get(GPU, 0),
                    "gpu_indices_used": self.gpus.taken(name),
                    "jobs": jobs,
                }
            return status

    def _visible_to(self, principal: Principal, job_id: int) -> bool:
        rec = self.engine.jobs.get(job_id)
        return rec is not None and principal.may_act_for(rec.job.tenant)

    def usage_report(self) -> dict[str, Any]:
        """The tenant tree with shares, decayed usage and fair-share factors (``sshare``)."""
        from phalanx.control.shares import share_report

        self._require_leader()
        priority = getattr(self.config, "slurm_priority", None)
        fair_tree = self.config.usage.fair_tree and getattr(priority, "fair_tree", True)
        with self._lock:
            usage = self.usage.usage()
            tenants = dict(self.registry.all("Tenant"))
        rows = share_report(
            tenants,
            usage,
            fair_tree_mode=fair_tree,
            dampening=float(getattr(priority, "fairshare_dampening", 1.0)),
        )
        return {
            "fair_tree": fair_tree,
            "half_life_s": self.config.usage.half_life_s,
            "associations": rows,
        }

    def render_metrics(self) -> bytes:
        from prometheus_client import generate_latest

        self._require_leader()
        with self._lock:
            self.metrics.observe_state(
                self.cluster_queue_status(), self.node_status(), self._pending_by_cq()
            )
        return generate_latest(self.metrics.registry)

    def _pending_by_cq(self) -> dict[str, tuple[int, int]]:
        """ClusterQueue -> (active pending, inadmissible pending), as Kueue counts them.

        Active jobs are candidates for the next cycle; inadmissible ones wait for a
        change (quota freed, a stopped queue started) before they are tried again.
        """
        counts: dict[str, tuple[int, int]] = {}
        for rec in self.engine.jobs.values():
            if rec.admission is not None or rec.cluster_queue is None:
                continue
            active, inadmissible = counts.get(rec.cluster_queue, (0, 0))
            sq = rec.queue
            blocked = (
                rec.waiting is not None
                or sq is None
                or sq.parked
                or sq.cq.parked
                or sq.cq.stopped is not None
            )
            if blocked:
                inadmissible += 1
            else:
                active += 1
            counts[rec.cluster_queue] = (active, inadmissible)
        return counts

    # ------------------------------------------------------------------ the loop

    def _call(self, command: _Command) -> Any:
        with self._inbox_lock:
            self._require_leader()
            if self._stopping.is_set() or self._thread is None:
                from phalanx.errors import Unavailable

                raise Unavailable("the control plane is not running")
            self._inbox.put(command)
        return command.future.result()

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
        if row is not None and not row.free and row.url != self.url:
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

    def _step(self, commands: list[_Command]) -> None:
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

    def _take_commands(self) -> list[_Command]:
        commands: list[_Command] = []
        try:
            first = self._inbox.get(block=not self._dirty, timeout=self._poll_timeout())
        except queue.Empty:
            return commands
        if first is None:
            return commands
        commands.append(first)
        jobs = len(first.submissions) if isinstance(first, _SubmitCmd) else 0
        while jobs < _MAX_JOBS_PER_ITERATION:
            try:
                more = self._inbox.get_nowait()
            except queue.Empty:
                break
            if more is None:
                self._stopping.set()
                break
            commands.append(more)
            if isinstance(more, _SubmitCmd):
                jobs += len(more.submissions)
        return commands

    def _poll_timeout(self) -> float:
        """How long to wait for a command: the poll interval, or less if a runtime timer is due."""
        due = self.runtime.next_event_time()
        if due is None:
            return self.poll_interval_s
        return max(0.0, min(self.poll_interval_s, due - self.clock()))

    def _iterate(self, commands: list[_Command]) -> None:
        # Events taken by an iteration that did not commit are handled again (after the
        # rebuild from the store); the runtime reports each one only once.
        events = [*self._replay, *self.runtime.poll()]
        self._replay = events
        now = self.clock()
        # A waitForPodsReady deadline, a requeue backoff's end, or Kueue's next head.
        wakeup = self.engine.next_wakeup()
        due = wakeup is not None and now >= wakeup
        if (
            not commands
            and not events
            and not self._dirty
            and not due
            and now - self._last_cycle < _IDLE_CYCLE_S
            and not (self.gate.jobs and now - self._last_gate >= _GATE_PERIOD_S)
            and not self.usage.due(now)
        ):
            return
        effects = _Effects()
        with self._lock:
            accepted = self._validate(commands, effects)
            with self.store.begin() as tx:
                self._apply_commands(tx, accepted, now, effects)
                for event in events:
                    self._on_runtime_event(tx, event, now)
                self._charge_usage(tx, now)
                if self.gate.jobs and (self._dirty or now - self._last_gate >= _GATE_PERIOD_S):
                    self._open_gate(tx, now)
                if self._dirty or due or now - self._last_cycle >= _IDLE_CYCLE_S:
                    started = time.perf_counter()
                    decisions = self.engine.cycle(now)
                    self.metrics.cycles_total.inc()
                    self.metrics.cycle_seconds.observe(time.perf_counter() - started)
                    # Kueue's cycle takes one head per ClusterQueue: after one that
                    # admitted, the next runs at once, not after the poll interval.
                    self._dirty = self.config.heads_per_cycle is not None and any(
                        isinstance(d, Admit) for d in decisions
                    )
                    self._last_cycle = now
                    self._record_decisions(tx, decisions, now, effects)
                commit_started = time.perf_counter()
            self._replay = []
            self.metrics.commit_seconds.observe(time.perf_counter() - commit_started)
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
            self._launch(spec)
        for job_id in effects.cancels:
            self.runtime.cancel(job_id)
        for job_id, grace in effects.preemptions:
            self.runtime.cancel(job_id, preempt_grace_s=grace)
        for job_id, signum, batch_only in effects.signals:
            self.runtime.signal(job_id, signum, batch_only=batch_only)
        for job_id, limit in effects.limits:
            self.runtime.set_time_limit(job_id, limit)

    # ------------------------------------------------------------------ commands

    def _validate(self, commands: list[_Command], effects: _Effects) -> list[_Command]:
        """Reject bad commands before the transaction; the rest are applied together."""
        accepted: list[_Command] = []
        submit_counts: SubmitCounts | None = None
        for cmd in commands:
            try:
                if isinstance(cmd, _SubmitCmd):
                    jobs = resolve_submissions(
                        cmd.principal,
                        cmd.submissions,
                        self.registry,
                        max_array_size=self.config.max_array_size,
                    )
                    self._check_accounts(jobs)
                    pairs = [
                        self._partition_defaults(*wall_default(job, sub, self.registry))
                        for job, sub in zip(jobs, cmd.submissions, strict=True)
                    ]
                    cmd.jobs = [job for job, _ in pairs]
                    cmd.submissions = [sub for _, sub in pairs]
                    submit_counts = submit_counts or SubmitCounts(store_counter(self.store))
                    submit_counts.check(cmd.jobs, cmd.submissions, self.registry)
                elif isinstance(cmd, _DeleteCmd):
                    self._check_delete(cmd.kind, cmd.name)
                elif isinstance(cmd, _ApplyCmd):
                    self.registry.check_apply(cmd.objects)
                    if cmd.jobs:
                        self._validate_kube(cmd)
            except PhalanxError as exc:
                cmd.future.set_exception(exc)
                continue
            accepted.append(cmd)
        return accepted

    def _apply_commands(
        self, tx: Tx, commands: list[_Command], now: float, effects: _Effects
    ) -> None:
        for cmd in commands:
            if isinstance(cmd, _SubmitCmd):
                self._insert(tx, cmd, now, effects)
            elif isinstance(cmd, _CancelCmd):
                self._cancel(tx, cmd.job_id, now, effects)
                effects.answers.append((cmd.future, None))
            elif isinstance(cmd, _HoldCmd | _RequeueCmd | _SignalCmd | _UpdateCmd):
                try:
                    self._job_command(tx, cmd, now, effects)
                except PhalanxError as exc:
                    effects.answers.append((cmd.future, exc))
                else:
                    effects.answers.append((cmd.future, None))
            elif isinstance(cmd, _ApplyCmd):
                results: list[tuple[str, str, str]] = []
                for obj in cmd.objects:
                    kind, name = object_key(obj)
                    outcome = tx.put_object(kind, name, obj.to_dict())
                    if outcome != "unchanged":
                        self.engine.apply(Upsert(obj))
                        self.registry.put(kind, name, obj)
                        self._on_node_change(kind, obj)
                        self._dirty = True
                    results.append((kind, name, outcome))
                if cmd.configuration is not None:
                    results.append(self._configure(tx, cmd.configuration, effects))
                results.extend(self._create_kube_jobs(tx, cmd, now, effects))
                effects.answers.append((cmd.future, results))
            elif isinstance(cmd, _DeleteCmd):
                tx.delete_object(cmd.kind, cmd.name)
                self.engine.apply(Delete(cmd.kind, cmd.name))  # type: ignore[arg-type]
                self.registry.remove(cmd.kind, cmd.name)
                if cmd.kind == "Node":
                    self.gpus.remove_node(cmd.name)
                    self._nodes_changed = True
                self._dirty = True
                effects.answers.append((cmd.future, None))

    def _configure(self, tx: Tx, configuration: Any, effects: _Effects) -> tuple[str, str, str]:
        """Store a Kueue ``Configuration``; the engine is rebuilt with it after the commit."""
        name = str(configuration.name)
        outcome = tx.put_object(CONFIGURATION, name, dict(configuration.manifest))
        if outcome != "unchanged":
            self.config = _engine_config(self.base_config, configuration)
            effects.reconfigure = True
        return CONFIGURATION, name, outcome

    def _validate_kube(self, cmd: _ApplyCmd) -> None:
        """Resolve the jobs of an apply against the registry as the apply leaves it.

        A job already stored under the same kind, namespace and name is
        ``unchanged`` when its spec is the same, and refused when it differs
        (a Job's pod template is immutable in Kubernetes too).
        """
        registry = self.registry.with_objects(cmd.objects)
        fresh: list[KubeApply] = []
        for item in cmd.jobs:
            existing = self._existing_kube(item)
            if existing is not None:
                item.existing = existing
                continue
            fresh.append(item)
        if fresh:
            subs = [item.job.submission for item in fresh]
            jobs = resolve_submissions(cmd.principal, subs, registry)
            self._check_accounts(jobs)
            SubmitCounts(store_counter(self.store)).check(jobs, subs, registry)
            for item, job in zip(fresh, jobs, strict=True):
                item.engine_job = job

    def _existing_kube(self, item: KubeApply) -> int | None:
        kind, namespace, name = kube_identity(item.job)
        for row in self.store.list_jobs(names=[name], tenants=[namespace]):
            run = (row.submission.get("run") or {}).get("kube") or {}
            if run.get("kind") != kind or run.get("name") != name:
                continue
            old_spec = (run.get("manifest") or {}).get("spec")
            if old_spec != item.job.manifest.get("spec"):
                raise Conflict(
                    f"{kind}/{namespace}/{name}: exists (job {row.id}) with a different spec; "
                    "a job's spec cannot be changed: delete it or apply it under another name"
                )
            return row.id
        return None

    def _create_kube_jobs(
        self, tx: Tx, cmd: _ApplyCmd, now: float, effects: _Effects
    ) -> list[tuple[str, str, str]]:
        fresh = [
            (item.engine_job, item.job.submission)
            for item in cmd.jobs
            if item.existing is None and item.engine_job is not None
        ]
        if fresh:
            self._store_new(tx, fresh, now)
        results: list[tuple[str, str, str]] = []
        for item in cmd.jobs:
            kind, namespace, name = kube_identity(item.job)
            created = item.existing is None and item.engine_job is not None
            results.append((kind, f"{namespace}/{name}", "created" if created else "unchanged"))
        return results

    def _insert(self, tx: Tx, cmd: _SubmitCmd, now: float, effects: _Effects) -> None:
        """Store new jobs (one per array task) and hold them at the gate."""
        ids = self._store_new(tx, list(zip(cmd.jobs, cmd.submissions, strict=True)), now)
        effects.answers.append((cmd.future, ids))

    def _store_new(
        self, tx: Tx, jobs: Sequence[tuple[Job, JobSubmission]], now: float
    ) -> list[int]:
        """Insert jobs (one row per array task), hold them at the gate; each job's first id."""
        rows: list[NewJob] = []
        owners: list[tuple[Job, JobSubmission, int | None]] = []
        firsts: list[int] = []
        for job, sub in jobs:
            firsts.append(len(rows))
            target = self._target_queue(job)
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
            self.gate.add(gated(engine_job, sub, array_id, task))
        self.metrics.submitted_total.inc(len(ids))
        self._dirty = True
        return [ids[i] for i in firsts]

    def _partition_defaults(self, job: Job, sub: JobSubmission) -> tuple[Job, JobSubmission]:
        """A batch job gets its partition's DefaultTime and DefMemPerCPU, as in Slurm."""
        target = self._target_queue(job)
        cq = self.registry.get("ClusterQueue", target) if target is not None else None
        request = sub.slurm
        if request is None or cq is None:
            return job, sub
        annotations = cq.annotations
        default_time = annotations.get(DEFAULT_TIME, "")
        if sub.run.time_limit is None and default_time.isdigit():
            run = sub.run.model_copy(update={"time_limit": int(default_time)})
            sub = sub.model_copy(update={"run": run})
        mem_per_cpu = annotations.get(DEF_MEM_PER_CPU, "")
        asked = (request.mem_per_node_mb, request.mem_per_cpu_mb, request.mem_per_gpu_mb)
        if mem_per_cpu.isdigit() and not any(asked):
            per_cpu = int(mem_per_cpu) << 20
            pod_sets = [
                p.model_copy(
                    update={
                        "requests": {
                            **p.requests,
                            MEMORY: -(-p.requests.get(CPU, 1000) // 1000) * per_cpu,
                        }
                    }
                )
                for p in sub.pod_sets
            ]
            slurm = request.model_copy(update={"mem_per_cpu_mb": int(mem_per_cpu)})
            sub = sub.model_copy(update={"pod_sets": pod_sets, "slurm": slurm})
            job = job.model_copy(update={"pod_sets": pod_sets})
        return job, sub

    def _open_gate(self, tx: Tx, now: float) -> None:
        """Hand the jobs that became eligible to the engine; record the reasons of the rest."""
        self._last_gate = now
        eligible, changed, doomed = self.gate.release(now, dependency_checker(tx, now))
        for g in eligible:
            self.engine.apply(Submit(g.job))
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
            self.metrics.finished_total.labels(state=JobState.CANCELLED.value).inc()
        if eligible or doomed:
            self._dirty = True

    def _job_command(
        self,
        tx: Tx,
        cmd: _HoldCmd | _RequeueCmd | _SignalCmd | _UpdateCmd,
        now: float,
        effects: _Effects,
    ) -> None:
        row = tx.get_job(cmd.job_id)
        if row is None:
            raise NotFound(f"job {cmd.job_id} not found")
        state = JobState(row.state)
        if isinstance(cmd, _HoldCmd):
            if state is not JobState.PENDING:
                raise Conflict(
                    f"job {row.id} is not pending ({row.state}): only pending jobs are held"
                )
            waiting = self.gate.jobs.get(row.id)
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
                self.engine.apply(Cancel(row.id))
                self.gate.left(row.id, row.array_job_id)
                waiting = gated(
                    _job_from_row(row, row.parsed_submission),
                    row.parsed_submission,
                    row.array_job_id,
                    row.array_task_id,
                )
                self.gate.add(waiting)
            if waiting is not None:
                waiting.hold = cmd.hold
                waiting.held_by_admin = cmd.principal.admin and cmd.hold
            tx.update_job(row.id, hold=cmd.hold)
            data: dict[str, Any] = {"by": cmd.principal.user}
            if cmd.hold and cmd.principal.admin:
                data["admin"] = True
            tx.add_event(row.id, "Held" if cmd.hold else "Released", now, data=data)
            self._dirty = True
        elif isinstance(cmd, _RequeueCmd):
            if state in (JobState.ADMITTED, JobState.RUNNING):
                self._evicting[row.id] = "Requeued"
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
                self.gate.add(
                    gated(_job_from_row(row, sub), sub, row.array_job_id, row.array_task_id)
                )
                self._dirty = True
        elif isinstance(cmd, _SignalCmd):
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
        effects: _Effects,
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
        tx.add_event(row.id, "Updated", now, data={k: changes[k] for k in sorted(changes)})

    def _target_queue(self, job: Job) -> str | None:
        """The ClusterQueue a job is headed for, for display while it is pending."""
        if job.cluster_queue is not None:
            return job.cluster_queue
        lq = self.registry.get("LocalQueue", f"{job.tenant}/{job.queue}")
        return lq.cluster_queue if lq is not None else None

    def _on_node_change(self, kind: str, obj: Any) -> None:
        if kind == "Node":
            self.gpus.set_capacity(obj.name, obj.capacity.get(GPU, 0))
            self._nodes_changed = True

    def _publish_node_names(self) -> None:
        if self._nodes_changed:
            self._nodes_changed = False
            self.runtime.set_node_names(self.registry.all("Node"))

    def _check_delete(self, kind: str, name: str) -> None:
        if self.registry.get(kind, name) is None:
            raise NotFound(f"{kind}/{name} not found")
        users = self.registry.users_of(kind, name)
        if users:
            raise Conflict(f"{kind}/{name} is in use by {', '.join(users[:5])}")
        jobs = [
            rec.id
            for rec in self.engine.jobs.values()
            if (kind == "ClusterQueue" and (rec.cluster_queue == name))
            or (kind == "LocalQueue" and rec.local_queue == name)
        ]
        if kind == "Node":
            slot = self.engine.cache.nodes.get(name)
            jobs = sorted(slot.jobs) if slot is not None else []
        if jobs:
            shown = ", ".join(str(j) for j in jobs[:5])
            raise Conflict(
                f"{kind}/{name} has {len(jobs)} unfinished job(s) ({shown}); "
                "cancel them or wait for them to finish first"
            )

    def _cancel(self, tx: Tx, job_id: int, now: float, effects: _Effects) -> None:
        row = tx.get_job(job_id)
        if row is None:
            raise NotFound(f"job {job_id} not found")
        if JobState(row.state).finished:
            return
        if row.state == JobState.PENDING.value:
            self.gate.remove(job_id)
            self.gate.left(job_id, row.array_job_id)
            self.engine.apply(Cancel(job_id))
            tx.update_job(
                job_id, state=JobState.CANCELLED.value, end_time=now, reason="", message=""
            )
            tx.add_event(job_id, "Cancelled", now, reason="CancelledByUser")
            self.metrics.finished_total.labels(state=JobState.CANCELLED.value).inc()
            self._dirty = True
            return
        if not row.cancel_requested:
            tx.update_job(job_id, cancel_requested=True)
            tx.add_event(job_id, "CancelRequested", now, reason="CancelledByUser")
        effects.cancels.append(job_id)

    # ------------------------------------------------------------------ runtime events

    def _on_runtime_event(self, tx: Tx, event: Started | Exited, now: float) -> None:
        attempt = self._active.get(event.job_id)
        if attempt is None or attempt != event.attempt:
            self.runtime.forget(event.job_id, event.attempt)
            return
        if isinstance(event, Started):
            if event.job_id in self._running:
                return
            self._running.add(event.job_id)
            tx.update_job(event.job_id, state=JobState.RUNNING.value, start_time=event.time)
            self._start_charging(tx, event.job_id, event.time)
            tx.add_event(event.job_id, "Started", event.time, data={"attempt": event.attempt})
            # Every task of the gang starts together: its pods are all running
            # (the Workload's PodsReady condition is read from the Started event).
            self.engine.apply(PodsReady(event.job_id, event.time))
            self._dirty = True
            return
        if (
            event.job_id not in self._running
            and event.start_time is not None
            and event.job_id not in self._evicting
            and event.job_id not in self._deactivating
        ):
            # It ended by itself, having started, but the Started event went with an
            # iteration that did not commit (the store was down): record it now, no
            # transition is lost. (One stopped before it was ready never started.)
            tx.update_job(event.job_id, state=JobState.RUNNING.value, start_time=event.start_time)
            self._start_charging(tx, event.job_id, event.start_time)
            tx.add_event(event.job_id, "Started", event.start_time, data={"attempt": event.attempt})
        del self._active[event.job_id]
        self._running.discard(event.job_id)
        self.usage.stop(event.job_id, event.end_time)
        row = tx.get_job(event.job_id)
        requeue = row is not None and requeues(row, event.state)
        nodes = row.nodes if row is not None else []
        self.gpus.release(event.job_id, nodes)
        self.runtime.forget(event.job_id, event.attempt)
        self._dirty = True
        evict_reason = self._evicting.pop(event.job_id, None)
        deactivated = self._deactivating.pop(event.job_id, None)
        preempted = self._preempting.pop(event.job_id, None)
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
        if requeue and evict_reason is None:
            evict_reason = "NodeFail"
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
        if (
            evict_reason is not None
            and deactivated is None
            and not (row is not None and row.cancel_requested)
        ):
            self.engine.apply(Requeue(event.job_id, evict_reason))
            tx.update_job(
                event.job_id,
                state=JobState.PENDING.value,
                reason=evict_reason,
                message=f"requeued: {evict_reason}",
                flavor=None,
                nodes=[],
                start_time=None,
            )
            tx.add_event(
                event.job_id, "Requeued", now, reason=evict_reason, data=_attempt_data(event, row)
            )
            return
        state = JobState(event.state) if deactivated is None else JobState.FAILED
        if ends_preempted:
            # Even if it ended by itself during its grace time (as in Slurm).
            state = JobState.PREEMPTED
        exit_code, signum = event.exit_code, event.signal
        if (
            state in (JobState.CANCELLED, JobState.TIMEOUT, JobState.PREEMPTED)
            and row is not None
            and (row.submission.get("run") or {}).get("script") is not None
        ):
            # Slurm records the kill on the batch step; the job's own ExitCode is 0:0.
            exit_code, signum = 0, None
        self.engine.apply(Finish(event.job_id, state))
        self.gate.left(event.job_id, row.array_job_id if row is not None else None)
        tx.update_job(
            event.job_id,
            state=state.value,
            end_time=event.end_time,
            start_time=event.start_time
            if row is None or row.start_time is None
            else row.start_time,
            exit_code=exit_code,
            signal=signum,
            reason=deactivated[0] if deactivated else "",
            message=deactivated[1] if deactivated else event.message,
        )
        tx.add_event(
            event.job_id,
            "Cancelled" if state is JobState.CANCELLED else "Finished",
            event.end_time,
            reason=state.value,
            message=event.message,
            data={"exit_code": event.exit_code, "signal": event.signal, "attempt": event.attempt},
        )
        self.metrics.finished_total.labels(state=state.value).inc()

    def _preempted(self, tx: Tx, row: JobRow, evict: Evict, event: Exited) -> bool:
        """Record a preempted attempt with its preemptor; whether the job is requeued
        (``REQUEUE`` mode and a job that may be requeued) rather than ending PREEMPTED."""
        requeue = evict.mode == "REQUEUE" and requeues_after_preemption(row)
        data: dict[str, Any] = {
            **_attempt_data(event, row),
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

    # ------------------------------------------------------------------ decisions

    def _record_decisions(
        self, tx: Tx, decisions: list[Decision], now: float, effects: _Effects
    ) -> None:
        pending_updates: list[tuple[int, dict[str, Any]]] = []
        for decision in decisions:
            if isinstance(decision, Admit):
                spec = self._admit(tx, decision, now)
                if spec is not None:
                    effects.launches.append(spec)
            elif isinstance(decision, Pending):
                reason = decision.reason
                pending_updates.append(
                    (decision.job_id, {"reason": reason.code.value, "message": reason.message})
                )
            elif isinstance(decision, Evict):
                self._evicting[decision.job_id] = decision.reason
                data: dict[str, Any] = {}
                if decision.preemptor is not None:
                    data["preemptor"] = decision.preemptor
                    data["mode"] = decision.mode
                    data["grace_period_s"] = decision.grace_period_s
                if decision.preemption_reason is not None:
                    data["preemption_reason"] = decision.preemption_reason
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
                    self._preempting[decision.job_id] = decision
                    effects.preemptions.append((decision.job_id, decision.grace_period_s))
                else:
                    effects.cancels.append(decision.job_id)
            elif isinstance(decision, Deactivate):
                self._deactivate(tx, decision, now, effects)
        if pending_updates:
            tx.update_jobs(pending_updates)

    def _deactivate(self, tx: Tx, decision: Deactivate, now: float, effects: _Effects) -> None:
        """Kueue's ``spec.active=false``: the job is over, FAILED with the engine's reason."""
        row = tx.get_job(decision.job_id)
        if row is None or JobState(row.state).finished:
            return
        tx.add_event(
            decision.job_id, "Deactivated", now, reason=decision.reason, message=decision.message
        )
        if decision.job_id in self._active:
            # Still running (its eviction is under way): it ends when its processes do.
            self._evicting.pop(decision.job_id, None)
            self._deactivating[decision.job_id] = (decision.reason, decision.message)
            effects.cancels.append(decision.job_id)
            return
        self.gate.remove(decision.job_id)
        self.gate.left(decision.job_id, row.array_job_id)
        tx.update_job(
            decision.job_id,
            state=JobState.FAILED.value,
            end_time=now,
            reason=decision.reason,
            message=decision.message,
        )
        self.metrics.finished_total.labels(state=JobState.FAILED.value).inc()
        self._dirty = True

    def _admit(self, tx: Tx, decision: Admit, now: float) -> LaunchSpec | None:
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
                    self.gpus.hold(placed.node, chosen, decision.job_id)
                for task in range(placed.count):
                    if not per_task:
                        indices: list[int] = []
                    elif chosen:
                        indices = chosen[task * per_task : (task + 1) * per_task]
                    else:
                        indices = self.gpus.take(placed.node, per_task, decision.job_id)
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
        tx.update_job(
            decision.job_id,
            state=JobState.ADMITTED.value,
            cluster_queue=decision.cluster_queue,
            flavor=decision.flavor,
            nodes=decision.nodes,
            assignment=assignment,
            attempt=attempt,
            reason="",
            message="",
        )
        tx.add_event(
            decision.job_id,
            "Admitted",
            now,
            data={
                "cluster_queue": decision.cluster_queue,
                "flavor": decision.flavor,
                "nodes": decision.nodes,
                "borrowing": decision.borrowing,
                "attempt": attempt,
            },
        )
        self.metrics.admitted_total.labels(cluster_queue=decision.cluster_queue).inc()
        self.metrics.admission_wait.labels(cluster_queue=decision.cluster_queue).observe(
            max(0.0, now - row.submit_time)
        )
        self._active[decision.job_id] = attempt
        if submission.run.kube is not None:
            for message in image_events(submission.run.kube):
                tx.add_event(decision.job_id, "ImageNotPulled", now, message=message)
        return self._launch_spec(row, submission, tasks, attempt)

    def _launch_spec(
        self, row: JobRow, submission: JobSubmission, tasks: list[TaskSpec], attempt: int
    ) -> LaunchSpec:
        spec = self._runnable(row, submission, tasks, attempt)
        requests = {p.name: dict(p.requests) for p in submission.pod_sets}
        return replace(spec, requests=requests, user=row.user)

    def _check_accounts(self, jobs: Sequence[Job]) -> None:
        """Refuse jobs whose users have no account to run as (one error for all)."""
        if self.accounts is None:
            return
        problems: list[str] = []
        for user in dict.fromkeys(job.user for job in jobs):
            try:
                self.accounts(user)
            except PhalanxError as exc:
                problems.append(exc.detail)
        if problems:
            raise Forbidden("; ".join(problems))

    def _runnable(
        self, row: JobRow, submission: JobSubmission, tasks: list[TaskSpec], attempt: int
    ) -> LaunchSpec:
        run = submission.run
        out, err = self.output_paths(row)
        if run.kube is not None:
            return kube_launch(row, run, run.kube, tasks, attempt, out, err)
        if run.script is not None:
            return slurm_launch(
                row,
                submission,
                tasks,
                attempt,
                out,
                err,
                url=self.url,
                registry=self.registry,
                container_runtime=self.container_runtime,
            )
        return LaunchSpec(
            job_id=row.id,
            attempt=attempt,
            command=tuple(run.command),
            working_dir=run.working_dir,
            env=dict(run.env),
            tasks=tuple(tasks),
            output=str(out),
            error=str(err) if err is not None else None,
            time_limit_s=float(run.time_limit) if run.time_limit else None,
            kill_wait_s=run.kill_wait,
        )

    def _launch(self, spec: LaunchSpec) -> None:
        try:
            self.runtime.launch(spec)
        except AlreadyLaunched:
            # Recovery raced a supervisor that exists: attach to it instead.
            self.runtime.adopt(spec.job_id, spec.attempt)

    # ------------------------------------------------------------------ recovery

    def _recover(self) -> list[LaunchSpec]:
        """Rebuild engine and registry from the store; returns the launches still owed."""
        if self.lease is not None:
            # Fenced: a server that no longer leads rebuilds (and launches) nothing.
            with self.store.begin():
                pass
        for stored in self.store.objects(CONFIGURATION):
            self.config = _engine_config(self.base_config, _stored_configuration(stored.spec))
        self._reset_state()
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
                self.engine.apply(Upsert(obj))
                self.registry.put(kind, object_key(obj)[1], obj)
                self._on_node_change(kind, obj)
        launches: list[LaunchSpec] = []
        lost: list[JobRow] = []
        now = self.clock()
        self._load_usage(now)
        for row in self.store.unfinished_jobs():
            submission = row.parsed_submission
            job = _job_from_row(row, submission)
            if row.state == JobState.PENDING.value or row.assignment is None:
                waiting = gated(job, submission, row.array_job_id, row.array_task_id)
                waiting.hold = row.hold
                waiting.held_by_admin = row.hold and _held_by_admin(self.store.job_events(row.id))
                self.gate.add(waiting)
                continue
            self.gate.entered_engine(row.id, row.array_job_id)
            admission = decision_from_dict(row.assignment["admit"])
            assert isinstance(admission, Admit)
            self.engine.apply(Adopt(job, admission, admitted_at=row.start_time))
            for node, indices in row.assignment.get("gpus", {}).items():
                self.gpus.hold(node, list(indices), row.id)
            self._active[row.id] = row.attempt
            if row.state == JobState.RUNNING.value:
                self._running.add(row.id)
                # It started before the restart: its pods are ready (no PodsReady timeout).
                self.engine.apply(PodsReady(row.id, row.start_time or row.submit_time))
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
                launches.append(self._launch_spec(row, submission, tasks, row.attempt))
            else:
                lost.append(row)
        self._resume_evictions(list(self._active))
        if lost:
            with self.store.begin() as tx:
                for row in lost:
                    self._on_runtime_event(
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
                self._charge_usage(tx, now)
        self._dirty = True
        return launches

    # ------------------------------------------------------------------ usage ledger

    def _load_usage(self, now: float) -> None:
        """Reload the ledger; charge running jobs from where the store says it left off."""
        running = {r.id: r for r in self.store.list_jobs(states=[JobState.RUNNING.value])}
        charges = self.store.job_charges(running=True)
        self.usage.load(self.store.usage(), [c for c in charges if c.job_id in running], now)
        stale = [c for c in charges if c.job_id not in running]
        missing = [r for r in running.values() if r.id not in self.usage.running()]
        if stale or missing:
            with self.store.begin() as tx:
                tx.put_job_charges([replace(c, charged_until=None) for c in stale], new=False)
                for row in missing:
                    self._start_charging(tx, row.id, row.start_time or now, row)
        for event in self.usage.events():
            self.engine.apply(event)

    def _start_charging(self, tx: Tx, job_id: int, since: float, row: JobRow | None = None) -> None:
        row = row or tx.get_job(job_id)
        if row is not None:
            cq = self.registry.get("ClusterQueue", row.cluster_queue or "")
            self.usage.start_job(tx, row, cq, since)

    def _charge_usage(self, tx: Tx, now: float) -> None:
        """Decay and charge usage when a calc period passed or a job stopped."""
        if not self.usage.due(now):
            return
        events = self.usage.tick(tx, now, self.registry.all("Tenant"))
        for event in events:
            self.engine.apply(event)
        if events:
            self._dirty = True

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
            self._evicting[job_id] = last.reason
            preemptor = last.data.get("preemptor")
            if preemptor is not None:
                self._preempting[job_id] = Evict(
                    job_id,
                    last.reason,
                    last.message,
                    int(preemptor),
                    last.data.get("preemption_reason"),
                    str(last.data.get("mode", "REQUEUE")),
                    float(last.data.get("grace_period_s", 0.0)),
                )

    def _rebuild(self) -> bool:
        """Engine, runtime and caches again from the store (what an iteration that failed
        to commit had changed in memory is thrown away; the runtime reports again what
        it had reported); False if the store could not be read."""
        try:
            with self._lock:
                launches = self._recover()
            self._publish_node_names()
            for spec in launches:
                self._launch(spec)
        except NotLeader:
            raise
        except Exception:
            log.exception("rebuilding from the store failed; retrying before anything else")
            time.sleep(1.0)
            return False
        return True


# ---------------------------------------------------------------------- helpers

CONFIGURATION = "Configuration"
"""The stored kind of Kueue's ``Configuration`` (one object; the last applied wins)."""


def _is_configuration(obj: Any) -> bool:
    from phalanx.dialects.kueue.configuration import KueueConfiguration

    return isinstance(obj, KueueConfiguration)


def _engine_config(base: EngineConfig, configuration: Any) -> EngineConfig:
    import dataclasses

    overrides: dict[str, Any] = configuration.engine_overrides()
    return dataclasses.replace(base, **overrides)


def _stored_configuration(manifest: dict[str, Any]) -> Any:
    from phalanx.dialects.kueue.configuration import convert_configuration

    config, problems = convert_configuration(str(manifest.get("apiVersion")), manifest)
    if config is None:  # pragma: no cover - it was valid when it was applied
        raise RuntimeError(f"the stored Kueue Configuration is no longer valid: {problems}")
    return config


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
        submit_time=now,
        array_task_id=array_task,
        array_start=array_start,
        hold=submission.hold,
    )


def _attempt_data(event: Exited, row: JobRow | None) -> dict[str, Any]:
    """An attempt that ended, as the Requeued and Preempted events keep it (``sacct -D``)."""
    start = row.start_time if row is not None and row.start_time is not None else None
    return {
        "attempt": event.attempt,
        "start_time": start if start is not None else event.start_time,
        "end_time": event.end_time,
        "exit_code": event.exit_code,
        "signal": event.signal,
    }


def _held_by_admin(events: Sequence[JobEventRow]) -> bool:
    """Whether the job's last hold was the admin's (its Held event says so)."""
    for event in reversed(events):
        if event.kind == "Held":
            return bool(event.data.get("admin"))
    return False


def _job_from_row(row: JobRow, submission: JobSubmission) -> Job:
    return Job(
        id=row.id,
        name=row.name,
        tenant=row.tenant,
        user=row.user,
        queue=row.queue,
        cluster_queue=submission.cluster_queue,
        priority_class=row.priority_class,
        priority=row.priority,
        pod_sets=submission.pod_sets,
        submit_time=row.submit_time,
        labels=submission.labels,
        time_limit=submission.run.time_limit,
        nice=submission.nice,
    )


def _stopped() -> PhalanxError:
    from phalanx.errors import Unavailable

    return Unavailable("the control plane is shutting down")


MAX_LAUNCH_ATTEMPTS = 3
"""Launches of a job whose supervisor never started before it ends NODE_FAIL."""


def _store_down() -> PhalanxError:
    from phalanx.errors import Unavailable

    return Unavailable("the store is unreachable; nothing was applied: try again")


def _internal(exc: Exception) -> PhalanxError:
    from phalanx.errors import Unavailable

    return Unavailable(f"the store rejected the change ({type(exc).__name__}); nothing was applied")


def _gpus_per_task(requests: dict[str, int]) -> int:
    """The GPU devices one task sees: its whole GPUs, or the one device of its share."""
    return requests.get(GPU, 0) or (1 if requests.get(GPU_MILLI, 0) else 0)
