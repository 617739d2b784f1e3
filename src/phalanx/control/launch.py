"""Launching: what the runtime is told to run for an admitted job, and where its output goes.

:class:`Site` holds what the server sets about running jobs (its URL, the
accounts jobs run as, the container runtime); :class:`Launcher` turns a stored
job and its placed tasks into the runtime's :class:`~phalanx.runtime.spec.LaunchSpec`
and starts it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from phalanx.control.kubejobs import kube_launch
from phalanx.control.registry import Registry
from phalanx.control.slurmjobs import expand_output, slurm_launch
from phalanx.model import JobSubmission
from phalanx.runtime.base import Runtime
from phalanx.runtime.spec import Account, AlreadyLaunched, LaunchSpec, TaskSpec
from phalanx.store import JobRow

__all__ = ["Launcher", "Site"]


@dataclass
class Site:
    """How this server runs jobs; set by the server once, before the loop starts."""

    url: str = ""
    """The API's URL, for the jobs' environment."""
    container_runtime: str | None = None
    """``builtin``: jobs' images run in phalanx's container runtime; ``host``: ``srun
    --container-image`` steps and pods run on the host, without their images; ``None``:
    containers are turned off."""
    images: Path | None = None
    """The image store (``phalanx image import``): ``STATE/images``."""

    def containers(self) -> dict[str, Any]:
        """What a job's tasks need to know of the container runtime."""
        return {
            "runtime": self.container_runtime,
            "images": str(self.images) if self.images is not None else None,
        }

    accounts: Callable[[str], Account] | None = None
    """The Unix account a user's jobs run as (raises :class:`~phalanx.errors.Forbidden`
    when there is none); ``None``: jobs run as the server's own user."""


class Launcher:
    """Builds launch specs for stored jobs and hands them to the runtime."""

    def __init__(self, runtime: Runtime, site: Site) -> None:
        self.runtime = runtime
        self.site = site

    def output_owner(self, job: JobRow) -> int | None:
        """The uid whose files the job's output must be, to be served back; ``None``:
        any (the jobs run as the server's own user)."""
        return self.site.accounts(job.user).uid if self.site.accounts is not None else None

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

    def runnable(
        self,
        row: JobRow,
        submission: JobSubmission,
        tasks: list[TaskSpec],
        attempt: int,
        registry: Registry,
    ) -> LaunchSpec:
        """What the runtime runs for one attempt of the job on ``tasks``."""
        run = submission.run
        out, err = self.output_paths(row)
        if run.kube is not None:
            return kube_launch(
                row, run, run.kube, tasks, attempt, out, err, containers=self.site.containers()
            )
        if run.script is not None:
            return slurm_launch(
                row,
                submission,
                tasks,
                attempt,
                out,
                err,
                url=self.site.url,
                registry=registry,
                containers=self.site.containers(),
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

    def launch_spec(
        self,
        row: JobRow,
        submission: JobSubmission,
        tasks: list[TaskSpec],
        attempt: int,
        registry: Registry,
    ) -> LaunchSpec:
        """:meth:`runnable`, with the requests, allocation and user the runtime needs to
        start it."""
        spec = self.runnable(row, submission, tasks, attempt, registry)
        requests = {p.name: dict(p.requests) for p in submission.pod_sets}
        allocation = tuple(tasks) if len(tasks) > len(spec.tasks) else ()
        return replace(spec, requests=requests, allocation=allocation, user=row.user)

    def launch(self, spec: LaunchSpec) -> None:
        try:
            self.runtime.launch(spec)
        except AlreadyLaunched:
            # Recovery raced a supervisor that exists: attach to it instead.
            self.runtime.adopt(spec.job_id, spec.attempt)
