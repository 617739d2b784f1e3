"""Simulating on explicit clusters: Node manifests, given queues, openb's nodes and
pods as a time trace, GPU shares and GPU models."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from tests.shared import needs_shared, shared_path

from phalanx.errors import Invalid
from phalanx.sim.run import load_cluster, simulate
from phalanx.sim.setup import Cluster, scenario
from phalanx.sim.simulator import Simulator
from phalanx.sim.trace import TraceJob, load_generic

TRACES = shared_path("traces")
OPENB = TRACES / "alibaba-openb-2023"
BIN = Path(sys.executable).parent

NODES = """\
apiVersion: v1
kind: Node
metadata:
  name: big-0
  labels: {nvidia.com/gpu.product: H100}
status:
  capacity: {nvidia.com/gpu: "8", cpu: "64", memory: 512Gi}
---
apiVersion: v1
kind: Node
metadata:
  name: big-1
  labels: {nvidia.com/gpu.product: H100}
status:
  capacity: {nvidia.com/gpu: "8", cpu: "64", memory: 512Gi}
---
apiVersion: v1
kind: Node
metadata:
  name: small-0
  labels: {nvidia.com/gpu.product: T4}
status:
  capacity: {nvidia.com/gpu: "2", cpu: "16", memory: 64Gi}
"""

QUEUES = """\
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: any}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: research}
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [nvidia.com/gpu]
    flavors:
    - name: any
      resources: [{name: nvidia.com/gpu, nominalQuota: 18}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: main, namespace: team-a}
