"""``phalanx submit`` options to a JobSubmission dict (Slurm's meanings, one pod set ``main``).

``--gpus`` is the job's total, spread evenly over ``--nodes``; ``--cpus`` is
per task (default one, as in Slurm) and ``--mem`` per node. Standard library only (the
model is not imported unless a per-node memory must be split over tasks).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from phalanx.errors import Invalid
from phalanx.timefmt import parse_time_limit

__all__ = ["build_submission", "parse_env"]

GPU = "nvidia.com/gpu"


def parse_env(pairs: Sequence[str]) -> dict[str, str]:
    """``["K=V", ...]`` to a dict; a pair without ``=`` is an error naming it."""
    env: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise Invalid(f"--env {pair!r}: expected KEY=VALUE")
        env[key] = value
    return env


def _split_memory(mem: str, tasks_per_node: int) -> str | int:
    if tasks_per_node == 1:
        return mem
    from phalanx.model.quantity import QuantityError, parse_quantity

    try:
        total = parse_quantity(mem, "memory")
    except (QuantityError, ValueError) as exc:
        raise Invalid(f"--mem {mem!r}: {exc}") from None
    return -(-total // tasks_per_node)


def build_submission(
    command: Sequence[str],
    *,
    gpus: int | str | None = None,
    nodes: int = 1,
    ntasks: int | None = None,
    cpus: str | None = None,
    mem: str | None = None,
    queue: str | None = None,
    partition: str | None = None,
    tenant: str | None = None,
    priority_class: str | None = None,
    time_limit: str | None = None,
    name: str | None = None,
    output: str | None = None,
    error: str | None = None,
    chdir: str | None = None,
    env: Sequence[str] = (),
) -> dict[str, Any]:
    """The submission ``phalanx submit`` sends (wire names, camelCase)."""
    if not command or not command[0]:
        raise Invalid("submit: give the command to run after the options, e.g. -- python train.py")
    if nodes < 1:
        raise Invalid(f"--nodes {nodes}: must be at least 1")
    tasks = nodes if ntasks is None else ntasks
    if tasks < 1:
        raise Invalid(f"--ntasks {tasks}: must be at least 1")
    if tasks % nodes:
        raise Invalid(f"--ntasks {tasks} cannot be spread evenly over --nodes {nodes}")
    per_node_tasks = tasks // nodes
    requests: dict[str, Any] = {}
    gpus, share = _gpus(gpus)
    if share is not None:
        if tasks > 1:
            raise Invalid(f"--gpus {share}: a share of one GPU is for a single task")
        requests[GPU] = share
    if gpus:
        if gpus < 0:
            raise Invalid(f"--gpus {gpus}: must not be negative")
        if gpus % nodes:
            raise Invalid(
                f"--gpus {gpus} is the job's total and cannot be spread evenly over "
                f"--nodes {nodes}; use a multiple of {nodes}"
            )
        per_node = gpus // nodes
        if per_node % per_node_tasks:
            raise Invalid(
                f"--gpus {gpus}: {per_node} GPUs per node cannot be split evenly over "
                f"{per_node_tasks} tasks per node"
            )
        requests[GPU] = per_node // per_node_tasks
    requests["cpu"] = cpus if cpus is not None else "1"  # Slurm's default: one CPU per task
    if mem is not None:
        requests["memory"] = _split_memory(mem, per_node_tasks)
    pod_set: dict[str, Any] = {"name": "main", "count": tasks, "requests": requests}
    if tasks > 1:
        pod_set["tasksPerNode"] = per_node_tasks
    run: dict[str, Any] = {
        "command": list(command),
        "workingDir": str(Path(chdir).resolve()) if chdir else os.getcwd(),
        "env": parse_env(env),
    }
    if time_limit is not None:
        seconds = parse_time_limit(time_limit)
        if seconds is not None:
            run["timeLimit"] = seconds
    if output:
        run["output"] = output
    if error:
        run["error"] = error
    submission: dict[str, Any] = {
        "name": name or os.path.basename(command[0]),
        "podSets": [pod_set],
        "run": run,
    }
    for key, value in (
        ("tenant", tenant),
        ("queue", queue),
        ("clusterQueue", partition),
        ("priorityClass", priority_class),
    ):
        if value is not None:
            submission[key] = value
    return submission


def _gpus(value: int | str | None) -> tuple[int, str | None]:
    """``--gpus``: a whole number of GPUs, or a share of one (``0.5``) for one task."""
    if value is None or isinstance(value, int):
        return value or 0, None
    text = value.strip()
    try:
        return int(text), None
    except ValueError:
        pass
    try:
        amount = float(text)
    except ValueError:
        raise Invalid(
            f"--gpus {value}: expected a number of GPUs, or a share of one like 0.5"
        ) from None
    if not 0 < amount < 1:
        raise Invalid(
            f"--gpus {value}: a share of one GPU is between 0 and 1; whole GPUs are integers"
        )
    return 0, text
