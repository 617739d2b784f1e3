"""Simulator speed: the whole Philly job list through the engine; prints JSON.

Replays every job of ``philly_jobs_pollux.csv`` (82,247) on 352 8-GPU nodes
(2,816 GPUs) shared by Philly's virtual clusters (``philly-shared:352``) with
the ``slurm`` preset by default (multifactor priority, backfill), and reports
the wall time, simulated events and engine cycles per second, and the peak
memory (RSS) of the process.

With ``--node-failure-rate R`` (failures per node-hour) or ``--node-mtbf H``
(``--node-repair``, ``--failure-seed``, ``--checkpoint-interval`` as for
``phalanx sim``) nodes fail during the replay; the JSON then also has the
number of failures and the goodput (GPU-hours useful and lost).

The Philly trace is read from ``../shared/traces/philly`` (bench/shared.py); without
it the replay is skipped, said on stderr, and the JSON says so.
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from phalanx.sim.failures import DEFAULT_REPAIR_H, FailureModel
from phalanx.sim.metrics import goodput
from phalanx.sim.run import load_cluster, load_trace
from phalanx.sim.setup import scenario
from phalanx.sim.simulator import Simulator
from phalanx.sim.trace import TimeLimitRule

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script
from bench.shared import skipped, traces


def needs(trace: str, cluster: str, folder: Path) -> list[Path]:
    """The trace files ``--trace`` and ``--cluster`` read (the named traces only)."""
    paths: list[Path] = []
    if trace in ("philly", "philly:all") or cluster.startswith("philly-"):
        philly = folder / "philly"
        paths += [philly / "philly_jobs_pollux.csv", philly / "philly_vc_nodes.csv"]
    if trace.partition(":")[0] == "openb" or cluster.partition(":")[0] == "openb":
        openb = folder / "alibaba-openb-2023"
        paths.append(openb / "openb_node_list_gpu_node.csv")
        if cluster == "openb:all":
            paths.append(openb / "openb_node_list_all_node.csv")
        if trace.partition(":")[0] == "openb":
            paths.append(openb / f"openb_pod_list_{trace.partition(':')[2] or 'default'}.csv")
    return paths


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--trace", default="philly:all")
    parser.add_argument("--cluster", default="philly-shared:352")
    parser.add_argument("--policy", default="slurm")
    add_failure_options(parser)
    args = parser.parse_args(argv)
    failures = failure_model(args)
    folder = traces()
    missing = skipped("the replay", *needs(args.trace, args.cluster, folder))
    if missing is not None:
        print(json.dumps({"benchmark": "sim", "trace": args.trace, **missing}))
        return 0
    started = time.perf_counter()
    jobs = TimeLimitRule().apply(load_trace(args.trace, folder))
    cluster = load_cluster(args.cluster, folder, jobs)
    loaded = time.perf_counter() - started
    started = time.perf_counter()
    result = Simulator(scenario(cluster, args.policy), jobs, failures=failures).run()
    wall = time.perf_counter() - started
    ended = sum(1 for o in result.outcomes if o.end is not None)
    print(
        json.dumps(
            {
                "python": platform.python_version(),
                "platform": platform.platform(),
                "trace": args.trace,
                "cluster": args.cluster,
                "cluster_gpus": cluster.gpus,
                "policy": args.policy,
                "jobs": len(jobs),
                "jobs_ended": ended,
                "load_s": round(loaded, 2),
                "replay_s": round(wall, 2),
                "events": result.events,
                "events_per_s": round(result.events / wall),
                "cycles": result.cycles,
                "cycles_per_s": round(result.cycles / wall),
                "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
                "target_replay_s": 60,
                "meets_target": wall < 60,
                **(
                    {}
                    if failures is None
                    else {
                        "failures": failures.describe(),
                        "node_failures": len(result.node_failures),
                        **{k: round(v, 4) for k, v in goodput(result.outcomes).items()},
                    }
                ),
            }
        )
    )
    return 0


def add_failure_options(parser: argparse.ArgumentParser) -> None:
    """``phalanx sim``'s node-failure options (off unless a rate or an MTBF is given)."""
    parser.add_argument("--node-failure-rate", type=float, help="failures per node-hour")
    parser.add_argument("--node-mtbf", type=float, help="or: mean hours between failures")
    parser.add_argument("--node-repair", type=float, default=DEFAULT_REPAIR_H, help="hours")
    parser.add_argument("--failure-seed", type=int, default=0)
    parser.add_argument("--checkpoint-interval", type=float, help="hours (default: none)")


def failure_model(args: argparse.Namespace) -> FailureModel | None:
    return FailureModel.from_options(
        args.node_failure_rate,
        args.node_mtbf,
        args.node_repair,
        args.failure_seed,
        args.checkpoint_interval,
    )


if __name__ == "__main__":
    raise SystemExit(main())
