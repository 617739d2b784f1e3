"""Batch scripts on the local runtime: Slurm environment, srun, scontrol, signals, limits."""

from __future__ import annotations

import os
import re
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from phalanx.runtime import Exited, LaunchSpec, LocalRuntime, TaskSpec


@pytest.fixture
def runtime(tmp_path: Path) -> Iterator[LocalRuntime]:
    rt = LocalRuntime(tmp_path / "state")
    yield rt
    rt.close()


def context(job_id: int = 22, **changes: Any) -> dict[str, Any]:
    ctx: dict[str, Any] = {
        "jobId": job_id,
        "jobName": "envcap",
        "partition": "gpu",
        "account": "teama",
        "qos": "normal",
        "user": "root",
        "uid": 0,
        "gid": 0,
        "submitDir": "/tmp/x",
        "submitHost": "vm",
        "clusterName": "phalanx",
        "nodes": [
            {"name": f"gpu{i}", "cpus": 64, "gpus": list(range(8)), "memMb": 262144, "tasks": 8}
            for i in (1, 2)
        ],
        "ntasks": None,
        "ntasksPerNode": 8,
        "cpusPerTask": 8,
        "gpus": None,
        "gpusPerNode": 8,
        "gpusPerTask": None,
        "memPerNodeMb": 262144,
        "memPerCpuMb": None,
        "memPerGpuMb": None,
        "array": None,
        "dependency": None,
        "timeLimitS": None,
        "url": "http://127.0.0.1:6900",
        "token": None,
    }
    ctx.update(changes)
    return ctx


def batch(
    tmp_path: Path,
    script: str,
    *,
    job_id: int = 22,
    ctx: dict[str, Any] | None = None,
    error: bool = False,
    **changes: Any,
) -> LaunchSpec:
    ctx = ctx if ctx is not None else context(job_id)
    first = ctx["nodes"][0]
    return LaunchSpec(
        job_id=job_id,
        attempt=1,
        command=changes.pop("command", ()),
        working_dir=str(tmp_path),
        env={},
        tasks=(TaskSpec(node=first["name"], rank=0, gpus=tuple(first["gpus"])),),
        output=str(tmp_path / f"slurm-{job_id}.out"),
        error=str(tmp_path / f"slurm-{job_id}.err") if error else None,
        script="#!/bin/sh\n" + script,
        slurm=ctx,
        kill_wait_s=changes.pop("kill_wait_s", 1.0),
        **changes,
    )


def run(rt: LocalRuntime, spec: LaunchSpec, timeout: float = 10.0) -> tuple[Exited, str]:
    rt.launch(spec)
    exited = rt.wait(spec.job_id, timeout)
    assert exited is not None, f"job {spec.job_id} did not exit"
    return exited, Path(spec.output).read_text()


def test_batch_script_runs_once_with_the_slurm_environment(
    runtime: LocalRuntime, tmp_path: Path
) -> None:
    script = 'echo run; env | grep -E "^(SLURM|CUDA)" | sort; echo "TASKPID $$"\n'
    spec = batch(tmp_path, script)
    exited, out = run(runtime, spec)
    assert exited.state == "COMPLETED", out
    lines = out.splitlines()
    assert lines.count("run") == 1
    env = dict(line.split("=", 1) for line in lines if "=" in line)
    assert env["SLURM_JOB_ID"] == "22"
    assert env["SLURM_JOB_NODELIST"] == "gpu[1-2]"
    assert env["SLURM_TASKS_PER_NODE"] == "8(x2)"
    assert env["SLURM_NTASKS"] == "16"
    assert env["CUDA_VISIBLE_DEVICES"] == "0,1,2,3,4,5,6,7"
    assert env["SLURM_WORKING_CLUSTER"] == "phalanx:127.0.0.1:6900:9728:109"
    pid = next(line.split()[1] for line in lines if line.startswith("TASKPID"))
    assert env["SLURM_TASK_PID"] == pid
    jobdir = runtime.attempt_dir(22, 1)
    assert (jobdir / "slurm.json").stat().st_mode & 0o777 == 0o600
    assert os.access(jobdir / "script", os.X_OK)


def test_script_arguments(runtime: LocalRuntime, tmp_path: Path) -> None:
    spec = batch(tmp_path, 'echo "args: $*"\n', command=("one", "two"))
    _, out = run(runtime, spec)
    assert out.strip() == "args: one two"


