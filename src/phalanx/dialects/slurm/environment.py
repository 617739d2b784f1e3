"""The environment Slurm 22.05 gives a batch script and the tasks of an ``srun`` step.

Pure functions of the job's *Slurm context*, the JSON-able dict the control
plane builds for every admitted Slurm job (``LaunchSpec.slurm``, written to
``JOBDIR/slurm.json``)::

    {"jobId", "jobName", "partition", "account", "qos", "user", "uid", "gid",
     "submitDir", "submitHost", "clusterName",
     "nodes": [{"name", "cpus", "gpus": [global indices], "memMb", "tasks"}, ...],
     "ntasks", "ntasksPerNode", "cpusPerTask", "gpus", "gpusPerNode", "gpusPerTask",
     "memPerNodeMb", "memPerCpuMb", "memPerGpuMb", "array": {...} | None,
     "dependency", "timeLimitS", "url", "token"}

``None`` means "not requested by the user": Slurm sets most option variables
only when the option was given (``SLURM_NTASKS``, ``SLURM_CPUS_PER_TASK``,
``SLURM_GPUS_PER_NODE``...). Optional keys: ``slurmConf`` (the value of
``SLURM_CONF``, default ``/etc/slurm/slurm.conf`` as a stock install has it:
phalanx has no slurm.conf, and nothing phalanx runs reads the variable) and
``restartCount`` (``SLURM_RESTART_COUNT``, set only when above 0, as Slurm).

:func:`batch_env` is checked variable by variable against environments
captured on a real Slurm 22.05 cluster (``tests/dialects/slurm``); the few
differences are deliberate:

* ``SLURM_TASK_PID`` is known only once the process exists: pass ``task_pid``,
  or let the launcher set it (the local runtime does, from the shell's ``$$``).
* ``SLURM_WORKING_CLUSTER`` names the phalanx API (host and port of ``url``)
  in place of slurmctld's; the RPC version and select plugin id are 22.05's.
* ``ENVIRONMENT=BATCH`` is set as Slurm does; ``HOSTNAME`` is left to the shell
  (it is the real host under Slurm too). ``SLURM_JOB_START_TIME``,
  ``SLURM_JOB_END_TIME`` and ``SLURM_JOB_GROUP`` are not set by 22.05 (the
  capture has none of them) and are not set here.

A heterogeneous job's context is its first component's (the leader's, where the
script runs) plus ``components``: each component's ``jobId`` (the job's + N),
``jobName``, ``partition``, ``account``, ``qos``, ``nodes`` and options, as above.
:func:`batch_env` then adds Slurm's ``SLURM_*_HET_GROUP_N`` variables (and the legacy
``_PACK_GROUP_N`` twins, ``SLURM_HET_SIZE``, ``SLURM_PACK_SIZE``) and leaves the
component options (``SLURM_CPUS_PER_TASK``, ``SLURM_GPUS_PER_NODE``, ...) to the
suffixed names only, as 22.05 does; :func:`het_step_env` lays out an ``srun`` step
over one or more components (``--het-group``, ``srun a : b``). Both were compared
with a real Slurm 22.05.8's environments (``tests/dialects/slurm/test_hetjob.py``).

Only this module, :mod:`hostlist` and the standard library are imported: ``srun``
(:mod:`phalanx.runtime.srun`) imports it in every job step.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import hostlist

from phalanx.hostranges import compress_hostlist

__all__ = [
    "DEFAULT_SLURM_CONF",
    "STEP_CLEARED",
    "StepRequest",
    "TaskEnv",
    "batch_env",
    "component_context",
    "compress_counts",
    "compress_hostlist",
    "het_group_names",
    "het_step_env",
    "node_list",
    "step_env",
    "step_layout",
]

DEFAULT_SLURM_CONF = "/etc/slurm/slurm.conf"
RPC_VERSION = 9728
"""SLURM_PROTOCOL_VERSION of 22.05, the fourth field of ``SLURM_WORKING_CLUSTER``."""
SELECT_PLUGIN_ID = 109
"""select/cons_tres's plugin id, the fifth field of ``SLURM_WORKING_CLUSTER``."""
GPU_VARIABLES = ("CUDA_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL", "ROCR_VISIBLE_DEVICES")
STEP_CLEARED = (*GPU_VARIABLES, "SLURM_STEP_GPUS", "SLURM_GPUS_ON_NODE")
"""Inherited variables ``srun`` drops before applying a task's :attr:`TaskEnv.env`
(a task on a node without GPUs must not see node 0's)."""


