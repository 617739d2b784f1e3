"""The usage ledger: what tenants and their users have run, decayed, for fair-share.

Slurm's accounting as the control plane keeps it. Every
``priority_calc_period_s`` (and, for a job that ended, for its last stretch)
the ledger first decays every association's stored usage by the half-life for
the time elapsed, then charges each running job's allocation for the time since
it was last charged: GPU-seconds (GPUs x seconds) and billable TRES-seconds
(:func:`~phalanx.engine.priority.billable_tres` with the ClusterQueue's
``slurm.phalanx.io/tres-billing-weights`` annotation, else the configured
``TRESBillingWeights``), to the job's (tenant, user) association, its tenant,
every ancestor tenant and the root. New usage is ``run * D^run * rate`` as in
Slurm's ``_apply_new_usage``. ``PriorityUsageResetPeriod`` clears the figures
at its calendar boundaries.

Time always comes from the caller (the control plane's ``now``). The ledger
writes its rows through the caller's :class:`~phalanx.store.Tx`, so usage,
per-job charges and each job's ``charged_until`` commit with the plane's other
changes: after a restart a running job is charged from where it was left, never
twice. Each tick returns :class:`~phalanx.engine.TenantUsage` events for the
tenants whose figures changed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

from phalanx.engine.config import EngineConfig
from phalanx.engine.events import TenantUsage
from phalanx.engine.priority import (
    ResetPeriod,
    billable_tres,
    decay_multiplier,
    new_usage,
    parse_billing_weights,
    resets_at_start,
    usage_reset_due,
)
from phalanx.model import CPU, GPU, GPU_MILLI, MEMORY, ClusterQueue, JobSubmission, Tenant
from phalanx.model.priorityannotations import TRES_BILLING_ANNOTATION
from phalanx.usage.records import JobChargeRow, UsageRow

if TYPE_CHECKING:
    from phalanx.store import JobRow

__all__ = [
    "BILLING_WEIGHTS_ANNOTATION",
    "ROOT",
    "ChargeBook",
    "Key",
    "MemoryBook",
    "UsageLedger",
    "allocated_tres",
    "billing_weights",
    "tenant_path",
]

BILLING_WEIGHTS_ANNOTATION = TRES_BILLING_ANNOTATION
"""A ClusterQueue's (partition's) ``TRESBillingWeights``, in Slurm's syntax (checked on apply)."""


class ChargeBook(Protocol):
    """Where the ledger writes: the store's transaction (:class:`~phalanx.store.Tx`) in
    the control plane, :class:`MemoryBook` in the simulator."""

    def get_job_charge(self, job_id: int) -> JobChargeRow | None: ...

    def put_job_charges(self, rows: Sequence[JobChargeRow], *, new: bool) -> None: ...

    def put_usage(self, rows: Sequence[UsageRow]) -> None: ...


class MemoryBook:
    """A :class:`ChargeBook` in memory: the simulator's, with no store behind it."""

    def __init__(self) -> None:
        self.charges: dict[int, JobChargeRow] = {}

    def get_job_charge(self, job_id: int) -> JobChargeRow | None:
        return self.charges.get(job_id)

    def put_job_charges(self, rows: Sequence[JobChargeRow], *, new: bool) -> None:
        for row in rows:
            self.charges[row.job_id] = row

    def put_usage(self, rows: Sequence[UsageRow]) -> None:
        """Nothing to keep: the ledger holds the figures."""


Key = tuple[str, str]
"""An association: ``(tenant, user)``; ``(tenant, "")`` is the tenant, ``("", "")`` the root."""

ROOT: Key = ("", "")
_MB = 1 << 20


def billing_weights(spec: str) -> dict[str, float]:
    """``TRESBillingWeights`` parsed; an empty spec bills CPUs, as Slurm does."""
    weights = parse_billing_weights(spec)
    return weights or {"cpu": 1.0}


