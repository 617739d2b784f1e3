"""Preemption on the local runtime: the cancel marker's grace time and the PREEMPTED state."""

from __future__ import annotations

import re
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from phalanx.runtime import LocalRuntime
from tests.runtime.test_batch import batch


@pytest.fixture
def runtime(tmp_path: Path) -> Iterator[LocalRuntime]:
    rt = LocalRuntime(tmp_path / "state")
    yield rt
    rt.close()


IGNORES_TERM = "trap '' TERM\necho started\nsleep 30\n"


def _started(tmp_path: Path, job_id: int = 22) -> None:
    out = tmp_path / f"slurm-{job_id}.out"
    deadline = time.monotonic() + 10
    while not (out.exists() and "started" in out.read_text()):
        assert time.monotonic() < deadline, "never started"
        time.sleep(0.02)


def test_grace_time_replaces_the_kill_wait(runtime: LocalRuntime, tmp_path: Path) -> None:
    spec = batch(tmp_path, IGNORES_TERM, kill_wait_s=20.0, error=True)
    runtime.launch(spec)
    _started(tmp_path)
    began = time.monotonic()
    runtime.cancel(22, preempt_grace_s=1.0)
    exited = runtime.wait(22, 10)
    assert exited is not None
    assert (exited.state, exited.signal, exited.message) == (
        "PREEMPTED",
        signal.SIGKILL,
        "preempted",
    )
    assert 0.9 <= time.monotonic() - began < 5
    err = Path(spec.error or "").read_text()
    assert re.search(
        r"^slurmstepd: error: \*\*\* JOB 22 ON gpu1 CANCELLED AT \S+ DUE TO PREEMPTION \*\*\*$",
        err,
        re.M,
    ), err


def test_no_grace_time_keeps_the_kill_wait(runtime: LocalRuntime, tmp_path: Path) -> None:
    runtime.launch(batch(tmp_path, IGNORES_TERM, kill_wait_s=1.0))
    _started(tmp_path)
    began = time.monotonic()
    runtime.cancel(22, preempt_grace_s=0.0)
    exited = runtime.wait(22, 10)
    assert exited is not None and (exited.state, exited.signal) == ("PREEMPTED", signal.SIGKILL)
    assert 0.9 <= time.monotonic() - began < 5


def test_a_job_that_stops_on_sigterm_ends_at_once(runtime: LocalRuntime, tmp_path: Path) -> None:
    runtime.launch(batch(tmp_path, "echo started\nsleep 30\n", kill_wait_s=1.0))
    _started(tmp_path)
    began = time.monotonic()
    runtime.cancel(22, preempt_grace_s=10.0)
    exited = runtime.wait(22, 10)
    assert exited is not None and (exited.state, exited.signal) == ("PREEMPTED", signal.SIGTERM)
    assert time.monotonic() - began < 3


# --------------------------------------------------------------------------- notice

NOTICE_SCRIPT = (
    "t0=$(date +%s.%N)\n"
    "trap 'echo \"usr1 $(date +%s.%N)\" >> marks' USR1\n"
    "trap 'echo \"term $(date +%s.%N)\" >> marks; exit 0' TERM\n"
    "echo started\n"
    "while :; do sleep 0.05; done\n"
)


def _marks(tmp_path: Path) -> dict[str, float]:
    out: dict[str, float] = {}
    for line in (tmp_path / "marks").read_text().splitlines():
        name, _, at = line.partition(" ")
        out.setdefault(name, float(at))
    return out


def test_notice_comes_its_seconds_before_the_end_of_the_grace_period(
    runtime: LocalRuntime, tmp_path: Path
) -> None:
    notice = (int(signal.SIGUSR1), 1.0, True)
    spec = batch(tmp_path, NOTICE_SCRIPT, kill_wait_s=5.0, preemption_notice=notice)
    runtime.launch(spec)
    _started(tmp_path)
    began = time.time()
    runtime.cancel(22, preempt_grace_s=2.0)
    exited = runtime.wait(22, 15)
    assert exited is not None and exited.state == "PREEMPTED"
    marks = _marks(tmp_path)
    # USR1 at the end of the grace period minus 1 s, SIGTERM at its end.
    assert 0.7 <= marks["usr1"] - began < 1.8, marks
    assert 1.7 <= marks["term"] - began < 3.0, marks
    assert marks["usr1"] < marks["term"]


