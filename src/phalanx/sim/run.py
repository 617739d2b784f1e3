"""``phalanx sim``: a trace, a cluster and policies in; summaries and per-job tables out.

Traces (``--trace``):

``philly``
    Philly's Helios setting: jobs submitted 2017-10-01 to 2017-11-30 in the 11
    virtual clusters of ``philly_vc_nodes.csv`` (68,503 jobs).
``philly:all``
    Every job of the Philly list (82,247).
``PATH.csv`` / ``PATH.jsonl``
    The generic format (:mod:`phalanx.sim.trace`).
``openb`` / ``openb:LIST``
    Alibaba's openb pods as a time trace (:func:`phalanx.sim.traces.openb.load_jobs`):
    ``openb_pod_list_default.csv``, or ``openb_pod_list_LIST.csv``
    (``openb:gpushare40``).
``accounting:STATE_DIR`` (or ``accounting:DATABASE_URL``)
    The jobs the live system ran (:mod:`phalanx.sim.traces.accounting`).

Clusters (``--cluster``):

``philly-vc``
    The 11 virtual clusters on their own 8-GPU nodes (352 nodes), each tenant
    only on its own (the Helios setting).
``philly-shared:N``
    N 8-GPU nodes shared by the 11 virtual clusters, each entitled to its
    share of ``philly_vc_nodes.csv``'s nodes (a VC the list lacks: one node).
``shared:N``
    N 8-GPU nodes shared by the trace's tenants, equally entitled.
``openb`` / ``openb:all``
    openb's 1,213 GPU nodes (``:all``: with its 310 CPU-only nodes), shared by
    the trace's tenants, equally entitled.
``PATH``
    Node manifests (a ``.yaml``/``.yml``/``.json`` file or a folder of them, as
    ``phalanx apply`` and ``phalanx up --config`` read), shared by the trace's
    tenants, equally entitled. Any other objects there (ResourceFlavors,
    Cohorts, ClusterQueues, LocalQueues, Tenants, Topologies) are the queues
    when ``--queues`` is not given.

``--queues PATH`` gives the queue objects the policies run on instead of
generated ones (:mod:`phalanx.sim.setup`).

``--traces DIR`` says where the public traces are (default:
``../shared/traces`` beside the checkout, or ``PHALANX_TRACES``).
Node failures (off by default): ``failures``, a
:class:`~phalanx.sim.failures.FailureModel` (``--node-failure-rate`` or
``--node-mtbf``, ``--node-repair``, ``--failure-seed``,
``--checkpoint-interval``), the same failures under every policy.

Writes ``DIR/summary.json`` (every policy), ``DIR/jobs-<policy>.csv``, the plots
and ``DIR/report.html`` (:mod:`phalanx.sim.report`).
"""

from __future__ import annotations

import csv
import json
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from phalanx.errors import Invalid
from phalanx.sim.failures import FailureModel
from phalanx.sim.metrics import summarize
from phalanx.sim.report import write_report
from phalanx.sim.setup import POLICIES, Cluster, scenario
from phalanx.sim.simulator import SimResult, Simulator
from phalanx.sim.trace import TimeLimitRule, TraceJob, load_generic

__all__ = ["default_traces", "load_cluster", "load_trace", "simulate"]


def default_traces() -> Path:
    env = os.environ.get("PHALANX_TRACES")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[3].parent / "shared" / "traces"


def _philly(traces: Path) -> Path:
    folder = traces / "philly"
    if not (folder / "philly_jobs_pollux.csv").exists():
        raise Invalid(f"--traces: the Philly trace is not in {folder} (give --traces DIR)")
    return folder


def load_trace(spec: str, traces: Path) -> list[TraceJob]:
    """The jobs of ``--trace`` (see the module docstring)."""
    from phalanx.sim.traces.philly import HELIOS_WINDOW, load_jobs, load_vc_nodes

    if spec in ("philly", "philly:all"):
        folder = _philly(traces)
        if spec == "philly:all":
            return load_jobs(folder / "philly_jobs_pollux.csv")
        vcs = load_vc_nodes(folder / "philly_vc_nodes.csv")
        return load_jobs(folder / "philly_jobs_pollux.csv", window=HELIOS_WINDOW, vcs=vcs)
    if spec.startswith("accounting:"):
        from phalanx.sim.traces.accounting import load_accounting

        return load_accounting(spec.removeprefix("accounting:"))
    if spec == "openb" or spec.startswith("openb:"):
        from phalanx.sim.traces.openb import load_jobs as load_openb

        name = spec.partition(":")[2] or "default"
        return load_openb(_openb(traces) / f"openb_pod_list_{name}.csv")
    path = Path(spec)
    if path.suffix in (".csv", ".jsonl", ".ndjson"):
        return load_generic(path)
    raise Invalid(
        f"--trace: {spec!r} is not known: expected philly, philly:all, openb[:LIST], "
        "accounting:STATE_DIR or a .csv/.jsonl file"
    )


def _openb(traces: Path) -> Path:
    folder = traces / "alibaba-openb-2023"
    if not (folder / "openb_node_list_gpu_node.csv").exists():
        raise Invalid(f"--traces: the openb trace is not in {folder} (give --traces DIR)")
    return folder


QUEUE_KINDS = ("ResourceFlavor", "Cohort", "ClusterQueue", "LocalQueue", "Tenant", "Topology")


