"""Heterogeneous jobs (``#SBATCH hetjob``, ``sbatch ... : ...``, ``srun --het-group``).

What sbatch reads for each component, the refusals, the submission (one pod set per
component, one ``slurm.components`` record) and the environments, compared with a real
Slurm 22.05.8 (``../shared/peers/slurm``): the batch environments below were dumped
there (``env | sort``) and the step environments checked variable by variable.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from phalanx.dialects.slurm.environment import StepRequest, batch_env, het_step_env
from phalanx.dialects.slurm.sbatch import (
    SbatchRequest,
    build_request,
    submission_dict,
    to_submission,
)
from phalanx.errors import Invalid
from phalanx.model import JobSubmission, SlurmRequest
from phalanx.runtime.srun import parse_args
from phalanx.runtime.srunhet import HetError, parse_groups, plan

SCRIPT = """#!/bin/bash
#SBATCH -J het --time=10 --mem=4G -A ml -p gpu
#SBATCH -N1 -n2 -c2 --gpus-per-node=2
#SBATCH hetjob
#SBATCH -N2 --ntasks-per-node=1 --gpus-per-node=h100:4 -p gpu
srun hostname
"""


def _request(
    argv: list[str], script: str | None = SCRIPT, *, lenient: bool = False, **env: str
) -> SbatchRequest:
    return build_request(
        argv,
        script_text=script,
        script_path="het.sh" if script is not None else None,
        env=env,
        cwd="/home/u",
        now=0.0,
        user="u",
        lenient=lenient,
        submit_host="login1",
    )


def _refused(argv: list[str], script: str | None = SCRIPT, **kw: Any) -> str:
    with pytest.raises(Invalid) as info:
        submission_dict(_request(argv, script, **kw), env={})
    return info.value.detail


# ----------------------------------------------------------------------------- sbatch


def test_script_components_propagate_what_sbatch_propagates() -> None:
    req = _request([])
    assert len(req.components) == 2
    first, second = req.components
    assert (first.nodes, first.ntasks, first.cpus_per_task) == ((1, 1), 2, 2)
    assert (second.nodes, second.ntasks_per_node, second.cpus_per_task) == ((2, 2), 1, None)
    # Job name, time, account and --mem propagate; sizes, GPUs and --partition do not.
    assert (second.job_name, second.time, second.account, second.mem) == ("het", 600, "ml", 4096)
    assert first.gpus_per_node is not None and first.gpus_per_node.count == 2
    assert second.gpus_per_node is not None and second.gpus_per_node.type == "h100"
    assert req.options is not None and req.options.job_name == "het"


def test_the_command_line_splits_at_colons() -> None:
    req = _request(
        ["-N1", "--gpus-per-node=2", ":", "-N1", "--gpus-per-node=4", "het.sh", "a", ":", "b"],
        "#!/bin/sh\ntrue\n",
    )
    assert [c.gpus_per_node.count for c in req.components if c.gpus_per_node] == [2, 4]
    # sbatch drops every `:` from the script's arguments (seen on Slurm 22.05).
    assert req.script_args == ("a", "b")
    assert req.script_path == "het.sh"


def test_the_last_command_line_group_serves_the_scripts_later_components() -> None:
    # Slurm 22.05: `sbatch --gpus-per-node=1 : --gpus-per-node=3 g2.sh` of a script with
    # three components gives them gres:gpu:1, gres:gpu:3, gres:gpu:3.
    script = "#!/bin/sh\n#SBATCH -N1\n#SBATCH hetjob\n#SBATCH -N1\n#SBATCH HETJOB\n#SBATCH -N1\n"
    req = _request(["--gpus-per-node=1", ":", "--gpus-per-node=3"], script + "true\n")
    assert [c.gpus_per_node.count for c in req.components if c.gpus_per_node] == [1, 3, 3]
    one = _request(["--gpus-per-node=2"], script + "true\n")
    assert [c.gpus_per_node.count for c in one.components if c.gpus_per_node] == [2, 2, 2]


def test_wrap_in_the_last_component_names_the_job_wrap() -> None:
    # Slurm 22.05: `sbatch -N1 : -N1 --wrap CMD` is a job named `wrap`.
    data = submission_dict(_request(["-N1", ":", "-N1", "--wrap", "hostname"], None), env={})
    assert data["name"] == "wrap" and data["run"]["script"].endswith("hostname\n")


def test_packjob_is_the_old_separator_with_sbatchs_warning() -> None:
    req = _request([], "#!/bin/sh\n#SBATCH -N1\n#SBATCH packjob\n#SBATCH -N2\ntrue\n")
    assert [c.nodes for c in req.components] == [(1, 1), (2, 2)]
    assert any('"packjob" component separator is being deprecated' in w for w in req.warnings)


def test_the_submission_has_a_pod_set_per_component() -> None:
    data = submission_dict(_request([]), env={})
    assert [p["name"] for p in data["podSets"]] == ["het-group-0", "het-group-1"]
    first, second = data["podSets"]
    assert (first["count"], first.get("tasksPerNode"), first["requests"]) == (
        1,
        1,
        {"nvidia.com/gpu": 2, "cpu": "4", "memory": 4096 << 20},
    )
    assert (second["count"], second["tasksPerNode"], second["requests"]) == (
        2,
        1,
        {"nvidia.com/gpu": 4, "cpu": "1", "memory": 4096 << 20},
    )
    assert second["nodeSelector"] == {"slurm.phalanx.io/gpu-type": "h100"}
    assert data["clusterQueue"] == "gpu" and data["tenant"] == "ml" and data["name"] == "het"
    slurm = data["slurm"]
    # The top level is the leader's (component 0's), as the plain SLURM_* names are.
    assert (slurm["nodes"], slurm["ntasks"], slurm["cpusPerTask"]) == (1, 2, 2)
    assert slurm["components"] == [
        {"nodes": 1, "ntasks": 2, "cpusPerTask": 2, "gpusPerNode": 2, "memPerNodeMb": 4096,
         "partition": "gpu"},
        {"nodes": 2, "ntasksPerNode": 1, "gpusPerNode": 4, "gpuType": "h100",
         "memPerNodeMb": 4096, "partition": "gpu"},
    ]  # fmt: skip
    # The model reads it and writes back the same keys in the same order.
    sub = to_submission(_request([]), env={})
    assert sub.slurm is not None and sub.slurm.heterogeneous
    assert json.dumps(sub.to_dict()["slurm"]) == json.dumps(slurm)
    assert [p.ntasks_per_node for p in sub.slurm.parts()] == [None, 1]
    again = JobSubmission.model_validate_json(json.dumps(sub.to_dict()))
    assert again == sub


def test_an_ordinary_record_is_one_part() -> None:
    record = SlurmRequest.model_validate({"jobName": "x", "nodes": 2, "gpusPerNode": 8})
    assert not record.heterogeneous
    [part] = record.parts()
    assert (part.nodes, part.gpus_per_node) == (2, 8)
    assert record.with_part(0, mem_per_cpu_mb=100).mem_per_cpu_mb == 100


def test_a_components_nodelist_is_excluded_from_the_others() -> None:
    data = submission_dict(_request(["-w", "n1", ":", "-N1", "job.sh"], "#!/bin/sh\n"), env={})
    assert data["podSets"][0]["nodeNames"] == ["n1"]
    assert data["podSets"][1]["excludeNodes"] == ["n1"]
    message = _refused(["-w", "n1", ":", "-w", "n1", "job.sh"], "#!/bin/sh\n")
    assert "Requested node configuration is not available" in message
    assert "components 0 and 1 both name n1" in message


@pytest.mark.parametrize(
    ("argv", "script", "expected"),
    [
        (
            ["--array=0-1", "-N1", ":", "-N1", "job.sh"],
            "#!/bin/sh\n",
            "sbatch: error: Batch job submission failed: Invalid job array specification "
            "(--array: a heterogeneous job cannot be a job array, as in Slurm)",
        ),
        (
            [],
            "#!/bin/sh\n#SBATCH -N1 --array=0-1\n#SBATCH hetjob\n#SBATCH -N1\n",
            "sbatch: error: Batch job submission failed: Invalid job array specification",
        ),
        (
            ["-t", "10", ":", "-t", "20", "job.sh"],
            "#!/bin/sh\n",
            "sbatch: error: --time differs between heterogeneous job components 0 and 1",
        ),
        (
            ["-p", "a", ":", "-p", "b", "job.sh"],
            "#!/bin/sh\n",
            "heterogeneous job components in different partitions (a, b) are not supported",
        ),
        (
            # Slurm 22.05 refuses it too: component 1 inherits --mem.
            ["--mem=1000", ":", "--mem-per-cpu=500", "job.sh"],
            "#!/bin/sh\n",
            "sbatch: error: --mem, --mem-per-cpu, and --mem-per-gpu are mutually exclusive.",
        ),
        (
            [],
            "#!/bin/sh\n#SBATCH -N1 : -N2\ntrue\n",
            "sbatch: fatal: het.sh: line 2: Unexpected `:` in [ : -N2]",
        ),
        (
            ["--het-group=1", "job.sh"],
            "#!/bin/sh\n",
            "sbatch: unrecognized option '--het-group=1'",
        ),
    ],
)
def test_refusals(argv: list[str], script: str, expected: str) -> None:
    assert expected in _refused(argv, script)


def test_a_later_component_may_repeat_a_job_option_but_not_change_it() -> None:
    req = _request(["-t", "10", ":", "-t", "10", "job.sh"], "#!/bin/sh\n")
    assert [c.time for c in req.components] == [600, 600]


def test_what_sbatch_drops_on_a_hetjob_line_is_named() -> None:
    # Slurm 22.05 ignores `--gpus-per-node=3` after `hetjob`, and a `hetjob` after
    # another word (with the rest of that line) without starting a component.
    after = "#!/bin/sh\n#SBATCH -N1\n#SBATCH hetjob --gpus-per-node=3\ntrue\n"
    assert "sbatch ignores what follows `hetjob` on its line (--gpus-per-node=3)" in _refused(
        [], after
    )
    req = _request([], after, lenient=True)
    assert len(req.components) == 2 and req.components[1].gpus_per_node is None
    inside = "#!/bin/sh\n#SBATCH -N1 -J a2 hetjob --gpus-per-node=3\n#SBATCH --comment=x\ntrue\n"
    assert "`hetjob` separates heterogeneous job components only at the start" in _refused(
        [], inside
    )
    req = _request([], inside, lenient=True)
    assert req.components == () and req.options.comment == "x"
    assert req.options.gpus_per_node is None


def test_too_many_components() -> None:
    argv = [*[w for _ in range(19) for w in ("-N1", ":")][:-1], "job.sh"]
    assert "phalanx runs at most 18" in _refused(argv, "#!/bin/sh\n")


# ----------------------------------------------------------------------------- environments

# `env | grep -E '^(SLURM|CUDA)' | sort` in the batch script of job 6 on Slurm 22.05.8:
#   #SBATCH -N1 -n2 -c2 --gpus-per-node=2 --mem=1000
#   #SBATCH hetjob
#   #SBATCH -N2 --ntasks-per-node=1 --gpus=4 --mem=3000
PROBE_6 = """\
CUDA_VISIBLE_DEVICES=0,1
SLURMD_NODENAME=gpu3
SLURM_CLUSTER_NAME=localgpu
SLURM_CONF=/etc/slurm/slurm.conf
SLURM_CPUS_ON_NODE=4
SLURM_CPUS_PER_TASK_HET_GROUP_0=2
SLURM_CPUS_PER_TASK_PACK_GROUP_0=2
SLURM_GPUS_HET_GROUP_1=4
SLURM_GPUS_ON_NODE=2
SLURM_GPUS_PACK_GROUP_1=4
SLURM_GPUS_PER_NODE_HET_GROUP_0=2
SLURM_GPUS_PER_NODE_PACK_GROUP_0=2
SLURM_GTIDS=0
SLURM_HET_SIZE=2
SLURM_JOBID=6
SLURM_JOB_ACCOUNT=teama
SLURM_JOB_ACCOUNT_HET_GROUP_0=teama
SLURM_JOB_ACCOUNT_HET_GROUP_1=teama
SLURM_JOB_ACCOUNT_PACK_GROUP_0=teama
SLURM_JOB_ACCOUNT_PACK_GROUP_1=teama
SLURM_JOB_CPUS_PER_NODE=4
SLURM_JOB_CPUS_PER_NODE_HET_GROUP_0=4
SLURM_JOB_CPUS_PER_NODE_HET_GROUP_1=1(x2)
SLURM_JOB_CPUS_PER_NODE_PACK_GROUP_0=4
SLURM_JOB_CPUS_PER_NODE_PACK_GROUP_1=1(x2)
SLURM_JOB_GID=0
SLURM_JOB_GPUS=0,1
SLURM_JOB_ID=6
SLURM_JOB_ID_HET_GROUP_0=6
SLURM_JOB_ID_HET_GROUP_1=7
SLURM_JOB_ID_PACK_GROUP_0=6
SLURM_JOB_ID_PACK_GROUP_1=7
SLURM_JOB_NAME=probe
SLURM_JOB_NAME_HET_GROUP_0=probe
SLURM_JOB_NAME_HET_GROUP_1=probe
SLURM_JOB_NAME_PACK_GROUP_0=probe
SLURM_JOB_NAME_PACK_GROUP_1=probe
SLURM_JOB_NODELIST=gpu3
SLURM_JOB_NODELIST_HET_GROUP_0=gpu3
SLURM_JOB_NODELIST_HET_GROUP_1=gpu[1-2]
SLURM_JOB_NODELIST_PACK_GROUP_0=gpu3
SLURM_JOB_NODELIST_PACK_GROUP_1=gpu[1-2]
SLURM_JOB_NUM_NODES=1
SLURM_JOB_NUM_NODES_HET_GROUP_0=1
SLURM_JOB_NUM_NODES_HET_GROUP_1=2
SLURM_JOB_NUM_NODES_PACK_GROUP_0=1
SLURM_JOB_NUM_NODES_PACK_GROUP_1=2
SLURM_JOB_PARTITION=gpu
SLURM_JOB_PARTITION_HET_GROUP_0=gpu
SLURM_JOB_PARTITION_HET_GROUP_1=gpu
SLURM_JOB_PARTITION_PACK_GROUP_0=gpu
SLURM_JOB_PARTITION_PACK_GROUP_1=gpu
SLURM_JOB_QOS=normal
SLURM_JOB_QOS_HET_GROUP_0=normal
SLURM_JOB_QOS_HET_GROUP_1=normal
SLURM_JOB_QOS_PACK_GROUP_0=normal
SLURM_JOB_QOS_PACK_GROUP_1=normal
SLURM_JOB_UID=0
SLURM_JOB_USER=root
SLURM_LOCALID=0
SLURM_MEM_PER_NODE=1000
SLURM_MEM_PER_NODE_HET_GROUP_0=1000
SLURM_MEM_PER_NODE_HET_GROUP_1=3000
SLURM_MEM_PER_NODE_PACK_GROUP_0=1000
SLURM_MEM_PER_NODE_PACK_GROUP_1=3000
SLURM_NNODES=1
SLURM_NODEID=0
SLURM_NODELIST=gpu3
SLURM_NODE_ALIASES=(null)
SLURM_NPROCS=2
SLURM_NPROCS_HET_GROUP_0=2
SLURM_NPROCS_HET_GROUP_1=2
SLURM_NPROCS_PACK_GROUP_0=2
SLURM_NPROCS_PACK_GROUP_1=2
SLURM_NTASKS=2
SLURM_NTASKS_HET_GROUP_0=2
SLURM_NTASKS_HET_GROUP_1=2
SLURM_NTASKS_PACK_GROUP_0=2
SLURM_NTASKS_PACK_GROUP_1=2
SLURM_NTASKS_PER_NODE_HET_GROUP_1=1
SLURM_NTASKS_PER_NODE_PACK_GROUP_1=1
SLURM_PACK_SIZE=2
SLURM_PRIO_PROCESS=0
SLURM_PROCID=0
SLURM_SUBMIT_DIR=/tmp/hp
SLURM_SUBMIT_HOST=vm
SLURM_TASKS_PER_NODE=2
SLURM_TASKS_PER_NODE_HET_GROUP_0=2
SLURM_TASKS_PER_NODE_HET_GROUP_1=1(x2)
SLURM_TASKS_PER_NODE_PACK_GROUP_0=2
SLURM_TASKS_PER_NODE_PACK_GROUP_1=1(x2)
SLURM_TASK_PID=24793
SLURM_TOPOLOGY_ADDR=gpu3
SLURM_TOPOLOGY_ADDR_PATTERN=node
SLURM_WORKING_CLUSTER=localgpu:127.0.0.1:6817:9728:109
"""

# The capture of job 68 (../shared/peers/slurm, `#SBATCH -N1 --gpus-per-node=2` /
# `hetjob` / `-N1 --gpus-per-node=4`, DefMemPerCPU=8000).
CAPTURE_68 = """\
CUDA_VISIBLE_DEVICES=0,1
GPU_DEVICE_ORDINAL=0,1
ROCR_VISIBLE_DEVICES=0,1
SLURMD_NODENAME=gpu1
SLURM_CLUSTER_NAME=localgpu
SLURM_CONF=/etc/slurm/slurm.conf
SLURM_CPUS_ON_NODE=1
SLURM_GPUS_ON_NODE=2
SLURM_GPUS_PER_NODE_HET_GROUP_0=2
SLURM_GPUS_PER_NODE_HET_GROUP_1=4
SLURM_GPUS_PER_NODE_PACK_GROUP_0=2
SLURM_GPUS_PER_NODE_PACK_GROUP_1=4
SLURM_GTIDS=0
SLURM_HET_SIZE=2
SLURM_JOBID=68
SLURM_JOB_ACCOUNT=teama
SLURM_JOB_ACCOUNT_HET_GROUP_0=teama
SLURM_JOB_ACCOUNT_HET_GROUP_1=teama
SLURM_JOB_ACCOUNT_PACK_GROUP_0=teama
SLURM_JOB_ACCOUNT_PACK_GROUP_1=teama
SLURM_JOB_CPUS_PER_NODE=1
SLURM_JOB_CPUS_PER_NODE_HET_GROUP_0=1
SLURM_JOB_CPUS_PER_NODE_HET_GROUP_1=1
SLURM_JOB_CPUS_PER_NODE_PACK_GROUP_0=1
SLURM_JOB_CPUS_PER_NODE_PACK_GROUP_1=1
SLURM_JOB_GID=0
SLURM_JOB_GPUS=0,1
SLURM_JOB_ID=68
SLURM_JOB_ID_HET_GROUP_0=68
SLURM_JOB_ID_HET_GROUP_1=69
SLURM_JOB_ID_PACK_GROUP_0=68
SLURM_JOB_ID_PACK_GROUP_1=69
SLURM_JOB_NAME=hetscript
SLURM_JOB_NAME_HET_GROUP_0=hetscript
SLURM_JOB_NAME_HET_GROUP_1=hetscript
SLURM_JOB_NAME_PACK_GROUP_0=hetscript
SLURM_JOB_NAME_PACK_GROUP_1=hetscript
SLURM_JOB_NODELIST=gpu1
SLURM_JOB_NODELIST_HET_GROUP_0=gpu1
SLURM_JOB_NODELIST_HET_GROUP_1=gpu2
SLURM_JOB_NODELIST_PACK_GROUP_0=gpu1
SLURM_JOB_NODELIST_PACK_GROUP_1=gpu2
SLURM_JOB_NUM_NODES=1
SLURM_JOB_NUM_NODES_HET_GROUP_0=1
SLURM_JOB_NUM_NODES_HET_GROUP_1=1
SLURM_JOB_NUM_NODES_PACK_GROUP_0=1
SLURM_JOB_NUM_NODES_PACK_GROUP_1=1
SLURM_JOB_PARTITION=gpu
SLURM_JOB_PARTITION_HET_GROUP_0=gpu
SLURM_JOB_PARTITION_HET_GROUP_1=gpu
SLURM_JOB_PARTITION_PACK_GROUP_0=gpu
SLURM_JOB_PARTITION_PACK_GROUP_1=gpu
SLURM_JOB_QOS=normal
SLURM_JOB_QOS_HET_GROUP_0=normal
SLURM_JOB_QOS_HET_GROUP_1=normal
SLURM_JOB_QOS_PACK_GROUP_0=normal
SLURM_JOB_QOS_PACK_GROUP_1=normal
SLURM_JOB_UID=0
SLURM_JOB_USER=root
SLURM_LOCALID=0
SLURM_MEM_PER_CPU=8000
SLURM_MEM_PER_CPU_HET_GROUP_0=8000
SLURM_MEM_PER_CPU_HET_GROUP_1=8000
SLURM_MEM_PER_CPU_PACK_GROUP_0=8000
SLURM_MEM_PER_CPU_PACK_GROUP_1=8000
SLURM_NNODES=1
SLURM_NODEID=0
SLURM_NODELIST=gpu1
SLURM_NODE_ALIASES=(null)
SLURM_PACK_SIZE=2
SLURM_PRIO_PROCESS=0
SLURM_PROCID=0
SLURM_SUBMIT_DIR=/tmp/si
SLURM_SUBMIT_HOST=vm
SLURM_TASKS_PER_NODE=1
SLURM_TASKS_PER_NODE_HET_GROUP_0=1
SLURM_TASKS_PER_NODE_HET_GROUP_1=1
SLURM_TASKS_PER_NODE_PACK_GROUP_0=1
SLURM_TASKS_PER_NODE_PACK_GROUP_1=1
SLURM_TASK_PID=10464
SLURM_TOPOLOGY_ADDR=gpu1
SLURM_TOPOLOGY_ADDR_PATTERN=node
SLURM_WORKING_CLUSTER=localgpu:127.0.0.1:6817:9728:109
"""


def _env(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if line)


def _component(job_id: int, nodes: list[dict[str, Any]], **options: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "jobId": job_id,
        "jobName": "probe",
        "partition": "gpu",
        "account": "teama",
        "qos": "normal",
        "nodes": nodes,
        "ntasks": None,
        "ntasksPerNode": None,
        "cpusPerTask": None,
        "gpus": None,
        "gpusPerNode": None,
        "gpusPerTask": None,
        "memPerNodeMb": None,
        "memPerCpuMb": None,
        "memPerGpuMb": None,
    }
    return {**base, **options}


def _context(components: list[dict[str, Any]], **job: Any) -> dict[str, Any]:
    return {
        **components[0],
        "user": "root",
        "uid": 0,
        "gid": 0,
        "submitDir": "/tmp/hp",
        "submitHost": "vm",
        "clusterName": "localgpu",
        "array": None,
        "dependency": None,
        "url": "http://127.0.0.1:6817",
        "components": components,
        **job,
    }


def _node(name: str, cpus: int, gpus: list[int], tasks: int) -> dict[str, Any]:
    return {"name": name, "cpus": cpus, "gpus": gpus, "memMb": 0, "tasks": tasks}


PROBE_6_CTX = _context(
    [
        _component(
            6, [_node("gpu3", 4, [0, 1], 2)], ntasks=2, cpusPerTask=2, gpusPerNode=2,
            memPerNodeMb=1000,
        ),
        _component(
            7, [_node("gpu1", 1, [0, 1, 2], 1), _node("gpu2", 1, [0], 1)], ntasksPerNode=1,
            gpus=4, memPerNodeMb=3000,
        ),
    ]
)  # fmt: skip


def _slurm_names(env: dict[str, str]) -> dict[str, str]:
    keep = ("SLURM", "CUDA_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL", "ROCR_VISIBLE_DEVICES")
    return {k: v for k, v in env.items() if k.startswith(keep)}


def test_batch_environment_is_slurms() -> None:
    ours = _slurm_names(batch_env(PROBE_6_CTX, task_pid=24793))
    theirs = _slurm_names(_env(PROBE_6))
    ours = {k: v for k, v in ours.items() if k in theirs or not k.startswith(("GPU_", "ROCR_"))}
    assert ours == theirs


def test_batch_environment_of_the_capture() -> None:
    ctx = _context(
        [
            _component(68, [_node("gpu1", 1, [0, 1], 1)], gpusPerNode=2, memPerCpuMb=8000),
            _component(69, [_node("gpu2", 1, [0, 1, 2, 3], 1)], gpusPerNode=4, memPerCpuMb=8000),
        ],
        jobName="hetscript",
        submitDir="/tmp/si",
    )
    for component in ctx["components"]:
        component["jobName"] = "hetscript"
    ctx["jobName"] = "hetscript"
    assert _slurm_names(batch_env(ctx, task_pid=10464)) == _env(CAPTURE_68)


def _step_vars(env: dict[str, str]) -> dict[str, str]:
    names = (
        "SLURM_JOB_NODELIST", "SLURM_NODELIST", "SLURM_JOB_NUM_NODES", "SLURM_JOB_CPUS_PER_NODE",
        "SLURM_NNODES", "SLURM_TASKS_PER_NODE", "SLURM_NTASKS", "SLURM_STEP_NUM_TASKS",
        "SLURM_STEP_TASKS_PER_NODE", "SLURM_STEP_NUM_NODES", "SLURM_NODEID", "SLURM_PROCID",
        "SLURM_GTIDS", "SLURM_LOCALID", "SLURMD_NODENAME", "CUDA_VISIBLE_DEVICES",
        "SLURM_DISTRIBUTION",
    )  # fmt: skip
    return {k: env[k] for k in names if k in env}


def test_a_step_over_both_components_is_slurms() -> None:
    # `srun -l --het-group=0,1 env` in job 6 on Slurm 22.05.8.
    tasks = het_step_env(PROBE_6_CTX, [(0, StepRequest(step_id=3)), (1, StepRequest(step_id=3))])
    common = {
        "SLURM_JOB_NODELIST": "gpu[1-3]",
        "SLURM_NODELIST": "gpu[1-3]",
        "SLURM_JOB_NUM_NODES": "3",
        "SLURM_JOB_CPUS_PER_NODE": "1(x2),4",
        "SLURM_NNODES": "3",
        "SLURM_TASKS_PER_NODE": "1(x2),2",
        "SLURM_NTASKS": "4",
        "SLURM_STEP_NUM_TASKS": "4",
        "SLURM_STEP_TASKS_PER_NODE": "1(x2),2",
        "SLURM_STEP_NUM_NODES": "3",
        "SLURM_DISTRIBUTION": "cyclic",
    }
    expected = [
        ("gpu3", "0", "0", "0,1", "0", "0,1"),
        ("gpu3", "0", "1", "0,1", "1", "0,1"),
        ("gpu1", "1", "2", "2", "0", "0,1,2"),
        ("gpu2", "2", "3", "3", "0", "0"),
    ]
    assert [_step_vars(t.env) for t in tasks] == [
        {
            **common,
            "SLURMD_NODENAME": node,
            "SLURM_NODEID": nodeid,
            "SLURM_PROCID": procid,
            "SLURM_GTIDS": gtids,
            "SLURM_LOCALID": localid,
            "CUDA_VISIBLE_DEVICES": cuda,
        }
        for node, nodeid, procid, gtids, localid, cuda in expected
    ]
    assert [t.component for t in tasks] == [0, 0, 1, 1]


def test_steps_on_part_of_the_components_are_slurms() -> None:
    # Job 11 on Slurm 22.05.8: `-N2 -c2` (gpu[3-4]) / `hetjob` / `-N2 -c3` (gpu[1-2]).
    ctx = _context(
        [
            _component(11, [_node("gpu3", 2, [], 1), _node("gpu4", 2, [], 1)], cpusPerTask=2),
            _component(12, [_node("gpu1", 3, [], 1), _node("gpu2", 3, [], 1)], cpusPerTask=3),
        ]
    )
    one = StepRequest(step_id=1, nodes=1, ntasks=1)
    [plain] = het_step_env(ctx, [(0, one)])
    assert _step_vars(plain.env) == {
        "SLURM_JOB_NODELIST": "gpu3", "SLURM_NODELIST": "gpu3", "SLURM_JOB_NUM_NODES": "1",
        "SLURM_JOB_CPUS_PER_NODE": "2(x2)", "SLURM_NNODES": "1", "SLURM_TASKS_PER_NODE": "1",
        "SLURM_NTASKS": "1", "SLURM_STEP_NUM_TASKS": "1", "SLURM_STEP_TASKS_PER_NODE": "1",
        "SLURM_STEP_NUM_NODES": "1", "SLURM_NODEID": "0", "SLURM_PROCID": "0",
        "SLURM_GTIDS": "0", "SLURM_LOCALID": "0", "SLURMD_NODENAME": "gpu3",
        "SLURM_DISTRIBUTION": "cyclic",
    }  # fmt: skip
    both = het_step_env(ctx, [(0, one), (1, one)])
    assert [(t.node, t.env["SLURM_PROCID"], t.env["SLURM_NODEID"]) for t in both] == [
        ("gpu3", "0", "0"),
        ("gpu1", "1", "1"),
    ]
    for task in both:
        assert task.env["SLURM_JOB_NODELIST"] == "gpu[1,3]"
        assert task.env["SLURM_JOB_CPUS_PER_NODE"] == "3(x2),2(x2)"
        assert task.env["SLURM_TASKS_PER_NODE"] == "1(x2)"
    second = het_step_env(ctx, [(1, StepRequest(step_id=4))])
    assert [(t.node, t.env["SLURM_PROCID"], t.env["SLURM_JOB_NODELIST"]) for t in second] == [
        ("gpu1", "0", "gpu[1-2]"),
        ("gpu2", "1", "gpu[1-2]"),
    ]
    assert {t.env["SLURM_JOB_CPUS_PER_NODE"] for t in second} == {"3(x2)"}


def test_a_component_keeps_its_ntasks_per_node_and_the_batch_pack_group_variable() -> None:
    # Job 8 on Slurm 22.05.8: `-N2 --ntasks-per-node=2` / `hetjob` / `-N1 -n3`.
    ctx = _context(
        [
            _component(8, [_node("gpu1", 2, [], 2), _node("gpu2", 2, [], 2)], ntasksPerNode=2),
            _component(9, [_node("gpu3", 3, [], 3)], ntasks=3),
        ]
    )
    first = het_step_env(ctx, [(0, StepRequest(step_id=0))])
    assert {t.env["SLURM_NTASKS_PER_NODE"] for t in first} == {"2"}
    assert {t.env["SLURM_DISTRIBUTION"] for t in first} == {"block"}
    third = het_step_env(ctx, [(1, StepRequest(step_id=1))])
    assert [t.env["SLURM_LOCALID"] for t in third] == ["0", "1", "2"]
    assert {t.env["SLURM_JOB_CPUS_PER_NODE"] for t in third} == {"3"}
    assert all("SLURM_JOB_CPUS_PER_NODE_PACK_GROUP_0" not in t.env for t in third)


# ----------------------------------------------------------------------------- srun


def _plan(argv: list[str], components: int = 2) -> Any:
    ctx = _context([_component(8 + i, [_node(f"n{i}", 1, [], 1)]) for i in range(components)])
    if components == 1:
        ctx.pop("components")
    opts = parse_args(argv)
    return opts, plan(opts, ctx, parse_args)


def test_srun_het_groups() -> None:
    assert parse_groups("1") == [1]
    assert parse_groups("0,2-3") == [0, 2, 3]
    assert parse_groups("[0-1]") == [0, 1]
    opts, step = _plan(["hostname"])
    assert step.groups == [(0, opts)]
    opts, step = _plan(["--het-group=0,1", "-n1", "hostname"])
    assert [g for g, _ in step.groups] == [0, 1]
    opts, step = _plan(["--pack-group=1", "hostname"])
    assert [g for g, _ in step.groups] == [1]
    # `srun -n2 : -n1 hostname`: the first component runs the next one's command.
    opts, step = _plan(["-l", "-n2", ":", "-n1", "hostname"])
    assert [(g, o.ntasks, o.command) for g, o in step.groups] == [
        (0, 2, ["hostname"]),
        (1, 1, ["hostname"]),
    ]
    opts, step = _plan(["-n1", "a", ":", "--het-group=1", "b", "x"])
    assert [(g, o.command) for g, o in step.groups] == [(0, ["a"]), (1, ["b", "x"])]
    assert _plan(["hostname"], components=1)[1] is None


@pytest.mark.parametrize(
    ("argv", "components", "lines"),
    [
        (
            ["--het-group=2", "true"],
            2,
            ("srun: error: Requested het-group offset exceeds highest hetjob index (2 > 1)",),
        ),
        (
            ["true", ":", "true", ":", "true"],
            2,
            (
                "srun: error: Attempt to run a job step with het group value of 2, but the job "
                "allocation has maximum value of 1",
            ),
        ),
        (
            ["--het-group=1", "true", ":", "true"],
            2,
            ("srun: fatal: Duplicate het groups in single srun not supported",),
        ),
        (
            ["--het-group=x", "true"],
            2,
            (
                "srun: error: _parse_single_range: Invalid range: `x'",
                "srun: error: Invalid --het-group value: x",
            ),
        ),
        (
            ["--het-group=0", "true"],
            1,
            ("srun: error: No directives to start application on any available hetjob components",),
        ),
        (
            ["--het-group=1", "true"],
            1,
            ("srun: error: Requested het-group offset exceeds highest hetjob index (1 > 0)",),
        ),
    ],
)
def test_srun_refusals_are_slurms(argv: list[str], components: int, lines: tuple[str]) -> None:
    with pytest.raises(HetError) as info:
        _plan(argv, components)
    assert info.value.lines == lines and info.value.code == 1
