"""The same sbatch scripts on a real Slurm 22.05 (the peer) and on phalanx, side by side.

Both clusters have nodes ``gpu[1-4]`` (64 CPUs, 512000 MB, 8 x h100 each) and one
partition ``gpu`` (Default=YES); phalanx gets them from ``phalanx import`` of the
slurm.conf below. Every script runs unchanged on both, through the same command
lines: ``sbatch``/``squeue``/``sacct``/``scancel`` from ``/usr/bin`` for Slurm, and
the ``phalanx shims`` wrappers of the same names for phalanx. Compared:

* final states (first word: Slurm prints ``CANCELLED by 0``) and exit codes, from
  ``sacct -X -n -P -o JobID,State,ExitCode``, with job ids replaced by names;
* output file names (``%x-%j.out``, ``%A_%a.out``) with the ids substituted back;
* the job environment: the set of ``SLURM_*`` names, and the values of the
  deterministic ones (:data:`COMPARED_VALUES`);
* array throttling (``%2``: at most two tasks at once, from sacct Start/End);
* pending reasons (``squeue -h -j E -o %r`` = ``DependencyNeverSatisfied``);
* ``srun`` ranks over 2 nodes x 2 tasks;
* node administration: ``scontrol update NodeName=`` refusals (exit status and
  words), abbreviated keys and states, ``sinfo -R``, ``ReqNodeNotAvail`` for a job
  that names a drained node and for one in a partition all drained, ``State=DOWN``
  with and without ``--no-requeue``.

The timeout job (``--time=1``, ``sleep 300``) is submitted on both at the start of
the module and checked last: Slurm enforces a 1-minute limit only after 60-90 s
(its time-limit check runs about every 30 s), so running it alongside the other
scripts keeps the module at ~2 minutes while still checking TIMEOUT on the real peer.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import pytest

from tests.reliability import server as phalanx_server

pytestmark = pytest.mark.usefixtures("slurm_peer")

SLURM_CONF = """\
ClusterName=phalanxpeer
GresTypes=gpu
DefMemPerCPU=8000
NodeName=gpu[1-4] CPUs=64 Boards=1 SocketsPerBoard=2 CoresPerSocket=32 ThreadsPerCore=1 \
RealMemory=512000 Gres=gpu:h100:8 State=UNKNOWN
PartitionName=gpu Nodes=gpu[1-4] Default=YES DefaultTime=01:00:00 MaxTime=INFINITE State=UP
"""

TOOLS = ("sbatch", "squeue", "sacct", "scancel", "scontrol", "sinfo")
FINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY"}
ENV_DUMP = "env | grep -E '^(SLURM_|CUDA_VISIBLE_DEVICES=)' | sort"

COMPARED_VALUES = (
    "SLURM_NNODES",
    "SLURM_NTASKS",
    "SLURM_NPROCS",
    "SLURM_NTASKS_PER_NODE",
    "SLURM_TASKS_PER_NODE",
    "SLURM_JOB_NODELIST",
    "SLURM_NODELIST",
    "SLURM_JOB_NUM_NODES",
    "SLURM_CPUS_PER_TASK",
    "SLURM_CPUS_ON_NODE",
    "SLURM_JOB_CPUS_PER_NODE",
    "SLURM_MEM_PER_NODE",
    "SLURM_GPUS_PER_NODE",
    "SLURM_GPUS_ON_NODE",
    "SLURM_JOB_GPUS",
    "SLURM_JOB_PARTITION",
    "SLURM_JOB_NAME",
    "SLURM_NODEID",
    "SLURM_PROCID",
    "SLURM_LOCALID",
    "SLURM_GTIDS",
    "SLURM_ARRAY_TASK_ID",
    "SLURM_ARRAY_TASK_COUNT",
    "SLURM_ARRAY_TASK_MIN",
    "SLURM_ARRAY_TASK_MAX",
    "SLURM_ARRAY_TASK_STEP",
    "CUDA_VISIBLE_DEVICES",
    "GPU_DEVICE_ORDINAL",
    "ROCR_VISIBLE_DEVICES",
)
"""Values that depend only on the request and the (identical) cluster, on an idle cluster."""

EXCLUDED_VALUES = {
    "SLURM_JOB_ID": "job id (assigned by each scheduler)",
    "SLURM_JOBID": "job id",
    "SLURM_ARRAY_JOB_ID": "job id",
    "SLURM_TASK_PID": "process id",
    "SLURM_SUBMIT_DIR": "path (each side runs in its own directory)",
    "SLURM_SUBMIT_HOST": "host name",
    "SLURMD_NODENAME": "host: follows the node list, which is compared",
    "SLURM_TOPOLOGY_ADDR": "host: follows the node list, which is compared",
    "SLURM_TOPOLOGY_ADDR_PATTERN": "topology plugin detail",
    "SLURM_CLUSTER_NAME": "cluster name (ClusterName of each side)",
    "SLURM_WORKING_CLUSTER": "cluster name, controller address, port, rpc version",
    "SLURM_CONF": "path of each side's slurm.conf",
    "SLURM_JOB_ACCOUNT": "account name (Slurm: teama from slurmdbd; phalanx: its tenant)",
    "SLURM_JOB_UID": "same user on both, but not a scheduling result",
    "SLURM_JOB_GID": "same user on both, but not a scheduling result",
    "SLURM_JOB_USER": "same user on both, but not a scheduling result",
    "SLURM_PRIO_PROCESS": "nice value of the submitter",
    "SLURM_NODE_ALIASES": "(null) on both; cloud-node plumbing",
    "SLURM_MEM_PER_CPU": "compared separately (test_default_memory_per_cpu)",
}
"""Names whose values are not compared (their presence still is), and why."""

EXCLUDED_NAMES = {
    "SLURM_JOB_QOS": "Slurm sets it only with slurmdbd accounting (QOS normal); phalanx has no QOS",
    "SLURM_MEM_PER_CPU": "compared separately (test_default_memory_per_cpu)",
}
"""Names left out of the name-set comparison, and why."""


def _run(args: list[str], cwd: Path, env: dict[str, str], timeout: float = 60) -> str:
    done = subprocess.run(
        args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    if done.returncode != 0:
        raise AssertionError(f"{args} failed (rc {done.returncode}):\n{done.stdout}{done.stderr}")
    return done.stdout


@dataclass
class Side:
    """One scheduler: where its tools are and where its jobs run."""

    name: str
    tools: dict[str, str]
    root: Path
    env: dict[str, str]
    timeout_job: str = ""
    notes: list[str] = field(default_factory=list)

    def run(self, tool: str, *args: str, cwd: Path | None = None) -> str:
        return _run([self.tools[tool], *args], cwd or self.root, self.env)

    def dir(self, name: str) -> Path:
        path = self.root / name
        path.mkdir(parents=True, exist_ok=True)
        return path

    def sbatch(self, cwd: Path, script: str, *args: str, name: str = "job.sh") -> str:
        """Write ``script`` into ``cwd`` and submit it; returns the job id."""
        path = cwd / name
        path.write_text(script)
        out = self.run("sbatch", "--parsable", *args, str(path), cwd=cwd).strip()
        match = re.fullmatch(r"(\d+)(;\S+)?", out)
        assert match, f"{self.name}: sbatch printed {out!r}"
        return match.group(1)

    def sacct(self, job_ids: list[str], fields: str = "JobID,State,ExitCode") -> list[list[str]]:
        out = self.run("sacct", "-X", "-n", "-P", "-o", fields, "-j", ",".join(job_ids))
        return [line.split("|") for line in out.splitlines() if line.strip()]

    def wait_final(
        self,
        job_ids: list[str],
        rows: int,
        timeout: float = 120,
        fields: str = "JobID,State,ExitCode",
    ) -> list[list[str]]:
        """Poll sacct until ``rows`` rows (array tasks count one each) are all final."""
        deadline = time.monotonic() + timeout
        got: list[list[str]] = []
        while time.monotonic() < deadline:
            got = self.sacct(job_ids, fields)
            if len(got) == rows and all(row[1].split()[0] in FINAL for row in got):
                return got
            time.sleep(0.5)
        raise AssertionError(f"{self.name}: jobs {job_ids} not all final after {timeout} s: {got}")

    def squeue(self, job_id: str, fmt: str) -> str:
        return self.run("squeue", "-h", "-j", job_id, "-o", fmt).strip()

    def wait_squeue(self, job_id: str, fmt: str, want: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        got = ""
        while time.monotonic() < deadline:
            got = self.squeue(job_id, fmt)
            if got == want:
                return
            time.sleep(0.3)
        raise AssertionError(f"{self.name}: squeue -j {job_id} -o {fmt} is {got!r}, not {want!r}")


def _env(text: str) -> dict[str, str]:
    env: dict[str, str] = {}
    for line in text.splitlines():
        name, sep, value = line.partition("=")
        if sep and (name.startswith("SLURM") or name == "CUDA_VISIBLE_DEVICES"):
            env[name] = value
    return env


def _compare_env(slurm: dict[str, str], phalanx: dict[str, str], what: str) -> None:
    names_s = set(slurm) - set(EXCLUDED_NAMES)
    names_p = set(phalanx) - set(EXCLUDED_NAMES)
    assert names_s == names_p, (
        f"{what}: only in Slurm: {sorted(names_s - names_p)}, "
        f"only in phalanx: {sorted(names_p - names_s)}"
    )
    values_s = {k: slurm.get(k) for k in COMPARED_VALUES}
    values_p = {k: phalanx.get(k) for k in COMPARED_VALUES}
    diff = {k: (values_s[k], values_p[k]) for k in COMPARED_VALUES if values_s[k] != values_p[k]}
    assert not diff, f"{what}: values differ (Slurm, phalanx): {diff}"


def _named(rows: list[list[str]], names: dict[str, str]) -> list[tuple[str, ...]]:
    """sacct rows with job ids replaced by names (``12_3`` -> ``arr_3``), state's first word."""
    out = []
    for job_id, state, *rest in rows:
        base, sep, task = job_id.partition("_")
        out.append((names[base] + sep + task, state.split()[0], *rest))
    return sorted(out)