def load_objects(path: Path, option: str) -> tuple[list[Any], list[Any]]:
    """The Nodes and the queue objects in the manifests at ``path``."""
    from phalanx.dialects import kueue

    if not path.exists():
        raise Invalid(f"{option}: {path}: no such file or directory")
    nodes: list[Any] = []
    queues: list[Any] = []
    for manifest in kueue.load_path(path):
        if manifest.kind == "Node":
            nodes.append(manifest.obj)
        elif manifest.kind in QUEUE_KINDS:
            queues.append(manifest.obj)
    return nodes, queues


def load_cluster(
    spec: str, traces: Path, jobs: Sequence[TraceJob], queues: Path | None = None
) -> Cluster:
    """The cluster of ``--cluster`` (see the module docstring), with ``--queues``."""
    cluster = _cluster(spec, traces, jobs)
    given: list[Any] = []
    if queues is not None:
        nodes, given = load_objects(queues, "--queues")
        if nodes:
            raise Invalid(f"--queues: {queues} has Nodes; give them with --cluster")
        if not given:
            raise Invalid(f"--queues: {queues} has no queue objects")
    elif cluster.machines and _is_path(spec):
        given = load_objects(Path(spec), "--cluster")[1]
    if given:
        cluster = replace(cluster, queues=tuple(given))
    return cluster


def _is_path(spec: str) -> bool:
    return Path(spec).suffix in (".yaml", ".yml", ".json") or Path(spec).is_dir()


def _cluster(spec: str, traces: Path, jobs: Sequence[TraceJob]) -> Cluster:
    from phalanx.sim.traces.philly import load_vc_nodes

    tenants = sorted({j.tenant for j in jobs}) or ["default"]
    kind, _, count = spec.partition(":")
    if kind == "philly-vc" and not count:
        return Cluster.isolated_pools(load_vc_nodes(_philly(traces) / "philly_vc_nodes.csv"))
    if kind in ("philly-shared", "shared") and count.isdigit() and int(count) > 0:
        if kind == "philly-shared":
            nodes = load_vc_nodes(_philly(traces) / "philly_vc_nodes.csv")
            shares = {k: float(v) for k, v in nodes.items()}
            # The trace's few VCs outside the list (philly:all) get one node's worth.
            shares.update({j.tenant: 1.0 for j in jobs if j.tenant not in shares})
            return Cluster.shared_pool(int(count), shares)
        return Cluster.shared_pool(int(count), dict.fromkeys(tenants, 1.0))
    if kind == "openb" and count in ("", "all"):
        from phalanx.sim.traces.openb import load_nodes

        folder = _openb(traces)
        machines = (
            load_nodes(folder / "openb_node_list_all_node.csv", gpu_only=False)
            if count == "all"
            else load_nodes(folder / "openb_node_list_gpu_node.csv")
        )
        return Cluster.from_nodes(machines, dict.fromkeys(tenants, 1.0))
    if _is_path(spec):
        machines = load_objects(Path(spec), "--cluster")[0]
        if not machines:
            raise Invalid(f"--cluster: {spec} has no Node manifests")
        return Cluster.from_nodes(machines, dict.fromkeys(tenants, 1.0))
    raise Invalid(
        f"--cluster: {spec!r} is not known: expected philly-vc, philly-shared:N, shared:N, "
        "openb[:all] or a path to Node manifests"
    )


def simulate(
    trace: str,
    cluster: str,
    policies: Sequence[str],
    out: Path,
    *,
    time_limit: str = "ceil:3600",
    traces: Path | None = None,
    queues: Path | None = None,
    progress: Callable[[str, float, int, int], None] | None = None,
    failures: FailureModel | None = None,
) -> dict[str, Any]:
    """Run every policy on the trace; write ``out``; the summary."""
    for policy in policies:
        if policy not in POLICIES:
            raise Invalid(f"--policy: {policy!r} is not known (known: {', '.join(POLICIES)})")
    folder = traces if traces is not None else default_traces()
    rule = TimeLimitRule.parse(time_limit)
    jobs = rule.apply(load_trace(trace, folder))
    if not jobs:
        raise Invalid(f"--trace: {trace} has no jobs")
    machines = load_cluster(cluster, folder, jobs, queues)
    out.mkdir(parents=True, exist_ok=True)
    summary: dict[str, Any] = {
        "trace": trace,
        "jobs": len(jobs),
        "cluster": cluster,
        "cluster_gpus": machines.gpus,
        "time_limit": str(rule),
        "failures": None if failures is None else failures.describe(),
        "policies": {},
    }
    results: dict[str, SimResult] = {}
    for policy in policies:
        report: Callable[[float, int], None] | None = None
        if progress is not None:

            def report(now: float, done: int, policy: str = policy) -> None:
                progress(policy, now, done, len(jobs))

        started = time.perf_counter()
        result = Simulator(
            scenario(machines, policy), jobs, progress=report, failures=failures
        ).run()
        wall = time.perf_counter() - started
        numbers = summarize(result, machines.shares)
        numbers["wall_s"] = round(wall, 2)
        summary["policies"][policy] = numbers
        results[policy] = result
        _write_jobs(out / f"jobs-{policy}.csv", result)
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    write_report(out, summary, results)
    return summary


def _write_jobs(path: Path, result: SimResult) -> None:
    with path.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(
            ["id", "tenant", "gpus", "submit", "duration", "start", "end", "state", "preemptions"]
        )
        for o in sorted(result.outcomes, key=lambda o: o.job.id):
            writer.writerow(
                [
                    o.job.id,
                    o.job.tenant,
                    o.job.gpus,
                    f"{o.job.submit:.3f}",
                    f"{o.job.duration:.3f}",
                    "" if o.start is None else f"{o.start:.3f}",
                    "" if o.end is None else f"{o.end:.3f}",
                    o.state,
                    o.preemptions,
                ]
            )
