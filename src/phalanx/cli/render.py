"""How the CLI prints: job and object tables (kubectl-like), JSON, YAML and ``describe``.

Tables go through rich; when standard output is not a terminal they are
printed at their natural width, never wrapped, so ``grep`` and ``awk`` work.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Sequence
from typing import Any

from phalanx.cli.jobtable import age, job_rows
from phalanx.timefmt import epoch, format_duration

__all__ = [
    "describe_job",
    "describe_object",
    "dump",
    "job_rows",
    "object_table",
    "print_explanation",
    "print_table",
]

_STATE_STYLES = {
    "PENDING": "yellow",
    "ADMITTED": "cyan",
    "RUNNING": "green",
    "COMPLETING": "green",
    "COMPLETED": "bright_black",
    "FAILED": "red",
    "CANCELLED": "magenta",
    "TIMEOUT": "red",
    "PREEMPTED": "magenta",
    "NODE_FAIL": "red",
    "OUT_OF_MEMORY": "red",
}


def print_table(
    header: Sequence[str], rows: Sequence[Sequence[str]], *, state_col: int = -1
) -> None:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    tty = sys.stdout.isatty()
    console = Console(width=None if tty else 100_000, highlight=False, soft_wrap=not tty)
    table = Table(box=None, pad_edge=False, show_edge=False, header_style="bold")
    for name in header:
        table.add_column(name, no_wrap=not tty, overflow="fold")
    for row in rows:
        cells: list[Any] = list(row)
        if 0 <= state_col < len(cells):
            cells[state_col] = Text(row[state_col], style=_STATE_STYLES.get(row[state_col], ""))
        table.add_row(*cells)
    if not rows:
        sys.stdout.write("No resources found.\n" if not header else "")
    console.print(table)


def _quotas(manifest: dict[str, Any]) -> str:
    status = manifest.get("status") or {}
    nominal = status.get("nominal") or {}
    usage = status.get("usage") or {}
    parts = []
    for flavor, resources in nominal.items():
        if "nvidia.com/gpu" in resources:
            used = (usage.get(flavor) or {}).get("nvidia.com/gpu", 0)
            parts.append(f"{flavor}:{used}/{resources['nvidia.com/gpu']}")
    return ",".join(parts)


def object_table(kind: str, items: Sequence[dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    """Header and cells of ``phalanx get KIND`` for a configuration kind."""
    rows: list[list[str]] = []
    if kind == "ClusterQueue":
        header = ["NAME", "COHORT", "PENDING", "ADMITTED", "GPUS(USED/NOMINAL)"]
        for m in items:
            status = m.get("status") or {}
            rows.append(
                [
                    m["metadata"]["name"],
                    (m.get("spec") or {}).get("cohortName", ""),
                    str(status.get("pending", "")),
                    str(status.get("admitted", "")),
                    _quotas(m),
                ]
            )
    elif kind == "Node":
        header = ["NAME", "STATE", "FLAVOR", "GPUS", "USED", "JOBS"]
        for m in items:
            status = m.get("status") or {}
            labels = m["metadata"].get("labels") or {}
            rows.append(
                [
                    m["metadata"]["name"],
                    str(status.get("state", "")),
                    labels.get("phalanx.io/flavor", ""),
                    str(status.get("gpus", "")),
                    str(status.get("gpus_used", "")),
                    ",".join(str(j) for j in status.get("jobs") or []),
                ]
            )
    elif kind == "LocalQueue":
        header = ["NAMESPACE", "NAME", "CLUSTERQUEUE"]
        for m in items:
            meta = m["metadata"]
            spec = m.get("spec") or {}
            rows.append([meta.get("namespace", ""), meta["name"], spec.get("clusterQueue", "")])
    elif kind == "PriorityClass":
        header = ["NAME", "VALUE", "DESCRIPTION", "LIMITS"]
        for m in items:
            # A Kueue WorkloadPriorityClass has no spec; a phalanx.io/v1 one (with limits) has.
            body = m.get("spec") or m
            limits = ",".join(
                f"{name}={_limit(value)}" for name, value in (body.get("limits") or {}).items()
            )
            rows.append(
                [
                    m["metadata"]["name"],
                    str(body.get("value", "")),
                    body.get("description", ""),
                    limits,
                ]
            )
    elif kind == "Workload":
        header = ["NAME", "QUEUE", "RESERVED IN", "ADMITTED", "FINISHED", "AGE"]
        for m in items:
            conditions = _conditions(m)
            admission = (m.get("status") or {}).get("admission") or {}
            reserved = conditions.get("QuotaReserved", {}).get("status") == "True"
            rows.append(
                [
                    m["metadata"]["name"],
                    (m.get("spec") or {}).get("queueName", ""),
                    admission.get("clusterQueue", "") if reserved else "",
                    conditions.get("Admitted", {}).get("status", ""),
                    conditions.get("Finished", {}).get("status", ""),
                    _since(m["metadata"].get("creationTimestamp")),
                ]
            )
    elif kind in ("Job", "JobSet", "PyTorchJob", "RayJob"):
        header = ["NAME", "STATUS", "COMPLETIONS", "DURATION", "AGE"]
        for m in items:
            status = m.get("status") or {}
            rows.append(
                [
                    m["metadata"]["name"],
                    _kube_status(status),
                    f"{status.get('succeeded', 0)}/{_completions(m)}",
                    _duration(status),
                    _since(m["metadata"].get("creationTimestamp")),
                ]
            )
    else:
        header = ["NAME"]
        rows = [[m["metadata"]["name"]] for m in items]
    return header, rows


def _limit(value: Any) -> str:
    """A limit as one table cell: ``gpu=16+cpu=64`` for a resource list."""
    if isinstance(value, dict):
        return "+".join(f"{r.removeprefix('nvidia.com/')}={q}" for r, q in value.items())
    return str(value)


def _conditions(manifest: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in (manifest.get("status") or {}).get("conditions") or []}


def _since(stamp: str | None) -> str:
    start = epoch(stamp)
    return age(time.time() - start) if start is not None else ""


def _kube_status(status: dict[str, Any]) -> str:
    """kubectl's STATUS column: Complete, Failed, Suspended or Running."""
    true = {c["type"] for c in status.get("conditions") or [] if c.get("status") == "True"}
    for kind, shown in (
        ("Complete", "Complete"),
        ("Completed", "Complete"),
        ("Succeeded", "Complete"),
        ("Failed", "Failed"),
        ("Suspended", "Suspended"),
    ):
        if kind in true:
            return shown
    return "Running" if status.get("active") else "Pending"


