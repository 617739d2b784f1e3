"""The Ray runtime against a real multi-node Ray cluster on this machine.

One Ray cluster for the module (``ray.cluster_utils.Cluster``: a CPU-only head
and three nodes declaring 8 GPUs each, labelled as a Slurm partition's nodes),
on loopback, dashboard off, with a short health check so that a removed node is
declared dead within seconds. Every test drives a real ``phalanx up --runtime
ray`` process with its own state directory. The node-failure test runs last:
it takes a node away.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest

from phalanx.control.spawn import ServerProcess, spawn_server
from phalanx.errors import PhalanxError
from phalanx.runtime.local import NSS_WRAPPER
from tests.needs import require

pytestmark = pytest.mark.timeout(600)

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "slurm"
BIN = Path(sys.executable).parent
PARTITION = "slurm.phalanx.io/partition-gpu-h100-dedicated"
NODE_CPUS = 128
NODE_MEMORY = 1100000 * 1024 * 1024

QUEUES = f"""\
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {{name: gpu-h100-dedicated}}
spec:
  nodeLabels: {{{PARTITION}: "true"}}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata:
  name: gpu-h100-dedicated
  annotations: {{slurm.phalanx.io/default-partition: "true"}}
spec:
  namespaceSelector: {{}}
  resourceGroups:
  - coveredResources: [cpu, memory, nvidia.com/gpu]
    flavors:
    - name: gpu-h100-dedicated
      resources:
      - {{name: cpu, nominalQuota: 384}}
      - {{name: memory, nominalQuota: 3300000Mi}}
      - {{name: nvidia.com/gpu, nominalQuota: 24}}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {{name: default, namespace: team-a}}
spec: {{clusterQueue: gpu-h100-dedicated}}
"""


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    require(importlib.util.find_spec("ray") is not None, "ray (pip install 'phalanx[ray]')")
    # Loopback only: without this, Ray rewrites 127.0.0.1 to the host's address.
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    from ray.cluster_utils import Cluster

    head = {
        "num_cpus": 1,
        "num_gpus": 0,
        "include_dashboard": False,
        "node_ip_address": "127.0.0.1",
        "labels": {"phalanx.io/node": "head"},
        "_system_config": {
            "health_check_initial_delay_ms": 0,
            "health_check_period_ms": 500,
            "health_check_failure_threshold": 4,
        },
    }
    c = Cluster(initialize_head=True, head_node_args=head)
    c.gpu_nodes = {}
    for i in (1, 2, 3):
        c.gpu_nodes[f"gpu{i}"] = c.add_node(
            num_cpus=NODE_CPUS,
            num_gpus=8,
            memory=NODE_MEMORY,
            node_ip_address="127.0.0.1",
            labels={"phalanx.io/node": f"gpu{i}", PARTITION: "true"},
        )
    c.wait_for_nodes()
    session = Path(c.head_node.get_session_dir_path())
    import ray

    ray.init(address=c.address, logging_level=logging.ERROR, log_to_driver=False)
    yield c
    ray.shutdown()
    c.shutdown()
    shutil.rmtree(session, ignore_errors=True)


class Phalanx:
    """A ``phalanx up --runtime ray`` process and an API client for it."""

    def __init__(self, cluster: Any, state: Path, work: Path, extra: Sequence[str] = ()) -> None:
        self.cluster = cluster
        self.state = state
        self.work = work
        self.extra = list(extra)
        self.server: ServerProcess | None = None
        self.start()

    def start(self) -> None:
        config = self.work / "queues.yaml"
        config.write_text(QUEUES)
        args = ["--port", "0", "--runtime", "ray", "--ray-address", self.cluster.address]
        args += ["--ray-workdir", str(self.work / "ray"), "--config", str(config)]
        args += ["--container-runtime", "host", *self.extra]
        env = {**os.environ, "PATH": f"{BIN}:{os.environ.get('PATH', '')}"}
        try:
            self.server = spawn_server(self.state, args, env=env)
        except PhalanxError as exc:
            raise AssertionError(exc.detail) from None
        self.env = {**env, "PHALANX_URL": self.server.url, "PHALANX_TOKEN": self.server.token}
        self.http = httpx.Client(
            base_url=self.server.url,
            headers={"Authorization": f"Bearer {self.server.token}"},
            timeout=60,
        )

    def kill(self) -> None:
        assert self.server is not None
        self.server.proc.kill()
        self.server.proc.wait(timeout=30)

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()

    def submit(self, body: dict[str, Any]) -> int:
        r = self.http.post("/api/v1/jobs", json=body)
        assert r.status_code == 201, r.text
        return int(r.json()["id"])

    def job(self, job_id: int) -> dict[str, Any]:
        return dict(self.http.get(f"/api/v1/jobs/{job_id}").json())

    def wait(self, job_id: int, done: Any, timeout: float = 180) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        job: dict[str, Any] = {}
        while time.monotonic() < deadline:
            job = self.job(job_id)
            if done(job):
                return job
            time.sleep(0.25)
        log = self.state / "server.log"
        tail = log.read_text()[-3000:] if log.exists() else ""
        raise AssertionError(f"job {job_id} did not get there in {timeout} s: {job}\n{tail}")

    def finished(self, job_id: int, timeout: float = 180) -> dict[str, Any]:
        return self.wait(job_id, lambda j: bool(j["end_time"]), timeout)

    def sbatch(self, folder: Path, script: str) -> int:
        """``phalanx sbatch SCRIPT`` in ``folder``: the job's id."""
        done = subprocess.run(
            [str(BIN / "phalanx"), "sbatch", script],
            cwd=folder,
            env=self.env,
            capture_output=True,
            text=True,
        )
        match = re.search(r"Submitted batch job (\d+)", done.stdout)
        assert match, done.stderr
        return int(match.group(1))

    def nodes(self) -> dict[str, dict[str, Any]]:
        items = self.http.get("/api/v1/nodes").json()["items"]
        return {n["metadata"]["name"]: n for n in items}