@dataclass(frozen=True, slots=True)
class StepRequest:
    """What one ``srun`` inside the job asked for (``None``: not given)."""

    step_id: int
    nodes: int | None = None
    ntasks: int | None = None
    ntasks_per_node: int | None = None
    cpus_per_task: int | None = None
    gpus_per_task: int | None = None
    launch_host: str = "127.0.0.1"
    """``SLURM_LAUNCH_NODE_IPADDR`` and ``SLURM_SRUN_COMM_HOST``."""
    comm_port: int | None = None
    """``SLURM_SRUN_COMM_PORT`` / ``SLURM_STEP_LAUNCHER_PORT``; unset when ``None``."""
    umask: int = 0o022


@dataclass(frozen=True, slots=True)
class TaskEnv:
    """One task of a step: where it runs and the variables ``srun`` sets for it.

    ``env`` goes on top of the environment ``srun`` inherited (the batch
    environment, possibly changed by the script); ``SLURM_TASK_PID`` is left
    to the launcher.
    """

    node: str
    node_id: int
    rank: int
    local_id: int
    gpus: tuple[int, ...]
    env: dict[str, str] = field(default_factory=dict)
    component: int = 0
    """The heterogeneous job component the task runs in (0 in any other job)."""


# -- formats -------------------------------------------------------------------


def compress_counts(values: Sequence[int]) -> str:
    """Slurm's run-length format: ``[2, 2, 2, 1]`` -> ``2(x3),1``; ``[8]`` -> ``8``."""
    parts: list[str] = []
    i = 0
    while i < len(values):
        j = i
        while j < len(values) and values[j] == values[i]:
            j += 1
        run = j - i
        parts.append(str(values[i]) if run == 1 else f"{values[i]}(x{run})")
        i = j
    return ",".join(parts)


def node_list(names: Sequence[str]) -> str:
    """A job or step node list (sorted and compressed, as from Slurm's node bitmaps)."""
    return str(hostlist.collect_hostlist(list(names)))


def _ids(gpus: Sequence[int]) -> str:
    return ",".join(str(int(g)) for g in gpus)


def _working_cluster(ctx: Mapping[str, Any]) -> str:
    url = urlsplit(str(ctx.get("url") or "http://127.0.0.1:6900"))
    host = url.hostname or "127.0.0.1"
    port = url.port or (443 if url.scheme == "https" else 80)
    return f"{ctx.get('clusterName') or 'phalanx'}:{host}:{port}:{RPC_VERSION}:{SELECT_PLUGIN_ID}"


