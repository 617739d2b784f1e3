"""The local runtime with real supervisors and real task processes."""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from phalanx.runtime import (
    AlreadyLaunched,
    Exited,
    LaunchSpec,
    LocalRuntime,
    RuntimeEvent,
    Started,
    TaskSpec,
    local,
)

PY = sys.executable


@pytest.fixture
def runtime(tmp_path: Path) -> Iterator[LocalRuntime]:
    rt = LocalRuntime(tmp_path / "state")
    yield rt
    rt.close()


def spec(
    tmp_path: Path,
    command: tuple[str, ...],
    *,
    job_id: int = 1,
    attempt: int = 1,
    tasks: tuple[TaskSpec, ...] = (TaskSpec(node="n0", rank=0),),
    env: dict[str, str] | None = None,
    working_dir: str | None = None,
    error: str | None = None,
    time_limit_s: float | None = None,
    kill_wait_s: float = 0.5,
) -> LaunchSpec:
    return LaunchSpec(
        job_id=job_id,
        attempt=attempt,
        command=command,
        working_dir=working_dir or str(tmp_path),
        env=env or {},
        tasks=tasks,
        output=str(tmp_path / "out" / f"{job_id}.out"),
        error=error,
        time_limit_s=time_limit_s,
        kill_wait_s=kill_wait_s,
    )


def sh(script: str) -> tuple[str, ...]:
    return ("sh", "-c", script)


def wait_started(rt: LocalRuntime, job_id: int, timeout: float = 5.0) -> list[RuntimeEvent]:
    """Poll until ``job_id`` reports Started; returns every event seen."""
    seen: list[RuntimeEvent] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        seen += rt.poll()
        if any(isinstance(e, Started) and e.job_id == job_id for e in seen):
            return seen
        time.sleep(0.01)
    raise AssertionError(f"job {job_id} did not start: {seen}")


def finish(rt: LocalRuntime, job_id: int, timeout: float = 5.0) -> Exited:
    exited = rt.wait(job_id, timeout)
    assert exited is not None, f"job {job_id} did not exit within {timeout}s"
    return exited


def status(rt: LocalRuntime, job_id: int, attempt: int = 1) -> dict[str, object]:
    data = json.loads((rt.attempt_dir(job_id, attempt) / "status.json").read_text())
    assert isinstance(data, dict)
    return data


def test_completed_job_appends_output(runtime: LocalRuntime, tmp_path: Path) -> None:
    s = spec(tmp_path, sh("echo hello; echo oops >&2"))
    Path(s.output).parent.mkdir()
    Path(s.output).write_text("earlier\n")
    runtime.launch(s)
    exited = finish(runtime, 1)
    assert exited.state == "COMPLETED"
    assert (exited.exit_code, exited.signal) == (0, None)
    assert exited.start_time is not None and exited.end_time >= exited.start_time
    assert Path(s.output).read_text().splitlines() == ["earlier", "hello", "oops"]
    events = runtime.poll()
    assert [type(e) for e in events] == [Started, Exited]
    assert runtime.poll() == []
    st = status(runtime, 1)
    assert st["state"] == "exited" and st["job_state"] == "COMPLETED"
    assert isinstance(st["tasks"], list) and len(st["tasks"]) == 1


def test_task_environment(runtime: LocalRuntime, tmp_path: Path) -> None:
    script = (
        'echo "$PHALANX_TASK_RANK $PHALANX_TASK_COUNT $PHALANX_NODE_NAME $PHALANX_JOB_ID'
        ' ${CUDA_VISIBLE_DEVICES-unset} $FOO ${BAR-none} $(pwd)"'
    )
    tasks = (
        TaskSpec(node="gpu-a", rank=0, gpus=(0, 1)),
        TaskSpec(node="gpu-b", rank=1, gpus=(3,), env={"BAR": "task1"}),
        TaskSpec(node="cpu-c", rank=2),
    )
    work = tmp_path / "work"
    work.mkdir()
    s = spec(tmp_path, sh(script), job_id=7, tasks=tasks, env={"FOO": "job"}, working_dir=str(work))
    os.environ["PHALANX_TEST_LEAK"] = "1"
    try:
        runtime.launch(s)
    finally:
        del os.environ["PHALANX_TEST_LEAK"]
    assert finish(runtime, 7).state == "COMPLETED"
    lines = sorted(Path(s.output).read_text().splitlines())
    assert lines == [
        f"0 3 gpu-a 7 0,1 job none {work}",
        f"1 3 gpu-b 7 3 job task1 {work}",
        f"2 3 cpu-c 7 unset job none {work}",
    ]


