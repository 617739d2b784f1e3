"""Slurm's interactive side against a real server: srun and salloc from a login shell,
srun --jobid, sattach, sstat, job steps in sacct, a --pty session and Ctrl-C.

Every command runs as its own process (the shims' ``python -m phalanx.cli.main``),
with the terminal-facing ones under a real pseudo-terminal.
"""

from __future__ import annotations

import os
import pty
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from phalanx.cli.slurm import shims
from tests.api.server import Cluster

PARTITION = "team-a"


@pytest.fixture(scope="module")
def env(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """A login shell's environment: the shims first on PATH, the admin's token."""
    bindir = tmp_path_factory.mktemp("bin")
    shims.write_shims(bindir)
    out = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "PHALANX_"))}
    out.update(
        PATH=f"{bindir}:{os.environ.get('PATH', '/usr/bin:/bin')}",
        PHALANX_URL=cluster.url,
        PHALANX_TOKEN=cluster.admin_token,
        PHALANX_STATE_DIR=str(cluster.state_dir),
        HOME_FOR_JOBS=str(tmp_path_factory.mktemp("work")),
    )
    return out


def tool(env: dict[str, str], *args: str, **kwargs: object) -> subprocess.CompletedProcess[str]:
    """Run a Slurm tool (``srun``, ``salloc``, ``sacct``, ...) through its shim."""
    kwargs.setdefault("timeout", 90)
    kwargs.setdefault("cwd", env["HOME_FOR_JOBS"])  # sbatch's slurm-N.out files go there
    return subprocess.run(  # type: ignore[call-overload, no-any-return]
        list(args), env=env, capture_output=True, text=True, check=False, **kwargs
    )


def sacct(env: dict[str, str], job: int | str) -> list[str]:
    done = tool(env, "sacct", "-n", "-P", "-j", str(job), "-o", "JobID,JobName,State,ExitCode")
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def wait_state(env: dict[str, str], job: int | str, states: set[str], timeout: float = 30) -> str:
    deadline = time.monotonic() + timeout
    state = ""
    while time.monotonic() < deadline:
        done = tool(env, "squeue", "-h", "-t", "all", "-j", str(job), "-o", "%T")
        state = done.stdout.strip()
        if state in states:
            return state
        time.sleep(0.2)
    raise AssertionError(f"job {job} is {state!r}, not one of {states}")