spec: {clusterQueue: research}
"""


def _jobs(trace: list[TraceJob], cluster: Cluster, policy: str) -> dict[int, tuple]:
    result = Simulator(scenario(cluster, policy), trace).run()
    return {o.job.id: (o.start, o.end, o.nodes) for o in result.outcomes}


def test_node_manifests_make_a_cluster_of_mixed_nodes(tmp_path: Path) -> None:
    (tmp_path / "nodes.yaml").write_text(NODES)
    trace = [
        TraceJob(1, 0.0, 100.0, 16, "a"),  # both 8-GPU nodes
        TraceJob(2, 0.0, 100.0, 2, "b"),  # fits the T4 node
        TraceJob(3, 1.0, 50.0, 1, "b", gpu_models=("H100",)),  # waits for an H100
    ]
    cluster = load_cluster(str(tmp_path / "nodes.yaml"), TRACES, trace)
    assert cluster.gpus == 18 and cluster.node_gpus == 8 and not cluster.queues
    for policy in ("phalanx", "slurm", "kueue", "fifo"):
        runs = _jobs(trace, cluster, policy)
        assert runs[1][:2] == (0.0, 100.0) and sorted(runs[1][2]) == ["big-0", "big-1"]
        assert runs[2][2] == ("small-0",)
        # The T4 has a GPU free, but the job names H100: it starts when job 1 ends.
        assert runs[3][0] == 100.0 and runs[3][2][0].startswith("big-")


def test_a_job_that_fits_nowhere_stays_pending_and_the_run_ends(tmp_path: Path) -> None:
    (tmp_path / "nodes.yaml").write_text(NODES)
    trace = [TraceJob(1, 0.0, 60.0, 24, "a"), TraceJob(2, 5.0, 60.0, 1, "a")]
    cluster = load_cluster(str(tmp_path / "nodes.yaml"), TRACES, trace)
    for policy in ("slurm", "phalanx"):
        runs = _jobs(trace, cluster, policy)
        assert runs[1] == (None, None, ())
        assert runs[2][:2] == (5.0, 65.0)


def test_given_queues_route_tenants_by_local_queue_namespace(tmp_path: Path) -> None:
    (tmp_path / "nodes.yaml").write_text(NODES)
    (tmp_path / "queues.yaml").write_text(QUEUES)
    trace = [TraceJob(1, 0.0, 60.0, 8, "team-a"), TraceJob(2, 0.0, 60.0, 8, "team-a")]
    cluster = load_cluster(str(tmp_path / "nodes.yaml"), TRACES, trace, tmp_path / "queues.yaml")
    assert {type(o).__name__ for o in cluster.queues} == {
        "ResourceFlavor",
        "ClusterQueue",
        "LocalQueue",
    }
    made = scenario(cluster, "kueue").make_job(trace[0])
    assert (made.cluster_queue, made.queue) == ("research", "main")
    # The same folder as --cluster: its queue objects are used too.
    folder = load_cluster(str(tmp_path), TRACES, trace)
    assert len(folder.queues) == 3 and folder.gpus == 18
    fifo = scenario(folder, "fifo")
    strategies = {getattr(o, "queueing_strategy", None) for o in fifo.objects}
    assert "StrictFIFO" in {str(s) for s in strategies if s is not None}
    runs = _jobs(trace, folder, "phalanx")
    assert all(r[:2] == (0.0, 60.0) for r in runs.values())


def test_bad_cluster_and_queue_files_are_one_clear_error(tmp_path: Path) -> None:
    (tmp_path / "nodes.yaml").write_text(NODES)
    (tmp_path / "empty.yaml").write_text(QUEUES)
    trace = [TraceJob(1, 0.0, 60.0, 8, "a")]
    with pytest.raises(Invalid, match="has no Node manifests"):
        load_cluster(str(tmp_path / "empty.yaml"), TRACES, trace)
    with pytest.raises(Invalid, match="has Nodes; give them with --cluster"):
        load_cluster("shared:1", TRACES, trace, tmp_path / "nodes.yaml")
    with pytest.raises(Invalid, match="no such file"):
        load_cluster("shared:1", TRACES, trace, tmp_path / "missing.yaml")
    (tmp_path / "bad.yaml").write_text(NODES.replace('"8"', "eight", 1))
    with pytest.raises(Invalid, match=r"bad\.yaml"):
        load_cluster(str(tmp_path / "bad.yaml"), TRACES, trace)
    # Two ClusterQueues, neither a's, and no LocalQueue in its namespace.
    (tmp_path / "orphan.yaml").write_text(
        QUEUES + "---\n" + QUEUES.split("---\n")[1].replace("research", "other")
    )
    cluster = load_cluster(str(tmp_path / "nodes.yaml"), TRACES, trace, tmp_path / "orphan.yaml")
    with pytest.raises(Invalid, match="tenant 'a' has no queue"):
        Simulator(scenario(cluster, "kueue"), [TraceJob(1, 0.0, 60.0, 8, "a")]).run()


def test_gpu_shares_pack_onto_one_gpu(tmp_path: Path) -> None:
    trace_file = tmp_path / "t.csv"
    trace_file.write_text(
        "submit,duration,gpus,gpu_milli,cpus,memory_mib,gpu_models\n"
        "0,100,1,500,4,8192,T4\n0,100,1,500,4,8192,T4\n0,100,1,500,4,8192,T4\n"
    )
    trace = load_generic(trace_file)
    assert trace[0].gpu_equivalents == 0.5 and trace[0].gpu_models == ("T4",)
    (tmp_path / "nodes.yaml").write_text(NODES)
    cluster = load_cluster(str(tmp_path / "nodes.yaml"), TRACES, trace)
    result = Simulator(scenario(cluster, "phalanx"), trace).run()
    # Three halves on the T4 node's two GPUs, at once.
    assert {(o.start, o.nodes) for o in result.outcomes} == {(0.0, ("small-0",))}
    assert max(used for _, used in result.busy) == pytest.approx(1.5)
    bad = tmp_path / "bad.csv"
    bad.write_text("submit,duration,gpus,gpu_milli\n0,100,2,500\n")
    with pytest.raises(Invalid, match=r"bad\.csv:2: gpu_milli: a share of a GPU needs gpus = 1"):
        load_generic(bad)


@needs_shared("traces", "alibaba-openb-2023")
def test_openb_replays_as_a_time_trace_on_its_own_nodes(tmp_path: Path) -> None:
    from phalanx.sim.traces.openb import load_jobs

    jobs = load_jobs(OPENB / "openb_pod_list_default.csv")
    # 8,152 pods less the 897 never scheduled.
    assert len(jobs) == 7255 and jobs[0].submit == 0.0
    assert sum(1 for j in jobs if j.gpu_milli < 1000 and j.gpus) > 2000
    summary = simulate("openb:gpuspec33", "openb", ["phalanx"], tmp_path / "out", traces=TRACES)
    assert summary["cluster_gpus"] == 6212
    numbers = summary["policies"]["phalanx"]
    # Every pod that ran in the trace runs here, except those no node can hold (the
    # gpuspec lists name models at random: a pod may ask for more than its models have).
    nodes = load_cluster("openb", TRACES, []).machines
    by_id = {j.id: j for j in load_jobs(OPENB / "openb_pod_list_gpuspec33.csv")}
    rows = (tmp_path / "out" / "jobs-phalanx.csv").read_text().splitlines()[1:]
    assert len(rows) == numbers["jobs"] > 7000
    never = [by_id[int(r.split(",")[0])] for r in rows if ",PENDING," in r]
    assert len(never) == numbers["jobs"] - numbers["ended"] < 10
    for job in never:
        assert not any(
            int(n.capacity["nvidia.com/gpu"]) >= job.gpus
            and n.capacity["cpu"] >= job.cpus * 1000
            and n.capacity["memory"] >= job.memory_mib << 20
            and (not job.gpu_models or n.labels["nvidia.com/gpu.product"] in job.gpu_models)
            for n in nodes
        )
    with pytest.raises(Invalid, match=r"openb_pod_list_multigpu20\.csv:1: expected the columns"):
        load_jobs(OPENB / "openb_pod_list_multigpu20.csv")


def test_phalanx_sim_on_node_manifests_from_the_command_line(tmp_path: Path) -> None:
    (tmp_path / "nodes.yaml").write_text(NODES)
    trace = tmp_path / "t.csv"
    trace.write_text("submit,duration,gpus,tenant\n0,3600,8,a\n0,3600,24,b\n")
    done = subprocess.run(
        [
            *(str(BIN / "phalanx"), "sim", "--trace", str(trace)),
            *("--cluster", str(tmp_path / "nodes.yaml"), "--policy", "phalanx,slurm"),
            *("--out", str(tmp_path / "out")),
        ],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert "phalanx: 1 jobs never ended (they fit nowhere in the cluster)" in done.stdout
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["cluster_gpus"] == 18