def _completions(manifest: dict[str, Any]) -> str:
    spec = manifest.get("spec") or {}
    kind = manifest.get("kind")
    if kind == "Job":
        return str(spec.get("completions") or spec.get("parallelism") or 1)
    if kind == "JobSet":
        return str(
            sum(
                int(rj.get("replicas", 1))
                * int(((rj.get("template") or {}).get("spec") or {}).get("completions") or 1)
                for rj in spec.get("replicatedJobs") or []
            )
        )
    if kind == "PyTorchJob":
        return str(
            sum(
                int((r or {}).get("replicas", 1))
                for r in (spec.get("pytorchReplicaSpecs") or {}).values()
            )
        )
    return "1"


def _duration(status: dict[str, Any]) -> str:
    start = epoch(status.get("startTime"))
    if start is None:
        return ""
    end = epoch(status.get("completionTime")) or time.time()
    return age(max(0.0, end - start))


def dump(data: Any, fmt: str) -> str:
    """``data`` as ``json`` or ``yaml`` text (a list of manifests as YAML documents)."""
    if fmt == "json":
        return json.dumps(data, indent=2) + "\n"
    import yaml

    if isinstance(data, list) and all(isinstance(d, dict) and "apiVersion" in d for d in data):
        return yaml.safe_dump_all(data, sort_keys=False) if data else ""
    return str(yaml.safe_dump(data, sort_keys=False))


