"""What the control plane does differently for jobs that came in as sbatch scripts.

Three things: which jobs wait at the gate and why (dependencies, begin times,
array throttles, holds), the Slurm context a batch job is launched with (its
allocation per node, from which the runtime makes ``SLURM_*`` and ``srun``
makes each step), and Slurm's filename patterns for the output files.
"""

from __future__ import annotations

import itertools
import math
import os
from pathlib import Path
from typing import Any

from phalanx.control.gate import DependencyStatus, GatedJob
from phalanx.control.registry import Registry
from phalanx.model import (
    CPU,
    MEMORY,
    Job,
    JobState,
    JobSubmission,
    PodSet,
    SlurmComponent,
    SlurmRequest,
)
from phalanx.runtime.spec import LaunchSpec, TaskSpec
from phalanx.store import JobRow, Tx

__all__ = [
    "CLUSTER_NAME",
    "dependency_checker",
    "expand_output",
    "gated",
    "requeues",
    "requeues_after_preemption",
    "slurm_launch",
]

CLUSTER_NAME = "phalanx"
_MIB = 1 << 20


def gated(job: Job, sub: JobSubmission, array_job_id: int | None, task: int | None) -> GatedJob:
    """The gate's record of a pending job."""
    return GatedJob(
        job=job,
        hold=sub.hold,
        begin_time=sub.begin_time,
        dependency=sub.dependency,
        array_job_id=array_job_id,
        array_task_id=task,
        throttle=sub.array.throttle if sub.array is not None else None,
        kill_on_invalid_dependency=bool(sub.slurm is not None and sub.slurm.kill_on_invalid_dep),
    )


def requeues(row: JobRow, state: str) -> bool:
    """Whether a job that ended in ``state`` goes back to the queue: on ``NODE_FAIL``, a
    job submitted with ``--requeue``, and every Kubernetes job (Kueue evicts a workload
    whose pods are lost with their node and requeues it)."""
    if state != JobState.NODE_FAIL.value:
        return False
    sub = row.parsed_submission
    return sub.requeue or sub.run.kube is not None


def requeues_after_preemption(row: JobRow) -> bool:
    """Whether a job preempted in ``REQUEUE`` mode goes back to the queue: a Slurm
    batch job only with ``--requeue`` (Slurm cancels the others, which end
    PREEMPTED), any other job always (Kueue requeues every evicted workload)."""
    sub = row.parsed_submission
    return sub.slurm is None or sub.requeue


# ---------------------------------------------------------------------- dependencies


def dependency_checker(tx: Tx, now: float) -> DependencyStatus:
    """Evaluates dependencies against the store, as seen inside ``tx``."""
    from phalanx.dialects.slurm.dependency import Dependee, evaluate, parse_dependency

    cache: dict[tuple[int, int | None], list[Dependee]] = {}

    def lookup(job_id: int, task: int | None) -> list[Dependee]:
        key = (job_id, task)
        if key not in cache:
            found = tx.list_jobs(array_job_id=job_id)
            if found:
                found = [r for r in found if task is None or r.array_task_id == task]
            else:
                single = tx.get_job(job_id)
                found = [single] if single is not None and task is None else []
            cache[key] = [Dependee(r.state, r.start_time) for r in found]
        return cache[key]

    def status(text: str, waiting: GatedJob) -> str:
        dep = parse_dependency(text)
        clear = True
        if any(t.kind == "singleton" for t in dep.terms):
            job = waiting.job
            others = tx.list_jobs(
                names=[job.name],
                users=[job.user],
                states=[JobState.PENDING.value, JobState.ADMITTED.value, JobState.RUNNING.value],
            )
            clear = not any(r.id < job.id for r in others)
        result: str = evaluate(
            dep, lookup, now=now, array_task=waiting.array_task_id, singleton_clear=clear
        )
        return result

    return status


# ---------------------------------------------------------------------- launching


def expand_output(pattern: str, row: JobRow, workdir: Path) -> Path:
    """Slurm's filename patterns (``%j``, ``%x``, ``%A_%a``, ``%N``, ...) under ``workdir``.

    Every job's output files use them, whether it came in as a batch script or not.
    """
    from phalanx.dialects.slurm.patterns import PatternFields, expand_pattern

    fields = PatternFields(
        job_id=row.id,
        array_job_id=row.array_job_id,
        array_task_id=row.array_task_id,
        job_name=row.name or "job",
        user=row.user,
        node=row.nodes[0] if row.nodes else "",
        node_index=0,
        task=0,
        step=None,
        restart_count=max(0, row.attempt - 1),
    )
    path = Path(expand_pattern(pattern, fields))
    return path if path.is_absolute() else workdir / path


def slurm_launch(
    row: JobRow,
    submission: JobSubmission,
    tasks: list[TaskSpec],
    attempt: int,
    out: Path,
    err: Path | None,
    *,
    url: str,
    registry: Registry,
    containers: dict[str, Any] | None = None,
) -> LaunchSpec:
    """A batch job: the script runs once on the first node; the allocation goes in ``slurm``."""
    run = submission.run
    context = slurm_context(row, submission, tasks, url=url, registry=registry)
    context["containers"] = dict(containers or {})
    # SLURM_RESTART_COUNT: the runs before this one (requeues after preemption or failure).
    context["restartCount"] = max(0, attempt - 1)
    # The script runs on the first node of the (first component's) allocation.
    nodes: list[dict[str, Any]] = context["nodes"]
    batch = TaskSpec(
        node=str(nodes[0]["name"]) if nodes else "",
        rank=0,
        gpus=tuple(int(g) for g in nodes[0]["gpus"]) if nodes else (),
    )
    return LaunchSpec(
        job_id=row.id,
        attempt=attempt,
        command=tuple(run.command),
        working_dir=run.working_dir,
        env=dict(run.env),
        tasks=(batch,),
        output=str(out),
        error=str(err) if err is not None else None,
        time_limit_s=float(run.time_limit) if run.time_limit else None,
        kill_wait_s=run.kill_wait,
        script=run.script,
        open_mode=run.open_mode,
        signal=(
            (run.signal.signal, float(run.signal.seconds), run.signal.batch_only)
            if run.signal is not None
            else None
        ),
        preemption_notice=(
            (run.signal.signal, float(run.signal.seconds), run.signal.batch_only)
            if run.signal is not None
            else None
        ),
        slurm=context,
    )


