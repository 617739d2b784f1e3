"""The noop runtime: attempts are timers driven by poll(), with a controlled clock."""

from __future__ import annotations

from pathlib import Path

import pytest

from phalanx.runtime.noop import RUNTIME_MS_ENV, NoopRuntime, runtime_ms
from phalanx.runtime.spec import AlreadyLaunched, Exited, LaunchSpec, Started, TaskSpec


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def spec(
    job_id: int,
    command: list[str],
    *,
    attempt: int = 1,
    env: dict[str, str] | None = None,
    time_limit_s: float | None = None,
    kube: dict[str, object] | None = None,
) -> LaunchSpec:
    return LaunchSpec(
        job_id=job_id,
        attempt=attempt,
        command=tuple(command),
        working_dir="/",
        env=env or {},
        tasks=(TaskSpec(node="n0", rank=0),),
        output="/dev/null",
        time_limit_s=time_limit_s,
        kube=kube,
    )


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        (["sleep", "0.2"], 200.0),
        (["/bin/sleep", "1", "2"], 3000.0),
        (["sleep", "1.5m"], 90_000.0),
        (["sh", "-c", "sleep .5"], 500.0),
        (["sleep", "soon"], 0.0),
        (["python", "train.py"], 0.0),
        (["sleep"], 0.0),
    ],
)
def test_runtime_from_the_command(command: list[str], expected: float) -> None:
    assert runtime_ms(spec(1, command)) == pytest.approx(expected)


def test_the_environment_overrides_the_command() -> None:
    assert runtime_ms(spec(1, ["sleep", "9"], env={RUNTIME_MS_ENV: "250"})) == 250.0
    # Not a number: the command decides.
    assert runtime_ms(spec(1, ["sleep", "9"], env={RUNTIME_MS_ENV: "x"})) == 9000.0


def test_kubernetes_job_runs_its_longest_task() -> None:
    def pod(*sleeps: str) -> dict[str, object]:
        return {"containers": [{"command": ["sleep"], "args": [s]} for s in sleeps]}

    kube = {"tasks": [[pod("1", "2"), pod("0.5")], [pod("1")]]}
    assert runtime_ms(spec(1, [], kube=kube)) == 2500.0


def test_started_at_launch_then_completed_after_the_runtime(tmp_path: Path) -> None:
    clock = Clock()
    rt = NoopRuntime(tmp_path, clock=clock)
    rt.launch(spec(7, ["sleep", "0.2"]))
    assert rt.next_event_time() == clock.now  # the Started event is due now
    assert rt.poll() == [Started(7, 1, 1000.0)]
    assert rt.next_event_time() == pytest.approx(1000.2)
    clock.now = 1000.1
    assert rt.poll() == []
    clock.now = 1000.25
    [event] = rt.poll()
    assert isinstance(event, Exited)
    assert (event.job_id, event.state, event.exit_code) == (7, "COMPLETED", 0)
    assert (event.start_time, event.end_time) == (1000.0, pytest.approx(1000.2))
    assert rt.poll() == []
    assert rt.next_event_time() is None
    with pytest.raises(AlreadyLaunched):
        rt.launch(spec(7, ["sleep", "0.2"]))


def test_cancel_ends_the_attempt_at_once(tmp_path: Path) -> None:
    clock = Clock()
    rt = NoopRuntime(tmp_path, clock=clock)
    rt.launch(spec(3, ["sleep", "60"]))
    rt.poll()
    clock.now += 1
    rt.cancel(3)
    [event] = rt.poll()
    assert isinstance(event, Exited)
    assert (event.state, event.end_time) == ("CANCELLED", 1001.0)
    clock.now += 100
    assert rt.poll() == []  # the original timer does not fire again


def test_time_limit_ends_it_as_timeout_and_can_be_changed(tmp_path: Path) -> None:
    clock = Clock()
    rt = NoopRuntime(tmp_path, clock=clock)
    rt.launch(spec(4, ["sleep", "10"], time_limit_s=2))
    rt.launch(spec(5, ["sleep", "10"], time_limit_s=2))
    rt.poll()
    rt.set_time_limit(5, None)  # removed: runs its full 10 s
    clock.now += 3
    [event] = rt.poll()
    assert isinstance(event, Exited)
    assert (event.job_id, event.state, event.end_time) == (4, "TIMEOUT", 1002.0)
    clock.now += 10
    [event] = rt.poll()
    assert isinstance(event, Exited)
    assert (event.job_id, event.state, event.end_time) == (5, "COMPLETED", 1010.0)


def test_forget_and_adopt(tmp_path: Path) -> None:
    clock = Clock()
    rt = NoopRuntime(tmp_path, clock=clock)
    rt.launch(spec(1, ["sleep", "1"]))
    assert rt.adopt(1, 1)
    assert not rt.adopt(2, 1)  # nothing survives a restart
    rt.forget(1, 1)
    clock.now += 5
    assert rt.poll() == []
    assert not rt.adopt(1, 1)
