"""Arrays, dependencies, holds, begin times and requeues through the real control plane."""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from phalanx.auth import ADMIN
from phalanx.control.plane import ControlPlane
from phalanx.errors import Conflict
from phalanx.model import ArraySpec, JobSubmission, PodSet, RunSpec
from tests.control.test_plane import ALICE, cluster, make_plane, wait_for


@pytest.fixture
def plane(tmp_path: Path) -> Iterator[ControlPlane]:
    p = make_plane(tmp_path / "state")
    p.start()
    p.apply(ADMIN, cluster())
    yield p
    p.stop()
    p.runtime.close()
    p.store.close()


def sub(tmp: Path, command: list[str], gpus: int = 1, **extra: Any) -> JobSubmission:
    return JobSubmission(
        name=extra.pop("name", "t"),
        tenant="team-a",
        pod_sets=[PodSet(requests={"nvidia.com/gpu": gpus, "cpu": 1})],
        run=RunSpec(command=command, working_dir=str(tmp), output=str(tmp / "out-%j.log")),
        **extra,
    )


def events(plane: ControlPlane, job_id: int) -> list[str]:
    return [e.kind for e in plane.store.job_events(job_id)]


def test_array_tasks_share_an_id_and_respect_the_throttle(
    plane: ControlPlane, tmp_path: Path
) -> None:
    array = ArraySpec(indices=list(range(6)), throttle=2, text="0-5%2")
    [first] = plane.submit(ALICE, [sub(tmp_path, ["sleep", "0.6"], array=array)])
    rows = plane.store.list_jobs(array_job_id=first)
    assert [r.array_task_id for r in rows] == list(range(6))
    assert {r.array_job_id for r in rows} == {first}
    peak = 0
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        rows = plane.store.list_jobs(array_job_id=first)
        active = [r for r in rows if r.state in ("ADMITTED", "RUNNING")]
        peak = max(peak, len(active))
        waiting = [r for r in rows if r.state == "PENDING"]
        if len(active) == 2:
            assert all(r.reason == "JobArrayTaskLimit" for r in waiting), waiting
        if all(r.state == "COMPLETED" for r in rows):
            break
        time.sleep(0.05)
    assert all(r.state == "COMPLETED" for r in rows)
    assert peak == 2


def test_afterok_waits_and_never_satisfied_stays_pending(
    plane: ControlPlane, tmp_path: Path
) -> None:
    [parent] = plane.submit(ALICE, [sub(tmp_path, ["sleep", "0.5"])])
    [child] = plane.submit(ALICE, [sub(tmp_path, ["true"], dependency=f"afterok:{parent}")])
    [failing] = plane.submit(ALICE, [sub(tmp_path, ["false"])])
    [orphan] = plane.submit(ALICE, [sub(tmp_path, ["true"], dependency=f"afterok:{failing}")])
    [runs_on_failure] = plane.submit(
        ALICE, [sub(tmp_path, ["true"], dependency=f"afternotok:{failing}")]
    )
    assert plane.store.get_job(child).reason == "Dependency"  # type: ignore[union-attr]
    wait_for(plane, parent, "COMPLETED")
    child_row = wait_for(plane, child, "COMPLETED")
    parent_row = plane.store.get_job(parent)
    assert parent_row is not None and parent_row.end_time is not None
    assert child_row.start_time is not None and child_row.start_time >= parent_row.end_time
    wait_for(plane, runs_on_failure, "COMPLETED")
    deadline = time.monotonic() + 5
    while plane.store.get_job(orphan).reason != "DependencyNeverSatisfied":  # type: ignore[union-attr]
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert plane.store.get_job(orphan).state == "PENDING"  # type: ignore[union-attr]


def test_singleton_runs_one_at_a_time(plane: ControlPlane, tmp_path: Path) -> None:
    ids = plane.submit(
        ALICE,
        [sub(tmp_path, ["sleep", "0.3"], name="solo", dependency="singleton") for _ in range(3)],
    )
    rows = [wait_for(plane, i, "COMPLETED") for i in ids]
    for earlier, later in itertools.pairwise(rows):
        assert earlier.end_time is not None and later.start_time is not None
        assert later.start_time >= earlier.end_time