@pytest.fixture
def phalanx(cluster: Any, tmp_path: Path) -> Iterator[Phalanx]:
    work = tmp_path / "work"
    work.mkdir()
    p = Phalanx(cluster, tmp_path / "state", work)
    yield p
    p.stop()


def gang(work: Path, command: str, *, count: int = 2, gpus: int = 8, **run: Any) -> dict[str, Any]:
    return {
        "tenant": "team-a",
        "queue": "default",
        "podSets": [{"count": count, "requests": {"nvidia.com/gpu": gpus, "cpu": 1}}],
        "run": {
            "command": ["sh", "-c", command],
            "workingDir": str(work),
            "output": str(work / "out-%j.log"),
            "killWait": 2,
            **run,
        },
    }


def ray_node_ids() -> dict[str, str]:
    import ray

    return {n["Labels"].get("phalanx.io/node", ""): n["NodeID"] for n in ray.nodes() if n["Alive"]}


def test_ray_nodes_become_phalanx_nodes(phalanx: Phalanx) -> None:
    nodes = phalanx.nodes()
    assert {"head", "gpu1", "gpu2", "gpu3"} <= set(nodes)
    gpu1 = nodes["gpu1"]
    assert gpu1["metadata"]["labels"][PARTITION] == "true"
    assert gpu1["metadata"]["labels"]["kubernetes.io/hostname"] == "gpu1"
    assert gpu1["status"]["capacity"]["nvidia.com/gpu"] == "8"
    assert gpu1["status"]["capacity"]["cpu"] == str(NODE_CPUS)
    assert "nvidia.com/gpu" not in nodes["head"]["status"]["capacity"]


def test_a_two_node_gang_lands_on_two_ray_nodes_with_each_nodes_environment(
    phalanx: Phalanx,
) -> None:
    command = (
        "echo rank=$PHALANX_TASK_RANK/$PHALANX_TASK_COUNT node=$PHALANX_NODE_NAME "
        "host=$(hostname) ray=$PHALANX_RAY_NODE_ID gpus=$CUDA_VISIBLE_DEVICES"
    )
    job_id = phalanx.submit(gang(phalanx.work, command))
    job = phalanx.finished(job_id)
    assert job["state"] == "COMPLETED", job
    assert len(set(job["nodes"])) == 2
    lines = (phalanx.work / f"out-{job_id}.log").read_text().split("\n")
    seen = {}
    for line in filter(None, lines):
        fields = dict(part.split("=", 1) for part in line.split())
        seen[fields["rank"]] = fields
    assert set(seen) == {"0/2", "1/2"}
    ids = ray_node_ids()
    for fields in seen.values():
        # Each task ran on the Ray node the engine chose, under its own name.
        assert fields["node"] in job["nodes"]
        assert fields["host"] == fields["node"]
        assert fields["ray"] == ids[fields["node"]]
        assert fields["gpus"] == "0,1,2,3,4,5,6,7"
    assert {f["node"] for f in seen.values()} == set(job["nodes"])


