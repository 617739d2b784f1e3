"""Topology benchmark: how tightly gangs land, and how long big gangs wait, per policy.

A synthetic 2,048-GPU cluster (256 nodes x 8 GPUs; racks of 32 nodes, 4 racks a
block, so 2 blocks) and a Philly-like job mix: sizes and run times drawn from
the Microsoft Philly trace (``../shared/traces/philly/philly_jobs_pollux.csv``;
the documented size distribution when it is absent), multi-node sizes
rounded to whole 8-GPU nodes, and every ``--gang-every``-th job a 256-GPU gang
(32 nodes: exactly one rack's worth). Jobs arrive as a Poisson process at the
rate that offers ``--load`` of the cluster's GPU-seconds. The same jobs run
through the pure engine (virtual time, a cycle at every arrival and completion)
under each placement policy:

``phalanx``
    The flavor names the Topology; pod sets carry no request: phalanx's default,
    every gang in the lowest domain that holds it, best fit among domains.
``kueue-tas``
    The same Topology, every pod set ``unconstrained``: what Kueue's Topology
    Aware Scheduling does for a pod set without an annotation in a TAS queue
    (LeastFreeCapacity).
``slurm-tree``
    The same Topology under ``EngineConfig(topology_policy="slurm-tree")``: as Slurm's
    ``topology/tree``, every job (single-node ones too) on the lowest switch that holds
    it, best fit, then best fit over its leaf switches.
``flat``
    No Topology: best fit over nodes (Slurm's ``topology/flat``, the default).

Per policy: the share of multi-node gangs placed within one rack and within one
block, the median and p90 wait from arrival to admission of the 256-GPU gangs,
the mean wait of all jobs, and the GPU utilisation while jobs arrive. Prints one JSON
object.
"""

from __future__ import annotations

import argparse
import csv
import heapq
import json
import math
import platform
import random
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from phalanx.engine import Admit, Engine, EngineConfig, Finish, Submit, Upsert
from phalanx.model import (
    ClusterQueue,
    Job,
    Node,
    PodSet,
    ResourceFlavor,
    Topology,
    TopologyLevel,
    TopologyRequest,
)

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script
from bench.shared import absent, note, traces

PHILLY_JOBS = traces() / "philly" / "philly_jobs_pollux.csv"
BLOCK, RACK, HOST = "network.example/block", "network.example/rack", "kubernetes.io/hostname"
NODES, NODE_GPUS, RACK_NODES, BLOCK_RACKS = 256, 8, 32, 4
GANG_NODES = 32
POLICIES = ("phalanx", "kueue-tas", "slurm-tree", "flat")
PHILLY_SIZES = {1: 76627, 2: 1818, 4: 1870, 8: 1643, 16: 199, 32: 67, 64: 6, 128: 3}
"""GPUs per job in the trace (its README), for when the trace is absent."""


def philly_jobs(rng: random.Random) -> list[tuple[int, float]]:
    """``(GPUs, run time s)`` of the trace's jobs; sizes only (run times drawn from a
    log-normal of the documented median) when the file is absent."""
    reason = absent(PHILLY_JOBS)
    if reason is None:
        with PHILLY_JOBS.open(newline="") as f:
            rows = [
                (int(r["num_gpus"]), float(r["duration"]))
                for r in csv.DictReader(f)
                if r.get("num_gpus")
            ]
        return rows
    note(f"skipping the Philly trace's job mix, the documented sizes instead: {reason}")
    sizes, weights = zip(*PHILLY_SIZES.items(), strict=True)
    return [
        (rng.choices(sizes, weights)[0], rng.lognormvariate(math.log(1144), 1.5))
        for _ in range(20000)
    ]