def wait_step(env: dict[str, str], step: str, timeout: float = 30) -> None:
    """Until sacct lists ``step`` (``12.0``): it has started."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done = tool(env, "sacct", "-n", "-P", "-j", step, "-o", "JobID")
        if step in done.stdout.split():
            return
        time.sleep(0.1)
    raise AssertionError(f"step {step} did not start in {timeout} s")


class Terminal:
    """A command under a pseudo-terminal: what it prints, keys typed to it."""

    def __init__(self, argv: list[str], env: dict[str, str]) -> None:
        self.pid, self.fd = pty.fork()
        if self.pid == 0:  # pragma: no cover - the child
            os.execvpe(argv[0], argv, env)
        self.seen = b""

    def expect(self, needle: bytes, timeout: float = 30) -> bytes:
        deadline = time.monotonic() + timeout
        while needle not in self.seen:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"{needle!r} not seen; got {self.seen!r}")
            ready, _, _ = select.select([self.fd], [], [], left)
            if ready:
                try:
                    data = os.read(self.fd, 4096)
                except OSError:
                    data = b""
                if not data:
                    raise AssertionError(f"{needle!r} not seen before the end; got {self.seen!r}")
                self.seen += data
        return self.seen

    def type(self, keys: bytes) -> None:
        os.write(self.fd, keys)

    def drain(self, seconds: float) -> None:
        if self.fd < 0:
            time.sleep(seconds)
            return
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            ready, _, _ = select.select([self.fd], [], [], left)
            if not ready:
                continue
            try:
                data = os.read(self.fd, 4096)
            except OSError:
                return
            if not data:
                return
            self.seen += data

    def wait(self, timeout: float = 60) -> int:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.drain(0.1)
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                return os.waitstatus_to_exitcode(status)
        os.kill(self.pid, signal.SIGKILL)
        raise AssertionError(f"still running; printed {self.seen!r}")

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def _job_of(text: str, tool_name: str) -> int:
    for line in text.splitlines():
        for marker in (f"{tool_name}: Granted job allocation ", f"{tool_name}: job "):
            if line.startswith(marker):
                return int(line[len(marker) :].split()[0])
    raise AssertionError(f"no job id in {text!r}")


# -- srun outside a job --------------------------------------------------------------


def test_srun_allocates_runs_one_step_and_ends_the_job(env: dict[str, str]) -> None:
    done = tool(
        env,
        "srun",
        "-p",
        PARTITION,
        "-N2",
        "--ntasks-per-node=1",
        "-l",
        "sh",
        "-c",
        "echo $SLURM_JOB_ID $SLURM_STEP_ID $SLURM_PROCID $SLURM_NODEID $SLURM_STEP_NUM_TASKS",
    )
    assert done.returncode == 0, done.stderr
    lines = sorted(done.stdout.splitlines())
    assert len(lines) == 2, done.stdout
    job = lines[0].split()[1]
    assert lines == [f"0: {job} 0 0 0 2", f"1: {job} 0 1 1 2"]
    assert sacct(env, job) == [f"{job}|sh|COMPLETED|0:0", f"{job}.0|sh|COMPLETED|0:0"]


def test_srun_exit_status_follows_slurms_rules(env: dict[str, str]) -> None:
    done = tool(env, "srun", "-p", PARTITION, "-n2", "sh", "-c", "exit $((SLURM_PROCID + 2))")
    assert done.returncode == 3, done.stderr
    assert "task 0: Exited with exit code 2" in done.stderr
    assert "task 1: Exited with exit code 3" in done.stderr
    killed = tool(env, "srun", "-p", PARTITION, "-n1", "sh", "-c", "kill -9 $$")
    assert killed.returncode == 137, killed.stderr
    assert ": task 0: Killed" in killed.stderr
    job = tool(env, "squeue", "-h", "-t", "all", "-u", "root", "-o", "%i %j %T")
    failed = [line for line in job.stdout.splitlines() if line.endswith(" FAILED")]
    assert failed, job.stdout


def test_srun_gives_stdin_to_task_zero_and_writes_output_files(
    env: dict[str, str], tmp_path: Path
) -> None:
    # Every task reads srun's standard input (Slurm's default), or the one --input names.
    done = tool(env, "srun", "-p", PARTITION, "-n2", "cat", input="alpha\nbeta\n")
    assert done.returncode == 0, done.stderr
    assert sorted(done.stdout.splitlines()) == ["alpha", "alpha", "beta", "beta"]
    done = tool(env, "srun", "-p", PARTITION, "-n2", "--input=1", "-l", "cat", input="gamma\n")
    assert (done.returncode, done.stdout) == (0, "1: gamma\n"), done.stderr
    done = tool(
        env,
        "srun",
        "-p",
        PARTITION,
        "-n2",
        "--output=out-%t.txt",
        "sh",
        "-c",
        "echo rank $SLURM_PROCID",
        cwd=tmp_path,
    )
    assert (done.returncode, done.stdout) == (0, ""), done.stderr
    assert (tmp_path / "out-0.txt").read_text() == "rank 0\n"
    assert (tmp_path / "out-1.txt").read_text() == "rank 1\n"


def test_srun_says_when_it_waits_for_resources(env: dict[str, str]) -> None:
    blocker = tool(
        env, "sbatch", "--parsable", "-p", PARTITION, "-N2", "--gpus-per-node=8",
        "--wrap", "sleep 120",
    )  # fmt: skip
    assert blocker.returncode == 0, blocker.stderr
    blocker_id = blocker.stdout.strip()
    wait_state(env, blocker_id, {"RUNNING"})
    proc = subprocess.Popen(
        ["srun", "-p", PARTITION, "-N2", "--gpus-per-node=8", "echo", "ran"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stderr is not None
        first = proc.stderr.readline()
        assert first.startswith("srun: job ") and first.endswith(
            " queued and waiting for resources\n"
        ), first
        job = int(first.split()[2])
        assert tool(env, "scancel", blocker_id).returncode == 0
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert err.startswith(f"srun: job {job} has been allocated resources\n"), err
    assert (proc.returncode, out) == (0, "ran\nran\n")


# -- salloc ------------------------------------------------------------------------------


def test_salloc_runs_the_command_with_the_allocation_and_releases_it(env: dict[str, str]) -> None:
    done = tool(
        env,
        "salloc",
        "-p",
        PARTITION,
        "-N2",
        "sh",
        "-c",
        "echo $SLURM_JOB_ID $SLURM_JOB_NUM_NODES $SLURM_NNODES $SLURM_NODELIST; "
        "env | grep -c '^PHALANX_SLURM_CONTEXT=' ; srun -l hostname >/dev/null; exit 7",
    )
    assert done.returncode == 7, done.stderr
    job = _job_of(done.stderr, "salloc")
    first, context = done.stdout.splitlines()[:2]
    assert first.split()[:3] == [str(job), "2", "2"]
    assert context == "0"  # the shell is the login shell's, not a task's
    assert done.stderr.splitlines() == [
        f"salloc: Granted job allocation {job}",
        f"salloc: Relinquishing job allocation {job}",
    ]
    assert sacct(env, job) == [
        f"{job}|interactive|FAILED|7:0",
        f"{job}.0|hostname|COMPLETED|0:0",
    ]


def test_salloc_no_shell_then_steps_by_jobid_then_scancel(env: dict[str, str]) -> None:
    done = tool(env, "salloc", "--no-shell", "-p", PARTITION, "-N1")
    assert done.returncode == 0, done.stderr
    job = _job_of(done.stderr, "salloc")
    assert wait_state(env, job, {"RUNNING"}) == "RUNNING"
    for expected in ("0", "1"):
        step = tool(env, "srun", f"--jobid={job}", "sh", "-c", "echo $SLURM_STEP_ID")
        assert (step.returncode, step.stdout) == (0, f"{expected}\n"), step.stderr
    assert tool(env, "scancel", str(job)).returncode == 0
    wait_state(env, job, {"CANCELLED"})


def test_salloc_immediate_gives_up_when_the_resources_are_busy(env: dict[str, str]) -> None:
    blocker = tool(
        env, "sbatch", "--parsable", "-p", PARTITION, "-N2", "--gpus-per-node=8",
        "--wrap", "sleep 120",
    )  # fmt: skip
    blocker_id = blocker.stdout.strip()
    try:
        wait_state(env, blocker_id, {"RUNNING"})
        done = tool(env, "salloc", "--immediate=2", "-p", PARTITION, "-N2", "--gpus-per-node=8")
        assert done.returncode == 1, done.stderr
        job = done.stderr.split("Pending job allocation ")[1].split()[0]
        assert done.stderr.splitlines() == [
            f"salloc: Pending job allocation {job}",
            f"salloc: job {job} queued and waiting for resources",
            "salloc: error: Unable to allocate resources: Connection timed out",
            f"salloc: Job allocation {job} has been revoked.",
        ]
        wait_state(env, job, {"CANCELLED"})
    finally:
        tool(env, "scancel", blocker_id)


# -- steps in a running job: srun --jobid, sattach, sstat, sacct -------------------------


@pytest.fixture
def batch_job(env: dict[str, str]) -> Iterator[str]:
    script = (
        "srun -l sh -c 'for i in $(seq 1 12); do echo tick $i; sleep 0.5; done; exit 4'; sleep 60"
    )
    done = tool(env, "sbatch", "--parsable", "-p", PARTITION, "-N2", "--wrap", script)
    assert done.returncode == 0, done.stderr
    job = done.stdout.strip()
    wait_state(env, job, {"RUNNING"})
    wait_step(env, f"{job}.0")  # the script's own srun is step 0
    try:
        yield job
    finally:
        tool(env, "scancel", job)


def test_srun_jobid_overlap_runs_a_step_in_a_running_batch_job(
    env: dict[str, str], batch_job: str
) -> None:
    done = tool(
        env, "srun", f"--jobid={batch_job}", "--overlap", "-N2", "-l", "sh", "-c",
        "echo $SLURM_JOB_ID.$SLURM_STEP_ID $SLURM_PROCID",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert sorted(done.stdout.splitlines()) == [f"0: {batch_job}.1 0", f"1: {batch_job}.1 1"]
    missing = tool(env, "srun", "--jobid=999999", "true")
    assert missing.returncode == 1
    assert missing.stderr.splitlines() == [
        "srun: error: Unable to confirm allocation for job 999999: Invalid job id specified",
        "srun: Check SLURM_JOB_ID environment variable. Expired or invalid job 999999",
    ]


def test_only_the_jobs_user_starts_steps_in_it(
    env: dict[str, str], cluster: Cluster, batch_job: str
) -> None:
    with cluster.admin as client:
        token = client.create_token("carol", ["default", "team-a"], name="carol")["token"]
    carol = {**env, "PHALANX_TOKEN": token}
    done = tool(carol, "srun", f"--jobid={batch_job}", "true")
    assert done.returncode == 1
    assert "Access/permission denied" in done.stderr


def test_sattach_sstat_and_step_records(env: dict[str, str], batch_job: str) -> None:
    time.sleep(1.5)
    usage = tool(env, "sstat", "-P", "-j", f"{batch_job}.0", "-o", "JobID,NTasks,AveCPU,MaxRSS")
    assert usage.returncode == 0, usage.stderr
    header, row = usage.stdout.splitlines()
    assert header == "JobID|NTasks|AveCPU|MaxRSS"
    fields = row.split("|")
    assert fields[:2] == [f"{batch_job}.0", "2"]
    assert fields[3].endswith("K") and int(fields[3][:-1]) > 0
    default = tool(env, "sstat", "-j", batch_job)
    assert default.stdout.splitlines()[0].startswith("JobID ")
    attached = tool(env, "sattach", "--label", f"{batch_job}.0")
    assert attached.returncode == 4, attached.stderr
    ticks = attached.stdout.splitlines()
    # What the step printed before sattach came is replayed, as slurmstepd does.
    assert ticks[:2] in (["0: tick 1", "1: tick 1"], ["1: tick 1", "0: tick 1"])
    assert "0: tick 12" in ticks and "1: tick 12" in ticks
    assert attached.stderr.splitlines() == [
        "sattach: error: task 0 exited with exit code 4",
        "sattach: error: task 1 exited with exit code 4",
    ]
    deadline = time.monotonic() + 30  # the step's end reaches the store a moment later
    while (rows := sacct(env, batch_job))[2].split("|")[2] == "RUNNING":
        assert time.monotonic() < deadline, rows
        time.sleep(0.2)
    assert rows[:3] == [
        f"{batch_job}|wrap|RUNNING|0:0",
        f"{batch_job}.batch|batch|RUNNING|0:0",
        f"{batch_job}.0|sh|FAILED|4:0",
    ]
    # As Slurm's: the header, the error on standard error, and exit status 0.
    none = tool(env, "sstat", "-j", f"{batch_job}.0")
    assert none.returncode == 0
    assert none.stdout.startswith("JobID ") and len(none.stdout.splitlines()) == 2
    assert none.stderr == f"sstat: error: StepId={batch_job}.0 not found running.\n"


# -- the terminal: --pty, Ctrl-C, a lost terminal ----------------------------------------


def test_srun_pty_gives_an_interactive_shell_on_a_terminal(env: dict[str, str]) -> None:
    term = Terminal(["srun", "-p", PARTITION, "--pty", "sh"], {**env, "PS1": "pty$ "})
    try:
        term.expect(b"pty$ ")
        term.type(b"echo job=$SLURM_JOB_ID; tty; exit 3\n")
        assert term.wait() == 3
    finally:
        term.close()
    text = term.seen.decode(errors="replace")
    assert "/dev/pts/" in text, text
    job = text.split("job=")[-1].split()[0]
    assert sacct(env, job)[0] == f"{job}|sh|FAILED|3:0"


def test_ctrl_c_once_reports_twice_cancels(env: dict[str, str]) -> None:
    term = Terminal(["srun", "-p", PARTITION, "-n2", "sh", "-c", "echo up; sleep 100"], env)
    try:
        term.expect(b"up\r\nup\r\n")
        term.type(b"\x03")
        seen = term.expect(b"running").decode()
        assert "srun: interrupt (one more within 1 sec to abort)" in seen
        assert "tasks 0-1: running" in seen
        time.sleep(1.2)
        term.type(b"\x03")  # more than a second later: reports again
        deadline = time.monotonic() + 10
        while term.seen.count(b"tasks 0-1: running") < 2 and time.monotonic() < deadline:
            term.drain(0.1)
        assert term.seen.count(b"tasks 0-1: running") == 2, term.seen
        term.type(b"\x03")
        time.sleep(0.3)
        term.type(b"\x03")  # within a second: aborts
        code = term.wait()
    finally:
        term.close()
    assert code == 130
    assert "srun: sending Ctrl-C to StepId=" in term.seen.decode()
    assert "srun: forcing job termination" in term.seen.decode()
    job = term.seen.decode().split("StepId=")[1].split(".")[0]
    wait_state(env, job, {"CANCELLED"})


def test_a_lost_terminal_cancels_the_job(env: dict[str, str]) -> None:
    term = Terminal(["srun", "-p", PARTITION, "-n1", "sh", "-c", "echo up; sleep 100"], env)
    term.expect(b"up")
    listed = tool(env, "squeue", "-h", "-u", "root", "-n", "sh", "-t", "R", "-o", "%i")
    jobs = listed.stdout.split()
    term.close()
    term.wait()
    assert jobs
    for job in jobs:
        wait_state(env, job, {"CANCELLED"})


def test_a_killed_srun_releases_its_allocation(env: dict[str, str]) -> None:
    proc = subprocess.Popen(
        ["srun", "-p", PARTITION, "-J", "killed-srun", "sleep", "100"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 30
    job = ""
    while not job and time.monotonic() < deadline:
        listed = tool(env, "squeue", "-h", "-n", "killed-srun", "-t", "R", "-o", "%i")
        job = listed.stdout.strip()
        time.sleep(0.2)
    time.sleep(1)
    proc.kill()
    proc.wait()
    assert job
    assert wait_state(env, job, {"CANCELLED"}) == "CANCELLED"


def test_srun_usage_errors(env: dict[str, str]) -> None:
    done = tool(env, "srun", "--no-such-option", "true")
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        "srun: unrecognized option '--no-such-option'",
        'Try "srun --help" for more information',
    ]
    done = tool(env, "srun", "-p", PARTITION)
    assert (done.returncode, done.stderr) == (1, "srun: fatal: No command given to execute.\n")
    done = tool(env, "srun", "-p", "no-such-partition", "true")
    assert done.returncode == 1
    assert done.stderr.startswith("srun: error: ") and "no-such-partition" in done.stderr
    assert sys.executable


def test_srun_unbuffered_passes_a_partial_line_on_at_once(env: dict[str, str]) -> None:
    proc = subprocess.Popen(
        ["srun", "-p", PARTITION, "-u", "sh", "-c", "printf 'name? '; sleep 4; echo done"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        started = time.monotonic()
        select.select([proc.stdout], [], [], 60)
        first = os.read(proc.stdout.fileno(), 100)
        assert first == b"name? ", first
        assert time.monotonic() - started < 30
        rest, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert (proc.returncode, first + rest) == (0, b"name? done\n")


def test_heterogeneous_srun_and_salloc_from_a_login_shell(env: dict[str, str]) -> None:
    """``srun A : B`` makes a heterogeneous job and runs one step over its components
    (each its own command); ``salloc A : B`` gives its command each component's
    variables only, and srun in it runs on component 0."""
    done = tool(
        env, "srun", "-p", PARTITION, "-N1", "-l", "sh", "-c", "echo zero $SLURM_HET_SIZE",
        ":", "-p", PARTITION, "-N1", "sh", "-c", "echo one; exit 4",
    )  # fmt: skip
    assert done.returncode == 4, done.stderr
    assert sorted(done.stdout.splitlines()) == ["0: zero 2", "1: one"]
    job = done.stderr.split("srun: job ")[1].split()[0]
    assert done.stderr.splitlines() == [
        f"srun: job {job} queued and waiting for resources",
        f"srun: job {job} has been allocated resources",
        # The task's number within its component, as Slurm's srun reports it.
        f"srun: error: {done.stderr.split('error: ')[1].split(':')[0]}: task 0: "
        "Exited with exit code 4",
    ]
    rows = sacct(env, job)
    assert rows[0] == f"{job}+0|sh|FAILED|4:0" and f"{job}+1|sh|FAILED|4:0" in rows
    held = tool(
        env, "salloc", "-p", PARTITION, "-N1", ":", "-p", PARTITION, "-N1", "sh", "-c",
        "echo $SLURM_JOB_ID ${SLURM_JOB_NODELIST:-unset} $SLURM_HET_SIZE "
        "$SLURM_NNODES_HET_GROUP_1; srun -l true; echo steps done",
    )  # fmt: skip
    assert held.returncode == 0, held.stderr
    first, last = held.stdout.splitlines()
    alloc = first.split()[0]
    assert first == f"{alloc} unset 2 1"
    assert last == "steps done"