def test_the_slurm_example_all_reduces_across_two_ray_nodes_in_its_image(
    cluster: Any, tmp_path: Path
) -> None:
    from tests.images import pytorch_image

    require(NSS_WRAPPER is not None, "nss_wrapper (Debian package libnss-wrapper)")
    if os.geteuid() != 0:
        pytest.skip("the container runtime's loop mounts need root")
    image = pytorch_image()
    work = tmp_path / "work"
    (work / "containers" / "out").mkdir(parents=True)
    (work / "containers" / "out" / "pytorch.sqsh").symlink_to(image)
    shutil.copytree(EXAMPLE, work / "slurm")
    folder = work / "slurm"
    p = Phalanx(cluster, tmp_path / "state", work, ["--container-runtime", "builtin"])
    try:
        job_id = p.sbatch(folder, "llama3-70b-finetune.sbatch")
        job = p.finished(job_id, timeout=400)
        out = folder / "logs" / f"llama3-70b-finetune-{job_id}.out"
        err = folder / "logs" / f"llama3-70b-finetune-{job_id}.err"
        assert (job["state"], job["exit_code"]) == ("COMPLETED", 0), err.read_text()[-3000:]
        text = out.read_text()
        found = re.findall(r"rank +(\d+)/16 .*?all_reduce=136 \(expected 136\)", text)
        assert sorted(found) == sorted(str(r) for r in range(16))
        hosts = set(re.findall(r"rank +\d+/16 local \d+ on (\w+)", text))
        assert hosts == set(job["nodes"]) and len(hosts) == 2
        assert "config: /models/configs/finetune_70b.yaml (found)" in text
    finally:
        p.stop()


def test_200_small_jobs_run_once_each(phalanx: Phalanx) -> None:
    work = phalanx.work
    ids = [
        phalanx.submit(gang(work, "echo ran $PHALANX_JOB_ID", count=1, gpus=1)) for _ in range(200)
    ]
    deadline = time.monotonic() + 400
    states: dict[int, str] = {}
    while time.monotonic() < deadline:
        items = phalanx.http.get("/api/v1/jobs", params={"limit": 1000}).json()["items"]
        states = {j["id"]: j["state"] for j in items if j["id"] in ids}
        if len(states) == 200 and all(s == "COMPLETED" for s in states.values()):
            break
        time.sleep(1)
    assert sorted(states.values()) == ["COMPLETED"] * 200, {
        i: s for i, s in states.items() if s != "COMPLETED"
    }
    for job_id in ids:
        assert (work / f"out-{job_id}.log").read_text() == f"ran {job_id}\n"
        assert phalanx.job(job_id)["attempt"] == 1


def test_cancel_ends_the_tasks_on_every_node(phalanx: Phalanx) -> None:
    pids = phalanx.work / "pids"
    pids.mkdir()
    command = f"echo $$ > {pids}/$PHALANX_TASK_RANK; exec sleep 600"
    job_id = phalanx.submit(gang(phalanx.work, command))
    phalanx.wait(job_id, lambda j: j["state"] == "RUNNING" and len(list(pids.iterdir())) == 2)
    assert phalanx.http.delete(f"/api/v1/jobs/{job_id}").status_code in (200, 202, 204)
    job = phalanx.finished(job_id, timeout=60)
    assert job["state"] == "CANCELLED", job
    for path in pids.iterdir():
        pid = int(path.read_text())
        deadline = time.monotonic() + 10
        while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not Path(f"/proc/{pid}").exists(), f"task {path.name} (pid {pid}) still runs"