@pytest.fixture(scope="module")
def sides(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Side, Side]]:
    base = tmp_path_factory.mktemp("side_by_side")
    state = base / "phalanx-state"
    server = phalanx_server.start(state)
    try:
        env = {**os.environ, "PHALANX_URL": server.url, "PHALANX_TOKEN": server.token}
        env.pop("PHALANX_STATE_DIR", None)
        bindir = Path(sys.executable).parent
        env["PATH"] = f"{bindir}{os.pathsep}{env.get('PATH', '')}"
        conf = base / "slurm.conf"
        conf.write_text(SLURM_CONF)
        _run([str(bindir / "phalanx"), "import", str(conf)], base, env)
        shims = base / "shims"
        _run([str(bindir / "phalanx"), "shims", str(shims)], base, env)
        slurm_env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
        slurm_tools = {t: shutil.which(t) or t for t in TOOLS}
        slurm = Side("slurm", slurm_tools, base / "slurm", slurm_env)
        phalanx = Side("phalanx", {t: str(shims / t) for t in TOOLS}, base / "phalanx", env)
        for side in (slurm, phalanx):
            side.root.mkdir()
            # Submitted first, checked last (test_timeout): see the module docstring.
            cwd = side.dir("timeout")
            side.timeout_job = side.sbatch(
                cwd, "#!/bin/bash\n#SBATCH --time=1 -w gpu4 -o timeout.out\nsleep 300\n"
            )
        yield slurm, phalanx
    finally:
        server.stop()