def test_srun_ranks_nodes_and_gpus(runtime: LocalRuntime, tmp_path: Path) -> None:
    ctx = context(
        nodes=[
            {"name": "gpu1", "cpus": 64, "gpus": [0, 1, 2, 3, 4, 5, 6, 7], "tasks": 8},
            {"name": "gpu2", "cpus": 64, "gpus": [0, 1, 2, 3], "tasks": 8},
        ]
    )
    script = (
        "srun sh -c 'echo R $SLURM_PROCID $SLURMD_NODENAME $CUDA_VISIBLE_DEVICES"
        " $SLURM_LOCALID $SLURM_NODEID $SLURM_STEP_ID $SLURM_NTASKS'\n"
        "srun -N2 -n2 sh -c 'echo S $SLURM_PROCID $SLURMD_NODENAME $SLURM_STEP_ID'\n"
    )
    exited, out = run(runtime, batch(tmp_path, script, ctx=ctx))
    assert exited.state == "COMPLETED", out
    ranks = sorted(
        (int(p[1]), p[2:]) for p in (line.split() for line in out.splitlines()) if p[0] == "R"
    )
    assert [r for r, _ in ranks] == list(range(16))
    for rank, (node, gpus, local, nodeid, step, ntasks) in ranks:
        assert node == ("gpu1" if rank < 8 else "gpu2")
        assert gpus == ("0,1,2,3,4,5,6,7" if rank < 8 else "0,1,2,3")
        assert (int(local), int(nodeid), step, ntasks) == (rank % 8, rank // 8, "0", "16")
    second = sorted(line for line in out.splitlines() if line.startswith("S "))
    assert second == ["S 0 gpu1 1", "S 1 gpu2 1"]


def test_srun_label_and_exit_codes(runtime: LocalRuntime, tmp_path: Path) -> None:
    script = (
        "srun -l -n3 -N1 sh -c 'echo hi'\n"
        "srun -n4 -N2 sh -c 'exit $SLURM_PROCID'; echo rc=$?\n"
        "srun -n2 -N1 sh -c 'if [ $SLURM_PROCID = 1 ]; then kill -9 $$; fi; exit 3'; echo rc=$?\n"
        "srun --bogus true; echo rc=$?\n"
    )
    exited, out = run(runtime, batch(tmp_path, script))
    assert exited.state == "COMPLETED", out
    lines = out.splitlines()
    assert sorted(line for line in lines if line.endswith(": hi")) == ["0: hi", "1: hi", "2: hi"]
    rcs = [line for line in lines if line.startswith("rc=")]
    assert rcs == ["rc=3", "rc=137", "rc=1"]
    assert "srun: error: gpu2: task 3: Exited with exit code 3" in lines
    assert "srun: error: gpu1: task 1: Killed" in lines
    assert "srun: unrecognized option '--bogus'" in lines


def test_srun_kill_on_bad_exit(runtime: LocalRuntime, tmp_path: Path) -> None:
    script = (
        "start=$(date +%s)\n"
        "srun -K -n2 -N1 sh -c 'if [ $SLURM_PROCID = 0 ]; then exit 4; fi; exec sleep 30'\n"
        'echo "rc=$? took=$(( $(date +%s) - start ))"\n'
    )
    _, out = run(runtime, batch(tmp_path, script))
    match = re.search(r"rc=(\d+) took=(\d+)", out)
    assert match is not None, out
    assert int(match.group(2)) < 10
    assert "Exited with exit code 4" in out


def test_scontrol_hostnames(runtime: LocalRuntime, tmp_path: Path) -> None:
    script = (
        "scontrol show hostnames\n"
        "scontrol show hostnames 'n[01-03]'\n"
        "scontrol show hostlist tux2,tux1,tux2\n"
        "scontrol show hostlistsorted tux2,tux1,tux2\n"
    )
    exited, out = run(runtime, batch(tmp_path, script))
    assert exited.state == "COMPLETED", out
    assert out.splitlines() == ["gpu1", "gpu2", "n01", "n02", "n03", "tux[2,1-2]", "tux[1-2,2]"]


def test_container_image_is_refused(runtime: LocalRuntime, tmp_path: Path) -> None:
    script = "srun --container-image=nvcr.io/nvidia/pytorch:24.01 true; echo rc=$?\n"
    _, out = run(runtime, batch(tmp_path, script))
    from phalanx.runtime.srun import CONTAINER_ERROR

    assert out.splitlines() == [CONTAINER_ERROR, "rc=1"]
    assert "--container-runtime host" in CONTAINER_ERROR


def test_truncate_and_append(runtime: LocalRuntime, tmp_path: Path) -> None:
    out = tmp_path / "slurm-22.out"
    out.write_text("old\n")
    run(runtime, batch(tmp_path, "echo new\n", open_mode="truncate"))
    assert out.read_text() == "new\n"
    out2 = tmp_path / "slurm-23.out"
    out2.write_text("old\n")
    run(runtime, batch(tmp_path, "echo new\n", job_id=23, ctx=context(23), open_mode="append"))
    assert out2.read_text() == "old\nnew\n"


def test_signal_before_the_time_limit(runtime: LocalRuntime, tmp_path: Path) -> None:
    # B: the batch shell gets USR1 1.5 s before the 2 s limit.
    script = "trap 'echo got-usr1; exit 0' USR1\nsleep 10 & wait\n"
    spec = batch(tmp_path, script, time_limit_s=2.0, signal=(int(signal.SIGUSR1), 1.5, True))
    start = time.monotonic()
    exited, out = run(runtime, spec)
    assert exited.state == "COMPLETED", out
    assert "got-usr1" in out
    assert time.monotonic() - start < 2.0
    # Without B: the steps' tasks get it, not the shell.
    script = (
        "srun sh -c 'trap \"echo task-usr1 $SLURM_PROCID; exit 0\" USR1; sleep 10 & wait' \n"
        "echo shell-alive\n"
    )
    spec = batch(
        tmp_path,
        script,
        job_id=24,
        ctx=context(24, nodes=[{"name": "gpu1", "cpus": 4, "gpus": [], "tasks": 2}]),
        time_limit_s=3.0,
        signal=(int(signal.SIGUSR1), 2.0, False),
    )
    exited, out = run(runtime, spec)
    assert exited.state == "COMPLETED", out
    assert sorted(line for line in out.splitlines() if line.startswith("task-usr1")) == [
        "task-usr1 0",
        "task-usr1 1",
    ]
    assert "shell-alive" in out


def test_time_limit_message(runtime: LocalRuntime, tmp_path: Path) -> None:
    spec = batch(tmp_path, "srun -n1 sleep 30\n", time_limit_s=0.5, error=True)
    exited, _ = run(runtime, spec)
    assert exited.state == "TIMEOUT"
    err = Path(spec.error or "").read_text()
    assert re.search(
        r"^slurmstepd: error: \*\*\* JOB 22 ON gpu1 CANCELLED AT "
        r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d DUE TO TIME LIMIT \*\*\*$",
        err,
        re.M,
    ), err


def test_cancel_reaches_srun_tasks(runtime: LocalRuntime, tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    script = f"srun -n4 -N2 sh -c 'echo $$ >> {pids}; exec sleep 60'\n"
    spec = batch(tmp_path, script, error=True)
    runtime.launch(spec)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if pids.exists() and len(pids.read_text().split()) == 4:
            break
        time.sleep(0.02)
    recorded = [int(p) for p in pids.read_text().split()]
    assert len(recorded) == 4
    runtime.cancel(22)
    exited = runtime.wait(22, 10)
    assert exited is not None and exited.state == "CANCELLED"
    for pid in recorded:
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.02)
        else:
            pytest.fail(f"task {pid} outlived the cancel")
    err = Path(spec.error or "").read_text()
    assert re.search(r"\*\*\* JOB 22 ON gpu1 CANCELLED AT \S+ \*\*\*", err), err
    assert "*** STEP 22.0 ON gpu1 CANCELLED AT" in err


def test_srun_outside_a_job_is_the_login_shells() -> None:
    """Outside a job's task the job's srun is a login shell's: it asks the server for an
    allocation (here there is none to ask: one error line)."""
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith(("PHALANX_", "SLURM_"))}
    env["PHALANX_URL"] = "http://127.0.0.1:1"
    proc = subprocess.run(
        [sys.executable, "-I", "-m", "phalanx.runtime.srun", "hostname"],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 1
    assert proc.stderr == (
        "srun: error: no phalanx server at http://127.0.0.1:1: start one with `phalanx up`\n"
    )