def allocated_tres(submission: JobSubmission, tasks: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """A job's allocated TRES from its placed tasks (``assignment["tasks"]``).

    Whole CPUs per task, memory in megabytes, GPUs as ``gres/gpu``, shares of GPUs
    as ``gres/gpu-milli`` (thousandths), and the number of distinct nodes.
    """
    requests = {p.name: p.requests for p in submission.pod_sets}
    cpus = mem = gpus = milli = 0
    nodes: set[str] = set()
    for task in tasks:
        asked = requests.get(str(task.get("podSet") or ""))
        if asked is None:
            asked = next(iter(requests.values()), {})
        cpus += max(1, -(-asked.get(CPU, 0) // 1000))
        mem += asked.get(MEMORY, 0)
        gpus += asked.get(GPU, 0)
        milli += asked.get(GPU_MILLI, 0)
        nodes.add(str(task.get("node")))
    alloc = {"cpu": cpus, "node": len(nodes)}
    if mem:
        alloc["mem"] = -(-mem // _MB)
    if gpus:
        alloc["gres/gpu"] = gpus
    if milli:
        alloc["gres/gpu-milli"] = milli
    return alloc


def gpu_rate(row: JobChargeRow) -> float:
    """The GPUs a charged job holds, its shares as fractions of a GPU."""
    shares: int = (row.alloc_tres or {}).get("gres/gpu-milli", 0)
    return row.gpus + shares / 1000


def tenant_path(tenant: str, tenants: Mapping[str, Tenant]) -> list[str]:
    """``tenant`` and each ancestor tenant, nearest first (a parent cycle is cut)."""
    path = [tenant]
    seen = {tenant}
    model = tenants.get(tenant)
    while model is not None and model.parent is not None and model.parent not in seen:
        path.append(model.parent)
        seen.add(model.parent)
        model = tenants.get(model.parent)
    return path


@dataclass(slots=True)
class _Job:
    """A job the ledger charges while it runs."""

    row: JobChargeRow
    ended: float | None = None
    """When it stopped; its last stretch is charged at the next tick."""


class UsageLedger:
    """Decayed usage per association and per-job charges; see the module docstring."""

    def __init__(self, config: EngineConfig) -> None:
        usage = config.usage
        self.half_life_s = usage.half_life_s
        self.reset_period = ResetPeriod(usage.reset_period)
        self.default_weights = billing_weights(usage.tres_billing_weights)
        self.period_s = config.priority_calc_period_s
        flags = getattr(getattr(config, "slurm_priority", None), "flags", ())
        self.max_tres = "MAX_TRES" in flags
        self.max_tres_gres = "MAX_TRES_GRES" in flags
        self._gpu: dict[Key, float] = {}
        self._billing: dict[Key, float] = {}
        self._owed: list[tuple[Key, float, float]] = []
        """Association charges of stretches not charged by a tick (a quick restart)."""
        self._last_decay: float | None = None
        self._last_period: float | None = None
        self._last_reset: float | None = None
        self._jobs: dict[int, _Job] = {}
        self._stopped: set[int] = set()
        """Jobs that stopped since the last tick (charged by the next one)."""
        self._emitted: dict[str, tuple[float, float]] = {}

    # ------------------------------------------------------------------ state

    def load(self, usage: Sequence[UsageRow], running: Sequence[JobChargeRow], now: float) -> None:
        """Take the stored ledger (after a start or a rebuild)."""
        for row in usage:
            key = (row.tenant, row.user)
            self._gpu[key] = row.gpu_seconds
            self._billing[key] = row.billing_seconds
            self._last_decay = row.last_decay
            self._last_reset = row.last_reset
        for charge in running:
            self._jobs[charge.job_id] = _Job(charge)
        self._last_period = self._last_decay
        if resets_at_start(self.reset_period):
            self._gpu = dict.fromkeys(self._gpu, 0.0)
            self._billing = dict.fromkeys(self._billing, 0.0)
            self._last_reset = now

    def running(self) -> set[int]:
        """Ids of the jobs being charged."""
        return {job_id for job_id, job in self._jobs.items() if job.ended is None}

    def usage(self) -> dict[Key, tuple[float, float]]:
        """Every association's (GPU-seconds, billing-seconds), decayed as of the last tick."""
        return {key: (self._gpu[key], self._billing.get(key, 0.0)) for key in self._gpu}

    def events(self) -> list[TenantUsage]:
        """Every tenant's figures, for an engine that starts without them."""
        self._emitted = {}
        return self._changed()

    # ------------------------------------------------------------------ jobs

    def start_job(
        self, tx: ChargeBook, row: JobRow, cluster_queue: ClusterQueue | None, since: float
    ) -> None:
        """Charge a job that started at ``since``, as its assignment placed it."""
        tasks = (row.assignment or {}).get("tasks") or []
        alloc = allocated_tres(row.parsed_submission, tasks)
        spec = (cluster_queue.annotations if cluster_queue is not None else {}).get(
            BILLING_WEIGHTS_ANNOTATION
        )
        try:
            weights = billing_weights(spec) if spec else None
        except ValueError:  # refused on apply; a stored one is not trusted
            weights = None
        self.start(
            tx,
            row.id,
            tenant=row.tenant,
            user=row.user,
            alloc_tres=alloc,
            weights=weights,
            since=since,
        )

    def start(
        self,
        tx: ChargeBook,
        job_id: int,
        *,
        tenant: str,
        user: str,
        alloc_tres: Mapping[str, int],
        weights: Mapping[str, float] | None,
        since: float,
    ) -> None:
        """Charge ``job_id`` from ``since`` on (it started, or started again after a requeue)."""
        if job_id in self._jobs and self._jobs[job_id].ended is None:
            return
        alloc = dict(alloc_tres)
        rate = billable_tres(
            {k: float(v) for k, v in alloc.items()},
            self.default_weights if weights is None else weights,
            max_tres=self.max_tres,
            max_tres_gres=self.max_tres_gres,
        )
        previous = self._jobs.pop(job_id, None)
        self._stopped.discard(job_id)
        if previous is not None and previous.ended is not None:
            # It stopped and starts again before a tick charged its last stretch.
            old = previous.row
            since_charged = previous.ended if old.charged_until is None else old.charged_until
            run = max(0.0, previous.ended - since_charged)
            self._owed.append(
                (
                    (old.tenant, old.user),
                    new_usage(run, gpu_rate(old), self.half_life_s),
                    new_usage(run, old.billing, self.half_life_s),
                )
            )
            previous.row = replace(
                old,
                gpu_seconds=old.gpu_seconds + gpu_rate(old) * run,
                billing_seconds=old.billing_seconds + old.billing * run,
            )
        before = previous.row if previous is not None else tx.get_job_charge(job_id)
        row = JobChargeRow(
            job_id=job_id,
            tenant=tenant,
            user=user,
            gpus=int(alloc.get("gres/gpu", 0)),
            billing=rate,
            alloc_tres=alloc,
            gpu_seconds=before.gpu_seconds if before else 0.0,
            billing_seconds=before.billing_seconds if before else 0.0,
            charged_until=since,
        )
        tx.put_job_charges([row], new=before is None and previous is None)
        self._jobs[job_id] = _Job(row)

    def stop(self, job_id: int, end: float) -> None:
        """``job_id`` stopped at ``end``; the next tick charges its last stretch."""
        job = self._jobs.get(job_id)
        if job is not None and job.ended is None:
            job.ended = end
            self._stopped.add(job_id)

    def due(self, now: float) -> bool:
        """Whether :meth:`tick` has work: a calc period passed, or a job stopped."""
        if self._last_period is None or now - self._last_period >= self.period_s:
            return True
        return bool(self._owed or self._stopped)

    # ------------------------------------------------------------------ ticks

    def tick(self, tx: ChargeBook, now: float, tenants: Mapping[str, Tenant]) -> list[TenantUsage]:
        """Reset if due, decay, charge; write it all through ``tx``; the changed tenants."""
        periodic = self._last_period is None or now - self._last_period >= self.period_s
        if self._last_reset is None:
            self._last_reset = now
        if self._last_decay is not None and now > self._last_decay:
            self._reset(now)
            factor = decay_multiplier(self.half_life_s, now - self._last_decay)
            if factor != 1.0:
                self._gpu = {k: v * factor for k, v in self._gpu.items()}
                self._billing = {k: v * factor for k, v in self._billing.items()}
        self._last_decay = now if self._last_decay is None else max(self._last_decay, now)
        if periodic:
            self._last_period = now
        charged: list[JobChargeRow] = []
        gpu_new: dict[Key, float] = {}
        billing_new: dict[Key, float] = {}
        for key, gpu, billing in self._owed:
            gpu_new[key] = gpu_new.get(key, 0.0) + gpu
            billing_new[key] = billing_new.get(key, 0.0) + billing
        self._owed = []
        ids = list(self._jobs) if periodic else sorted(self._stopped)
        self._stopped = set()
        for job_id in ids:
            job = self._jobs[job_id]
            row = job.row
            until = now if job.ended is None else min(job.ended, now)
            start = row.charged_until if row.charged_until is not None else until
            run = max(0.0, until - start)
            key = (row.tenant, row.user)
            gpu_new[key] = gpu_new.get(key, 0.0) + new_usage(run, gpu_rate(row), self.half_life_s)
            billing_new[key] = billing_new.get(key, 0.0) + new_usage(
                run, row.billing, self.half_life_s
            )
            row = replace(
                row,
                gpu_seconds=row.gpu_seconds + gpu_rate(row) * run,
                billing_seconds=row.billing_seconds + row.billing * run,
                charged_until=None if job.ended is not None else until,
            )
            charged.append(row)
            if job.ended is not None:
                del self._jobs[job_id]
            else:
                job.row = row
        for key in gpu_new.keys() | billing_new.keys():
            for assoc in self._path(key, tenants):
                self._gpu[assoc] = self._gpu.get(assoc, 0.0) + gpu_new.get(key, 0.0)
                self._billing[assoc] = self._billing.get(assoc, 0.0) + billing_new.get(key, 0.0)
        self._gpu.setdefault(ROOT, 0.0)
        self._billing.setdefault(ROOT, 0.0)
        tx.put_job_charges(charged, new=False)
        tx.put_usage(self._rows())
        return self._changed()

    def _reset(self, now: float) -> None:
        """``PriorityUsageResetPeriod``: clear everything at a passed calendar boundary."""
        assert self._last_reset is not None
        last, at = datetime.fromtimestamp(self._last_reset), datetime.fromtimestamp(now)
        if usage_reset_due(self.reset_period, last, at):
            self._gpu = dict.fromkeys(self._gpu, 0.0)
            self._billing = dict.fromkeys(self._billing, 0.0)
            self._last_reset = now

    def _path(self, key: Key, tenants: Mapping[str, Tenant]) -> list[Key]:
        """The association, its tenant, every ancestor tenant, the root."""
        tenant, user = key
        out: list[Key] = [key] if user else []
        out += [(name, "") for name in tenant_path(tenant, tenants)]
        out.append(ROOT)
        return out

    def _rows(self) -> list[UsageRow]:
        assert self._last_decay is not None and self._last_reset is not None
        return [
            UsageRow(
                tenant=key[0],
                user=key[1],
                gpu_seconds=value,
                billing_seconds=self._billing.get(key, 0.0),
                last_decay=self._last_decay,
                last_reset=self._last_reset,
            )
            for key, value in sorted(self._gpu.items())
        ]

    def _changed(self) -> list[TenantUsage]:
        out: list[TenantUsage] = []
        for (tenant, user), gpu in sorted(self._gpu.items()):
            if user or not tenant:
                continue
            figures = (gpu, self._billing.get((tenant, user), 0.0))
            if self._emitted.get(tenant) == figures:
                continue
            self._emitted[tenant] = figures
            out.append(TenantUsage(tenant, figures[0] / 3600.0, billing=figures[1]))
        return out