def _both(sides: tuple[Side, Side], name: str) -> list[tuple[Side, Path]]:
    return [(side, side.dir(name)) for side in sides]


ENV_SCRIPT = f"""\
#!/bin/bash
#SBATCH --job-name=envdump
#SBATCH --output=%x-%j.out
#SBATCH --nodes=1 --ntasks=2 --cpus-per-task=4 --gpus-per-node=2 --mem=16G
{ENV_DUMP}
"""


def test_environment(sides: tuple[Side, Side]) -> None:
    dumps = {}
    for side, cwd in _both(sides, "env"):
        job = side.sbatch(cwd, ENV_SCRIPT)
        assert side.wait_final([job], 1) == [[job, "COMPLETED", "0:0"]]
        files = sorted(p.name for p in cwd.glob("*.out"))
        assert files == [f"envdump-{job}.out"], f"{side.name}: {files}"
        dumps[side.name] = _env((cwd / files[0]).read_text())
    assert dumps["slurm"]["SLURM_JOB_NODELIST"] == "gpu1"
    _compare_env(dumps["slurm"], dumps["phalanx"], "batch env")


DEFAULT_MEM_SCRIPT = f"""\
#!/bin/bash
#SBATCH --job-name=defmem
#SBATCH --output=%x-%j.out
{ENV_DUMP}
"""


def test_default_memory_per_cpu(sides: tuple[Side, Side]) -> None:
    """No ``--mem``: Slurm exports slurm.conf's DefMemPerCPU as SLURM_MEM_PER_CPU."""
    dumps = {}
    for side, cwd in _both(sides, "defmem"):
        job = side.sbatch(cwd, DEFAULT_MEM_SCRIPT)
        assert side.wait_final([job], 1) == [[job, "COMPLETED", "0:0"]]
        dumps[side.name] = _env((cwd / f"defmem-{job}.out").read_text())
    assert dumps["slurm"].get("SLURM_MEM_PER_CPU") == "8000"
    assert dumps["phalanx"].get("SLURM_MEM_PER_CPU") == "8000"


def _max_concurrent(rows: list[list[str]]) -> int:
    """Most tasks running in one second, from sacct's Start and End (1 s resolution)."""
    spans = []
    for row in rows:
        start, end = datetime.fromisoformat(row[3]), datetime.fromisoformat(row[4])
        spans.append((start.timestamp(), max(end.timestamp(), start.timestamp() + 1)))
    if not spans:
        return 0
    first, last = int(min(s for s, _ in spans)), int(max(e for _, e in spans))
    return max(sum(1 for s, e in spans if s <= t < e) for t in range(first, last + 1))


ARRAY_SCRIPT = f"""\
#!/bin/bash
#SBATCH --job-name=arr
#SBATCH --array=0-5%2
#SBATCH --output=%A_%a.out
echo "task=$SLURM_ARRAY_TASK_ID"
sleep 1
{ENV_DUMP}
"""


