"""JobSubmission.slurm is a typed SlurmRequest whose stored form is the dict sbatch writes."""

from __future__ import annotations

import json
from typing import Any

import pytest

from phalanx.dialects.slurm import build_request, to_submission
from phalanx.dialects.slurm.sbatch import submission_dict
from phalanx.model import JobSubmission, SlurmRequest, SlurmSwitches

ENV = {"HOME": "/home/u", "X": "1"}
ARGV = [
    "--job-name=train",
    "-N2-4",
    "--ntasks-per-node=4",
    "--cpus-per-task=8",
    "--gpus-per-node=h100:8",
    "--mem=64G",
    "-p",
    "gpu",
    "-A",
    "ml",
    "-q",
    "high",
    "--export=ALL,Y=2",
    "--switches=1",
    "--kill-on-invalid-dep=yes",
    "-C",
    "a&b",
    "--exclusive",
    "--array=0-15:3%4",
]
SCRIPT = "#!/bin/sh\nsrun true\n"

# The stored submission of `sbatch ARGV` (JobSubmission.to_dict(), what the store
# keeps), as phalanx wrote it while `slurm` was an untyped dict.
STORED: dict[str, Any] = {
    "name": "train",
    "tenant": "ml",
    "user": "u",
    "clusterQueue": "gpu",
    "priorityClass": "high",
    "podSets": [
        {
            "name": "main",
            "count": 2,
            "requests": {"nvidia.com/gpu": "8", "cpu": "32", "memory": "64Gi"},
            "nodeSelector": {
                "slurm.phalanx.io/feature-a": "true",
                "slurm.phalanx.io/feature-b": "true",
                "slurm.phalanx.io/gpu-type": "h100",
            },
            "tolerations": [],
            "tasksPerNode": 1,
            "exclusive": True,
            "excludeNodes": [],
            "topology": {"unconstrained": False, "switches": 1, "waitS": 300.0},
        }
    ],
    "labels": {},
    "run": {
        "script": SCRIPT,
        "command": [],
        "workingDir": "/home/u",
        "env": {"HOME": "/home/u", "X": "1", "Y": "2"},
        "killWait": 30.0,
        "output": "slurm-%A_%a.out",
        "openMode": "truncate",
    },
    "array": {"indices": [0, 3, 6, 9, 12, 15], "throttle": 4, "text": "0-15:3%4"},
    "hold": False,
    "requeue": False,
    "nice": 0,
    "comment": "",
    "mail": {},
    "slurm": {
        "jobName": "train",
        "submitDir": "/home/u",
        "submitHost": "login1",
        "nodes": 2,
        "nodesMax": 4,
        "ntasksPerNode": 4,
        "cpusPerTask": 8,
        "gpusPerNode": 8,
        "gpuType": "h100",
        "memPerNodeMb": 65536,
        "exclusive": "node",
        "partition": "gpu",
        "account": "ml",
        "qos": "high",
        "export": "ALL,Y=2",
        "switches": {"count": 1, "waitSeconds": None},
        "killOnInvalidDep": True,
        "constraint": "a&b",
        "arrayStep": 3,
    },
}

# Another one, with the other options a batch job records.
STORED_SLURM_2: dict[str, Any] = {
    "jobName": "sbatch",
    "submitDir": "/home/u",
    "submitHost": "login1",
    "ntasks": 3,
    "gpus": 2,
    "gpusPerTask": 1,
    "memPerGpuMb": 1000,
    "switches": {"count": 2, "waitSeconds": 600},
    "nodelist": "n[1-2]",
}


def _request(argv: list[str]) -> Any:
    return build_request(
        argv,
        script_text=SCRIPT,
        script_path=None,
        env=ENV,
        cwd="/home/u",
        now=0.0,
        user="u",
        submit_host="login1",
    )


def test_an_sbatch_submission_is_stored_exactly_as_before() -> None:
    sub = to_submission(_request(ARGV), env=ENV)
    assert isinstance(sub.slurm, SlurmRequest)
    stored = sub.to_dict()
    assert stored == STORED
    # Same keys in the same order: the JSON text is unchanged too.
    assert json.dumps(stored) == json.dumps(STORED)


def test_the_dialect_wire_form_is_the_model_stored_form() -> None:
    for argv in (ARGV, ["-n", "3", "--gpus=2", "--gpus-per-task=1", "--switches=2@10"]):
        wire = submission_dict(_request(argv), env=ENV)["slurm"]
        typed = SlurmRequest.model_validate(wire)
        assert json.dumps(typed.to_dict()) == json.dumps(wire)


def test_a_stored_submission_loads_typed_and_dumps_unchanged() -> None:
    sub = JobSubmission.model_validate(STORED)
    slurm = sub.slurm
    assert slurm is not None
    assert (slurm.job_name, slurm.nodes, slurm.nodes_max, slurm.ntasks) == ("train", 2, 4, None)
    assert (slurm.ntasks_per_node, slurm.cpus_per_task, slurm.gpus_per_node) == (4, 8, 8)
    assert (slurm.mem_per_node_mb, slurm.kill_on_invalid_dep, slurm.array_step) == (65536, True, 3)
    assert slurm.switches == SlurmSwitches(count=1, wait_seconds=None)
    assert json.dumps(sub.to_dict()) == json.dumps(STORED)
    # Round trip through JSON text, as the store does.
    again = JobSubmission.model_validate_json(json.dumps(STORED))
    assert again == sub


@pytest.mark.parametrize(
    "stored",
    [
        STORED_SLURM_2,
        {"ntasks": 1},  # written by hand through the API
        {"jobName": "x", "nodes": None, "gpus": None},  # explicit nulls load as unset
        {},
    ],
)
def test_older_and_partial_slurm_records_load(stored: dict[str, Any]) -> None:
    data = {**STORED, "slurm": stored}
    sub = JobSubmission.model_validate(data)
    assert sub.slurm is not None
    expected = {k: v for k, v in stored.items() if v is not None}
    assert json.dumps(sub.slurm.to_dict()) == json.dumps(expected)
    assert sub.slurm.ntasks == stored.get("ntasks")


def test_a_submission_without_slurm_has_none() -> None:
    data = {k: v for k, v in STORED.items() if k != "slurm"}
    sub = JobSubmission.model_validate(data)
    assert sub.slurm is None
    assert "slurm" not in sub.to_dict()


def test_unknown_slurm_keys_are_refused() -> None:
    with pytest.raises(ValueError, match="ntask"):
        SlurmRequest.model_validate({"ntask": 1})
