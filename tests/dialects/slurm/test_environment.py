"""The Slurm environment of phalanx against environments captured on real Slurm 22.05.

The captures are ``../shared/peers/slurm/env-contract/*.txt`` beside the
checkout (the tests skip when it is absent). Every SLURM/CUDA/GPU/ROCR
variable name must match; values match exactly unless they are per-run (ids,
pids, hosts, ports, paths, the cluster's name), which are compared by shape.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from phalanx.dialects.slurm.environment import (
    StepRequest,
    batch_env,
    compress_counts,
    compress_hostlist,
    step_env,
    step_layout,
)
from tests.shared import require_shared

CAPTURES = ("peers", "slurm", "env-contract")
PREFIX = re.compile(r"^(SLURM|SLURMD|CUDA|GPU_|ROCR)")

SHAPES = {
    "SLURM_TASK_PID": r"\d+",
    "SLURM_SUBMIT_DIR": r"/.*",
    "SLURM_SUBMIT_HOST": r"[\w.-]+",
    "SLURM_CLUSTER_NAME": r"[\w-]+",
    "SLURM_WORKING_CLUSTER": r"[\w-]+:[\w.-]+:\d+:9728:109",
    "SLURM_SRUN_COMM_PORT": r"\d+",
    "SLURM_STEP_LAUNCHER_PORT": r"\d+",
    "SLURM_LAUNCH_NODE_IPADDR": r"[\d.]+",
    "SLURM_SRUN_COMM_HOST": r"[\w.-]+",
}
"""Per-run values, compared by shape; every other variable must be equal."""

NOT_SET = {"SLURM_TASK_PID"}
"""Set by the launcher once the process exists, not by :func:`batch_env` alone."""


def captured(name: str) -> dict[str, str]:
    path = require_shared(*CAPTURES, name)
    lines = path.read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if "=" in line)


def slurm_only(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if PREFIX.match(k)}


def compare(ours: dict[str, str], real: dict[str, str]) -> None:
    ours = slurm_only(ours)
    assert sorted(ours) == sorted(real)
    for name, value in real.items():
        shape = SHAPES.get(name)
        if shape is not None:
            assert re.fullmatch(shape, ours[name]), (name, ours[name])
            assert re.fullmatch(shape, value), (name, value)
        else:
            assert ours[name] == value, name


def two_nodes() -> dict[str, Any]:
    """``--nodes=2 --gpus-per-node=8 --ntasks-per-node=8 --cpus-per-task=8 --mem=256G``."""
    node = {"cpus": 64, "gpus": list(range(8)), "memMb": 262144, "tasks": 8}
    return {
        "jobId": 22,
        "jobName": "envcap",
        "partition": "gpu",
        "account": "teama",
        "qos": "normal",
        "user": "root",
        "uid": 0,
        "gid": 0,
        "submitDir": "/tmp/slurm-envcap",
        "submitHost": "vm",
        "clusterName": "phalanx",
        "nodes": [{"name": "gpu1", **node}, {"name": "gpu2", **node}],
        "ntasks": None,
        "ntasksPerNode": 8,
        "cpusPerTask": 8,
        "gpus": None,
        "gpusPerNode": 8,
        "gpusPerTask": None,
        "memPerNodeMb": 262144,
        "memPerCpuMb": None,
        "memPerGpuMb": None,
        "array": None,
        "dependency": None,
        "timeLimitS": 600,
        "url": "http://127.0.0.1:6900",
        "token": None,
    }


def one_node(job_id: int, node_gpus: list[int], **changes: Any) -> dict[str, Any]:
    ctx = two_nodes()
    ctx.update(
        jobId=job_id,
        jobName="wrap",
        nodes=[{"name": "gpu1", "cpus": 1, "gpus": node_gpus, "memMb": 8000, "tasks": 1}],
        ntasksPerNode=None,
        cpusPerTask=None,
        gpusPerNode=None,
        memPerNodeMb=None,
        memPerCpuMb=8000,
    )
    ctx.update(changes)
    return ctx


def test_two_node_batch() -> None:
    env = batch_env(two_nodes(), task_pid=4242)
    compare(env, captured("2node-batch-env.txt"))
    assert env["ENVIRONMENT"] == "BATCH"


def test_two_node_srun_step() -> None:
    base = batch_env(two_nodes(), task_pid=1)
    tasks = step_env(two_nodes(), StepRequest(0, ntasks=2, ntasks_per_node=1, comm_port=42043))
    assert [(t.rank, t.node, t.node_id, t.local_id) for t in tasks] == [
        (0, "gpu1", 0, 0),
        (1, "gpu2", 1, 0),
    ]
    for task in tasks:
        env = {**base, **task.env, "SLURM_TASK_PID": "99"}
        compare(env, captured(f"2node-srun-step-env-node{task.node_id}.txt"))


def test_array_task() -> None:
    array = {"jobId": 23, "taskId": 1, "min": 0, "max": 3, "count": 4, "step": 1}
    ctx = one_node(26, [1], gpus=1, array=array)
    compare(batch_env(ctx, task_pid=7), captured("array-task-env.txt"))


def test_dependency_job() -> None:
    ctx = one_node(24, [], dependency="afterok:23")
    compare(batch_env(ctx, task_pid=7), captured("dependency-job-env.txt"))


def test_optional_variables() -> None:
    ctx = one_node(5, [], qos=None, account=None, ntasks=3, memPerCpuMb=None)
    env = batch_env(ctx)
    assert "SLURM_JOB_QOS" not in env and "SLURM_JOB_ACCOUNT" not in env
    assert env["SLURM_NTASKS"] == env["SLURM_NPROCS"] == "3"
    assert "SLURM_NTASKS_PER_NODE" not in env and "SLURM_TASK_PID" not in env
    assert "SLURM_MEM_PER_CPU" not in env and "SLURM_MEM_PER_NODE" not in env
    assert "CUDA_VISIBLE_DEVICES" not in env
    assert env["SLURM_CONF"] == "/etc/slurm/slurm.conf"
    assert batch_env({**ctx, "slurmConf": "/x/slurm.conf"})["SLURM_CONF"] == "/x/slurm.conf"


def test_block_layout_of_a_full_step() -> None:
    tasks = step_env(two_nodes(), StepRequest(3))
    assert [t.rank for t in tasks] == list(range(16))
    assert [t.node for t in tasks] == ["gpu1"] * 8 + ["gpu2"] * 8
    assert [t.local_id for t in tasks] == list(range(8)) * 2
    assert tasks[9].env["SLURM_GTIDS"] == "8,9,10,11,12,13,14,15"
    assert tasks[0].env["SLURM_DISTRIBUTION"] == "block"
    assert tasks[0].env["SLURM_STEP_TASKS_PER_NODE"] == "8(x2)"
    assert tasks[0].env["SLURM_STEP_ID"] == "3"
    assert "SLURM_SRUN_COMM_PORT" not in tasks[0].env


def test_layouts() -> None:
    ctx = two_nodes()
    assert step_layout(ctx, StepRequest(0, ntasks=3)) == [2, 1]
    assert step_layout(ctx, StepRequest(0, nodes=1)) == [8]
    assert step_layout(ctx, StepRequest(0, ntasks=1)) == [1]
    assert step_layout(ctx, StepRequest(0, ntasks_per_node=2)) == [2, 2]
    assert step_layout(ctx, StepRequest(0, ntasks=3, ntasks_per_node=2)) == [2, 1]
    no_tasks = {**ctx, "ntasksPerNode": None}
    assert step_layout(no_tasks, StepRequest(0)) == [1, 1]
    with pytest.raises(ValueError, match="not available"):
        step_layout(ctx, StepRequest(0, nodes=3))


def test_gpus_per_task_binds_a_slice() -> None:
    tasks = step_env(two_nodes(), StepRequest(0, ntasks_per_node=4, gpus_per_task=2))
    assert [t.gpus for t in tasks[:4]] == [(0, 1), (2, 3), (4, 5), (6, 7)]
    assert tasks[1].env["CUDA_VISIBLE_DEVICES"] == "2,3"
    assert tasks[1].env["SLURM_STEP_GPUS"] == "0,1,2,3,4,5,6,7"


def test_formats() -> None:
    assert compress_counts([2, 2, 2, 1]) == "2(x3),1"
    assert compress_counts([72, 72, 36]) == "72(x2),36"
    assert compress_counts([8]) == "8"
    assert compress_hostlist(["tux2", "tux1", "tux2"]) == "tux[2,1-2]"
    assert compress_hostlist(["tux1", "tux2", "tux2"]) == "tux[1-2,2]"
    assert compress_hostlist(["n09", "n10", "login"]) == "n[09-10],login"
    assert compress_hostlist(["gpu1"]) == "gpu1"