def test_a_restarted_control_plane_re_adopts_a_running_job(phalanx: Phalanx) -> None:
    marker = phalanx.work / "go"
    command = f"echo start; while [ ! -e {marker} ]; do sleep 0.2; done; echo done"
    job_id = phalanx.submit(gang(phalanx.work, command))
    phalanx.wait(job_id, lambda j: j["state"] == "RUNNING")
    phalanx.kill()
    marker.touch()  # the job goes on while no control plane runs
    time.sleep(1)
    phalanx.start()
    job = phalanx.finished(job_id)
    assert (job["state"], job["attempt"]) == ("COMPLETED", 1), job
    text = (phalanx.work / f"out-{job_id}.log").read_text()
    assert text.count("start") == 2 and text.count("done") == 2


def test_the_health_check_runs_on_each_ray_node(cluster: Any, tmp_path: Path) -> None:
    """``--health-check`` on the Ray runtime: the program runs on each node, as a Ray
    task pinned to it, with the node's environment; the node it fails on drains with
    its first line as the reason and resumes when it passes again."""
    work = tmp_path / "work"
    work.mkdir()
    flag, seen, script = work / "broken", work / "seen", work / "check.sh"
    script.write_text(
        "#!/bin/sh\n"
        f'echo "$PHALANX_NODE $SLURMD_NODENAME [$CUDA_VISIBLE_DEVICES] '
        f'$(tr "\\\\0" "\\\\n" < /proc/$PPID/environ | grep ^RAY_RAYLET_PID=)" >> {seen}\n'
        f'if [ "$PHALANX_NODE" = gpu2 ] && [ -e {flag} ]; then\n'
        '  echo "gpu2: GPU 5 is gone"; exit 1\n'
        "fi\n"
        "exit 0\n"
    )
    script.chmod(0o755)
    flag.touch()
    p = Phalanx(
        cluster,
        tmp_path / "state",
        work,
        ["--health-check", str(script), "--health-check-interval", "1"],
    )
    try:

        def reason(name: str) -> str:
            annotations = p.nodes()[name]["metadata"].get("annotations", {})
            return str(annotations.get("phalanx.io/reason", ""))

        deadline = time.monotonic() + 60
        while reason("gpu2") != "gpu2: GPU 5 is gone" and time.monotonic() < deadline:
            time.sleep(0.25)
        nodes = p.nodes()
        assert nodes["gpu2"]["status"]["state"] == "drain", nodes["gpu2"]
        assert nodes["gpu1"]["status"]["state"] != "drain", nodes["gpu1"]
        # Each ran in a worker of its node's raylet, with the node's environment.
        raylets = {
            name: node.all_processes["raylet"][0].process.pid
            for name, node in cluster.gpu_nodes.items()
        }
        lines = set(seen.read_text().splitlines())
        for name, pid in raylets.items():
            line = f"{name} {name} [0,1,2,3,4,5,6,7] RAY_RAYLET_PID={pid}"
            assert line in lines, (line, lines)
        flag.unlink()
        deadline = time.monotonic() + 60
        while p.nodes()["gpu2"]["status"]["state"] == "drain" and time.monotonic() < deadline:
            time.sleep(0.25)
        assert p.nodes()["gpu2"]["status"]["state"] != "drain", p.nodes()["gpu2"]
    finally:
        p.stop()


def test_the_epilog_runs_on_each_ray_node_of_the_job(cluster: Any, tmp_path: Path) -> None:
    """``--epilog`` on the Ray runtime: after a gang ends, the program runs on each of
    its nodes' machines with the epilog's environment; it fails, and those nodes
    drain with ``Epilog error`` while the job's end stands."""
    work = tmp_path / "work"
    work.mkdir()
    seen, script = work / "seen", work / "epilog.sh"
    script.write_text(
        "#!/bin/sh\n"
        f'echo "$SLURMD_NODENAME $SLURM_JOB_ID $SLURM_JOB_PARTITION [$CUDA_VISIBLE_DEVICES] '
        f'$(tr "\\\\0" "\\\\n" < /proc/$PPID/environ | grep ^RAY_RAYLET_PID=)" >> {seen}\n'
        "exit 1\n"
    )
    script.chmod(0o755)
    p = Phalanx(cluster, tmp_path / "state", work, ["--epilog", str(script)])
    try:
        job_id = p.submit(gang(work, "true"))
        job = p.finished(job_id)
        assert job["state"] == "COMPLETED", job
        names = sorted(job["nodes"])
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and any(
            p.nodes()[n]["status"]["state"] != "drain" for n in names
        ):
            time.sleep(0.25)
        nodes = p.nodes()
        for name in names:
            assert nodes[name]["status"]["state"] == "drain", nodes[name]
            assert nodes[name]["metadata"]["annotations"]["phalanx.io/reason"] == "Epilog error"
        [other] = [n for n in ("gpu1", "gpu2", "gpu3") if n not in names]
        assert nodes[other]["status"]["state"] != "drain", nodes[other]
        raylets = {
            name: node.all_processes["raylet"][0].process.pid
            for name, node in cluster.gpu_nodes.items()
        }
        lines = set(seen.read_text().splitlines())
        for name in names:
            line = (
                f"{name} {job_id} gpu-h100-dedicated [0,1,2,3,4,5,6,7] "
                f"RAY_RAYLET_PID={raylets[name]}"
            )
            assert line in lines, (line, lines)
    finally:
        p.stop()


