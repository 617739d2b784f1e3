"""GPU sharing end to end: shares of one device run side by side as real processes, each
seeing that device and its share; a whole-GPU job never lands on a shared device."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from phalanx.auth import ADMIN
from phalanx.control.plane import SHARE_ENV, ControlPlane
from phalanx.errors import Invalid
from phalanx.model import (
    GPU,
    GPU_MILLI,
    ClusterQueue,
    JobSubmission,
    LocalQueue,
    Node,
    PodSet,
    ResourceFlavor,
    RunSpec,
)
from phalanx.server import start_server
from tests.control.test_plane import ALICE, make_plane, wait_for


def _cluster() -> list[object]:
    resources = [
        {"name": "cpu", "nominalQuota": 16},
        {"name": GPU, "nominalQuota": 2},
        {"name": GPU_MILLI, "nominalQuota": 2000},
    ]
    return [
        ResourceFlavor(name="t4"),
        Node(name="gpu-0", capacity={GPU: 2, "cpu": 16, "memory": "64Gi"}),
        ClusterQueue.model_validate(
            {
                "name": "team-a",
                "resourceGroups": [
                    {
                        "coveredResources": [r["name"] for r in resources],
                        "flavors": [{"name": "t4", "resources": resources}],
                    }
                ],
            }
        ),
        LocalQueue(name="default", namespace="team-a", cluster_queue="team-a"),
    ]


@pytest.fixture
def plane(tmp_path: Path) -> Iterator[ControlPlane]:
    p = make_plane(tmp_path / "state")
    p.start()
    p.apply(ADMIN, _cluster())
    yield p
    p.stop()
    p.runtime.close()
    p.store.close()


def _job(tmp: Path, gpus: str | int, command: str) -> JobSubmission:
    return JobSubmission(
        name="share",
        tenant="team-a",
        pod_sets=[PodSet(requests={GPU: gpus, "cpu": 1})],
        run=RunSpec(
            command=["sh", "-c", command],
            working_dir=str(tmp),
            output=str(tmp / "out-%j.log"),
            kill_wait=0.5,
        ),
    )


def test_shares_run_side_by_side_on_one_device(plane: ControlPlane, tmp_path: Path) -> None:
    gate = tmp_path / "go"
    wait = f"echo $CUDA_VISIBLE_DEVICES ${SHARE_ENV}; while [ ! -e {gate} ]; do sleep 0.05; done"
    shares = plane.submit(ALICE, [_job(tmp_path, "0.5", wait) for _ in range(2)])
    for job_id in shares:
        wait_for(plane, job_id, "RUNNING")
    # Both halves of device 0 are taken: a whole GPU gets device 1, a third share waits.
    [whole] = plane.submit(ALICE, [_job(tmp_path, 1, wait)])
    wait_for(plane, whole, "RUNNING")
    [third] = plane.submit(ALICE, [_job(tmp_path, "0.6", wait)])
    wait_for(plane, third, "PENDING")
    assert plane.node_status()["gpu-0"]["gpu_indices_used"] == [0, 1]
    gate.touch()
    for job_id in shares:
        wait_for(plane, job_id, "COMPLETED")
        assert (tmp_path / f"out-{job_id}.log").read_text() == "0 500\n"
    wait_for(plane, whole, "COMPLETED")
    assert (tmp_path / f"out-{whole}.log").read_text() == "1\n"
    wait_for(plane, third, "COMPLETED")
    assert (tmp_path / f"out-{third}.log").read_text() in ("0 600\n", "1 600\n")
    assert plane.node_status()["gpu-0"]["gpu_indices_used"] == []


def test_an_unknown_placement_is_refused_before_anything_starts(tmp_path: Path) -> None:
    with pytest.raises(Invalid, match=r"--placement.*placement must be one of"):
        start_server(tmp_path / "state", port=0, placement="tightest")
    assert not (tmp_path / "state").exists()
