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
