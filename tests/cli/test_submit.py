"""``phalanx submit`` options to submissions: Slurm's meanings of --gpus, --nodes, --ntasks."""

from __future__ import annotations

import os

import pytest

from phalanx.cli.submit import build_submission, parse_env
from phalanx.errors import Invalid


def test_defaults() -> None:
    sub = build_submission(["python", "train.py"])
    assert sub["name"] == "python"
    assert sub["podSets"] == [{"name": "main", "count": 1, "requests": {"cpu": "1"}}]
    assert sub["run"] == {"command": ["python", "train.py"], "workingDir": os.getcwd(), "env": {}}
    assert "tenant" not in sub and "queue" not in sub


def test_gpus_are_the_total_spread_over_nodes() -> None:
    sub = build_submission(["x"], gpus=16, nodes=2)
    pod_set = sub["podSets"][0]
    assert pod_set["count"] == 2
    assert pod_set["tasksPerNode"] == 1
    assert pod_set["requests"]["nvidia.com/gpu"] == 8


def test_ntasks_per_node_split_gpus_and_memory() -> None:
    sub = build_submission(["x"], gpus=16, nodes=2, ntasks=16, cpus="4", mem="64Gi")
    pod_set = sub["podSets"][0]
    assert (pod_set["count"], pod_set["tasksPerNode"]) == (16, 8)
    assert pod_set["requests"] == {"nvidia.com/gpu": 1, "cpu": "4", "memory": 8 * 2**30}


def test_a_fraction_of_a_gpu_is_a_share_for_one_task() -> None:
    sub = build_submission(["x"], gpus="0.5")
    assert sub["podSets"][0]["requests"]["nvidia.com/gpu"] == "0.5"
    assert build_submission(["x"], gpus="2")["podSets"][0]["requests"]["nvidia.com/gpu"] == 2
    from phalanx.model import JobSubmission

    parsed = JobSubmission.model_validate({**sub, "tenant": "t"})
    assert parsed.pod_sets[0].requests == {"cpu": 1000, "phalanx.io/gpu-milli": 500}


def test_single_node_memory_is_passed_through() -> None:
    assert build_submission(["x"], mem="10Gi")["podSets"][0]["requests"]["memory"] == "10Gi"


@pytest.mark.parametrize(
    ("options", "needle"),
    [
        ({"gpus": 6, "nodes": 4}, "--gpus 6"),
        ({"nodes": 2, "ntasks": 3}, "--ntasks 3"),
        ({"gpus": 8, "ntasks": 3}, "tasks per node"),
        ({"nodes": 0}, "--nodes 0"),
        ({"time_limit": "soon"}, "'soon'"),
        ({"env": ["NOEQUALS"]}, "KEY=VALUE"),
        ({"gpus": "1.5"}, "whole GPUs are integers"),
        ({"gpus": "half"}, "share of one like 0.5"),
        ({"gpus": "0.5", "ntasks": 2}, "for a single task"),
    ],
)
def test_errors_name_the_option(options: dict, needle: str) -> None:
    with pytest.raises(Invalid) as info:
        build_submission(["x"], **options)
    assert needle in info.value.detail


def test_everything_else(tmp_path: os.PathLike[str]) -> None:
    sub = build_submission(
        ["x"],
        queue="q",
        partition="team-a",
        tenant="t",
        priority_class="high",
        time_limit="1-00:00:00",
        name="n",
        output="out-%j",
        error="err-%j",
        chdir=str(tmp_path),
        env=["A=1", "B=x=y"],
    )
    assert sub["queue"] == "q"
    assert sub["clusterQueue"] == "team-a"
    assert sub["tenant"] == "t"
    assert sub["priorityClass"] == "high"
    assert sub["name"] == "n"
    assert sub["run"]["timeLimit"] == 86400
    assert sub["run"]["workingDir"] == str(tmp_path)
    assert sub["run"]["env"] == {"A": "1", "B": "x=y"}
    assert (sub["run"]["output"], sub["run"]["error"]) == ("out-%j", "err-%j")


def test_unlimited_time_sets_no_limit() -> None:
    assert "timeLimit" not in build_submission(["x"], time_limit="UNLIMITED")["run"]


def test_parse_env() -> None:
    assert parse_env(["A=", "B=2"]) == {"A": "", "B": "2"}