def test_a_ray_node_that_joins_is_picked_up_live(phalanx: Phalanx) -> None:
    assert "gpu4" not in phalanx.nodes()
    phalanx.cluster.gpu_nodes["gpu4"] = phalanx.cluster.add_node(
        num_cpus=NODE_CPUS,
        num_gpus=8,
        memory=NODE_MEMORY,
        node_ip_address="127.0.0.1",
        labels={"phalanx.io/node": "gpu4", PARTITION: "true"},
    )
    deadline = time.monotonic() + 60
    while "gpu4" not in phalanx.nodes() and time.monotonic() < deadline:
        time.sleep(0.5)
    gpu4 = phalanx.nodes()["gpu4"]
    assert gpu4["status"]["state"] == "idle"
    assert gpu4["status"]["capacity"]["nvidia.com/gpu"] == "8"


def test_a_node_dying_mid_job_is_node_fail_and_the_requeued_job_completes_elsewhere(
    phalanx: Phalanx,
) -> None:
    marker = phalanx.work / "second"
    # The first attempt waits for ever; the second (marker present) ends at once.
    command = f"if [ -e {marker} ]; then echo second $(hostname); else sleep 600; fi"
    job_id = phalanx.submit(gang(phalanx.work, command) | {"requeue": True})
    job = phalanx.wait(job_id, lambda j: j["state"] == "RUNNING")
    victim = job["nodes"][1]
    marker.touch()
    phalanx.cluster.remove_node(phalanx.cluster.gpu_nodes.pop(victim), allow_graceful=False)
    job = phalanx.wait(job_id, lambda j: j["attempt"] >= 2 and bool(j["end_time"]), 120)
    assert job["state"] == "COMPLETED", job
    assert victim not in job["nodes"]
    events = phalanx.http.get(f"/api/v1/jobs/{job_id}/events").json()
    reasons = json.dumps(events)
    assert "NODE_FAIL" in reasons or "NodeFail" in reasons, reasons[:2000]
    # Ray's GCS marks the node dead on its own health-check clock, which on a loaded
    # machine can come after the requeued job already finished elsewhere.
    deadline = time.monotonic() + 60
    while phalanx.nodes()[victim]["status"]["state"] != "down" and time.monotonic() < deadline:
        time.sleep(0.5)
    assert phalanx.nodes()[victim]["status"]["state"] == "down"
    text = (phalanx.work / f"out-{job_id}.log").read_text()
    assert sorted(text.split()) == sorted(["second", "second", *job["nodes"]])


def test_a_two_node_step_runs_in_its_image_on_two_ray_nodes(cluster: Any, tmp_path: Path) -> None:
    from tests.runtime.containers.images_support import busybox_rootfs, require_tools, squashfs

    if os.geteuid() != 0:
        pytest.skip("the container runtime's loop mounts need root")
    require_tools("mksquashfs")
    work = tmp_path / "work"
    work.mkdir()
    rootfs = busybox_rootfs(work / "rootfs")
    (rootfs / "etc").mkdir(exist_ok=True)
    (rootfs / "etc" / "os-release").write_text("ID=phxbox-ray\n")
    image = squashfs(rootfs, work / "img.sqsh")
    p = Phalanx(cluster, tmp_path / "state", work, ["--container-runtime", "builtin"])
    try:
        (work / "job.sh").write_text(
            "#!/bin/bash\n#SBATCH -N2 --ntasks-per-node=1 --partition=gpu-h100-dedicated\n"
            f"srun -l --container-image={image} sh -c "
            "'echo $(hostname) $SLURM_PROCID $(cat /etc/os-release) $(test -e /etc/debian_version "
            "&& echo host-visible || echo image-only)'\n"
        )
        job_id = p.sbatch(work, "job.sh")
        job = p.finished(job_id)
        out = (work / f"slurm-{job_id}.out").read_text()
        assert job["state"] == "COMPLETED", out
        lines = sorted(line for line in out.splitlines() if "ID=phxbox-ray" in line)
        first, second = job["nodes"]
        assert lines == [
            f"0: {first} 0 ID=phxbox-ray image-only",
            f"1: {second} 1 ID=phxbox-ray image-only",
        ], out
    finally:
        p.stop()


