"""Checking commands before the loop's transaction: a bad one is answered with its
error and the others go ahead.

A submission is resolved against the registry (queues, tenants, limits), its
user must have an account to run as, and a batch job gets its partition's
defaults here; a delete must leave nothing that uses the object; the jobs of a
Kubernetes apply are resolved against the registry as the apply leaves it.
"""

from __future__ import annotations

from collections.abc import Sequence

from phalanx.control.commands import ApplyCmd, Command, DeleteCmd, SubmitCmd
from phalanx.control.kubejobs import KubeApply, kube_identity
from phalanx.control.launch import Site
from phalanx.control.state import LoopState, target_queue
from phalanx.control.submissions import DEF_MEM_PER_CPU, DEFAULT_TIME, resolve_submissions
from phalanx.control.submit_limits import SubmitCounts, store_counter, wall_default
from phalanx.errors import Conflict, Forbidden, NotFound, PhalanxError
from phalanx.model import CPU, MEMORY, Job, JobSubmission
from phalanx.store import Store

__all__ = ["Validator"]


class Validator:
    """Checks commands against the registry, the engine and the store, before they apply."""

    def __init__(self, state: LoopState, store: Store, site: Site) -> None:
        self.state = state
        self.store = store
        self.site = site

    def validate(self, commands: list[Command]) -> list[Command]:
        """Reject bad commands before the transaction; the rest are applied together."""
        accepted: list[Command] = []
        submit_counts: SubmitCounts | None = None
        for cmd in commands:
            try:
                if isinstance(cmd, SubmitCmd):
                    jobs = resolve_submissions(
                        cmd.principal,
                        cmd.submissions,
                        self.state.registry,
                        max_array_size=self.state.config.max_array_size,
                    )
                    self.check_accounts(jobs)
                    pairs = [
                        self.partition_defaults(*wall_default(job, sub, self.state.registry))
                        for job, sub in zip(jobs, cmd.submissions, strict=True)
                    ]
                    cmd.jobs = [job for job, _ in pairs]
                    cmd.submissions = [sub for _, sub in pairs]
                    submit_counts = submit_counts or SubmitCounts(store_counter(self.store))
                    submit_counts.check(cmd.jobs, cmd.submissions, self.state.registry)
                elif isinstance(cmd, DeleteCmd):
                    self._check_delete(cmd.kind, cmd.name)
                elif isinstance(cmd, ApplyCmd):
                    self.state.registry.check_apply(cmd.objects)
                    if cmd.jobs:
                        self._validate_kube(cmd)
            except PhalanxError as exc:
                cmd.future.set_exception(exc)
                continue
            accepted.append(cmd)
        return accepted

    def check_accounts(self, jobs: Sequence[Job]) -> None:
        """Refuse jobs whose users have no account to run as (one error for all)."""
        if self.site.accounts is None:
            return
        problems: list[str] = []
        for user in dict.fromkeys(job.user for job in jobs):
            try:
                self.site.accounts(user)
            except PhalanxError as exc:
                problems.append(exc.detail)
        if problems:
            raise Forbidden("; ".join(problems))

    def partition_defaults(self, job: Job, sub: JobSubmission) -> tuple[Job, JobSubmission]:
        """A batch job gets its partition's DefaultTime and DefMemPerCPU, as in Slurm."""
        target = target_queue(self.state.registry, job)
        cq = self.state.registry.get("ClusterQueue", target) if target is not None else None
        request = sub.slurm
        if request is None or cq is None:
            return job, sub
        annotations = cq.annotations
        default_time = annotations.get(DEFAULT_TIME, "")
        if sub.run.time_limit is None and default_time.isdigit():
            run = sub.run.model_copy(update={"time_limit": int(default_time)})
            sub = sub.model_copy(update={"run": run})
        mem_per_cpu = annotations.get(DEF_MEM_PER_CPU, "")
        if not mem_per_cpu.isdigit():
            return job, sub
        # Each component that asks for no memory (an ordinary job is one component, its
        # only pod set; a heterogeneous job's component N is its pod set N).
        per_cpu = int(mem_per_cpu) << 20
        pod_sets = list(sub.pod_sets)
        slurm = request
        parts = request.parts()
        for index, part in enumerate(parts):
            if any((part.mem_per_node_mb, part.mem_per_cpu_mb, part.mem_per_gpu_mb)):
                continue
            chosen = range(len(pod_sets)) if len(parts) == 1 else [index]
            for i in chosen:
                p = pod_sets[i]
                memory = -(-p.requests.get(CPU, 1000) // 1000) * per_cpu
                pod_sets[i] = p.model_copy(update={"requests": {**p.requests, MEMORY: memory}})
            slurm = slurm.with_part(index, mem_per_cpu_mb=int(mem_per_cpu))
        if slurm is not request:
            sub = sub.model_copy(update={"pod_sets": pod_sets, "slurm": slurm})
            job = job.model_copy(update={"pod_sets": pod_sets})
        return job, sub

    def _check_delete(self, kind: str, name: str) -> None:
        if self.state.registry.get(kind, name) is None:
            raise NotFound(f"{kind}/{name} not found")
        users = self.state.registry.users_of(kind, name)
        if users:
            raise Conflict(f"{kind}/{name} is in use by {', '.join(users[:5])}")
        jobs = [
            rec.id
            for rec in self.state.engine.jobs.values()
            if (kind == "ClusterQueue" and (rec.cluster_queue == name))
            or (kind == "LocalQueue" and rec.local_queue == name)
        ]
        if kind == "Node":
            slot = self.state.engine.cache.nodes.get(name)
            jobs = sorted(slot.jobs) if slot is not None else []
        if jobs:
            shown = ", ".join(str(j) for j in jobs[:5])
            raise Conflict(
                f"{kind}/{name} has {len(jobs)} unfinished job(s) ({shown}); "
                "cancel them or wait for them to finish first"
            )

    def _validate_kube(self, cmd: ApplyCmd) -> None:
        """Resolve the jobs of an apply against the registry as the apply leaves it.

        A job already stored under the same kind, namespace and name is
        ``unchanged`` when its spec is the same, and refused when it differs
        (a Job's pod template is immutable in Kubernetes too).
        """
        registry = self.state.registry.with_objects(cmd.objects)
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
            self.check_accounts(jobs)
            SubmitCounts(store_counter(self.store)).check(jobs, subs, registry)
            for item, job in zip(fresh, jobs, strict=True):
                item.engine_job = job

    def _existing_kube(self, item: KubeApply) -> int | None:
        kind, namespace, name = kube_identity(item.job)
        rows = self.store.list_jobs(names=[name], tenants=[namespace])
        # A job deleted through the Kubernetes API frees its name.
        deleted = {
            int(job_id)
            for job_id, meta in self.store.meta("job", [str(r.id) for r in rows]).items()
            if meta.get("deleted") is not None
        }
        for row in rows:
            if row.id in deleted:
                continue
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
