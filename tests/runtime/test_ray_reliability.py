"""Node loss, checkpoints, the preemption notice and expedited requeue on the Ray
runtime, against a real multi-node Ray cluster on this machine.

The cluster is :mod:`tests.runtime.test_ray`'s (a CPU-only head and three 8-GPU
nodes on loopback, with a short health check). The first tests drive a
:class:`~phalanx.runtime.ray.runtime.RayRuntime` in this process and read its
events; the batch-job tests drive a real ``phalanx up --runtime ray`` with
``phalanx sbatch``. The node-loss tests add the node they take away, except the
last one, which removes one of the gang's nodes and adds its replacement.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from phalanx.runtime.spec import Checkpointed, Exited, LaunchSpec, RuntimeEvent, Started, TaskSpec
from tests.runtime import test_ray
from tests.runtime.test_ray import (
    NODE_CPUS,
    NODE_MEMORY,
    PARTITION,
    Phalanx,
    cluster,
    gang,
    ray_node_ids,
)

__all__ = ["cluster"]

pytestmark = pytest.mark.timeout(300)

BIN = Path(sys.executable).parent


class Driver:
    """A RayRuntime in this process, and the events it reported so far."""

    def __init__(self, runtime: Any, work: Path) -> None:
        self.runtime = runtime
        self.work = work
        self.events: list[RuntimeEvent] = []
        self.next_id = 1

    def launch(self, command: str, nodes: list[str], **spec: Any) -> int:
        job_id = self.next_id
        self.next_id += 1
        self.runtime.launch(
            LaunchSpec(
                job_id=job_id,
                attempt=1,
                command=("sh", "-c", command),
                working_dir=str(self.work),
                env={},
                tasks=tuple(TaskSpec(node, rank) for rank, node in enumerate(nodes)),
                output=str(self.work / f"out-{job_id}.log"),
                requests={"": {"cpu": 1000}},
                **spec,
            )
        )
        return job_id

    def wait(
        self, job_id: int, done: Callable[[RuntimeEvent], bool], timeout: float = 60
    ) -> RuntimeEvent:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.events += self.runtime.poll()
            for event in self.events:
                if event.job_id == job_id and done(event):
                    return event
            time.sleep(0.1)
        raise AssertionError(f"job {job_id}: no such event in {timeout} s: {self.mine(job_id)}")

    def mine(self, job_id: int) -> list[RuntimeEvent]:
        return [e for e in self.events if e.job_id == job_id]

    def started(self, job_id: int) -> None:
        self.wait(job_id, lambda e: isinstance(e, Started))

    def exited(self, job_id: int, timeout: float = 60) -> Exited:
        event = self.wait(job_id, lambda e: isinstance(e, Exited), timeout)
        assert isinstance(event, Exited)
        return event


@pytest.fixture
def driver(cluster: Any, tmp_path: Path) -> Iterator[Driver]:
    from phalanx.runtime.ray.runtime import RayRuntime

    work = tmp_path / "work"
    work.mkdir()
    runtime = RayRuntime(tmp_path / "state", cluster.address, workdir=str(tmp_path / "ray"))
    runtime.watch()
    yield Driver(runtime, work)
    # Not close(): that disconnects this process, which the module's cluster shares.
    runtime._stop.set()
    for job_id, attempt in list(runtime._attempts):
        runtime.forget(job_id, attempt)
    runtime.poll()
    deadline = time.monotonic() + 30
    while runtime._releasing and time.monotonic() < deadline:
        time.sleep(0.1)
        runtime.poll()
    runtime.retire_agents()


def add_gpu_node(cluster: Any, name: str) -> Any:
    node = cluster.add_node(
        num_cpus=NODE_CPUS,
        num_gpus=8,
        memory=NODE_MEMORY,
        node_ip_address="127.0.0.1",
        labels={"phalanx.io/node": name, PARTITION: "true"},
    )
    cluster.gpu_nodes[name] = node
    return node


def wait_live(runtime: Any, name: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while name not in runtime.inventory.live and time.monotonic() < deadline:
        runtime.refresh()
        time.sleep(0.2)
    assert name in runtime.inventory.live, sorted(runtime.inventory.live)


def test_a_removed_ray_node_ends_its_job_node_fail_naming_that_node(
    cluster: Any, driver: Driver
) -> None:
    add_gpu_node(cluster, "lost1")
    wait_live(driver.runtime, "lost1")
    pids = driver.work / "pids"
    pids.mkdir()
    command = f"echo $$ > {pids}/$PHALANX_NODE_NAME; exec sleep 600"
    job_id = driver.launch(command, ["gpu1", "lost1"])
    driver.started(job_id)
    cluster.remove_node(cluster.gpu_nodes.pop("lost1"), allow_graceful=False)
    event = driver.exited(job_id)
    assert event.state == "NODE_FAIL", event
    assert event.lost_nodes == ("lost1",), event
    assert "lost1" in event.message
    # The healthy node's task ends with the attempt (as the lost node's would with it).
    healthy = int((pids / "gpu1").read_text())
    driver.runtime.forget(job_id, 1)
    deadline = time.monotonic() + 30
    while Path(f"/proc/{healthy}").exists() and time.monotonic() < deadline:
        driver.runtime.poll()
        time.sleep(0.1)
    assert not Path(f"/proc/{healthy}").exists(), "the task on gpu1 outlived its attempt"
    # The lost node's task outlives its "machine" here, which is this one.
    with contextlib.suppress(ProcessLookupError):
        os.killpg(int((pids / "lost1").read_text()), signal.SIGKILL)
    # A launch onto a node the Ray cluster no longer has names it too.
    deadline = time.monotonic() + 60
    while "lost1" in driver.runtime.inventory.live and time.monotonic() < deadline:
        time.sleep(0.2)
    job_id = driver.launch("true", ["gpu1", "lost1"])
    event = driver.exited(job_id)
    assert (event.state, event.lost_nodes) == ("NODE_FAIL", ("lost1",)), event


def test_a_removed_ray_node_that_runs_no_batch_task_ends_its_batch_job_node_fail(
    cluster: Any, driver: Driver
) -> None:
    # A batch job's other nodes run only what srun starts there: their agents are idle.
    add_gpu_node(cluster, "lost2")
    wait_live(driver.runtime, "lost2")
    job_id = driver.launch("", ["gpu1", "lost2"], script="#!/bin/sh\nexec sleep 600\n")
    driver.started(job_id)
    cluster.remove_node(cluster.gpu_nodes.pop("lost2"), allow_graceful=False)
    event = driver.exited(job_id)
    assert (event.state, event.lost_nodes) == ("NODE_FAIL", ("lost2",)), event


def test_touching_the_checkpoint_file_on_ray_is_a_checkpointed_event(driver: Driver) -> None:
    work = driver.work
    # Rank 0 touches its file at once; rank 1 runs `phalanx checkpoint` once told to.
    command = (
        'if [ "$PHALANX_TASK_RANK" = 0 ]; then touch "$PHALANX_CHECKPOINT_FILE"; '
        f"else while [ ! -e {work}/go ]; do sleep 0.1; done; {BIN}/phalanx checkpoint; fi; "
        f"while [ ! -e {work}/done ]; do sleep 0.1; done"
    )
    job_id = driver.launch(command, ["gpu1", "gpu2"])
    first = driver.wait(job_id, lambda e: isinstance(e, Checkpointed))
    mtime = Path(driver.runtime.jobdir(job_id, 1, 0), "checkpoint").stat().st_mtime
    assert first.time == mtime
    time.sleep(0.05)
    (work / "go").touch()
    second = driver.wait(job_id, lambda e: isinstance(e, Checkpointed) and e.time > first.time)
    rank1 = Path(driver.runtime.jobdir(job_id, 1, 1), "checkpoint")
    assert second.time == rank1.stat().st_mtime
    (work / "done").touch()
    event = driver.exited(job_id)
    assert event.state == "COMPLETED", event
    # Once per new time: the two checkpoints, nothing told twice.
    checkpoints = [e for e in driver.mine(job_id) if isinstance(e, Checkpointed)]
    assert checkpoints == [first, second]


def test_a_preempted_ray_job_gets_its_notice_before_sigterm(driver: Driver) -> None:
    work = driver.work
    log = work / "signals-$PHALANX_TASK_RANK"
    command = (
        f"trap 'echo USR1 $(date +%s.%N) >> {log}' USR1; "
        f"trap 'echo TERM $(date +%s.%N) >> {log}; exit 0' TERM; "
        f"touch {work}/ready-$PHALANX_TASK_RANK; "
        "while :; do sleep 0.1; done"
    )
    job_id = driver.launch(
        command,
        ["gpu1", "gpu2"],
        preemption_notice=(int(signal.SIGUSR1), 2.0, False),
        kill_wait_s=2.0,
    )
    driver.started(job_id)
    deadline = time.monotonic() + 30
    while not all((work / f"ready-{r}").exists() for r in (0, 1)):
        assert time.monotonic() < deadline, "the tasks did not set their traps"
        time.sleep(0.1)
    preempted = time.time()
    # A grace period of 3 s with a USR1@2 notice: USR1 after ~1 s, SIGTERM after ~3 s.
    driver.runtime.cancel(job_id, preempt_grace_s=3.0)
    event = driver.exited(job_id)
    assert event.state == "PREEMPTED", event
    for rank in (0, 1):
        lines = [line.split() for line in (work / f"signals-{rank}").read_text().splitlines()]
        assert [name for name, _ in lines] == ["USR1", "TERM"], (rank, lines)
        usr1, term = (float(at) for _, at in lines)
        assert 0.5 < usr1 - preempted < 4.0, (rank, usr1 - preempted)
        assert 1.5 < term - usr1 < 3.5, (rank, term - usr1)


def test_every_job_runs_in_the_one_agent_of_its_ray_node(driver: Driver) -> None:
    import ray

    runtime = driver.runtime
    for _ in range(3):
        job_id = driver.launch("true", ["gpu1", "gpu2"])
        assert driver.exited(job_id).state == "COMPLETED"
    actors = ray.util.list_named_actors(all_namespaces=True)
    mine = {a["name"] for a in actors if a["name"].startswith(f"{runtime.prefix}/")}
    live = {n.node_id for n in runtime.inventory.live.values()}
    # One per Ray node, made when the node was first seen; none per job.
    assert mine == {runtime.agent_name(node_id) for node_id in live}


def test_a_job_ray_cannot_place_yet_starts_nothing_and_cancels_at_once(driver: Driver) -> None:
    from ray.util import remove_placement_group
    from ray.util.placement_group import placement_group

    node_id = ray_node_ids()["gpu3"]
    # Something outside phalanx holds every CPU of gpu3.
    outside = placement_group(
        [{"CPU": NODE_CPUS}], bundle_label_selector=[{"ray.io/node-id": node_id}]
    )
    assert outside.wait(30)
    try:
        job_id = driver.launch("touch ran", ["gpu3"])
        time.sleep(2)
        driver.events += driver.runtime.poll()
        assert driver.mine(job_id) == []
        assert not Path(driver.runtime.jobdir(job_id, 1, 0), "status.json").exists()
        driver.runtime.cancel(job_id)
        event = driver.exited(job_id)
        assert (event.state, event.start_time) == ("CANCELLED", None), event
        assert not (driver.work / "ran").exists()
    finally:
        remove_placement_group(outside)


def sbatch(p: Phalanx, *args: str) -> int:
    done = subprocess.run(
        [str(BIN / "phalanx"), "sbatch", *args],
        cwd=p.work,
        env=p.env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    match = re.search(r"Submitted batch job (\d+)", done.stdout)
    assert match, done.stdout + done.stderr
    return int(match.group(1))


def test_the_srun_tasks_of_a_two_node_batch_job_run_on_both_ray_nodes(
    cluster: Any, tmp_path: Path
) -> None:
    """The placement group of a batch job has a bundle (and an agent) on each of its
    nodes, not only the batch shell's: srun's task on the other node runs there."""
    work = tmp_path / "work"
    work.mkdir()
    p = Phalanx(cluster, tmp_path / "state", work)
    try:
        job_id = sbatch(
            p, "-N", "2", "--ntasks-per-node", "1", "--gpus-per-node", "8", "-o", "out-%j.log",
            "--wrap", "srun sh -c 'echo $SLURMD_NODENAME $PHALANX_RAY_NODE_ID'",
        )  # fmt: skip
        job = p.finished(job_id, 120)
        text = (work / f"out-{job_id}.log").read_text()
        assert job["state"] == "COMPLETED", (job, text)
        ids = ray_node_ids()
        seen = dict(line.split() for line in text.splitlines())
        assert set(seen) == set(job["nodes"]) and len(seen) == 2, text
        assert seen == {name: ids[name] for name in seen}, (seen, ids)
    finally:
        p.stop()


def test_phalanx_checkpoint_from_srun_on_a_batch_jobs_other_ray_node_is_reported(
    cluster: Any, tmp_path: Path
) -> None:
    """On the node without the batch shell, srun's task gets that node's agent's own
    checkpoint file (the batch node's is on another machine); the agent reports it."""
    work = tmp_path / "work"
    work.mkdir()
    p = Phalanx(cluster, tmp_path / "state", work)
    try:
        (work / "task.sh").write_text(
            'if [ "$SLURM_NODEID" = 1 ]; then\n'
            f"  {BIN}/phalanx checkpoint || exit 1\n"
            '  echo "$SLURMD_NODENAME $PHALANX_CHECKPOINT_FILE"\n'
            "fi\n"
            "sleep 3\n"
        )
        job_id = sbatch(
            p, "-N", "2", "--ntasks-per-node", "1", "--gpus-per-node", "8", "-o", "out-%j.log",
            "--wrap", f"srun sh {work}/task.sh",
        )  # fmt: skip
        job = p.finished(job_id, 120)
        text = (work / f"out-{job_id}.log").read_text()
        assert job["state"] == "COMPLETED", (job, text)
        node, path = text.split()
        assert node == job["nodes"][1], (job["nodes"], text)
        assert path.endswith(f"/jobs/{job_id}/1/1/checkpoint"), path
        events = p.http.get(f"/api/v1/jobs/{job_id}/events").json()["items"]
        [checkpointed] = [e for e in events if e["kind"] == "Checkpointed"]
        assert checkpointed["data"] == {"attempt": 1}, checkpointed
    finally:
        p.stop()


def test_a_preempted_two_node_batch_job_on_ray_gets_its_notice_on_both_nodes_first(
    cluster: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``sbatch --signal=USR1@2`` on a ClusterQueue with a 4 s grace time: preempted by
    a higher priority, the srun tasks on both Ray nodes (the other node's through its
    agent) get USR1 about 2 s before SIGTERM."""
    queues = test_ray.QUEUES.replace(
        "  name: gpu-h100-dedicated\n  annotations: {",
        "  name: gpu-h100-dedicated\n  annotations: {slurm.phalanx.io/grace-time: '4', ",
    ).replace(
        "spec:\n  namespaceSelector: {}\n  resourceGroups:",
        "spec:\n  namespaceSelector: {}\n  preemption: {withinClusterQueue: LowerPriority}\n"
        "  resourceGroups:",
    )
    queues += "---\napiVersion: kueue.x-k8s.io/v1beta2\nkind: WorkloadPriorityClass\n"
    queues += "metadata: {name: high}\nvalue: 1000\n"
    assert "LowerPriority" in queues and "grace-time" in queues
    monkeypatch.setattr(test_ray, "QUEUES", queues)
    work = tmp_path / "work"
    work.mkdir()
    p = Phalanx(cluster, tmp_path / "state", work)
    try:
        log = f"{work}/sig-$SLURMD_NODENAME"
        (work / "task.sh").write_text(
            f"trap 'echo USR1 $(date +%s.%N) >> {log}' USR1\n"
            f"trap 'echo TERM $(date +%s.%N) >> {log}; exit 0' TERM\n"
            f"touch {work}/ready-$SLURMD_NODENAME\n"
            "while :; do sleep 0.1; done\n"
        )
        job_id = sbatch(
            p, "-N", "2", "--ntasks-per-node", "1", "--gpus-per-node", "8",
            "--signal=USR1@2", "-o", "out-%j.log", "--wrap", f"srun sh {work}/task.sh",
        )  # fmt: skip
        nodes = p.wait(job_id, lambda j: j["state"] == "RUNNING")["nodes"]
        deadline = time.monotonic() + 60
        while not all((work / f"ready-{n}").exists() for n in nodes):
            assert time.monotonic() < deadline, "the srun tasks did not set their traps"
            time.sleep(0.1)
        count = len([n for n in p.nodes() if n in cluster.gpu_nodes])
        preempted = time.time()
        high = p.submit(gang(work, "exec sleep 600", count=count) | {"priorityClass": "high"})
        job = p.finished(job_id, 60)
        assert job["state"] == "PREEMPTED", job
        for node in nodes:
            lines = [line.split() for line in (work / f"sig-{node}").read_text().splitlines()]
            assert [name for name, _ in lines] == ["USR1", "TERM"], (node, lines)
            usr1, term = (float(at) for _, at in lines)
            assert 1.5 < usr1 - preempted < 6.0, (node, usr1 - preempted)
            assert 1.5 < term - usr1 < 3.5, (node, term - usr1)
        p.wait(high, lambda j: j["state"] == "RUNNING")
        p.http.delete(f"/api/v1/jobs/{high}")
    finally:
        p.stop()


def test_an_expedited_gang_whose_ray_node_is_removed_restarts_first_on_its_healthy_node(
    cluster: Any, tmp_path: Path
) -> None:
    """``sbatch --requeue=expedite`` through ``phalanx up --runtime ray``: the gang's
    Ray node is removed; the gang is requeued with its healthy node held (the lost
    node left out even before the inventory marks it down) and restarts on that node
    plus the node that joins next, ahead of the jobs that waited."""
    work = tmp_path / "work"
    work.mkdir()
    p = Phalanx(cluster, tmp_path / "state", work)
    try:
        gpu_nodes = sorted(n for n in p.nodes() if n in cluster.gpu_nodes)
        job_id = sbatch(
            p, "--requeue=expedite", "-N", "2", "--ntasks-per-node", "1", "--gpus-per-node", "8",
            "-o", "gang-%j.out", "--wrap", f"echo $$ >> {work}/pids; exec sleep 600",
        )  # fmt: skip
        nodes = p.wait(job_id, lambda j: j["state"] == "RUNNING")["nodes"]
        healthy, lost = sorted(nodes)
        # Every other GPU node is taken; the jobs that come next wait.
        others = [n for n in gpu_nodes if n not in nodes]
        fillers = [p.submit(gang(work, "exec sleep 600", count=1)) for _ in others]
        for filler in fillers:
            p.wait(filler, lambda j: j["state"] == "RUNNING")
        waiting = [p.submit(gang(work, "exec sleep 600", count=1)) for _ in range(3)]
        cluster.remove_node(cluster.gpu_nodes.pop(lost), allow_graceful=False)
        p.wait(job_id, lambda j: j["state"] == "PENDING", 60)
        events = p.http.get(f"/api/v1/jobs/{job_id}/events").json()["items"]
        assert [e for e in events if e["kind"] == "Requeued"], events
        # The healthy node waits for the gang: none of the waiting jobs starts there.
        time.sleep(2)
        assert all(p.job(j)["state"] == "PENDING" for j in waiting)
        assert p.job(job_id)["state"] == "PENDING"
        add_gpu_node(cluster, "spare1")
        job = p.wait(job_id, lambda j: j["state"] == "RUNNING", 120)
        assert sorted(job["nodes"]) == sorted([healthy, "spare1"]), job
        # Once: the NODE_FAIL waited for the control plane to have the node down, so the
        # engine never tried the lost node as the replacement.
        events = p.http.get(f"/api/v1/jobs/{job_id}/events").json()["items"]
        [requeued] = [e for e in events if e["kind"] == "Requeued"]
        assert requeued["reason"] == "NodeFail", requeued
        assert requeued["data"]["expedite"] == {"held": [healthy]}, requeued
        assert job["attempt"] == 2, job
        assert all(p.job(j)["state"] == "PENDING" for j in waiting)
        for other in [job_id, *fillers, *waiting]:
            p.http.delete(f"/api/v1/jobs/{other}")
    finally:
        p.stop()
        # A batch shell on the removed node outlives its "machine" here, this one.
        for pid in (work / "pids").read_text().split() if (work / "pids").exists() else ():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(int(pid), signal.SIGKILL)


TAS = f"""\
apiVersion: kueue.x-k8s.io/v1beta2
kind: Topology
metadata: {{name: ray-fabric}}
spec:
  levels:
  - nodeLabel: {PARTITION}
  - nodeLabel: kubernetes.io/hostname
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {{name: gpu-tas}}
spec:
  nodeLabels: {{{PARTITION}: "true"}}
  topologyName: ray-fabric
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {{name: tas}}
spec:
  namespaceSelector: {{}}
  resourceGroups:
  - coveredResources: [cpu, memory, nvidia.com/gpu]
    flavors:
    - name: gpu-tas
      resources:
      - {{name: cpu, nominalQuota: 512}}
      - {{name: memory, nominalQuota: 4400000Mi}}
      - {{name: nvidia.com/gpu, nominalQuota: 32}}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {{name: tas, namespace: team-a}}
spec: {{clusterQueue: tas}}
"""


def test_a_topology_placed_gang_whose_ray_node_is_removed_is_hot_swapped(
    cluster: Any, tmp_path: Path
) -> None:
    """A gang in a flavor with a Topology (every GPU node in one domain here) loses a
    Ray node: it keeps its admission and restarts at once on its healthy node plus a
    free node of the domain, and its record says which node replaced which."""
    work = tmp_path / "work"
    work.mkdir()
    tas = work / "tas.yaml"
    tas.write_text(TAS)
    p = Phalanx(cluster, tmp_path / "state", work, ["--config", str(tas)])
    try:
        while len([n for n in p.nodes() if n in cluster.gpu_nodes]) < 3:
            name = f"spare{len(cluster.gpu_nodes) + 10}"
            add_gpu_node(cluster, name)
            deadline = time.monotonic() + 60
            while name not in p.nodes():
                assert time.monotonic() < deadline, sorted(p.nodes())
                time.sleep(0.5)
        body = gang(work, f"echo $$ >> {work}/pids; exec sleep 600") | {
            "queue": "tas",
            "requeue": True,
        }
        job_id = p.submit(body)
        nodes = p.wait(job_id, lambda j: j["state"] == "RUNNING")["nodes"]
        healthy, lost = sorted(nodes)
        cluster.remove_node(cluster.gpu_nodes.pop(lost), allow_graceful=False)
        job = p.wait(job_id, lambda j: j["state"] == "RUNNING" and lost not in j["nodes"], 120)
        assert healthy in job["nodes"] and job["attempt"] == 2, job
        [new] = [n for n in job["nodes"] if n != healthy]
        events = p.http.get(f"/api/v1/jobs/{job_id}/events").json()["items"]
        [swap] = [e for e in events if e["kind"] == "NodeReplaced"]
        assert swap["data"]["replaced"] == {lost: new}, swap
        assert swap["reason"] == "NODE_FAIL", swap
        assert not [e for e in events if e["kind"] == "Requeued"], events
        p.http.delete(f"/api/v1/jobs/{job_id}")
    finally:
        p.stop()
        # A task on the removed node outlives its "machine" here, this one.
        for pid in (work / "pids").read_text().split() if (work / "pids").exists() else ():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(int(pid), signal.SIGKILL)
