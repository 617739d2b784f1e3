"""The openb trace reader and the packing replay: errors name file and line, the replay
keeps every device within 1000 thousandths, and the paper's policies match the FGD
authors' own simulator (their results are stored beside the trace)."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
from tests.shared import require_shared, shared_path

from phalanx.errors import Invalid
from phalanx.model import GPU, GPU_MILLI, GPU_PRODUCT_LABEL
from phalanx.sim.packing import alloc_curve, profile_of, replay, sample_workload
from phalanx.sim.traces.openb import OpenbPod, load_nodes, load_pods

OPENB_PARTS = ("traces", "alibaba-openb-2023")
OPENB = shared_path(*OPENB_PARTS)
EXPECTED = OPENB / "fgd_expected_results" / "analysis_allo_discrete.csv"
NODES = "sn,cpu_milli,memory_mib,gpu,model\n"
PODS = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n"


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_nodes_and_pods_read_into_the_model(tmp_path: Path) -> None:
    nodes = load_nodes(
        _write(tmp_path, "n.csv", NODES + "a,96000,393216,8,G2\nb,32000,262144,0,\n"),
    )
    assert [n.name for n in nodes] == ["a"]  # GPU nodes only, as the authors use
    assert nodes[0].labels[GPU_PRODUCT_LABEL] == "G2"
    assert nodes[0].capacity == {"cpu": 96000, "memory": 393216 << 20, GPU: 8}
    pods = load_pods(
        _write(
            tmp_path,
            "p.csv",
            PODS + "s,3152,12288,1,810,\nw,11300,30000,2,1000,\nm,4000,1,1,500,V100M16|V100M32\n",
        )
    )
    assert [(p.num_gpu, p.gpu_milli, p.gpu_spec) for p in pods] == [
        (1, 810, ()),
        (2, 1000, ()),
        (1, 500, ("V100M16", "V100M32")),
    ]
    share = pods[0].pod_set()
    assert share.requests[GPU_MILLI] == 810 and GPU not in share.requests
    assert pods[1].pod_set().requests[GPU] == 2
    affinity = pods[2].pod_set().node_affinity
    assert affinity and affinity[0].match_expressions[0].values == ("V100M16", "V100M32")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("sn,cpu_milli,gpu\nx,1,1\n", "n.csv:1: expected the columns"),
        (NODES + "a,many,1,1,G2\n", "n.csv:2: cpu_milli: expected a number, got 'many'"),
        (NODES + "a,1,1,-2,G2\n", "n.csv:2: gpu: expected a non-negative number"),
    ],
)
def test_bad_node_lists_name_file_and_line(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(Invalid, match=message):
        load_nodes(_write(tmp_path, "n.csv", text))


def test_bad_pod_lists_name_file_and_line(tmp_path: Path) -> None:
    with pytest.raises(Invalid, match=r"p.csv:3: gpu_milli: a pod of 2 GPUs takes them whole"):
        load_pods(_write(tmp_path, "p.csv", PODS + "a,1,1,1,500,\nb,1,1,2,500,\n"))
    with pytest.raises(Invalid, match=r"missing\.csv"):
        load_pods(tmp_path / "missing.csv")


def test_curve_follows_the_authors_rounding() -> None:
    # 10 GPUs: arrivals of 0.5 % steps; allocation lags by one pod.
    arrived = [50 * i for i in range(1, 5)]
    allocated = [0, 50, 100, 150]
    curve = alloc_curve(arrived, allocated, 10_000)
    # Arrivals 0.5, 1, 1.5, 2 %: 0.5 rounds to 0 and 1.5 to 2 (to even, as Python's and
    # pandas' round do); allocations 0, 0.5, 1, 1.5 %.
    assert (curve[0], curve[1], curve[2]) == (0.0, 0.5, 1.25)
    assert curve[3] == 1.25  # nothing rounds to 3: the levels either side


def _small_cluster(tmp_path: Path) -> tuple[list, list[OpenbPod]]:
    nodes = load_nodes(
        _write(
            tmp_path,
            "n.csv",
            NODES
            + "".join(
                f"n{i},{16000 * (1 + i % 3)},65536,{(1, 2, 4, 8)[i % 4]},M{i % 2}\n"
                for i in range(12)
            ),
        )
    )
    rows = []
    for i in range(60):
        gpus = (0, 1, 1, 1, 2, 4)[i % 6]
        milli = (1000, 250, 500, 800)[i % 4] if gpus == 1 else (1000 if gpus else 0)
        spec = "M1" if i % 7 == 0 and gpus else ""
        rows.append(f"p{i:02d},{2000 + 500 * (i % 5)},1024,{gpus},{milli},{spec}\n")
    return nodes, load_pods(_write(tmp_path, "p.csv", PODS + "".join(rows)))


@pytest.mark.parametrize("policy", ["phalanx", "fgd", "best-fit", "dot-product", "random", "tight"])
def test_replay_never_overcommits(tmp_path: Path, policy: str) -> None:
    nodes, pods = _small_cluster(tmp_path)
    capacity = sum(n.capacity[GPU] for n in nodes) * 1000
    arrivals = sample_workload(pods, capacity, seed=7)
    assert sum(p.gpu_total_milli for p in arrivals) <= 1.3 * capacity
    run = replay(nodes, arrivals, policy, seed=7, profile=profile_of(pods))
    assert run.arrived[-1] == sum(p.gpu_total_milli for p in arrivals)
    assert all(u <= a for u, a in zip(run.allocated, run.arrived, strict=True))
    assert run.allocated[-1] <= capacity
    assert sum(run.failed.values()) > 0  # 130 % of the GPUs cannot all fit


def _authors(workload: str, policy: str) -> dict[int, float]:
    with EXPECTED.open(newline="") as fh:
        rows = [
            r
            for r in csv.DictReader(fh)
            if r["workload"] == f"openb_pod_list_{workload}" and r["sc_policy"] == policy
        ]
    return {lv: sum(float(r[str(lv)]) for r in rows) / len(rows) for lv in range(131)}


@pytest.fixture(scope="module")
def openb() -> tuple[list, list[OpenbPod]]:
    require_shared(*OPENB_PARTS, "fgd_expected_results", "analysis_allo_discrete.csv")
    return (
        load_nodes(OPENB / "openb_node_list_gpu_node.csv"),
        load_pods(OPENB / "openb_pod_list_default.csv"),
    )


@pytest.mark.parametrize(("policy", "authors"), [("best-fit", "05-BestFit"), ("fgd", "06-FGD")])
def test_the_papers_policies_match_the_authors_curves(
    openb: tuple[list, list[OpenbPod]], policy: str, authors: str
) -> None:
    nodes, pods = openb
    capacity = sum(n.capacity[GPU] for n in nodes) * 1000
    assert (len(nodes), capacity) == (1213, 6_212_000)
    run = replay(nodes, sample_workload(pods, capacity, 42), policy, 42, profile_of(pods))
    curve, theirs = run.curve(), _authors("default", authors)
    gaps = {lv: curve[lv] - theirs[lv] for lv in theirs}
    worst = max(gaps, key=lambda lv: abs(gaps[lv]))
    assert abs(gaps[worst]) <= 1.0, f"{policy}: {gaps[worst]:+.2f} points at {worst} % load"


def test_phalanx_beats_fgd_at_full_load(openb: tuple[list, list[OpenbPod]]) -> None:
    nodes, pods = openb
    capacity = sum(n.capacity[GPU] for n in nodes) * 1000
    profile = profile_of(pods)
    ours, fgd = [], []
    for seed in (42, 43):
        arrivals = sample_workload(pods, capacity, seed)
        ours.append(replay(nodes, arrivals, "phalanx", seed, profile).curve()[100])
        fgd.append(replay(nodes, arrivals, "fgd", seed, profile).curve()[100])
    assert sum(ours) / 2 > max(sum(fgd) / 2, _authors("default", "06-FGD")[100])
