"""The FGD experiment on Alibaba's openb trace, through phalanx's engine; prints JSON.

Replays the openb pod lists (``../shared/traces/alibaba-openb-2023``) on the
trace's 1,213 GPU nodes (6,212 GPUs) the way the FGD authors' simulator does
(:mod:`phalanx.sim.packing`: per seed, the pods in a random order, then pods
drawn at random until the requests reach 130 % of the GPUs; each pod placed
on arrival or dropped, nothing leaving), under each placement policy, and
compares the GPU allocation ratio at every level of arrived load (0 to 130 %
of the GPUs) with the authors' own results stored beside the trace
(``fgd_expected_results/analysis_allo_discrete.csv``, 10 seeds each).

Policies: ``random``, ``dot-product``, ``best-fit`` and ``fgd`` are the paper's,
with its simulator's definitions; ``fgd`` and ``phalanx`` score against the
trace's task mix as the authors' FGD does (``--profile trace``), and
``phalanx-online`` is phalanx's default as it runs live, learning the mix from
the pods as they arrive. The phalanx rows are compared with the authors' FGD.

Per workload and policy: the mean curve over the seeds at a few load levels,
the largest gap to the authors' curve over all levels (``max_gap``: positive is
above theirs), and the pods that found no node, by kind. ``--quick`` runs one
seed of the default list only.

The trace is read from ``../shared/traces/alibaba-openb-2023`` (bench/shared.py);
without it the experiment is skipped, said on stderr, and the JSON says so.
"""

from __future__ import annotations

import argparse
import csv
import json
import platform
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from phalanx.sim.packing import profile_of, replay, sample_workload
from phalanx.sim.traces.openb import load_nodes, load_pods

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script
from bench.shared import skipped, traces

OPENB = traces() / "alibaba-openb-2023"
EXPECTED = OPENB / "fgd_expected_results" / "analysis_allo_discrete.csv"
POLICIES = ("random", "dot-product", "best-fit", "fgd", "phalanx", "phalanx-online")
AUTHORS = {
    "random": "01-Random",
    "dot-product": "02-DotProd",
    "best-fit": "05-BestFit",
    "fgd": "06-FGD",
    "phalanx": "06-FGD",
    "phalanx-online": "06-FGD",
}
"""The authors' row each policy is compared with."""
LEVELS = (50, 80, 90, 95, 100, 110, 120, 130)
SEEDS = tuple(range(42, 52))


def expected() -> dict[tuple[str, str], dict[int, float]]:
    """The authors' mean curve per (workload, policy)."""
    sums: dict[tuple[str, str], dict[int, list[float]]] = {}
    with EXPECTED.open(newline="") as fh:
        for row in csv.DictReader(fh):
            by_level = sums.setdefault((row["workload"], row["sc_policy"]), {})
            for level in range(131):
                value = row.get(str(level))
                if value:
                    by_level.setdefault(level, []).append(float(value))
    return {k: {lv: sum(v) / len(v) for lv, v in c.items()} for k, c in sums.items()}


def one(
    task: tuple[str, str, int, bool],
) -> tuple[str, str, int, dict[int, float], dict[str, int], float]:
    """Replay one workload under one policy with one seed."""
    workload, policy, seed, all_nodes = task
    start = time.perf_counter()
    if all_nodes:
        nodes = load_nodes(OPENB / "openb_node_list_all_node.csv", gpu_only=False)
    else:
        nodes = load_nodes(OPENB / "openb_node_list_gpu_node.csv")
    pods = load_pods(OPENB / f"{workload}.csv")
    capacity = sum(n.capacity.get("nvidia.com/gpu", 0) for n in nodes) * 1000
    arrivals = sample_workload(pods, capacity, seed)
    engine_policy = "phalanx" if policy.startswith("phalanx") else policy
    profile = None if policy == "phalanx-online" else profile_of(pods)
    run = replay(nodes, arrivals, engine_policy, seed, profile)
    return workload, policy, seed, run.curve(), dict(run.failed), time.perf_counter() - start


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--workload", action="append", help="pod list (default: all 17)")
    parser.add_argument("--policy", action="append", choices=POLICIES, help="default: all")
    parser.add_argument("--seeds", type=int, default=10, help="seeds for the default list")
    parser.add_argument("--variant-seeds", type=int, default=3, help="seeds for the others")
    parser.add_argument("--jobs", type=int, default=2, help="worker processes")
    parser.add_argument("--quick", action="store_true", help="one seed of the default list")
    parser.add_argument(
        "--all-nodes",
        action="store_true",
        help="the 1,523 nodes with the 310 CPU-only ones (the authors use the 1,213 GPU nodes)",
    )
    args = parser.parse_args(argv)
    nodes = "openb_node_list_all_node.csv" if args.all_nodes else "openb_node_list_gpu_node.csv"
    missing = skipped("the FGD experiment", EXPECTED, OPENB / nodes)
    if missing is not None:
        print(json.dumps({"benchmark": "openb", **missing}))
        return 0
    authors = expected()
    workloads = args.workload or sorted({w for w, _ in authors})
    if args.quick:
        workloads, args.seeds = ["openb_pod_list_default"], 1
    unknown = [w for w in workloads if not (OPENB / f"{w}.csv").exists()]
    if unknown:
        sys.stderr.write(f"--workload: no pod list {', '.join(unknown)} in {OPENB}\n")
        return 2
    policies = args.policy or list(POLICIES)
    tasks = [
        (w, p, s, args.all_nodes)
        for w in workloads
        for p in policies
        for s in SEEDS[: args.seeds if w.endswith("default") else args.variant_seeds]
    ]
    curves: dict[tuple[str, str], list[dict[int, float]]] = {}
    failed: dict[tuple[str, str], dict[str, int]] = {}
    seconds: list[float] = []
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        for workload, policy, _, curve, fails, took in pool.map(one, tasks):
            curves.setdefault((workload, policy), []).append(curve)
            into = failed.setdefault((workload, policy), {})
            for kind, n in fails.items():
                into[kind] = into.get(kind, 0) + n
            seconds.append(took)
    results: list[dict[str, Any]] = []
    for (workload, policy), runs in curves.items():
        mean = {
            lv: sum(c[lv] for c in runs if lv in c) / sum(1 for c in runs if lv in c)
            for lv in range(131)
            if any(lv in c for c in runs)
        }
        theirs = authors.get((workload, AUTHORS[policy]), {})
        gaps = {lv: mean[lv] - theirs[lv] for lv in mean if lv in theirs}
        worst = max(gaps, key=lambda lv: abs(gaps[lv])) if gaps else None
        results.append(
            {
                "workload": workload.removeprefix("openb_pod_list_"),
                "policy": policy,
                "seeds": len(runs),
                "allocation": {str(lv): round(mean[lv], 2) for lv in LEVELS if lv in mean},
                "authors": {str(lv): round(theirs[lv], 2) for lv in LEVELS if lv in theirs},
                "max_gap": round(gaps[worst], 2) if worst is not None else None,
                "max_gap_at": worst,
                "failed_per_seed": {
                    k: round(v / len(runs), 1) for k, v in failed[(workload, policy)].items()
                },
            }
        )
    print(
        json.dumps(
            {
                "python": platform.python_version(),
                "platform": platform.platform(),
                "nodes": 1523 if args.all_nodes else 1213,
                "gpus": 6212,
                "replays": len(tasks),
                "seconds_per_replay_mean": round(sum(seconds) / len(seconds), 2),
                "results": results,
            }
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
