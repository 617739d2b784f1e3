"""The control plane with a real store (SQLite), real supervisors and the real engine."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from phalanx.auth import ADMIN, Principal
from phalanx.control.plane import ControlPlane
from phalanx.errors import Conflict, Forbidden, Invalid, NotFound, Unavailable
from phalanx.model import (
    ClusterQueue,
    Cohort,
    JobSubmission,
    LocalQueue,
    Node,
    PodSet,
    PriorityClass,
    ResourceFlavor,
    RunSpec,
)
from phalanx.runtime.local import LocalRuntime
from phalanx.store import JobRow, Store

ALICE = Principal(user="alice", tenants=frozenset({"team-a"}))
BOB = Principal(user="bob", tenants=frozenset({"team-b"}))


def cluster() -> list[object]:
    flavor = ResourceFlavor(name="h100", node_labels={"phalanx.io/flavor": "h100"})
    nodes = [
        Node(
            name=f"gpu-{i}",
            labels={"phalanx.io/flavor": "h100"},
            capacity={"nvidia.com/gpu": 8, "cpu": 32, "memory": "256Gi"},
        )
        for i in range(3)
    ]

    def cq(name: str, gpus: int) -> ClusterQueue:
        return ClusterQueue.model_validate(
            {
                "name": name,
                "cohortName": "research",
                "resourceGroups": [
                    {
                        "coveredResources": ["cpu", "memory", "nvidia.com/gpu"],
                        "flavors": [
                            {
                                "name": "h100",
                                "resources": [
                                    {"name": "cpu", "nominalQuota": 48},
                                    {"name": "memory", "nominalQuota": "384Gi"},
                                    {"name": "nvidia.com/gpu", "nominalQuota": gpus},
                                ],
                            }
                        ],
                    }
                ],
            }
        )

    return [
        flavor,
        Cohort(name="research"),
        cq("team-a", 16),
        cq("team-b", 8),
        LocalQueue(name="default", namespace="team-a", cluster_queue="team-a"),
        LocalQueue(name="default", namespace="team-b", cluster_queue="team-b"),
        PriorityClass(name="high", value=1000),
        *nodes,
    ]


def job(
    command: list[str],
    *,
    gpus: int = 1,
    count: int = 1,
    tenant: str | None = "team-a",
    tmp: Path,
    time_limit: int | None = None,
    **extra: object,
) -> JobSubmission:
    return JobSubmission(
        name="t",
        tenant=tenant,
        pod_sets=[PodSet(count=count, requests={"nvidia.com/gpu": gpus, "cpu": 1})],
        run=RunSpec(
            command=command,
            working_dir=str(tmp),
            output=str(tmp / "out-%j.log"),
            time_limit=time_limit,
            kill_wait=0.5,
        ),
        **extra,  # type: ignore[arg-type]
    )


def make_plane(state: Path, database: str | None = None) -> ControlPlane:
    store = Store.open(database, state_dir=state)
    return ControlPlane(store, LocalRuntime(state), state_dir=state, poll_interval_s=0.01)


@pytest.fixture
def plane(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[ControlPlane]:
    """A running control plane on SQLite (and on PostgreSQL for tests parametrized by backend)."""
    database = request.getfixturevalue("database") if "backend" in request.fixturenames else None
    p = make_plane(tmp_path / "state", database)
    p.start()
    p.apply(ADMIN, cluster())
    yield p
    p.stop()
    p.runtime.close()
    p.store.close()


def wait_for(plane: ControlPlane, job_id: int, *states: str, timeout: float = 15) -> JobRow:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        row = plane.store.get_job(job_id)
        assert row is not None
        if row.state in states:
            return row
        time.sleep(0.02)
    raise AssertionError(f"job {job_id} is {row.state}, not {states}")


BOTH_STORES = pytest.mark.parametrize("backend", ["sqlite", "postgresql"])


@BOTH_STORES
def test_job_runs_to_completion_with_its_history(
    plane: ControlPlane, tmp_path: Path, backend: str
) -> None:
    [job_id] = plane.submit(
        ALICE, [job(["sh", "-c", "echo hello $CUDA_VISIBLE_DEVICES"], tmp=tmp_path)]
    )
    row = wait_for(plane, job_id, "COMPLETED")
    assert row.exit_code == 0 and row.cluster_queue == "team-a" and row.flavor == "h100"
    assert row.user == "alice" and row.queue == "default" and row.start_time is not None
    kinds = [e.kind for e in plane.store.job_events(job_id)]
    assert kinds == ["Submitted", "Admitted", "Started", "Finished"]
    admitted = plane.store.job_events(job_id)[1]
    assert admitted.data["nodes"] == row.nodes and admitted.data["flavor"] == "h100"
    assert (tmp_path / f"out-{job_id}.log").read_text() == "hello 0\n"
    # Quota and GPU indices are released.
    assert (
        plane.cluster_queue_status()["team-a"]["usage"].get("h100", {}).get("nvidia.com/gpu", 0)
        == 0
    )
    assert all(not n["gpu_indices_used"] for n in plane.node_status().values())


def test_jobs_on_one_node_see_different_gpus(plane: ControlPlane, tmp_path: Path) -> None:
    ids = plane.submit(
        ALICE,
        [
            job(
                ["sh", "-c", "echo $PHALANX_NODE_NAME $CUDA_VISIBLE_DEVICES; sleep 1"],
                gpus=4,
                tmp=tmp_path,
            )
            for _ in range(4)
        ],
    )
    rows = [wait_for(plane, i, "COMPLETED") for i in ids]
    seen: dict[str, set[str]] = {}
    for r in rows:
        node, devices = (tmp_path / f"out-{r.id}.log").read_text().split()
        assert [node] == r.nodes
        assert devices not in seen.setdefault(node, set()), "two jobs shared GPUs"
        seen[node].add(devices)
        assert len(devices.split(",")) == 4


def test_gang_over_two_nodes_starts_every_rank(plane: ControlPlane, tmp_path: Path) -> None:
    sub = job(
        [
            "sh",
            "-c",
            "echo $PHALANX_TASK_RANK/$PHALANX_TASK_COUNT $PHALANX_NODE_NAME $CUDA_VISIBLE_DEVICES",
        ],
        gpus=8,
        count=2,
        tmp=tmp_path,
    )
    [job_id] = plane.submit(ALICE, [sub])
    row = wait_for(plane, job_id, "COMPLETED")
    assert len(row.nodes) == 2
    lines = sorted((tmp_path / f"out-{job_id}.log").read_text().splitlines())
    assert [line.split()[0] for line in lines] == ["0/2", "1/2"]
    assert {line.split()[1] for line in lines} == set(row.nodes)
    assert all(line.split()[2] == "0,1,2,3,4,5,6,7" for line in lines)


def test_a_burst_of_submissions_takes_few_cycles(plane: ControlPlane, tmp_path: Path) -> None:
    # Held in a stopped queue so nothing runs: this is about the write path.
    held = ClusterQueue.model_validate({"name": "held", "stopPolicy": "Hold"})
    plane.apply(ADMIN, [held])
    before = plane.metrics.cycles_total._value.get()
    ids: list[int] = []
    lock = threading.Lock()

    def submitter() -> None:
        for _ in range(50):
            [i] = plane.submit(
                ADMIN,
                [
                    JobSubmission(
                        tenant="team-a",
                        cluster_queue="held",
                        pod_sets=[PodSet(requests={"cpu": 1})],
                        run=RunSpec(command=["true"]),
                    )
                ],
            )
            with lock:
                ids.append(i)

    threads = [threading.Thread(target=submitter) for _ in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    cycles = plane.metrics.cycles_total._value.get() - before
    assert len(set(ids)) == 1000
    assert cycles < 250, f"{cycles} cycles for 1,000 submissions"
    assert plane.store.count_jobs(states=["PENDING"])["PENDING"] == 1000


def test_cancel_pending_and_running(plane: ControlPlane, tmp_path: Path) -> None:
    running, pending = plane.submit(
        ALICE,
        [
            job(["sleep", "30"], gpus=8, count=2, tmp=tmp_path),
            job(["true"], gpus=8, count=2, tmp=tmp_path),
        ],
    )
    wait_for(plane, running, "RUNNING")
    assert plane.store.get_job(pending).state == "PENDING"  # type: ignore[union-attr]
    assert plane.cancel(ALICE, pending).state == "CANCELLED"
    plane.cancel(ALICE, running)
    row = wait_for(plane, running, "CANCELLED")
    assert row.end_time is not None
    kinds = [e.kind for e in plane.store.job_events(running)]
    assert kinds == ["Submitted", "Admitted", "Started", "CancelRequested", "Cancelled"]
    assert [e.kind for e in plane.store.job_events(pending)] == ["Submitted", "Cancelled"]
    with pytest.raises(NotFound):
        plane.cancel(BOB, running)  # another tenant's job does not exist for bob


def test_time_limit_ends_in_timeout(plane: ControlPlane, tmp_path: Path) -> None:
    [job_id] = plane.submit(ALICE, [job(["sleep", "30"], time_limit=1, tmp=tmp_path)])
    row = wait_for(plane, job_id, "TIMEOUT")
    assert row.end_time is not None and row.start_time is not None
    assert 0.8 < row.end_time - row.start_time < 10


def test_failed_job_records_exit_code(plane: ControlPlane, tmp_path: Path) -> None:
    [job_id] = plane.submit(ALICE, [job(["sh", "-c", "exit 3"], tmp=tmp_path)])
    row = wait_for(plane, job_id, "FAILED")
    assert row.exit_code == 3


def test_bad_submissions_are_refused_whole(plane: ControlPlane, tmp_path: Path) -> None:
    good = job(["true"], tmp=tmp_path)
    with pytest.raises(
        Invalid, match=r"jobs\[1\]\.queue: tenant 'team-a' has no LocalQueue named 'nope'"
    ):
        plane.submit(ALICE, [good, job(["true"], tmp=tmp_path, queue="nope")])
    with pytest.raises(Invalid, match=r"priorityClass: no PriorityClass named 'urgent'"):
        plane.submit(ALICE, [job(["true"], tmp=tmp_path, priority_class="urgent")])
    with pytest.raises(Forbidden, match="tenant 'team-b'"):
        plane.submit(ALICE, [job(["true"], tmp=tmp_path, tenant="team-b")])
    with pytest.raises(Invalid, match="tenant: required"):
        plane.submit(
            Principal(user="carol", tenants=frozenset({"team-a", "team-b"})),
            [job(["true"], tmp=tmp_path, tenant=None)],
        )
    assert plane.store.list_jobs() == []


def test_configuration_in_use_is_not_deleted(plane: ControlPlane, tmp_path: Path) -> None:
    with pytest.raises(Conflict, match="LocalQueue/team-a/default"):
        plane.delete(ADMIN, "ClusterQueue", "team-a")
    with pytest.raises(Conflict, match="ClusterQueue/team-a"):
        plane.delete(ADMIN, "ResourceFlavor", "h100")
    [job_id] = plane.submit(ALICE, [job(["sleep", "30"], tmp=tmp_path)])
    wait_for(plane, job_id, "RUNNING")
    node = plane.store.get_job(job_id).nodes[0]  # type: ignore[union-attr]
    with pytest.raises(Conflict, match="unfinished job"):
        plane.delete(ADMIN, "Node", node)
    with pytest.raises(Forbidden):
        plane.delete(ALICE, "Node", node)
    with pytest.raises(NotFound):
        plane.delete(ADMIN, "Node", "no-such-node")
    plane.cancel(ADMIN, job_id)
    wait_for(plane, job_id, "CANCELLED")
    plane.delete(ADMIN, "Node", node)
    assert node not in plane.node_status()


@BOTH_STORES
def test_restart_re_adopts_running_jobs_and_runs_nothing_twice(
    tmp_path: Path, backend: str, database: str | None
) -> None:
    state = tmp_path / "state"
    first = make_plane(state, database)
    first.start()
    first.apply(ADMIN, cluster())
    ids = first.submit(
        ALICE, [job(["sh", "-c", "echo run; sleep 2"], gpus=4, tmp=tmp_path) for _ in range(6)]
    )
    for i in ids[:4]:
        wait_for(first, i, "RUNNING")
    # The control plane goes away; supervisors keep running.
    first.stop()
    first.store.close()
    second = make_plane(state, database)
    second.start()
    try:
        rows = [wait_for(second, i, "COMPLETED", timeout=30) for i in ids]
        for r in rows:
            assert (tmp_path / f"out-{r.id}.log").read_text() == "run\n", "ran twice"
            kinds = [e.kind for e in second.store.job_events(r.id)]
            assert kinds.count("Started") == 1 and kinds.count("Admitted") == 1
        # The recovered engine has the quota back.
        usage = second.cluster_queue_status()["team-a"]["usage"]
        assert usage.get("h100", {}).get("nvidia.com/gpu", 0) == 0
    finally:
        second.stop()
        second.store.close()


def test_a_failed_transaction_applies_nothing_and_the_loop_recovers(
    plane: ControlPlane, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The job is already in the engine and in the open transaction when the cycle fails.
    def broken_cycle(now: float, probe: object = None) -> list[object]:
        raise RuntimeError("boom")

    monkeypatch.setattr(plane.engine, "cycle", broken_cycle)
    with pytest.raises(Unavailable, match="nothing was applied"):
        plane.submit(ALICE, [job(["true"], tmp=tmp_path)])
    assert plane.store.list_jobs() == []
    # The loop rebuilt its engine from the store: the failed job is not in it.
    assert plane.engine.pending_count() == 0 and plane.engine.cycle is not broken_cycle
    [job_id] = plane.submit(ALICE, [job(["true"], tmp=tmp_path)])
    wait_for(plane, job_id, "COMPLETED")