def workload(args: argparse.Namespace) -> list[tuple[float, int, float]]:
    """``(arrival, GPUs, run time)`` of ``--jobs`` jobs."""
    rng = random.Random(args.seed)
    pool = [(g, min(d, args.max_runtime)) for g, d in philly_jobs(rng) if 0 < g <= 128]
    drawn: list[tuple[int, float]] = []
    for i in range(args.jobs):
        if args.gang_every and i % args.gang_every == args.gang_every - 1:
            drawn.append((GANG_NODES * NODE_GPUS, rng.choice(pool)[1]))
            continue
        gpus, runtime = rng.choice(pool)
        if gpus > NODE_GPUS:
            gpus = -(-gpus // NODE_GPUS) * NODE_GPUS
        drawn.append((gpus, runtime))
    work = sum(g * d for g, d in drawn)
    rate = args.load * NODES * NODE_GPUS * len(drawn) / work  # arrivals per second
    t = 0.0
    out = []
    for gpus, runtime in drawn:
        t += rng.expovariate(rate)
        out.append((t, gpus, max(1.0, runtime)))
    return out


def cluster(policy: str) -> tuple[Engine, dict[str, tuple[str, str]]]:
    engine = Engine(
        EngineConfig(
            preset="kueue", topology_policy="slurm-tree" if policy == "slurm-tree" else "phalanx"
        )
    )
    topology = policy != "flat"
    if topology:
        engine.apply(
            Upsert(
                Topology(
                    name="fabric",
                    levels=[TopologyLevel(node_label=label) for label in (BLOCK, RACK, HOST)],
                )
            )
        )
    engine.apply(
        Upsert(
            ResourceFlavor(
                name="gpu",
                node_labels={"pool": "gpu"},
                topology_name="fabric" if topology else None,
            )
        )
    )
    where: dict[str, tuple[str, str]] = {}
    for i in range(NODES):
        rack = i // RACK_NODES
        block = rack // BLOCK_RACKS
        name = f"node-{i:03d}"
        where[name] = (f"block-{block}", f"rack-{rack:02d}")
        engine.apply(
            Upsert(
                Node(
                    name=name,
                    labels={"pool": "gpu", BLOCK: where[name][0], RACK: where[name][1]},
                    capacity={"nvidia.com/gpu": NODE_GPUS, "cpu": "96", "memory": "1000Gi"},
                )
            )
        )
    engine.apply(
        Upsert(
            ClusterQueue.model_validate(
                {
                    "name": "cq",
                    "resourceGroups": [
                        {
                            "coveredResources": ["nvidia.com/gpu"],
                            "flavors": [
                                {
                                    "name": "gpu",
                                    "resources": [
                                        {
                                            "name": "nvidia.com/gpu",
                                            "nominalQuota": NODES * NODE_GPUS,
                                        }
                                    ],
                                }
                            ],
                        }
                    ],
                }
            )
        )
    )
    return engine, where


def job(i: int, arrival: float, gpus: int, policy: str) -> Job:
    request = TopologyRequest(unconstrained=True) if policy == "kueue-tas" else None
    if gpus <= NODE_GPUS:
        pod_set = PodSet(count=1, requests={"nvidia.com/gpu": gpus}, topology=request)
    else:
        nodes = gpus // NODE_GPUS
        pod_set = PodSet(
            count=nodes,
            tasks_per_node=1,
            requests={"nvidia.com/gpu": NODE_GPUS},
            topology=request,
        )
    return Job(id=i, cluster_queue="cq", submit_time=arrival, pod_sets=[pod_set])


def run(policy: str, jobs: Sequence[tuple[float, int, float]]) -> dict[str, Any]:
    engine, where = cluster(policy)
    events: list[tuple[float, int, int]] = [(a, 1, i) for i, (a, _, _) in enumerate(jobs)]
    heapq.heapify(events)
    start: dict[int, float] = {}
    racks: dict[int, int] = {}
    blocks: dict[int, int] = {}
    busy = 0.0
    last = 0.0
    running_gpus = 0
    window = jobs[-1][0]  # utilisation while jobs still arrive
    while events:
        now = events[0][0]
        busy += running_gpus * (min(now, window) - min(last, window))
        last = now
        while events and events[0][0] == now:
            _, kind, i = heapq.heappop(events)
            if kind == 1:
                engine.apply(Submit(job(i, jobs[i][0], jobs[i][1], policy)))
            else:
                engine.apply(Finish(i))
                running_gpus -= jobs[i][1]
        for d in engine.cycle(now):
            if isinstance(d, Admit):
                start[d.job_id] = now
                running_gpus += jobs[d.job_id][1]
                heapq.heappush(events, (now + jobs[d.job_id][2], 0, d.job_id))
                nodes = {n.node for p in d.pod_sets for n in p.nodes}
                if len(nodes) > 1:
                    racks[d.job_id] = len({where[n][1] for n in nodes})
                    blocks[d.job_id] = len({where[n][0] for n in nodes})
    waits = [start[i] - a for i, (a, _, _) in enumerate(jobs) if i in start]
    gang_waits = [start[i] - a for i, (a, g, _) in enumerate(jobs) if g == GANG_NODES * NODE_GPUS]
    multi = list(racks)
    return {
        "jobs": len(jobs),
        "admitted": len(start),
        "multi_node_gangs": len(multi),
        "within_one_rack": round(sum(racks[j] == 1 for j in multi) / max(1, len(multi)), 4),
        "within_one_block": round(sum(blocks[j] == 1 for j in multi) / max(1, len(multi)), 4),
        "gangs_256": len(gang_waits),
        "gang_256_wait_median_s": round(statistics.median(gang_waits), 1) if gang_waits else None,
        "gang_256_wait_p90_s": round(sorted(gang_waits)[int(0.9 * (len(gang_waits) - 1))], 1)
        if gang_waits
        else None,
        "mean_wait_s": round(statistics.fmean(waits), 1) if waits else None,
        "gpu_utilisation_while_arriving": round(busy / (NODES * NODE_GPUS * window), 4),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--jobs", type=int, default=3000, help="jobs to run")
    parser.add_argument("--load", type=float, default=0.9, help="offered load, share of GPUs")
    parser.add_argument("--gang-every", type=int, default=50, help="every N-th job a 256-GPU gang")
    parser.add_argument("--max-runtime", type=float, default=6 * 3600, help="run times capped (s)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--policy", choices=POLICIES, action="append", help="default: all")
    args = parser.parse_args(argv)
    jobs = workload(args)
    reason = absent(PHILLY_JOBS)
    result: dict[str, Any] = {
        "python": platform.python_version(),
        "cluster": f"{NODES} nodes x {NODE_GPUS} GPUs, {RACK_NODES}-node racks, "
        f"{BLOCK_RACKS} racks a block",
        "trace": "philly" if reason is None else "documented sizes",
        **({} if reason is None else {"skipped": f"the Philly trace's job mix: {reason}"}),
        "jobs": args.jobs,
        "load": args.load,
        "gang_every": args.gang_every,
        "seed": args.seed,
    }
    for policy in args.policy or POLICIES:
        result[policy] = run(policy, jobs)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