def test_array_throttled(sides: tuple[Side, Side]) -> None:
    """``--array=0-5%2``: six tasks, at most two at once, ``%A_%a`` file names."""
    results = {}
    for side, cwd in _both(sides, "array"):
        side.notes.append(side.sbatch(cwd, ARRAY_SCRIPT))
    for side, cwd in _both(sides, "array"):
        job = side.notes.pop()
        rows = side.wait_final([job], 6, fields="JobID,State,ExitCode,Start,End")
        assert _max_concurrent(rows) <= 2, f"{side.name}: more than 2 tasks at once: {rows}"
        files = sorted(p.name for p in cwd.glob("*.out"))
        assert files == [f"{job}_{i}.out" for i in range(6)], f"{side.name}: {files}"
        outputs = {i: (cwd / f"{job}_{i}.out").read_text() for i in range(6)}
        for i, text in outputs.items():
            assert text.startswith(f"task={i}\n"), f"{side.name} task {i}: {text!r}"
        results[side.name] = (_named([r[:3] for r in rows], {job: "arr"}), outputs)
    assert results["slurm"][0] == results["phalanx"][0]
    assert results["slurm"][0] == [(f"arr_{i}", "COMPLETED", "0:0") for i in range(6)]
    placed: dict[str, set[str]] = {"slurm": set(), "phalanx": set()}
    for i in range(6):
        env_s, env_p = _env(results["slurm"][1][i]), _env(results["phalanx"][1][i])
        for name, env in (("slurm", env_s), ("phalanx", env_p)):
            placed[name].add(env.pop("SLURM_JOB_NODELIST", ""))
            env.pop("SLURM_NODELIST", None)
        _compare_env(env_s, env_p, f"array task {i}")
    # Placement, last: the timeout job (1 CPU, no GPU) is running on gpu4 meanwhile.
    if placed["slurm"] != placed["phalanx"]:
        pytest.xfail(
            "difference: node choice for 1-CPU, no-GPU array tasks while a 1-CPU job runs on "
            f"gpu4: Slurm (cons_tres, CR_Core_Memory) packs them onto {sorted(placed['slurm'])}, "
            f"phalanx (best-fit on the GPU flavor) puts them on {sorted(placed['phalanx'])}"
        )


def test_dependencies(sides: tuple[Side, Side]) -> None:
    results = {}
    ids: dict[str, dict[str, str]] = {}
    for side, cwd in _both(sides, "deps"):
        job = ids.setdefault(side.name, {})

        def submit(name: str, code: int, *args: str, side: Side = side, cwd: Path = cwd) -> str:
            script = f"#!/bin/bash\n#SBATCH --job-name={name} -o {name}.out\nexit {code}\n"
            return side.sbatch(cwd, script, *args, name=f"{name}.sh")

        job["A"] = submit("A", 0)
        job["B"] = submit("B", 0, f"--dependency=afterok:{job['A']}")
        job["C"] = submit("C", 0, f"--dependency=afterok:{job['B']}")
        job["D"] = submit("D", 3)
        job["E"] = submit("E", 0, f"--dependency=afterok:{job['D']}")
    for side in sides:
        job = ids[side.name]
        side.wait_final([job[n] for n in "ABCD"], 4)
        side.wait_squeue(job["E"], "%T %r", "PENDING DependencyNeverSatisfied", timeout=60)
    reasons = {side.name: side.squeue(ids[side.name]["E"], "%r") for side in sides}
    assert reasons["slurm"] == reasons["phalanx"] == "DependencyNeverSatisfied"
    for side in sides:
        job = ids[side.name]
        side.run("scancel", job["E"])
        rows = side.wait_final([job[n] for n in "ABCDE"], 5)
        results[side.name] = _named(rows, {v: k for k, v in job.items()})
    assert results["slurm"] == [
        ("A", "COMPLETED", "0:0"),
        ("B", "COMPLETED", "0:0"),
        ("C", "COMPLETED", "0:0"),
        ("D", "FAILED", "3:0"),
        ("E", "CANCELLED", "0:0"),
    ]
    assert results["phalanx"] == results["slurm"]


SRUN_SCRIPT = """\
#!/bin/bash
#SBATCH --job-name=ranks
#SBATCH --output=%x-%j.out
#SBATCH --nodes=2 --ntasks-per-node=2
srun sh -c 'echo $SLURM_PROCID $SLURMD_NODENAME'
"""


def test_srun_two_nodes(sides: tuple[Side, Side]) -> None:
    layouts = {}
    for side, cwd in _both(sides, "srun"):
        side.notes.append(side.sbatch(cwd, SRUN_SCRIPT))
    for side, cwd in _both(sides, "srun"):
        job = side.notes.pop()
        assert side.wait_final([job], 1) == [[job, "COMPLETED", "0:0"]]
        lines = (cwd / f"ranks-{job}.out").read_text().split("\n")
        pairs = sorted(tuple(line.split()) for line in lines if line.strip())
        by_node: dict[str, list[int]] = {}
        for rank, node in pairs:
            by_node.setdefault(node, []).append(int(rank))
        # Modulo node names: which ranks share a node.
        layouts[side.name] = sorted(sorted(ranks) for ranks in by_node.values())
    assert layouts["slurm"] == [[0, 1], [2, 3]]
    assert layouts["phalanx"] == layouts["slurm"]


CANCEL_SCRIPT = """\
#!/bin/bash
#SBATCH --job-name=victim
#SBATCH --output=%x-%j.out
sleep 60
"""