def test_environment_is_not_inherited(runtime: LocalRuntime, tmp_path: Path) -> None:
    os.environ["PHALANX_TEST_LEAK"] = "1"
    try:
        runtime.launch(spec(tmp_path, sh("env")))
    finally:
        del os.environ["PHALANX_TEST_LEAK"]
    assert finish(runtime, 1).state == "COMPLETED"
    names = {line.split("=", 1)[0] for line in (tmp_path / "out" / "1.out").read_text().split()}
    assert "PHALANX_TEST_LEAK" not in names
    assert {"PATH", "PHALANX_JOB_ID", "PHALANX_TASK_RANK"} <= names


def test_nonzero_exit_is_failed_with_largest_code(runtime: LocalRuntime, tmp_path: Path) -> None:
    tasks = tuple(TaskSpec(node="n0", rank=r) for r in range(3))
    runtime.launch(spec(tmp_path, sh("exit $((PHALANX_TASK_RANK * 3))"), tasks=tasks))
    exited = finish(runtime, 1)
    assert (exited.state, exited.exit_code, exited.signal) == ("FAILED", 6, None)


def test_killed_by_signal_is_failed_with_signal(runtime: LocalRuntime, tmp_path: Path) -> None:
    runtime.launch(spec(tmp_path, sh("kill -9 $$")))
    exited = finish(runtime, 1)
    assert (exited.state, exited.exit_code, exited.signal) == ("FAILED", 0, signal.SIGKILL)


def test_time_limit(runtime: LocalRuntime, tmp_path: Path) -> None:
    runtime.launch(spec(tmp_path, ("sleep", "30"), time_limit_s=0.3))
    exited = finish(runtime, 1)
    assert (exited.state, exited.signal) == ("TIMEOUT", signal.SIGTERM)
    assert exited.start_time is not None
    assert 0.25 <= exited.end_time - exited.start_time < 3


def test_time_limit_kills_task_that_ignores_sigterm(runtime: LocalRuntime, tmp_path: Path) -> None:
    ignore = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(30)"
    runtime.launch(spec(tmp_path, (PY, "-c", ignore), time_limit_s=0.3, kill_wait_s=0.5))
    exited = finish(runtime, 1)
    assert (exited.state, exited.signal) == ("TIMEOUT", signal.SIGKILL)
    assert exited.start_time is not None
    assert exited.end_time - exited.start_time >= 0.75


def test_cancel(runtime: LocalRuntime, tmp_path: Path) -> None:
    runtime.launch(spec(tmp_path, ("sleep", "30")))
    wait_started(runtime, 1)
    began = time.monotonic()
    runtime.cancel(1)
    exited = finish(runtime, 1)
    assert (exited.state, exited.signal) == ("CANCELLED", signal.SIGTERM)
    assert time.monotonic() - began < 2


def test_cancel_before_the_supervisor_starts_is_not_lost(
    runtime: LocalRuntime, tmp_path: Path
) -> None:
    # A supervisor that takes 0.3 s to come up.
    runtime.supervisor_command = [
        "sh",
        "-c",
        'sleep 0.3; exec "$0" -I -m phalanx.runtime.supervisor "$1"',
        PY,
    ]
    s = spec(tmp_path, sh("echo ran"))
    runtime.launch(s)
    runtime.cancel(1)
    exited = finish(runtime, 1)
    assert exited.state == "CANCELLED"
    assert exited.start_time is None
    assert not Path(s.output).exists()
    assert [type(e) for e in runtime.poll()] == [Exited]


def test_cancel_of_unknown_job_is_a_no_op(runtime: LocalRuntime) -> None:
    runtime.cancel(404)


def test_launching_an_attempt_twice_is_refused(runtime: LocalRuntime, tmp_path: Path) -> None:
    runtime.launch(spec(tmp_path, ("true",)))
    with pytest.raises(AlreadyLaunched):
        runtime.launch(spec(tmp_path, ("true",)))
    other = LocalRuntime(runtime.state_dir)
    with pytest.raises(AlreadyLaunched):
        other.launch(spec(tmp_path, ("true",)))
    assert finish(runtime, 1).state == "COMPLETED"