def _nodes(ctx: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    nodes = list(ctx.get("nodes") or ())
    if not nodes:
        raise ValueError("the Slurm context has no nodes")
    return nodes


def _tasks_requested(ctx: Mapping[str, Any]) -> bool:
    return ctx.get("ntasks") is not None or ctx.get("ntasksPerNode") is not None


def _job_tasks(ctx: Mapping[str, Any]) -> int:
    if ctx.get("ntasks") is not None:
        return int(ctx["ntasks"])
    return sum(int(n.get("tasks") or 1) for n in _nodes(ctx))


# -- batch step ----------------------------------------------------------------


def batch_env(ctx: Mapping[str, Any], *, task_pid: int | None = None) -> dict[str, str]:
    """The variables Slurm 22.05 sets for the batch script (the job's node 0)."""
    nodes = _nodes(ctx)
    first = nodes[0]
    job_id = str(ctx["jobId"])
    names = [str(n["name"]) for n in nodes]
    nodelist = node_list(names)
    env: dict[str, str] = {
        "ENVIRONMENT": "BATCH",
        "SLURM_JOB_ID": job_id,
        "SLURM_JOBID": job_id,
        "SLURM_JOB_NAME": str(ctx.get("jobName") or ""),
        "SLURM_JOB_PARTITION": str(ctx.get("partition") or ""),
    }
    if ctx.get("account"):
        env["SLURM_JOB_ACCOUNT"] = str(ctx["account"])
    if ctx.get("qos"):
        env["SLURM_JOB_QOS"] = str(ctx["qos"])
    env.update(
        {
            "SLURM_JOB_NODELIST": nodelist,
            "SLURM_NODELIST": nodelist,
            "SLURM_JOB_NUM_NODES": str(len(nodes)),
            "SLURM_NNODES": str(len(nodes)),
            "SLURM_NODEID": "0",
            "SLURMD_NODENAME": names[0],
            "SLURM_TOPOLOGY_ADDR": names[0],
            "SLURM_TOPOLOGY_ADDR_PATTERN": "node",
        }
    )
    if _tasks_requested(ctx):
        env["SLURM_NTASKS"] = env["SLURM_NPROCS"] = str(_job_tasks(ctx))
    if ctx.get("ntasksPerNode") is not None:
        env["SLURM_NTASKS_PER_NODE"] = str(ctx["ntasksPerNode"])
    env["SLURM_TASKS_PER_NODE"] = compress_counts([int(n.get("tasks") or 1) for n in nodes])
    if ctx.get("cpusPerTask") is not None:
        env["SLURM_CPUS_PER_TASK"] = str(ctx["cpusPerTask"])
    env["SLURM_CPUS_ON_NODE"] = str(int(first.get("cpus") or 1))
    env["SLURM_JOB_CPUS_PER_NODE"] = compress_counts([int(n.get("cpus") or 1) for n in nodes])
    if ctx.get("memPerNodeMb") is not None:
        env["SLURM_MEM_PER_NODE"] = str(ctx["memPerNodeMb"])
    elif ctx.get("memPerCpuMb") is not None:
        env["SLURM_MEM_PER_CPU"] = str(ctx["memPerCpuMb"])
    if ctx.get("memPerGpuMb") is not None:
        env["SLURM_MEM_PER_GPU"] = str(ctx["memPerGpuMb"])
    if ctx.get("gpus") is not None:
        env["SLURM_GPUS"] = str(ctx["gpus"])
    if ctx.get("gpusPerNode") is not None:
        env["SLURM_GPUS_PER_NODE"] = str(ctx["gpusPerNode"])
    if ctx.get("gpusPerTask") is not None:
        env["SLURM_GPUS_PER_TASK"] = str(ctx["gpusPerTask"])
    gpus = [int(g) for g in first.get("gpus") or ()]
    if gpus:
        env["SLURM_GPUS_ON_NODE"] = str(len(gpus))
        env["SLURM_JOB_GPUS"] = _ids(gpus)
        for name in GPU_VARIABLES:
            env[name] = _ids(gpus)
    env.update({"SLURM_PROCID": "0", "SLURM_LOCALID": "0", "SLURM_GTIDS": "0"})
    if task_pid is not None:
        env["SLURM_TASK_PID"] = str(task_pid)
    env.update(
        {
            "SLURM_PRIO_PROCESS": "0",
            "SLURM_JOB_UID": str(ctx.get("uid", 0)),
            "SLURM_JOB_GID": str(ctx.get("gid", 0)),
            "SLURM_JOB_USER": str(ctx.get("user") or ""),
            "SLURM_SUBMIT_DIR": str(ctx.get("submitDir") or ""),
            "SLURM_SUBMIT_HOST": str(ctx.get("submitHost") or ""),
            "SLURM_CLUSTER_NAME": str(ctx.get("clusterName") or "phalanx"),
            "SLURM_CONF": str(ctx.get("slurmConf") or DEFAULT_SLURM_CONF),
            "SLURM_NODE_ALIASES": "(null)",
            "SLURM_WORKING_CLUSTER": _working_cluster(ctx),
        }
    )
    if int(ctx.get("restartCount") or 0) > 0:
        env["SLURM_RESTART_COUNT"] = str(ctx["restartCount"])
    array = ctx.get("array")
    if array:
        env.update(
            {
                "SLURM_ARRAY_JOB_ID": str(array["jobId"]),
                "SLURM_ARRAY_TASK_ID": str(array["taskId"]),
                "SLURM_ARRAY_TASK_MIN": str(array["min"]),
                "SLURM_ARRAY_TASK_MAX": str(array["max"]),
                "SLURM_ARRAY_TASK_COUNT": str(array["count"]),
                "SLURM_ARRAY_TASK_STEP": str(array.get("step", 1)),
            }
        )
    if ctx.get("dependency"):
        env["SLURM_JOB_DEPENDENCY"] = str(ctx["dependency"])
    if ctx.get("components"):
        _het_batch_env(ctx, env)
    return env


# -- heterogeneous jobs ------------------------------------------------------------

HET_OPTION_VARIABLES = (
    "SLURM_CPUS_PER_TASK",
    "SLURM_NTASKS_PER_NODE",
    "SLURM_GPUS",
    "SLURM_GPUS_PER_NODE",
    "SLURM_GPUS_PER_TASK",
    "SLURM_MEM_PER_GPU",
)
"""What sbatch exports from a component's options: in a heterogeneous job only as
``_HET_GROUP_N`` (and ``_PACK_GROUP_N``) names, never plain."""


def het_group_names(name: str, index: int) -> tuple[str, str]:
    """``NAME_HET_GROUP_N`` and its legacy twin ``NAME_PACK_GROUP_N``."""
    return f"{name}_HET_GROUP_{index}", f"{name}_PACK_GROUP_{index}"


def component_context(ctx: Mapping[str, Any], index: int) -> dict[str, Any]:
    """Component ``index`` of a heterogeneous job as a context of its own (its id, nodes
    and options over the job's); the job's own context when it has no components."""
    components = ctx.get("components") or []
    if not components:
        return dict(ctx)
    merged = {**ctx, **components[index]}
    merged.pop("components", None)
    return merged


def _het_batch_env(ctx: Mapping[str, Any], env: dict[str, str]) -> None:
    """The heterogeneous job's variables of the batch script (slurmctld's
    ``_set_het_job_env`` and what sbatch exports per component)."""
    for name in HET_OPTION_VARIABLES:
        env.pop(name, None)
    components = list(ctx["components"])
    for index in range(len(components)):
        part = component_context(ctx, index)
        nodes = _nodes(part)
        values: dict[str, str] = {}
        if part.get("account"):
            values["SLURM_JOB_ACCOUNT"] = str(part["account"])
        values["SLURM_JOB_CPUS_PER_NODE"] = compress_counts(
            [int(n.get("cpus") or 1) for n in nodes]
        )
        values["SLURM_JOB_ID"] = str(part["jobId"])
        values["SLURM_JOB_NAME"] = str(part.get("jobName") or "")
        values["SLURM_JOB_NODELIST"] = node_list([str(n["name"]) for n in nodes])
        values["SLURM_JOB_NUM_NODES"] = str(len(nodes))
        values["SLURM_JOB_PARTITION"] = str(part.get("partition") or "")
        if part.get("qos"):
            values["SLURM_JOB_QOS"] = str(part["qos"])
        if part.get("memPerNodeMb") is not None:
            values["SLURM_MEM_PER_NODE"] = str(part["memPerNodeMb"])
        elif part.get("memPerCpuMb") is not None:
            values["SLURM_MEM_PER_CPU"] = str(part["memPerCpuMb"])
        values["SLURM_TASKS_PER_NODE"] = compress_counts([int(n.get("tasks") or 1) for n in nodes])
        if part.get("cpusPerTask") is not None:
            values["SLURM_CPUS_PER_TASK"] = str(part["cpusPerTask"])
        if _tasks_requested(part):
            values["SLURM_NTASKS"] = values["SLURM_NPROCS"] = str(_job_tasks(part))
        if part.get("ntasksPerNode") is not None:
            values["SLURM_NTASKS_PER_NODE"] = str(part["ntasksPerNode"])
        for key, variable in (
            ("gpus", "SLURM_GPUS"),
            ("gpusPerNode", "SLURM_GPUS_PER_NODE"),
            ("gpusPerTask", "SLURM_GPUS_PER_TASK"),
            ("memPerGpuMb", "SLURM_MEM_PER_GPU"),
        ):
            if part.get(key) is not None:
                values[variable] = str(part[key])
        for name, value in values.items():
            for variable in het_group_names(name, index):
                env[variable] = value
    env["SLURM_HET_SIZE"] = env["SLURM_PACK_SIZE"] = str(len(components))


def het_step_env(
    ctx: Mapping[str, Any], groups: Sequence[tuple[int, StepRequest]]
) -> list[TaskEnv]:
    """Every task of an ``srun`` step of a heterogeneous job, in rank order, over the
    components ``groups`` names (``(component, its request)``, in the step's order).

    As Slurm 22.05 lays out such a step: each component's tasks are laid out on its
    own allocation (as :func:`step_env` does a job's) and numbered after the previous
    components' (``SLURM_PROCID``, ``SLURM_NODEID``); every task sees the whole step
    in ``SLURM_STEP_*``, ``SLURM_NTASKS``, ``SLURM_NNODES``, ``SLURM_TASKS_PER_NODE``
    and, as srun overwrites them there, ``SLURM_JOB_NODELIST``, ``SLURM_NODELIST``,
    ``SLURM_JOB_NUM_NODES`` (the step's nodes, sorted by name) and
    ``SLURM_JOB_CPUS_PER_NODE`` (the components' allocations). ``SLURM_JOB_ID`` stays
    the job's (the leader's). Raises :class:`ValueError` with srun's wording.
    """
    parts: list[tuple[int, list[TaskEnv], dict[str, Any]]] = []
    for index, request in groups:
        part = component_context(ctx, index)
        tasks = step_env(part, request)
        per_node = part.get("ntasksPerNode")
        if per_node is not None and request.ntasks_per_node is None:
            # srun takes SLURM_NTASKS_PER_NODE_HET_GROUP_N as its --ntasks-per-node.
            for task in tasks:
                task.env["SLURM_NTASKS_PER_NODE"] = str(per_node)
        parts.append((index, tasks, part))
    step_counts: dict[str, int] = {}
    allocation: dict[str, int] = {}
    for _, tasks, part in parts:
        for task in tasks:
            step_counts[task.node] = step_counts.get(task.node, 0) + 1
        for node in _nodes(part):
            allocation.setdefault(str(node["name"]), int(node.get("cpus") or 1))
    names = _by_name(step_counts)
    total = sum(step_counts.values())
    tasks_per_node = compress_counts([step_counts[n] for n in names])
    common = {
        "SLURM_STEP_NODELIST": node_list(names),
        "SLURM_JOB_NODELIST": node_list(names),
        "SLURM_NODELIST": node_list(names),
        "SLURM_STEP_NUM_NODES": str(len(names)),
        "SLURM_NNODES": str(len(names)),
        "SLURM_JOB_NUM_NODES": str(len(names)),
        "SLURM_STEP_NUM_TASKS": str(total),
        "SLURM_NTASKS": str(total),
        "SLURM_NPROCS": str(total),
        "SLURM_STEP_TASKS_PER_NODE": tasks_per_node,
        "SLURM_TASKS_PER_NODE": tasks_per_node,
        "SLURM_JOB_CPUS_PER_NODE": compress_counts([allocation[n] for n in _by_name(allocation)]),
    }
    # srun keeps one environment for the whole step: its last component's distribution.
    distribution = parts[-1][1][0].env["SLURM_DISTRIBUTION"] if parts[-1][1] else "cyclic"
    out: list[TaskEnv] = []
    rank_offset = node_offset = 0
    for index, tasks, _ in parts:
        for task in tasks:
            env = dict(task.env)
            # SLURM_JOB_CPUS_PER_NODE_PACK_GROUP_0 is the batch script's, untouched.
            env.pop("SLURM_JOB_CPUS_PER_NODE_PACK_GROUP_0", None)
            env.update(common)
            env["SLURM_DISTRIBUTION"] = distribution
            rank = task.rank + rank_offset
            node_id = task.node_id + node_offset
            gtids = [int(r) + rank_offset for r in env["SLURM_GTIDS"].split(",")]
            env["SLURM_PROCID"] = str(rank)
            env["SLURM_NODEID"] = str(node_id)
            env["SLURM_GTIDS"] = ",".join(str(r) for r in gtids)
            out.append(TaskEnv(task.node, node_id, rank, task.local_id, task.gpus, env, index))
        rank_offset += len(tasks)
        node_offset += len({t.node for t in tasks})
    return out


def _by_name(names: Mapping[str, int]) -> list[str]:
    """Node names in hostlist order (``gpu2`` before ``gpu10``), as Slurm sorts a step's."""
    return list(hostlist.expand_hostlist(node_list(list(names)))) if names else []


# -- srun steps ----------------------------------------------------------------


def step_layout(ctx: Mapping[str, Any], step: StepRequest) -> list[int]:
    """Tasks per node of the step, over the first nodes of the allocation.

    ``-N`` picks the node count (default: all the job's nodes, fewer when fewer
    tasks were asked for); ``--ntasks-per-node`` fixes the count per node;
    ``-n`` alone spreads tasks evenly in blocks (the first nodes get one more).
    With neither, the step runs the job's tasks (its ``SLURM_TASKS_PER_NODE``)
    when the job asked for tasks, else one task per node, as Slurm does.
    Raises :class:`ValueError` with srun's wording when the request does not fit.
    """
    nodes = _nodes(ctx)
    available = len(nodes)
    if step.nodes is not None and step.nodes < 1:
        raise ValueError(f"Invalid node count: {step.nodes}")
    if step.nodes is not None and step.nodes > available:
        raise ValueError(
            "Unable to create step for job "
            f"{ctx['jobId']}: Requested node configuration is not available"
        )
    if step.ntasks is not None and step.ntasks < 1:
        raise ValueError(f"Invalid number of tasks: {step.ntasks}")
    per_node = step.ntasks_per_node
    ntasks = step.ntasks
    if ntasks is None and per_node is None:
        job_per_node = ctx.get("ntasksPerNode")
        if step.nodes is None or step.nodes == available:
            if _tasks_requested(ctx):
                counts = [int(n.get("tasks") or 1) for n in nodes]
                if ctx.get("ntasks") is not None and sum(counts) != int(ctx["ntasks"]):
                    ntasks = int(ctx["ntasks"])
                else:
                    return counts
            else:
                return [1] * available
        elif job_per_node is not None:
            per_node = int(job_per_node)
        else:
            return [1] * int(step.nodes)
    if step.nodes is not None:
        count = int(step.nodes)
    elif ntasks is not None and per_node is not None:
        count = min(available, max(1, -(-ntasks // per_node)))
    elif ntasks is not None:
        count = min(available, ntasks)
    else:
        count = available
    if ntasks is not None and ntasks < count:
        count = ntasks  # srun warns "can't run N processes on M nodes, setting nnodes to N"
    if per_node is not None:
        counts = [per_node] * count
        if ntasks is not None:
            if ntasks > per_node * count:
                raise ValueError(
                    "Unable to create step for job "
                    f"{ctx['jobId']}: Requested node configuration is not available"
                )
            left = ntasks
            counts = []
            for _ in range(count):
                take = min(per_node, left)
                counts.append(take)
                left -= take
        return counts
    assert ntasks is not None
    base, extra = divmod(ntasks, count)
    return [base + (1 if i < extra else 0) for i in range(count)]


def step_env(ctx: Mapping[str, Any], step: StepRequest) -> list[TaskEnv]:
    """Every task of an ``srun`` step, in rank order, with the variables srun sets for it."""
    nodes = _nodes(ctx)
    counts = step_layout(ctx, step)
    step_nodes = nodes[: len(counts)]
    ntasks = sum(counts)
    names = [str(n["name"]) for n in step_nodes]
    nodelist = node_list(names)
    tasks_per_node = compress_counts(counts)
    common: dict[str, str] = {
        "SLURM_STEP_ID": str(step.step_id),
        "SLURM_STEPID": str(step.step_id),
        "SLURM_STEP_NODELIST": nodelist,
        "SLURM_STEP_NUM_NODES": str(len(step_nodes)),
        "SLURM_STEP_NUM_TASKS": str(ntasks),
        "SLURM_STEP_TASKS_PER_NODE": tasks_per_node,
        "SLURM_NNODES": str(len(step_nodes)),
        "SLURM_NTASKS": str(ntasks),
        "SLURM_NPROCS": str(ntasks),
        "SLURM_TASKS_PER_NODE": tasks_per_node,
        "SLURM_DISTRIBUTION": "cyclic" if ntasks <= len(step_nodes) else "block",
        "SLURM_JOB_CPUS_PER_NODE_PACK_GROUP_0": compress_counts(
            [int(n.get("cpus") or 1) for n in nodes]
        ),
        "SLURM_LAUNCH_NODE_IPADDR": step.launch_host,
        "SLURM_SRUN_COMM_HOST": step.launch_host,
        "SLURM_UMASK": f"{step.umask:04o}",
    }
    if step.ntasks_per_node is not None:
        common["SLURM_NTASKS_PER_NODE"] = str(step.ntasks_per_node)
    if step.cpus_per_task is not None:
        common["SLURM_CPUS_PER_TASK"] = str(step.cpus_per_task)
    if step.gpus_per_task is not None:
        common["SLURM_GPUS_PER_TASK"] = str(step.gpus_per_task)
    if step.comm_port is not None:
        common["SLURM_SRUN_COMM_PORT"] = str(step.comm_port)
        common["SLURM_STEP_LAUNCHER_PORT"] = str(step.comm_port)
    out: list[TaskEnv] = []
    rank = 0
    for node_id, (node, count) in enumerate(zip(step_nodes, counts, strict=True)):
        name = str(node["name"])
        node_gpus = [int(g) for g in node.get("gpus") or ()]
        gtids = ",".join(str(r) for r in range(rank, rank + count))
        if step.gpus_per_task is not None:
            # --gpus-per-task implies --gpu-bind=per_task:<n>: each task its own slice.
            step_gpus = node_gpus[: step.gpus_per_task * count]
        else:
            step_gpus = node_gpus
        for local_id in range(count):
            if step.gpus_per_task is not None:
                k = step.gpus_per_task
                visible = step_gpus[local_id * k : (local_id + 1) * k]
            else:
                visible = step_gpus
            env = dict(common)
            env.update(
                {
                    "SLURM_PROCID": str(rank),
                    "SLURM_LOCALID": str(local_id),
                    "SLURM_NODEID": str(node_id),
                    "SLURM_GTIDS": gtids,
                    "SLURMD_NODENAME": name,
                    "SLURM_TOPOLOGY_ADDR": name,
                    "SLURM_CPUS_ON_NODE": str(int(node.get("cpus") or 1)),
                }
            )
            if step_gpus:
                env["SLURM_STEP_GPUS"] = _ids(step_gpus)
                env["SLURM_GPUS_ON_NODE"] = str(len(step_gpus))
            if visible:
                for var in GPU_VARIABLES:
                    env[var] = _ids(visible)
            out.append(TaskEnv(name, node_id, rank, local_id, tuple(visible), env))
            rank += 1
    return out