def describe_job(job: dict[str, Any], events: Sequence[dict[str, Any]]) -> str:
    """``phalanx describe job ID``: every field, the pod sets, the pending reason, the events."""
    lines = []
    width = 18

    def field(label: str, value: Any) -> None:
        shown = "<none>" if value in (None, "", [], {}) else value
        lines.append(f"{label + ':':<{width}}{shown}")

    field("ID", job["id"])
    field("Name", job.get("name"))
    field("State", job.get("state"))
    if job.get("state") == "PENDING" or job.get("reason"):
        field("Reason", job.get("reason"))
        field("Message", job.get("message"))
    for label, key in (
        ("Tenant", "tenant"),
        ("User", "user"),
        ("Queue", "queue"),
        ("ClusterQueue", "cluster_queue"),
        ("Flavor", "flavor"),
        ("PriorityClass", "priority_class"),
        ("Priority", "priority"),
        ("GPUs", "gpus"),
    ):
        field(label, job.get(key))
    field("Nodes", ",".join(job.get("nodes") or []))
    gpu_indices = job.get("gpu_indices") or {}
    if gpu_indices:
        field(
            "GPU indices",
            " ".join(f"{n}:{','.join(map(str, ix))}" for n, ix in gpu_indices.items()),
        )
    field("Command", " ".join(job.get("command") or []))
    field("Working dir", job.get("working_dir"))
    limit = job.get("time_limit")
    field("Time limit", "UNLIMITED" if limit is None else format_duration(limit))
    for label, key in (
        ("Submitted", "submit_time"),
        ("Started", "start_time"),
        ("Ended", "end_time"),
        ("Estimated start", "estimated_start"),
    ):
        field(label, job.get(key))
    if job.get("exit_code") is not None or job.get("signal") is not None:
        field("Exit code", job.get("exit_code"))
        field("Signal", job.get("signal"))
    field("Attempt", job.get("attempt"))
    lines.append("Pod sets:")
    for p in job.get("pod_sets") or []:
        requests = ", ".join(f"{k}={v}" for k, v in (p.get("requests") or {}).items()) or "-"
        per_node = f", {p['tasks_per_node']} per node" if p.get("tasks_per_node") else ""
        lines.append(f"  {p['name']}: {p['count']} task(s){per_node}, each {requests}")
        flavors = p.get("flavors") or {}
        if flavors:
            lines.append("    flavors: " + ", ".join(f"{r}={f}" for r, f in flavors.items()))
        placed = p.get("nodes") or []
        if placed:
            lines.append("    nodes:   " + ", ".join(f"{n['node']}x{n['count']}" for n in placed))
    lines.append("Events:")
    if not events:
        lines.append("  <none>")
    for event in events:
        detail = " ".join(x for x in (event.get("reason"), event.get("message")) if x)
        kind = str(event.get("kind", ""))
        lines.append(f"  {event.get('time') or '':<26}{kind:<12} {detail}".rstrip())
    return "\n".join(lines) + "\n"


def print_explanation(answer: dict[str, Any]) -> None:
    """``phalanx explain JOB``: the server's plain words, the first sentence in bold and
    coloured by the job's state."""
    from rich.console import Console
    from rich.text import Text

    tty = sys.stdout.isatty()
    console = Console(width=None if tty else 100_000, highlight=False, soft_wrap=not tty)
    lines = str(answer.get("text") or "").splitlines()
    style = _STATE_STYLES.get(str(answer.get("state") or ""), "")
    for i, line in enumerate(lines):
        console.print(Text(line, style=f"bold {style}".strip() if i == 0 else ""))


def describe_object(manifest: dict[str, Any]) -> str:
    """``phalanx describe KIND NAME``: the manifest as YAML, its live status last."""
    body = {k: v for k, v in manifest.items() if k != "status"}
    text = dump(body, "yaml")
    status = manifest.get("status")
    if status:
        text += dump({"status": status}, "yaml")
    return text