def test_second_attempt(runtime: LocalRuntime, tmp_path: Path) -> None:
    runtime.launch(spec(tmp_path, sh("echo first; exit 1"), attempt=1))
    first = finish(runtime, 1)
    assert (first.attempt, first.state, first.exit_code) == (1, "FAILED", 1)
    runtime.forget(1, 1)
    runtime.launch(spec(tmp_path, sh("echo second"), attempt=2))
    second = finish(runtime, 1)
    assert (second.attempt, second.state) == (2, "COMPLETED")
    assert (tmp_path / "out" / "1.out").read_text().splitlines() == ["first", "second"]
    assert runtime.attempt_dir(1, 1).is_dir() and runtime.attempt_dir(1, 2).is_dir()


def test_supervisor_survives_the_control_plane_being_killed(tmp_path: Path) -> None:
    state = tmp_path / "state"
    s = spec(tmp_path, sh("sleep 1; echo done"))
    launcher = textwrap.dedent(
        f"""
        import os, signal
        from pathlib import Path
        from phalanx.runtime import LaunchSpec, LocalRuntime, TaskSpec
        rt = LocalRuntime(Path({str(state)!r}))
        rt.launch(LaunchSpec(
            job_id=1, attempt=1, command=("sh", "-c", "sleep 1; echo done"),
            working_dir={s.working_dir!r}, env={{}}, tasks=(TaskSpec(node="n0", rank=0),),
            output={s.output!r},
        ))
        rt.wait(1, 0.2)
        os.kill(os.getpid(), signal.SIGKILL)
        """
    )
    proc = subprocess.run([PY, "-c", launcher], check=False)
    assert proc.returncode == -signal.SIGKILL
    rt = LocalRuntime(state)
    assert rt.adopt(1, 1)
    assert rt.adopt(1, 1)  # idempotent
    assert not rt.adopt(1, 2)
    assert not rt.adopt(2, 1)
    exited = finish(rt, 1)
    assert exited.state == "COMPLETED"
    assert [type(e) for e in rt.poll()] == [Started, Exited]
    assert Path(s.output).read_text() == "done\n"
    rt.close()


def test_adopt_reports_a_job_that_finished_while_away(tmp_path: Path) -> None:
    state = tmp_path / "state"
    first = LocalRuntime(state)
    first.launch(spec(tmp_path, sh("exit 4")))
    assert finish(first, 1).exit_code == 4
    del first  # events never consumed: the control plane died before its commit
    rt = LocalRuntime(state)
    assert rt.adopt(1, 1)
    events = rt.poll()
    assert [type(e) for e in events] == [Started, Exited]
    exited = events[1]
    assert isinstance(exited, Exited)
    assert (exited.state, exited.exit_code) == ("FAILED", 4)
    assert rt.poll() == []


def test_every_launch_sent_before_the_control_plane_was_killed_starts(tmp_path: Path) -> None:
    # Launches go to the fork server without waiting for its answers; killed with
    # thirty of them sent, the control plane leaves them committed, so each must run.
    state = tmp_path / "state"
    out = tmp_path / "out"
    out.mkdir()
    launcher = textwrap.dedent(
        f"""
        import os, signal
        from pathlib import Path
        from phalanx.runtime import LaunchSpec, LocalRuntime, TaskSpec
        rt = LocalRuntime(Path({str(state)!r}))
        for job in range(1, 31):
            rt.launch(LaunchSpec(
                job_id=job, attempt=1, command=("sh", "-c", "echo run"),
                working_dir={str(tmp_path)!r}, env={{}}, tasks=(TaskSpec(node="n0", rank=0),),
                output=f"{out}/{{job}}.out",
            ))
        os.kill(os.getpid(), signal.SIGKILL)
        """
    )
    proc = subprocess.run([PY, "-c", launcher], check=False)
    assert proc.returncode == -signal.SIGKILL
    rt = LocalRuntime(state)
    try:
        for job in range(1, 31):
            assert rt.adopt(job, 1)
        ended = {job: finish(rt, job, timeout=20) for job in range(1, 31)}
        assert {job: e.state for job, e in ended.items()} == dict.fromkeys(ended, "COMPLETED")
        assert all((out / f"{job}.out").read_text() == "run\n" for job in ended)
    finally:
        rt.close()