def test_cancel_running(sides: tuple[Side, Side]) -> None:
    results = {}
    for side, cwd in _both(sides, "cancel"):
        side.notes.append(side.sbatch(cwd, CANCEL_SCRIPT))
    for side in sides:
        side.wait_squeue(side.notes[-1], "%T", "RUNNING", timeout=60)
    for side in sides:
        side.run("scancel", side.notes[-1])
    for side, cwd in _both(sides, "cancel"):
        job = side.notes.pop()
        rows = side.wait_final([job], 1, timeout=60)
        results[side.name] = _named(rows, {job: "victim"})
        assert (cwd / f"victim-{job}.out").exists(), f"{side.name}: no output file"
    assert results["slurm"][0][:2] == ("victim", "CANCELLED")
    assert results["phalanx"][0][:2] == results["slurm"][0][:2]
    assert results["phalanx"] == results["slurm"]  # ExitCode 0:0: the kill is on the step


def test_timeout(sides: tuple[Side, Side]) -> None:
    """``--time=1`` + ``sleep 300`` (submitted when the module started): TIMEOUT on both."""
    results = {}
    for side in sides:
        rows = side.wait_final([side.timeout_job], 1, timeout=180)
        results[side.name] = _named(rows, {side.timeout_job: "slow"})
    assert results["slurm"][0][:2] == ("slow", "TIMEOUT")
    assert results["phalanx"][0][:2] == results["slurm"][0][:2]
    assert results["phalanx"] == results["slurm"]  # ExitCode 0:0: the kill is on the step


GANG_SCRIPT = """\
#!/bin/bash
#SBATCH --job-name=gang2
#SBATCH --nodes=2 --ntasks-per-node=1
#SBATCH --output=%x-%j.out
sleep 60
"""


def test_multi_node_jobs_count_their_nodes(sides: tuple[Side, Side]) -> None:
    """A 2-node job shows 2 nodes pending (held) and running, in squeue and sacct."""
    seen = {}
    for side, cwd in _both(sides, "nodes"):
        held = side.sbatch(cwd, GANG_SCRIPT, "--hold", name="held.sh")
        running = side.sbatch(cwd, GANG_SCRIPT, name="running.sh")
        side.notes += [held, running]
    for side in sides:
        running, held = side.notes.pop(), side.notes.pop()
        side.wait_squeue(running, "%T", "RUNNING", timeout=60)
        queued = (side.squeue(held, "%T %D"), side.squeue(running, "%T %D"))
        side.run("scancel", held, running)
        # sacct's NNodes once the job has ended (the accounting record is complete then).
        [[_, _, nnodes]] = side.wait_final([running], 1, fields="JobID,State,NNodes")
        seen[side.name] = (*queued, nnodes)
    assert seen["slurm"] == ("PENDING 2", "RUNNING 2", "2")
    assert seen["phalanx"] == seen["slurm"]