def test_hold_release_and_begin_time(plane: ControlPlane, tmp_path: Path) -> None:
    [held] = plane.submit(ALICE, [sub(tmp_path, ["true"], hold=True)])
    [later] = plane.submit(ALICE, [sub(tmp_path, ["true"], begin_time=time.time() + 1.5)])
    time.sleep(0.3)
    assert plane.store.get_job(held).reason == "JobHeldUser"  # type: ignore[union-attr]
    assert plane.store.get_job(later).reason == "BeginTime"  # type: ignore[union-attr]
    assert plane.release(ALICE, held).hold is False
    wait_for(plane, held, "COMPLETED")
    row = wait_for(plane, later, "COMPLETED")
    assert row.start_time is not None and row.start_time >= row.submit_time + 1.4
    assert "Held" not in events(plane, held) and "Released" in events(plane, held)


def test_holding_a_pending_job_withdraws_it(plane: ControlPlane, tmp_path: Path) -> None:
    # Fill team-a's quota and the cohort so the next job waits in the engine.
    [big] = plane.submit(ALICE, [sub(tmp_path, ["sleep", "30"], gpus=8)])
    [big2] = plane.submit(ALICE, [sub(tmp_path, ["sleep", "30"], gpus=8)])
    [big3] = plane.submit(ALICE, [sub(tmp_path, ["sleep", "30"], gpus=8)])
    [waiting] = plane.submit(ALICE, [sub(tmp_path, ["true"], gpus=8)])
    time.sleep(0.3)
    assert plane.store.get_job(waiting).state == "PENDING"  # type: ignore[union-attr]
    assert plane.hold(ALICE, waiting).hold is True
    with pytest.raises(Conflict, match="only pending jobs are held"):
        plane.hold(ALICE, big)
    for j in (big, big2, big3):
        plane.cancel(ADMIN, j)
    time.sleep(0.5)
    row = plane.store.get_job(waiting)
    assert row is not None and (row.state, row.reason) == ("PENDING", "JobHeldUser")
    plane.release(ALICE, waiting)
    wait_for(plane, waiting, "COMPLETED")


def running_attempt(plane: ControlPlane, job_id: int, attempt: int) -> Any:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        row = plane.store.get_job(job_id)
        if row is not None and row.state == "RUNNING" and row.attempt == attempt:
            return row
        time.sleep(0.05)
    raise AssertionError(f"job {job_id} is not running attempt {attempt}: {row}")


def test_requeue_a_running_and_a_finished_job(plane: ControlPlane, tmp_path: Path) -> None:
    [job_id] = plane.submit(ALICE, [sub(tmp_path, ["sh", "-c", "echo go; sleep 30"])])
    running_attempt(plane, job_id, 1)
    plane.requeue(ALICE, job_id)
    running_attempt(plane, job_id, 2)
    plane.cancel(ALICE, job_id)
    wait_for(plane, job_id, "CANCELLED")
    plane.requeue(ALICE, job_id)
    row = running_attempt(plane, job_id, 3)
    assert row.end_time is None
    plane.cancel(ALICE, job_id)
    kinds = events(plane, job_id)
    assert kinds.count("Started") == 3 and "Requeued" in kinds


def test_update_time_limit_of_a_pending_job(plane: ControlPlane, tmp_path: Path) -> None:
    [job_id] = plane.submit(ALICE, [sub(tmp_path, ["true"], hold=True)])
    row = plane.update(ALICE, job_id, {"time_limit": 120, "nice": 10, "comment": "x"})
    assert row.submission["run"]["timeLimit"] == 120
    assert row.submission["nice"] == 10 and row.submission["comment"] == "x"
    assert "Updated" in events(plane, job_id)


def test_gated_jobs_survive_a_restart(tmp_path: Path) -> None:
    state = tmp_path / "state"
    first = make_plane(state)
    first.start()
    first.apply(ADMIN, cluster())
    [held] = first.submit(ALICE, [sub(tmp_path, ["true"], hold=True)])
    array = ArraySpec(indices=[1, 2, 3], throttle=1, text="1-3%1")
    [arr] = first.submit(ALICE, [sub(tmp_path, ["sleep", "0.3"], array=array)])
    first.stop()
    first.store.close()
    second = make_plane(state)
    second.start()
    try:
        for r in second.store.list_jobs(array_job_id=arr):
            wait_for(second, r.id, "COMPLETED", timeout=30)
        row = second.store.get_job(held)
        assert row is not None and (row.state, row.reason, row.hold) == (
            "PENDING",
            "JobHeldUser",
            True,
        )
    finally:
        second.stop()
        second.store.close()
