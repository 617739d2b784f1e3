"""Kubernetes jobs in the control plane: creating them from an apply, launching their pods.

``phalanx apply`` sends job manifests with the configuration; the control
plane converts them (again, server side: see :mod:`phalanx.dialects.kueue.jobs`)
and creates one phalanx job per Kubernetes job. A job's identity is its kind,
namespace and name: applying the same one again is ``unchanged``, applying a
changed spec under the same name is refused.

At admission the pod plan is computed from the admitted pod counts (partial
admission gives fewer pods) and handed to the runtime in
:attr:`~phalanx.runtime.spec.LaunchSpec.kube`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from phalanx.dialects.kueue.jobs import KubeJob, pod_names, pod_plan
from phalanx.errors import Invalid
from phalanx.model import Job
from phalanx.model.submission import KubeRun, RunSpec
from phalanx.runtime.spec import LaunchSpec, TaskSpec
from phalanx.store import JobRow

__all__ = ["KubeApply", "image_events", "kube_identity", "kube_launch", "split_kube"]


@dataclass(slots=True)
class KubeApply:
    """One job document of an apply, as the control loop resolves it."""

    job: KubeJob
    existing: int | None = None
    """The id of the job stored under the same identity (then nothing is created)."""
    engine_job: Job | None = None


def split_kube(objects: Iterable[Any]) -> tuple[list[Any], list[KubeApply]]:
    """Configuration objects and Kubernetes jobs of an apply, each in document order."""
    config: list[Any] = []
    jobs: list[KubeApply] = []
    seen: set[tuple[str, str, str]] = set()
    for obj in objects:
        if isinstance(obj, KubeJob):
            key = kube_identity(obj)
            if key in seen:
                raise Invalid(f"{key[0]}/{key[1]}/{key[2]}: appears twice in one apply")
            seen.add(key)
            jobs.append(KubeApply(obj))
        else:
            config.append(obj)
    return config, jobs


def kube_identity(job: KubeJob) -> tuple[str, str, str]:
    return job.kind, job.namespace, job.name


def image_events(kube: KubeRun) -> list[str]:
    """One message per container image: there is no container runtime to pull it."""
    images: dict[str, None] = {}
    for pod_set in kube.pod_sets:
        for container in (*pod_set.init_containers, *pod_set.containers):
            if container.image:
                images[container.image] = None
    return [f"image {image} not pulled: running the command on the host" for image in images]


def kube_launch(
    row: JobRow,
    run: RunSpec,
    kube: KubeRun,
    tasks: Sequence[TaskSpec],
    attempt: int,
    out: Path,
    err: Path | None,
    *,
    containers: dict[str, Any] | None = None,
) -> LaunchSpec:
    """The launch of an admitted Kubernetes job: one task per pod slot."""
    counts: dict[str, int] = {}
    for task in tasks:
        counts[task.pod_set] = counts.get(task.pod_set, 0) + 1
    plan = pod_plan(kube, counts)
    taken: dict[str, int] = {}
    per_task: list[list[dict[str, Any]]] = []
    head_rank: int | None = None
    for task in tasks:
        slot = taken.get(task.pod_set, 0)
        taken[task.pod_set] = slot + 1
        per_task.append(plan[task.pod_set][slot])
        if kube.kind == "RayJob" and task.pod_set == kube.pod_sets[0].name:
            head_rank = task.rank
    return LaunchSpec(
        job_id=row.id,
        attempt=attempt,
        command=("kubepod",),  # replaced by the runtime with its pod runner
        working_dir=run.working_dir,
        env={**run.env, "PHALANX_KUBE_KIND": kube.kind, "PHALANX_KUBE_NAME": kube.name},
        tasks=tuple(tasks),
        output=str(out),
        error=str(err) if err is not None else None,
        time_limit_s=float(run.time_limit) if run.time_limit else None,
        kill_wait_s=run.kill_wait,
        preemption_notice=(
            (run.preemption_notice.signal, float(run.preemption_notice.seconds), False)
            if run.preemption_notice is not None
            else None
        ),
        kube={
            "tasks": per_task,
            "backoffLimit": kube.backoff_limit,
            "podNames": pod_names(kube, counts),
            "headRank": head_rank,
            "containers": dict(containers or {}),
        },
    )