def _answer(side: Side, *args: str) -> tuple[int, str, str]:
    """``scontrol`` on one side, refusals included: (exit status, stdout, stderr)."""
    done = subprocess.run(
        [side.tools["scontrol"], *args],
        cwd=side.root,
        env=side.env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return done.returncode, done.stdout, done.stderr


def test_node_administration(sides: tuple[Side, Side]) -> None:
    """``scontrol update NodeName=`` as Slurm parses it (refusals and their words, keys
    and states abbreviated), ``sinfo -R``, ``ReqNodeNotAvail`` for a job that names a
    drained node, and ``State=DOWN`` ending a ``--no-requeue`` job NODE_FAIL while a
    job without the flag is requeued."""
    refusals = [
        ("NodeName=gpu3", "State=DRAIN"),
        ("NodeName=gpu3", "State=DOWN", "Reason="),
        ("no=gpu3", "State=DRAIN", "Reason=x"),
        ("NodeName=gpu3", "State=dr", "Reason=x"),
        ("NodeName=gpu3", "State=RESUME"),
    ]
    for args in refusals:
        answers = {side.name: _answer(side, "update", *args) for side in sides}
        assert answers["phalanx"] == answers["slurm"], args
        assert answers["slurm"][0] == 1, answers
    pinned = {}
    for side, cwd in _both(sides, "drained"):
        assert _answer(side, "update", "nod=gpu3", "s=dra", "r=side by side") == (0, "", "")
        assert side.run("sinfo", "-R", "-h", "-o", "%E|%N") == "side by side|gpu3\n"
        pinned[side.name] = side.sbatch(cwd, "#!/bin/bash\n#SBATCH -w gpu3 --gpus=1\ntrue\n")
    for side in sides:
        side.wait_squeue(pinned[side.name], "%r", "ReqNodeNotAvail, UnavailableNodes:gpu3")
        side.run("scancel", pinned[side.name])
        assert _answer(side, "update", "nodename=gpu3", "state=resume")[0] == 0
    # Every node of the partition drained: slurmctld's description of ReqNodeNotAvail.
    anywhere = {}
    for side, cwd in _both(sides, "all-drained"):
        assert _answer(side, "update", "NodeName=gpu[1-4]", "State=DRAIN", "Reason=all")[0] == 0
        anywhere[side.name] = side.sbatch(cwd, "#!/bin/bash\n#SBATCH --gpus=1\ntrue\n")
    for side in sides:
        side.wait_squeue(
            anywhere[side.name],
            "%r",
            "Nodes required for job are DOWN, DRAINED or reserved for jobs in higher priority "
            "partitions",
        )
        side.run("scancel", anywhere[side.name])
        assert _answer(side, "update", "NodeName=gpu[1-4]", "State=RESUME")[0] == 0
    jobs: dict[str, dict[str, str]] = {}
    for side, cwd in _both(sides, "down"):
        script = "#!/bin/bash\n#SBATCH -w gpu3 --gpus=1\nsleep 120\n"
        jobs[side.name] = {
            "kept": side.sbatch(cwd, script, "--no-requeue", name="kept.sh"),
            "requeued": side.sbatch(cwd, script, name="requeued.sh"),
        }
    for side in sides:
        for job in jobs[side.name].values():
            side.wait_squeue(job, "%T", "RUNNING")
        assert _answer(side, "update", "NodeName=gpu3", "State=DOWN", "Reason=gone")[0] == 0
    try:
        for side in sides:
            kept, requeued = jobs[side.name]["kept"], jobs[side.name]["requeued"]
            assert side.wait_final([kept], 1)[0][1] == "NODE_FAIL", side.name
            side.wait_squeue(requeued, "%T", "PENDING")
            shown = side.run("scontrol", "show", "job", kept)
            assert "JobState=NODE_FAIL Reason=NodeDown" in shown, (side.name, shown)
    finally:
        for side in sides:
            side.run("scancel", jobs[side.name]["requeued"])
            _answer(side, "update", "NodeName=gpu3", "State=RESUME")


# -- the interactive side: srun and salloc from a login shell, steps, sstat, sattach ----

INTERACTIVE_TOOLS = ("srun", "salloc", "sattach", "sstat")
"""Run from each side's login shell: Slurm's from PATH, phalanx's shims."""
STEP_ENV_EXCLUDED = {
    **EXCLUDED_VALUES,
    "SLURM_STEP_ID": "compared as output",
    "SLURM_STEPID": "compared as output",
    "SLURM_LAUNCH_NODE_IPADDR": "srun's address (Slurm's I/O plumbing)",
    "SLURM_SRUN_COMM_HOST": "srun's address (Slurm's I/O plumbing)",
    "SLURM_SRUN_COMM_PORT": "srun's port (Slurm's I/O plumbing)",
    "SLURM_STEP_LAUNCHER_PORT": "srun's port (Slurm's I/O plumbing)",
    "SLURM_UMASK": "the submitter's umask",
}


def _interactive(
    side: Side, tool: str, *args: str, stdin: str | None = None, cwd: Path | None = None
) -> tuple[int, str, str]:
    """One interactive tool on one side: (exit status, stdout, stderr)."""
    path = side.tools.get(tool) or shutil.which(tool) or tool
    done = subprocess.run(
        [path, *args],
        cwd=cwd or side.root,
        env=side.env,
        input=stdin if stdin is not None else "",
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return done.returncode, done.stdout, done.stderr


def _ids_out(text: str) -> str:
    """Job ids (and Slurm's per-daemon ``slurmstepd-<node>`` prefix) made comparable."""
    text = re.sub(r"\b\d+(?=\.\d+\b)", "J", text)  # 12.0 -> J.0
    text = re.sub(r"(job allocation|job|JobId=|Job) \d+", r"\1 J", text)
    return text.replace("slurmstepd-gpu1:", "slurmstepd:")


@pytest.fixture(scope="module")
def login(sides: tuple[Side, Side]) -> tuple[Side, Side]:
    """The sides with their interactive tools: Slurm's own, phalanx's shims."""
    slurm, phalanx = sides
    shims = Path(phalanx.tools["sbatch"]).parent
    for tool in INTERACTIVE_TOOLS:
        slurm.tools[tool] = shutil.which(tool) or tool
        phalanx.tools[tool] = str(shims / tool)
    # A salloc shell's srun is found on PATH: each side's own first.
    phalanx.env["PATH"] = f"{shims}{os.pathsep}{phalanx.env['PATH']}"
    return sides


def test_srun_outside_a_job_runs_one_step(login: tuple[Side, Side]) -> None:
    """Output, exit status and the tasks' environment of ``srun`` from a login shell."""
    seen = {}
    for side in login:
        rc, out, err = _interactive(
            side, "srun", "-N2", "--ntasks-per-node=1", "-l", "sh", "-c",
            "echo $SLURM_PROCID $SLURM_STEP_ID $SLURM_NODEID $SLURM_STEP_NUM_TASKS "
            "$SLURM_JOB_NUM_NODES $SLURM_JOB_NAME",
        )  # fmt: skip
        rc_env, env_out, _ = _interactive(side, "srun", "-N2", "--ntasks-per-node=1", "env")
        first = env_out.split("SLURM_PROCID=1\n")[0] if "SLURM_PROCID=1\n" in env_out else ""
        seen[side.name] = (rc, sorted(out.splitlines()), err, rc_env, _env(env_out))
        assert first is not None
    slurm, phalanx = seen["slurm"], seen["phalanx"]
    assert slurm[:3] == (0, ["0: 0 0 0 2 2 sh", "1: 1 0 1 2 2 sh"], "")
    assert phalanx[:4] == slurm[:4]
    names_s = set(slurm[4]) - set(EXCLUDED_NAMES) - set(STEP_ENV_EXCLUDED)
    names_p = set(phalanx[4]) - set(EXCLUDED_NAMES) - set(STEP_ENV_EXCLUDED)
    names_s.discard("SRUN_DEBUG")
    assert names_p == names_s, (sorted(names_s - names_p), sorted(names_p - names_s))


EXIT_CASES = (
    ("-n2", "sh", "-c", "exit $SLURM_PROCID"),
    ("-n2", "sh", "-c", "exit 3"),
    ("-n1", "sh", "-c", "kill -9 $$"),
    ("-n1", "sh", "-c", "kill -11 $$"),
    ("-N2", "--ntasks-per-node=1", "sh", "-c", "exit $((SLURM_PROCID+4))"),
)


def test_srun_exit_status_and_error_lines(login: tuple[Side, Side]) -> None:
    """srun's status (128 + a task's signal, else the highest exit code) and its
    ``srun: error: NODE: task(s) N: ...`` lines, byte for byte modulo job ids."""
    seen: dict[str, list[tuple[int, list[str]]]] = {}
    for side in login:
        seen[side.name] = []
        for case in EXIT_CASES:
            rc, _, err = _interactive(side, "srun", *case)
            # Which free node a one-node step lands on is each scheduler's choice.
            lines = re.sub(r"gpu\d", "gpuN", _ids_out(err)).splitlines()
            seen[side.name].append((rc, sorted(lines)))
    assert [rc for rc, _ in seen["slurm"]] == [1, 3, 137, 139, 5]
    assert seen["phalanx"] == seen["slurm"]


def test_srun_stdin_goes_to_every_task(login: tuple[Side, Side]) -> None:
    seen = {}
    for side in login:
        everyone = _interactive(side, "srun", "-n2", "cat", stdin="hi\n")
        one = _interactive(side, "srun", "-n2", "--input=1", "-l", "cat", stdin="hi\n")
        seen[side.name] = (everyone[0], everyone[1], one[0], one[1])
    assert seen["slurm"] == (0, "hi\nhi\n", 0, "1: hi\n")
    assert seen["phalanx"] == seen["slurm"]


def test_salloc_environment_steps_and_exit_status(login: tuple[Side, Side]) -> None:
    """salloc's messages, the variables its command gets, srun inside it, its status."""
    seen = {}
    for side in login:
        rc, out, err = _interactive(
            side, "salloc", "-N2", "sh", "-c",
            "env | grep '^SLURM_' | sort; srun -l hostname >/dev/null; exit 7",
        )  # fmt: skip
        env = _env(out)
        seen[side.name] = (rc, _ids_out(err).splitlines(), env)
    slurm, phalanx = seen["slurm"], seen["phalanx"]
    assert slurm[0] == 7
    assert phalanx[0] == 7
    assert phalanx[1][0] == slurm[1][0] == "salloc: Granted job allocation J"
    assert phalanx[1][1] == slurm[1][1] == "salloc: Relinquishing job allocation J"
    excluded = set(EXCLUDED_NAMES) | {"SLURM_CONF", "SLURM_NODE_ALIASES"}
    assert set(phalanx[2]) - excluded == set(slurm[2]) - excluded
    compared = ("SLURM_JOB_NAME", "SLURM_JOB_NUM_NODES", "SLURM_NNODES", "SLURM_NODELIST")
    compared += ("SLURM_TASKS_PER_NODE", "SLURM_JOB_CPUS_PER_NODE", "SLURM_JOB_PARTITION")
    for name in compared:
        assert phalanx[2].get(name) == slurm[2].get(name), name


def _steps(side: Side, job: str, want: int, timeout: float = 60) -> list[list[str]]:
    """sacct's rows of a job and its steps, once there are ``want`` and all are final."""
    fields = "JobID,JobName,State,ExitCode,NNodes,NTasks,NodeList"
    deadline = time.monotonic() + timeout
    rows: list[list[str]] = []
    while time.monotonic() < deadline:
        out = side.run("sacct", "-n", "-P", "-o", fields, "-j", job)
        rows = [line.split("|") for line in out.splitlines() if line.strip()]
        # slurmdbd's record lags a moment behind: JobName "allocation" until it catches up.
        settled = all(r[1] != "allocation" for r in rows)
        if len(rows) == want and settled and all(r[2].split()[0] in FINAL for r in rows):
            return [[_ids_out(r[0]).replace(job, "J"), *r[1:]] for r in rows]
        time.sleep(0.5)
    raise AssertionError(f"{side.name}: sacct -j {job}: {rows}")


STEPS_SCRIPT = """\
#!/bin/bash
#SBATCH -J twostep -N2 -o %x-%j.out
srun -N2 hostname
srun -n1 sh -c "exit 3"
echo end
"""


def test_sacct_step_records(login: tuple[Side, Side]) -> None:
    """sacct's job and step rows of a batch job with two steps, of a job srun made and
    of a salloc job."""
    seen = {}
    for side in login:
        cwd = side.dir("steps")
        batch = side.sbatch(cwd, STEPS_SCRIPT)
        _interactive(side, "srun", "-N1", "-n2", "-J", "myrun", "true")
        made = side.run("squeue", "-h", "-t", "all", "-n", "myrun", "-o", "%i").split()
        salloc = _interactive(
            side, "salloc", "-N2", "sh", "-c", "srun -N2 true; srun -n1 false; exit 5"
        )
        alloc = re.search(r"Granted job allocation (\d+)", salloc[2])
        assert alloc, salloc
        made_id = made[-1] if made else _latest(side, "myrun")
        seen[side.name] = (
            _steps(side, batch, 4),
            _steps(side, made_id, 2),
            _steps(side, alloc.group(1), 3),
        )
    for got_s, got_p in zip(seen["slurm"], seen["phalanx"], strict=True):
        assert got_p == got_s


def _latest(side: Side, name: str) -> str:
    out = side.run("sacct", "-X", "-n", "-P", "-o", "JobID", "--name", name)
    return out.split()[-1]


def test_srun_jobid_errors(login: tuple[Side, Side]) -> None:
    seen = {}
    for side in login:
        seen[side.name] = [
            _interactive(side, "srun", "--jobid=999999", "true"),
            _interactive(side, "srun", "--jobid=abc", "true")[::2],
        ]
    assert seen["slurm"][0][0] == 1
    assert seen["phalanx"] == seen["slurm"]


SSTAT_SCRIPT = """\
#!/bin/bash
#SBATCH -J watched -N1 -n2 -o %x-%j.out
srun -n2 sh -c 'for i in 1 2 3 4 5 6 7 8; do echo tick $i; sleep 1; done; exit 3'
"""


def test_sstat_and_sattach_on_a_running_step(login: tuple[Side, Side]) -> None:
    """sstat's header and its rows' shape; sattach's replay, its error lines and its
    status; the errors of both for a step that is not running."""
    seen = {}
    for side in login:
        cwd = side.dir("sstat")
        job = side.sbatch(cwd, SSTAT_SCRIPT)
        deadline = time.monotonic() + 60
        stat = (1, "", "")
        while time.monotonic() < deadline:
            stat = _interactive(side, "sstat", "-j", job)
            if len(stat[1].splitlines()) == 3:
                break
            time.sleep(0.5)
        parsable = _interactive(side, "sstat", "-n", "-P", "-o", "JobID,NTasks", "-j", job)
        attached = _interactive(side, "sattach", f"{job}.0")
        gone = _interactive(side, "sstat", "-j", f"{job}.7")
        seen[side.name] = (
            stat[0],
            stat[1].splitlines()[:2],
            _ids_out(parsable[1]),
            attached[0],
            attached[1].count("tick 1\n"),
            attached[2],
            (gone[0], gone[1].count("\n"), _ids_out(gone[2])),
        )
    assert seen["slurm"][0] == 0 and seen["slurm"][3] == 3
    assert seen["phalanx"] == seen["slurm"]


def test_ctrl_c_and_pty(login: tuple[Side, Side]) -> None:
    """One Ctrl-C reports the tasks, two within a second end the step (status 130);
    ``--pty`` gives task 0 a terminal of its own."""
    import pty as ptymod

    seen = {}
    for side in login:
        pid, fd = ptymod.fork()
        if pid == 0:  # pragma: no cover - the child
            os.chdir(side.root)
            os.execve(
                side.tools["srun"],
                [side.tools["srun"], "-n2", "sh", "-c", "echo up; sleep 60"],
                side.env,
            )
        text = _pty_until(fd, b"up\r\nup\r\n", 60)
        os.write(fd, b"\x03")
        text += _pty_until(fd, b"running\r\n", 20)
        time.sleep(1.5)
        os.write(fd, b"\x03")
        time.sleep(0.3)
        os.write(fd, b"\x03")
        text += _pty_until(fd, b"", 30)
        _, status = os.waitpid(pid, 0)
        os.close(fd)
        lines = _ids_out(text.decode(errors="replace")).replace("^C", "").splitlines()
        pid, fd = ptymod.fork()
        if pid == 0:  # pragma: no cover - the child
            os.chdir(side.root)
            os.execve(
                side.tools["srun"],
                [side.tools["srun"], "--pty", "sh", "-c", "tty; exit 3"],
                side.env,
            )
        shown = _pty_until(fd, b"", 60).decode(errors="replace")
        _, pty_status = os.waitpid(pid, 0)
        os.close(fd)
        seen[side.name] = (
            os.waitstatus_to_exitcode(status),
            lines[2:4],
            lines[4:6],
            os.waitstatus_to_exitcode(pty_status),
            "/dev/pts/" in shown,
        )
    assert seen["slurm"][0] == 130
    assert seen["phalanx"] == seen["slurm"]


def _pty_until(fd: int, needle: bytes, timeout: float) -> bytes:
    import select

    seen = b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not (needle and needle in seen):
        ready, _, _ = select.select([fd], [], [], 0.2)
        if ready:
            try:
                data = os.read(fd, 4096)
            except OSError:
                break
            if not data:
                break
            seen += data
    return seen