def test_srun_and_salloc_from_a_login_shell_run_steps_on_the_ray_nodes(
    phalanx: Phalanx, tmp_path: Path
) -> None:
    """``srun`` outside a job makes an allocation on two Ray nodes and runs its step
    there (each node's task where Ray placed its bundle); ``salloc`` holds one while
    ``srun`` in its shell runs steps; sacct shows the steps."""
    shims = tmp_path / "shims"
    subprocess.run([str(BIN / "phalanx"), "shims", str(shims)], env=phalanx.env, check=True)
    env = {**phalanx.env, "PATH": f"{shims}:{phalanx.env['PATH']}"}

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            list(args), env=env, cwd=tmp_path, capture_output=True, text=True, timeout=180
        )

    done = run(
        "srun", "-p", "gpu-h100-dedicated", "-N2", "--ntasks-per-node=1", "--gpus-per-node=8",
        "-l", "sh", "-c", "echo $SLURM_PROCID $SLURMD_NODENAME $SLURM_STEP_ID",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = sorted(done.stdout.splitlines())
    assert [line.split()[0] for line in lines] == ["0:", "1:"], done.stdout
    nodes = {line.split()[2] for line in lines}
    assert len(nodes) == 2 and nodes <= {"gpu1", "gpu2", "gpu3"}, done.stdout
    held = run(
        "salloc", "-p", "gpu-h100-dedicated", "-N2", "sh", "-c",
        "srun -l sh -c 'echo $SLURMD_NODENAME' | sort; exit 3",
    )  # fmt: skip
    assert held.returncode == 3, held.stderr
    job = re.search(r"Granted job allocation (\d+)", held.stderr)
    assert job, held.stderr
    assert len(held.stdout.splitlines()) == 2, held.stdout
    rows = run("sacct", "-n", "-P", "-j", job.group(1), "-o", "JobID,JobName,State,ExitCode")
    assert rows.stdout.splitlines() == [
        f"{job.group(1)}|interactive|FAILED|3:0",
        f"{job.group(1)}.0|sh|COMPLETED|0:0",
    ], rows.stdout


def test_sstat_samples_each_task_on_its_own_ray_node(phalanx: Phalanx, tmp_path: Path) -> None:
    """A running step's usage: the batch shell's node samples its task, the other node
    the task it runs (not the proxy srun keeps for it)."""
    (tmp_path / "job.sh").write_text(
        "#!/bin/bash\n#SBATCH -N2 --ntasks-per-node=1 --partition=gpu-h100-dedicated\n"
        'srun python3 -c \'x = bytearray(96 << 20); x[::4096] = b"1" * len(x[::4096]); '
        "import time; time.sleep(120)'\n"
    )
    job_id = phalanx.sbatch(tmp_path, "job.sh")
    try:
        deadline = time.monotonic() + 120
        tasks: list[dict[str, Any]] = []
        while time.monotonic() < deadline:
            steps = phalanx.http.get(f"/api/v1/jobs/{job_id}/steps/usage").json()["steps"]
            tasks = steps[0]["tasks"] if steps else []
            if len(tasks) == 2 and all(t["rssKb"] > 90 * 1024 for t in tasks):
                break
            time.sleep(1)
        assert [t["rank"] for t in tasks] == [0, 1], tasks
        assert all(t["rssKb"] > 90 * 1024 for t in tasks), tasks
    finally:
        phalanx.http.delete(f"/api/v1/jobs/{job_id}")
