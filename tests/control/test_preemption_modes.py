"""Preemption with real supervisors: SIGTERM and a grace period, then requeue or PREEMPTED."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from phalanx.api.views import event_view, job_view
from phalanx.auth import ADMIN, Principal
from phalanx.cli.slurm import sacct
from phalanx.control.plane import ControlPlane
from phalanx.model import (
    ClusterQueue,
    JobSubmission,
    LocalQueue,
    Node,
    PodSet,
    PriorityClass,
    ResourceFlavor,
    RunSpec,
)
from phalanx.runtime.local import LocalRuntime
from phalanx.store import JobEventRow, Store
from tests.control.test_plane import wait_for

ALICE = Principal(user="alice", tenants=frozenset({"team-a"}))


def _objects(annotations: dict[str, str]) -> list[object]:
    queue = ClusterQueue.model_validate(
        {
            "name": "cq",
            "preemption": {"withinClusterQueue": "LowerPriority"},
            "resourceGroups": [
                {
                    "coveredResources": ["cpu", "nvidia.com/gpu"],
                    "flavors": [
                        {
                            "name": "h100",
                            "resources": [
                                {"name": "cpu", "nominalQuota": 32},
                                {"name": "nvidia.com/gpu", "nominalQuota": 8},
                            ],
                        }
                    ],
                }
            ],
            "annotations": annotations,
        }
    )
    return [
        ResourceFlavor(name="h100", node_labels={"phalanx.io/flavor": "h100"}),
        queue,
        LocalQueue(name="default", namespace="team-a", cluster_queue="cq"),
        PriorityClass(name="low", value=0),
        PriorityClass(name="high", value=1000),
        Node(
            name="gpu-0",
            labels={"phalanx.io/flavor": "h100"},
            capacity={"nvidia.com/gpu": 8, "cpu": 32, "memory": "256Gi"},
        ),
    ]


@contextmanager
def _plane(tmp_path: Path, annotations: dict[str, str]) -> Iterator[ControlPlane]:
    state = tmp_path / "state"
    plane = ControlPlane(
        Store.open(None, state_dir=state),
        LocalRuntime(state),
        state_dir=state,
        poll_interval_s=0.01,
    )
    plane.start()
    plane.apply(ADMIN, _objects(annotations))
    try:
        yield plane
    finally:
        plane.stop()
        plane.runtime.close()
        plane.store.close()


def _job(script: str, tmp: Path, priority: str, gpus: int = 8, **extra: Any) -> JobSubmission:
    return JobSubmission(
        name=priority,
        tenant="team-a",
        priority_class=priority,
        pod_sets=[PodSet(count=1, requests={"nvidia.com/gpu": gpus, "cpu": 1})],
        run=RunSpec(
            command=["sh", "-c", script],
            working_dir=str(tmp),
            output=str(tmp / "out-%j.log"),
            kill_wait=0.5,
        ),
        **extra,
    )


def _wait_output(path: Path, text: str, timeout: float = 15) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and text in path.read_text():
            return
        time.sleep(0.02)
    raise AssertionError(f"{path} never said {text!r}")


def _events(plane: ControlPlane, job_id: int, kind: str) -> list[JobEventRow]:
    return [e for e in plane.store.job_events(job_id) if e.kind == kind]


CHECKPOINTING = (
    'if [ -f ckpt-$PHALANX_JOB_ID ]; then echo "resumed from $(cat ckpt-$PHALANX_JOB_ID)"; '
    "exit 0; fi; "
    'trap "echo step-42 > ckpt-$PHALANX_JOB_ID; exit 0" TERM; echo started; sleep 30 & wait'
)
"""A job that checkpoints on SIGTERM and resumes from its checkpoint when run again."""

IGNORING = 'trap "" TERM; echo started; sleep 30'
"""A job that ignores SIGTERM: only SIGKILL stops it."""


def test_requeue_checkpoints_on_sigterm_keeps_the_id_and_completes_later(tmp_path: Path) -> None:
    with _plane(tmp_path, {"slurm.phalanx.io/grace-time": "5"}) as plane:
        [low] = plane.submit(ALICE, [_job(CHECKPOINTING, tmp_path, "low")])
        wait_for(plane, low, "RUNNING")
        _wait_output(tmp_path / f"out-{low}.log", "started")
        [high] = plane.submit(ALICE, [_job("echo high; sleep 1", tmp_path, "high")])
        wait_for(plane, low, "PENDING")
        assert (tmp_path / f"ckpt-{low}").read_text() == "step-42\n"
        wait_for(plane, high, "COMPLETED")
        row = wait_for(plane, low, "COMPLETED")
        assert row.attempt == 2 and row.exit_code == 0
        assert "resumed from step-42" in (tmp_path / f"out-{low}.log").read_text()

        [evicting] = _events(plane, low, "Evicting")
        assert evicting.data["preemptor"] == high and evicting.data["mode"] == "REQUEUE"
        [preempted] = _events(plane, low, "Preempted")
        assert preempted.reason == "InClusterQueue"
        data = preempted.data
        assert (data["preemptor"], data["attempt"], data["requeued"]) == (high, 1, True)
        # The job checkpointed and exited at once, well within its grace time.
        assert data["end_time"] - evicting.time < 4
        # Its GPUs went to the preemptor only once it had stopped.
        [started] = _events(plane, high, "Started")
        assert started.time >= data["end_time"]

        # sacct -D: the preempted run, then the run that completed.
        view = job_view(plane.store.get_job(low))  # type: ignore[arg-type]
        events = [event_view(e) for e in plane.store.job_events(low)]
        runs = [*sacct.earlier_runs(view, events), view]
        fields = sacct.parse_fields("JobID,State,ExitCode")
        assert sacct.format_jobs(runs, fields, parsable="plain").splitlines() == [
            "JobID|State|ExitCode",
            f"{low}|PREEMPTED|0:0",
            f"{low}|COMPLETED|0:0",
        ]
        assert sacct.format_jobs([view], fields, parsable="plain", header=False) == (
            f"{low}|COMPLETED|0:0\n"
        )


def test_cancel_mode_sigkills_after_the_grace_time_and_ends_preempted(tmp_path: Path) -> None:
    annotations = {"slurm.phalanx.io/preempt-mode": "CANCEL", "slurm.phalanx.io/grace-time": "2"}
    with _plane(tmp_path, annotations) as plane:
        [low] = plane.submit(ALICE, [_job(IGNORING, tmp_path, "low")])
        wait_for(plane, low, "RUNNING")
        _wait_output(tmp_path / f"out-{low}.log", "started")
        [high] = plane.submit(ALICE, [_job("sleep 0.5", tmp_path, "high")])
        row = wait_for(plane, low, "PREEMPTED")
        assert row.attempt == 1 and row.end_time is not None
        [evicting] = _events(plane, low, "Evicting")
        [preempted] = _events(plane, low, "Preempted")
        data = preempted.data
        assert (data["preemptor"], data["mode"], data["requeued"]) == (high, "CANCEL", False)
        # SIGTERM was ignored: SIGKILL after the 2 s grace, not after the 0.5 s kill wait.
        assert data["signal"] == 9
        assert 1.8 <= data["end_time"] - evicting.time < 8
        wait_for(plane, high, "COMPLETED")
        time.sleep(0.3)
        assert plane.store.get_job(low).state == "PREEMPTED"  # type: ignore[union-attr]
        assert not _events(plane, low, "Requeued")


def test_a_slurm_job_is_requeued_only_with_requeue(tmp_path: Path) -> None:
    with _plane(tmp_path, {}) as plane:
        slurm = {"ntasks": 1}
        [kept, dropped] = plane.submit(
            ALICE,
            [
                _job(CHECKPOINTING, tmp_path, "low", gpus=4, slurm=slurm, requeue=True),
                _job(CHECKPOINTING, tmp_path, "low", gpus=4, slurm=slurm),
            ],
        )
        for job_id in (kept, dropped):
            wait_for(plane, job_id, "RUNNING")
            _wait_output(tmp_path / f"out-{job_id}.log", "started")
        [high] = plane.submit(ALICE, [_job("sleep 0.5", tmp_path, "high")])
        assert wait_for(plane, dropped, "PREEMPTED").attempt == 1
        wait_for(plane, high, "COMPLETED")
        assert wait_for(plane, kept, "COMPLETED").attempt == 2
        # Both got SIGTERM and checkpointed.
        assert (tmp_path / f"ckpt-{dropped}").exists() and (tmp_path / f"ckpt-{kept}").exists()


def test_min_runtime_delays_the_preemption(tmp_path: Path) -> None:
    with _plane(tmp_path, {"phalanx.io/min-runtime": "2"}) as plane:
        [low] = plane.submit(ALICE, [_job(CHECKPOINTING, tmp_path, "low")])
        wait_for(plane, low, "RUNNING")
        [admitted] = _events(plane, low, "Admitted")
        [high] = plane.submit(ALICE, [_job("sleep 0.2", tmp_path, "high")])
        wait_for(plane, low, "PENDING")
        [evicting] = _events(plane, low, "Evicting")
        assert evicting.time - admitted.time >= 2
        wait_for(plane, high, "COMPLETED")
        wait_for(plane, low, "COMPLETED")


SLOW_CHECKPOINT = (
    "if [ -f ckpt-$PHALANX_JOB_ID ]; then echo resumed; exit 0; fi; "
    'trap "sleep 1.5; echo step-7 > ckpt-$PHALANX_JOB_ID; exit 0" TERM; '
    "echo started; sleep 30 & wait"
)
"""A job whose checkpoint takes 1.5 s after SIGTERM."""


def test_a_preemption_under_way_survives_a_control_plane_restart(tmp_path: Path) -> None:
    state = tmp_path / "state"

    def start() -> ControlPlane:
        plane = ControlPlane(
            Store.open(None, state_dir=state),
            LocalRuntime(state),
            state_dir=state,
            poll_interval_s=0.01,
        )
        plane.start()
        return plane

    first = start()
    first.apply(ADMIN, _objects({"slurm.phalanx.io/grace-time": "10"}))
    [low] = first.submit(ALICE, [_job(SLOW_CHECKPOINT, tmp_path, "low")])
    wait_for(first, low, "RUNNING")
    _wait_output(tmp_path / f"out-{low}.log", "started")
    [high] = first.submit(ALICE, [_job("sleep 0.2", tmp_path, "high")])
    deadline = time.monotonic() + 10
    while not _events(first, low, "Evicting"):
        assert time.monotonic() < deadline, "never evicted"
        time.sleep(0.02)
    # The preemptor leaves, and the control plane goes while the victim checkpoints
    # (its supervisor runs on): only the recorded eviction says what to do with it.
    first.cancel(ADMIN, high)
    first.stop()
    first.runtime.close()
    first.store.close()
    second = start()
    try:
        assert wait_for(second, high, "CANCELLED").start_time is None
        row = wait_for(second, low, "COMPLETED")
        assert row.attempt == 2
        assert (tmp_path / f"ckpt-{low}").read_text() == "step-7\n"
        preempted = _events(second, low, "Preempted")
        assert preempted and preempted[-1].data["requeued"] is True
        assert preempted[-1].data["preemptor"] == high
    finally:
        second.stop()
        second.runtime.close()
        second.store.close()


def test_a_checkpoint_survives_a_control_plane_restart(tmp_path: Path) -> None:
    state = tmp_path / "state"

    def start() -> ControlPlane:
        plane = ControlPlane(
            Store.open(None, state_dir=state),
            LocalRuntime(state),
            state_dir=state,
            poll_interval_s=0.01,
        )
        plane.start()
        return plane

    first = start()
    first.apply(ADMIN, _objects({}))
    script = 'echo started; touch "$PHALANX_CHECKPOINT_FILE"; sleep 30'
    [job] = first.submit(ALICE, [_job(script, tmp_path, "low")])
    wait_for(first, job, "RUNNING")
    deadline = time.monotonic() + 10
    while not _events(first, job, "Checkpointed"):
        assert time.monotonic() < deadline, "no checkpoint recorded"
        time.sleep(0.02)
    [recorded] = _events(first, job, "Checkpointed")
    assert recorded.data == {"attempt": 1}
    first.stop()
    first.runtime.close()
    first.store.close()
    second = start()
    try:
        # The engine has it back from the history; the re-attached supervisor's report
        # of the same checkpoint is not recorded twice.
        adm = second.state.engine.jobs[job].admission
        assert adm is not None and adm.checkpoint_at == recorded.time
        time.sleep(0.5)
        assert len(_events(second, job, "Checkpointed")) == 1
        second.cancel(ALICE, job)
        wait_for(second, job, "CANCELLED")
    finally:
        second.stop()
        second.runtime.close()
        second.store.close()


def test_attempt_times_come_from_the_current_attempt() -> None:
    from phalanx.control.recovery import _attempt_times

    def event(kind: str, at: float, attempt: int) -> JobEventRow:
        return JobEventRow(
            id=0, job_id=1, kind=kind, time=at, reason="", message="", data={"attempt": attempt}
        )

    events = [
        event("Admitted", 10.0, 1),
        event("Checkpointed", 20.0, 1),
        event("Admitted", 50.0, 2),
        event("Started", 51.0, 2),
    ]
    assert _attempt_times(events, 2) == (50.0, None)
    assert _attempt_times([*events, event("Checkpointed", 60.0, 2)], 2) == (50.0, 60.0)
