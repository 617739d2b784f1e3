"""Simulator speed: the whole Philly job list through the engine; prints JSON.

Replays every job of ``philly_jobs_pollux.csv`` (82,247) on 352 8-GPU nodes
(2,816 GPUs) shared by Philly's virtual clusters (``philly-shared:352``) with
the ``slurm`` preset by default (multifactor priority, backfill), and reports
the wall time, simulated events and engine cycles per second, and the peak
memory (RSS) of the process.

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
    args = parser.parse_args(argv)
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
    result = Simulator(scenario(cluster, args.policy), jobs).run()
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
            }
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