def test_a_second_supervisor_of_a_finished_attempt_runs_nothing(
    runtime: LocalRuntime, tmp_path: Path
) -> None:
    s = spec(tmp_path, sh("echo run"))
    runtime.launch(s)
    assert finish(runtime, 1).state == "COMPLETED"
    jobdir = runtime.attempt_dir(1, 1)
    again = subprocess.run(
        [PY, "-I", "-m", "phalanx.runtime.supervisor", str(jobdir)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert again.returncode == 1
    assert "taken already" in again.stderr
    assert Path(s.output).read_text() == "run\n"
    assert status(runtime, 1)["job_state"] == "COMPLETED"


def test_an_attempt_given_up_as_never_started_never_runs(tmp_path: Path) -> None:
    # A supervisor that comes up after the control plane ended its attempt NODE_FAIL
    # (the job is launched again as the next attempt) must not run it as well.
    rt = LocalRuntime(tmp_path / "state")
    rt.supervisor_command = [PY, "-c", "import sys; sys.exit(3)"]
    s = spec(tmp_path, sh("echo run"))
    try:
        rt.launch(s)
        assert finish(rt, 1).state == "NODE_FAIL"
        jobdir = rt.attempt_dir(1, 1)
        late = subprocess.run(
            [PY, "-I", "-m", "phalanx.runtime.supervisor", str(jobdir)], check=False
        )
        assert late.returncode == 1
        assert not Path(s.output).exists()
        assert not (jobdir / "status.json").exists()
    finally:
        rt.close()


def test_a_supervisor_that_starts_between_the_liveness_check_and_the_read_is_not_lost(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The liveness check finds no supervisor (it has not started yet); by the time the
    # status is read again it has started and written its first status. It is alive:
    # the attempt is not ended as a supervisor lost.
    rt = LocalRuntime(tmp_path / "state")
    jobdir = rt.attempt_dir(1, 1)
    jobdir.mkdir(parents=True)
    assert rt.adopt(1, 1)
    lock = os.open(jobdir / "supervisor.lock", os.O_RDWR | os.O_CREAT, 0o644)
    real = local._supervisor_alive
    calls: list[bool] = []

    def checked_just_before_it_started(path: Path) -> bool:
        if calls:
            calls.append(real(path))
            return calls[-1]
        calls.append(False)
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)  # the supervisor starts now
        (jobdir / "status.json").write_text(
            json.dumps({"state": "running", "pid": os.getpid(), "start_time": time.time()})
        )
        return False

    monkeypatch.setattr(local, "_supervisor_alive", checked_just_before_it_started)
    try:
        events = rt.poll()
        assert calls == [False, True]
        assert not any(isinstance(e, Exited) for e in events), events
        assert any(isinstance(e, Started) for e in events), events
    finally:
        os.close(lock)
        rt.close()


def test_supervisor_killed_fails_the_job(runtime: LocalRuntime, tmp_path: Path) -> None:
    runtime.launch(spec(tmp_path, ("sleep", "30")))
    wait_started(runtime, 1)
    st = status(runtime, 1)
    pid, tasks = st["pid"], st["tasks"]
    assert isinstance(pid, int) and isinstance(tasks, list)
    os.kill(pid, signal.SIGKILL)
    exited = finish(runtime, 1, timeout=5)
    assert exited.state == "FAILED"
    assert exited.message == (
        "supervisor lost: the job's supervisor process died without reporting its end; "
        "its tasks were killed (SIGKILL)"
    )
    assert exited.signal == signal.SIGKILL
    assert exited.start_time is not None
    # Its orphaned task was killed with it.
    assert _gone(tasks[0]), "orphaned task still running"


def _gone(pid: int, timeout: float = 2.0) -> bool:
    """True once ``pid`` is gone or a zombie (its new parent may not reap it at once)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except FileNotFoundError:
            return True
        if stat.rsplit(")", 1)[1].split()[0] in ("Z", "X"):
            return True
        time.sleep(0.02)
    return False


def test_supervisor_that_fails_to_start_is_node_fail(runtime: LocalRuntime, tmp_path: Path) -> None:
    runtime.supervisor_command = [PY, "-c", "import sys; sys.exit(3)"]
    runtime.launch(spec(tmp_path, ("true",)))
    exited = finish(runtime, 1)
    assert (exited.state, exited.message) == ("NODE_FAIL", "supervisor failed to start")


def test_supervisor_is_not_a_child_of_the_control_plane(
    runtime: LocalRuntime, tmp_path: Path
) -> None:
    runtime.launch(spec(tmp_path, ("sleep", "30")))
    wait_started(runtime, 1)
    pid = status(runtime, 1)["pid"]
    assert isinstance(pid, int)
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ppid, sid = int(fields[1]), int(fields[3])
    assert ppid != os.getpid()
    assert sid == pid != os.getsid(0)
    runtime.cancel(1)
    assert finish(runtime, 1).state == "CANCELLED"


def test_missing_working_dir(runtime: LocalRuntime, tmp_path: Path) -> None:
    missing = str(tmp_path / "nowhere")
    s = spec(tmp_path, ("true",), working_dir=missing)
    runtime.launch(s)
    exited = finish(runtime, 1)
    assert (exited.state, exited.exit_code) == ("FAILED", 1)
    assert missing in exited.message
    assert Path(s.output).read_text() == (
        f"slurmstepd: error: couldn't chdir to `{missing}': No such file or directory\n"
    )


def test_command_not_found(runtime: LocalRuntime, tmp_path: Path) -> None:
    s = spec(tmp_path, ("no-such-command-phalanx",))
    runtime.launch(s)
    exited = finish(runtime, 1)
    assert (exited.state, exited.exit_code) == ("FAILED", 2)
    assert "execve(): no-such-command-phalanx: No such file or directory" in exited.message
    assert Path(s.output).read_text().startswith("slurmstepd: error: execve(): ")


def test_stderr_to_its_own_file(runtime: LocalRuntime, tmp_path: Path) -> None:
    error = tmp_path / "err" / "1.err"
    s = spec(tmp_path, sh("echo out; echo err >&2"), error=str(error))
    runtime.launch(s)
    assert finish(runtime, 1).state == "COMPLETED"
    assert Path(s.output).read_text() == "out\n"
    assert error.read_text() == "err\n"


def test_forget_drops_a_job(runtime: LocalRuntime, tmp_path: Path) -> None:
    runtime.launch(spec(tmp_path, ("true",)))
    assert finish(runtime, 1).state == "COMPLETED"
    runtime.forget(1)
    assert runtime.poll() == []


def test_default_output(runtime: LocalRuntime) -> None:
    assert runtime.default_output(12) == runtime.state_dir / "runtime" / "logs" / "12.out"


def test_supervisor_module_runs_isolated(tmp_path: Path) -> None:
    # -I ignores PYTHONPATH and the cwd: phalanx must come from the venv's site-packages.
    proc = subprocess.run(
        [PY, "-I", "-m", "phalanx.runtime.supervisor"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 2
    assert "usage" in proc.stderr


def test_signal_reaches_the_tasks(runtime: LocalRuntime, tmp_path: Path) -> None:
    script = "trap 'echo got USR1; exit 7' USR1; while :; do sleep 0.05; done"
    runtime.launch(spec(tmp_path, sh(script)))
    wait_started(runtime, 1)
    time.sleep(0.2)  # the trap is set
    runtime.signal(1, signal.SIGUSR1)
    exited = runtime.wait(1, timeout=10)
    assert exited is not None and (exited.state, exited.exit_code) == ("FAILED", 7)
    # Every process of the job gets it (sleep dies of it, sh runs its trap).
    assert (tmp_path / "out" / "1.out").read_text().endswith("got USR1\n")


def test_time_limit_changed_while_running(runtime: LocalRuntime, tmp_path: Path) -> None:
    runtime.launch(spec(tmp_path, ("sleep", "30"), time_limit_s=60))
    wait_started(runtime, 1)
    runtime.set_time_limit(1, 1.0)
    exited = runtime.wait(1, timeout=10)
    assert exited is not None and exited.state == "TIMEOUT"
    assert exited.start_time is not None and exited.end_time - exited.start_time < 5
