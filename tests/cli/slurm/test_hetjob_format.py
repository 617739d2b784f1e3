"""A heterogeneous job's lines in squeue, scontrol and sacct, from its job view (no server)."""

from __future__ import annotations

from typing import Any

from phalanx.cli.slurm.common import het_rows, het_selected, job_display_id, parse_job_ref
from phalanx.cli.slurm.sacct import format_jobs as sacct_format
from phalanx.cli.slurm.sacct import het_job_rows, parse_fields
from phalanx.cli.slurm.scontrol import job_record, render
from phalanx.cli.slurm.squeue import DEFAULT_FORMAT, parse_format
from phalanx.cli.slurm.squeue import format_jobs as squeue_format

JOB: dict[str, Any] = {
    "id": 68,
    "name": "hetscript",
    "state": "COMPLETED",
    "user": "root",
    "account": "teama",
    "partition": "gpu",
    "nodes": ["gpu1", "gpu2"],
    "gpus": 6,
    "start_time": "2026-12-07T13:00:00.000Z",
    "end_time": "2026-12-07T13:00:05.000Z",
    "exit_code": 0,
    "batch": True,
    "num_cpus": 2,
    "pod_sets": [
        {"name": "het-group-0", "requests": {"nvidia.com/gpu": 2}},
        {"name": "het-group-1", "requests": {"nvidia.com/gpu": 4}},
    ],
    "gpu_indices": {"gpu1": [0, 1], "gpu2": [0, 1, 2, 3]},
    "het_components": [
        {"id": 68, "het_job_id": 68, "het_job_offset": 0, "pod_set": "het-group-0",
         "partition": "gpu", "nodes": ["gpu1"], "num_nodes": 1, "num_tasks": 1,
         "num_cpus": 1, "gpus": 2},
        {"id": 69, "het_job_id": 68, "het_job_offset": 1, "pod_set": "het-group-1",
         "partition": "gpu", "nodes": ["gpu2"], "num_nodes": 1, "num_tasks": 1,
         "num_cpus": 1, "gpus": 4},
    ],
}  # fmt: skip

# Step 0: `srun --het-group=1 env`; 1: `srun -n1 env : -n1 env`; 2: a plain `srun hostname`.
STEPS = [
    {"step": 0, "name": "env", "nodes": ["gpu2"], "taskNodes": ["gpu2"], "ntasks": 1,
     "state": "COMPLETED", "taskComponents": [1], "componentNames": {"1": "env"}},
    {"step": 1, "name": "env", "nodes": ["gpu1", "gpu2"], "taskNodes": ["gpu1", "gpu2"],
     "ntasks": 2, "state": "COMPLETED", "taskComponents": [0, 1],
     "componentNames": {"0": "env", "1": "env"}},
    {"step": 2, "name": "hostname", "nodes": ["gpu1"], "taskNodes": ["gpu1"], "ntasks": 1,
     "state": "COMPLETED", "taskComponents": [0], "componentNames": {"0": "hostname"}},
]  # fmt: skip


def test_squeue_lines_per_component() -> None:
    rows = het_rows(JOB)
    assert [job_display_id(r) for r in rows] == ["68+0", "68+1"]
    assert [(r["id"], r["nodes"], r["gpus"], r["batch"]) for r in rows] == [
        (68, ["gpu1"], 2, True),
        (69, ["gpu2"], 4, False),
    ]
    running = [{**r, "state": "RUNNING", "end_time": None} for r in rows]
    text = squeue_format(running, parse_format(DEFAULT_FORMAT), now=1e10)
    lines = [line.split() for line in text.splitlines()[1:]]
    assert [(r[0], r[1], r[4], r[6], r[7]) for r in lines] == [
        ("68+0", "gpu", "R", "1", "gpu1"),
        ("68+1", "gpu", "R", "1", "gpu2"),
    ]


def test_job_references() -> None:
    first, second = het_rows(JOB)
    by_leader, by_own_id, by_plus = (parse_job_ref(t) for t in ("68", "69", "68+1"))
    assert by_plus is not None and (by_plus.job_id, by_plus.het_offset) == (68, 1)
    assert het_selected(first, [by_leader], whole=False)
    assert het_selected(second, [by_leader], whole=False)
    assert not het_selected(first, [by_own_id], whole=False)
    assert het_selected(second, [by_own_id], whole=False)
    assert not het_selected(first, [by_plus], whole=False)
    assert het_selected(first, [by_plus], whole=True)  # squeue -j 68+1 lists both


def test_scontrol_records_per_component() -> None:
    first, second = (render(job_record(r)).splitlines() for r in het_rows(JOB))
    assert first[:2] == [
        "JobId=68 HetJobId=68 HetJobOffset=0 JobName=hetscript",
        "   HetJobIdSet=68-69",
    ]
    assert second[:2] == [
        "JobId=69 HetJobId=68 HetJobOffset=1 JobName=hetscript",
        "   HetJobIdSet=68-69",
    ]
    assert "   NodeList=gpu2" in second


def test_sacct_lines_as_slurms() -> None:
    # The rows Slurm 22.05.8 printed for the capture's job 68 (less its step 3).
    rows = het_job_rows(JOB, STEPS)
    fields = parse_fields("JobID,JobIDRaw,JobName,NNodes,NTasks,NodeList")
    assert sacct_format(rows, fields, parsable="plain").splitlines() == [
        "JobID|JobIDRaw|JobName|NNodes|NTasks|NodeList",
        "68+0|68|hetscript|1||gpu1",
        "68+0.batch|68.batch|batch|1|1|gpu1",
        "68+0.1|68.1|env|1|1|gpu1",
        "68+0.2|68.2|hostname|1|1|gpu1",
        "68+1|69|hetscript|1||gpu2",
        "68+1.0|69.0|env|1|1|gpu2",
        "68+1.1|69.1|env|1|1|gpu2",
    ]
    only = het_job_rows(JOB, STEPS, refs=[parse_job_ref("69")], only_steps={"68+1": {"0"}})
    assert [(job_display_id(r), r.get("step_label")) for r in only] == [("68+1", "0")]
    earlier = [{**JOB, "state": "PREEMPTED"}]
    again = het_job_rows(JOB, [], earlier=earlier, with_steps=False)
    assert [(job_display_id(r), r["state"]) for r in again] == [
        ("68+0", "PREEMPTED"),
        ("68+0", "COMPLETED"),
        ("68+1", "PREEMPTED"),
        ("68+1", "COMPLETED"),
    ]