def slurm_context(
    row: JobRow,
    submission: JobSubmission,
    tasks: list[TaskSpec],
    *,
    url: str,
    registry: Registry,
) -> dict[str, Any]:
    """The allocation and request of a batch job, as ``dialects/slurm/environment`` reads it.

    A heterogeneous job's context is its first component's (where the batch script
    runs, what the plain ``SLURM_*`` names describe) with ``components``: every
    component's own (its id, the job's id + N, its nodes and options), from which the
    ``SLURM_*_HET_GROUP_N`` variables and ``srun --het-group`` steps are made.
    """
    slurm = submission.slurm or SlurmRequest()
    parts = slurm.parts()
    components: list[dict[str, Any]] = []
    for index, part in enumerate(parts):
        if slurm.components is None:
            pod_set, mine = submission.pod_sets[0], tasks
        else:
            pod_set = submission.pod_sets[index]
            mine = [t for t in tasks if t.pod_set == pod_set.name]
        components.append(
            {
                "jobId": row.id + index,
                "jobName": row.name,
                "partition": row.cluster_queue,
                "account": row.tenant,
                "qos": row.priority_class,
                "nodes": _component_nodes(part, pod_set, mine, registry),
                "ntasks": part.ntasks,
                "ntasksPerNode": part.ntasks_per_node,
                "cpusPerTask": part.cpus_per_task,
                "gpus": part.gpus,
                "gpusPerNode": part.gpus_per_node,
                "gpusPerTask": part.gpus_per_task,
                "memPerNodeMb": part.mem_per_node_mb,
                "memPerCpuMb": part.mem_per_cpu_mb,
                "memPerGpuMb": part.mem_per_gpu_mb,
            }
        )
    array = None
    if row.array_job_id is not None and submission.array is not None:
        indices = submission.array.indices
        array = {
            "jobId": row.array_job_id,
            "taskId": row.array_task_id,
            "min": min(indices),
            "max": max(indices),
            "count": len(indices),
            "step": _step(indices),
        }
    context: dict[str, Any] = {
        **components[0],
        "user": row.user,
        "uid": os.getuid(),
        "gid": os.getgid(),
        "submitDir": slurm.submit_dir or submission.run.working_dir,
        "submitHost": slurm.submit_host or os.uname().nodename,
        "clusterName": CLUSTER_NAME,
        "array": array,
        "dependency": submission.dependency,
        "timeLimitS": submission.run.time_limit,
        "container": [list(pair) for pair in slurm.container] if slurm.container else None,
        "allocation": slurm.allocation,
        "url": url,
        "token": None,
    }
    if slurm.components is not None:
        context["components"] = components
    return context


def _component_nodes(
    part: SlurmComponent, pod_set: PodSet, tasks: list[TaskSpec], registry: Registry
) -> list[dict[str, Any]]:
    """The nodes of one component (an ordinary job's only one), in placement order:
    name, CPUs, global GPU indices, memory and tasks on each."""
    per_unit_cpu = pod_set.requests.get(CPU, 0)
    per_unit_mem = pod_set.requests.get(MEMORY, 0)
    units: dict[str, int] = {}
    gpus: dict[str, list[int]] = {}
    for t in tasks:
        units[t.node] = units.get(t.node, 0) + 1
        gpus.setdefault(t.node, []).extend(t.gpus)
    names = list(units)
    per_node_tasks = _tasks_per_node(part, names, units)
    nodes = []
    for name in names:
        node = registry.get("Node", name)
        if pod_set.exclusive and node is not None:
            cpus = node.capacity.get(CPU, 0)
            mem = node.capacity.get(MEMORY, 0)
        else:
            cpus = per_unit_cpu * units[name]
            mem = per_unit_mem * units[name]
        nodes.append(
            {
                "name": name,
                "cpus": max(1, math.ceil(cpus / 1000)),
                "gpus": sorted(gpus.get(name, [])),
                "memMb": mem // _MIB,
                "tasks": per_node_tasks[name],
            }
        )
    return nodes


def _tasks_per_node(
    slurm: SlurmComponent, names: list[str], units: dict[str, int]
) -> dict[str, int]:
    """Tasks on each node: ``--ntasks-per-node``, else ``--ntasks`` in blocks, else per unit."""
    if slurm.nodes is None:
        # One placement unit per task: the engine's counts are the tasks.
        return dict(units)
    if slurm.ntasks_per_node:
        return {n: int(slurm.ntasks_per_node) for n in names}
    ntasks = slurm.ntasks
    if ntasks:
        base, extra = divmod(int(ntasks), len(names))
        return {n: base + (1 if i < extra else 0) for i, n in enumerate(names)}
    return {n: 1 for n in names}


def _step(indices: list[int]) -> int:
    """SLURM_ARRAY_TASK_STEP: the common difference of a regular range, else 1."""
    if len(indices) < 2:
        return 1
    diffs = {b - a for a, b in itertools.pairwise(indices)}
    return diffs.pop() if len(diffs) == 1 else 1