def test_a_notice_longer_than_the_grace_period_comes_at_once(
    runtime: LocalRuntime, tmp_path: Path
) -> None:
    notice = (int(signal.SIGUSR1), 60.0, True)
    spec = batch(tmp_path, NOTICE_SCRIPT, kill_wait_s=5.0, preemption_notice=notice)
    runtime.launch(spec)
    _started(tmp_path)
    began = time.time()
    runtime.cancel(22, preempt_grace_s=1.0)
    exited = runtime.wait(22, 15)
    assert exited is not None and exited.state == "PREEMPTED"
    marks = _marks(tmp_path)
    # The grace period is not lengthened: USR1 at once, SIGTERM after 1 s.
    assert marks["usr1"] - began < 0.7, marks
    assert 0.8 <= marks["term"] - began < 2.0, marks


def test_cancel_sends_no_notice(runtime: LocalRuntime, tmp_path: Path) -> None:
    notice = (int(signal.SIGUSR1), 1.0, True)
    spec = batch(tmp_path, NOTICE_SCRIPT, kill_wait_s=5.0, preemption_notice=notice)
    runtime.launch(spec)
    _started(tmp_path)
    runtime.cancel(22)
    exited = runtime.wait(22, 15)
    assert exited is not None and exited.state == "CANCELLED"
    assert set(_marks(tmp_path)) == {"term"}


# --------------------------------------------------------------------------- checkpoints


def test_touching_the_checkpoint_file_reports_a_checkpoint(
    runtime: LocalRuntime, tmp_path: Path
) -> None:
    from phalanx.runtime import Checkpointed

    script = 'echo started\nsleep 0.3\ntouch "$PHALANX_CHECKPOINT_FILE"\nsleep 0.5\n'
    spec = batch(tmp_path, script)
    runtime.launch(spec)
    exited = runtime.wait(22, 10)
    assert exited is not None and exited.state == "COMPLETED"
    events = runtime.poll()
    points = [e for e in events if isinstance(e, Checkpointed)]
    assert len(points) == 1 and (points[0].job_id, points[0].attempt) == (22, 1)
    assert exited.start_time is not None and exited.start_time <= points[0].time <= exited.end_time


def test_a_kubernetes_jobs_notice_reaches_its_containers(
    runtime: LocalRuntime, tmp_path: Path
) -> None:
    from types import SimpleNamespace

    from phalanx.control.kubejobs import kube_launch
    from phalanx.dialects.kueue.jobs import convert_job
    from phalanx.runtime import TaskSpec

    script = NOTICE_SCRIPT.replace("echo started\n", "echo started > started\n")
    doc = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "noticed", "annotations": {"phalanx.io/preemption-notice": "USR1@1"}},
        "spec": {
            "template": {
                "spec": {
                    "containers": [{"name": "c", "image": "i", "command": ["sh", "-c", script]}],
                    "restartPolicy": "Never",
                }
            }
        },
    }
    run = convert_job("Job", doc).submission.run.model_copy(update={"working_dir": str(tmp_path)})
    assert run.kube is not None
    spec = kube_launch(
        SimpleNamespace(id=31),  # type: ignore[arg-type]
        run,
        run.kube,
        [TaskSpec(node="n0", rank=0, pod_set="main")],
        1,
        tmp_path / "out",
        None,
    )
    assert spec.preemption_notice == (int(signal.SIGUSR1), 1.0, False)
    runtime.launch(spec)
    deadline = time.monotonic() + 15
    while not (tmp_path / "started").exists():
        assert time.monotonic() < deadline, (tmp_path / "out").read_text()
        time.sleep(0.02)
    began = time.time()
    runtime.cancel(31, preempt_grace_s=2.0)
    exited = runtime.wait(31, 15)
    assert exited is not None and exited.state == "PREEMPTED"
    marks = _marks(tmp_path)
    assert 0.7 <= marks["usr1"] - began < 1.8, marks
    assert marks["usr1"] < marks["term"], marks
    # The pod runner outlived the notice: the task ended with the SIGTERM, not with USR1.
    assert exited.signal != signal.SIGUSR1, exited
