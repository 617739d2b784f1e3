"""The phalanx admission engine on a virtual 4-node, 32-GPU cluster.

Two tenants submit through their LocalQueues: ``vision`` a 16-GPU gang
(2 nodes x 8 GPUs) and a few small jobs, ``nlp`` a stream of 1-4 GPU jobs.
The engine decides; this script plays the cluster with a virtual clock: it
finishes each admitted job after its run time and feeds the completion back.
"""

from __future__ import annotations

import random

from rich.console import Console
from rich.table import Table

from phalanx.engine import Admit, Engine, Finish, Pending, Submit, Upsert
from phalanx.model import (
    ClusterQueue,
    Job,
    LocalQueue,
    Node,
    PodSet,
    ResourceFlavor,
    Tenant,
)

GPU = "nvidia.com/gpu"


def cluster() -> list[object]:
    objects: list[object] = [
        ResourceFlavor(name="h100", node_labels={"gpu.phalanx.io/model": "h100"}),
        Tenant(name="vision", allocation=0.5),
        Tenant(name="nlp", allocation=0.5),
    ]
    for i in range(4):
        objects.append(
            Node(
                name=f"gpu-node-{i}",
                labels={"gpu.phalanx.io/model": "h100"},
                capacity={GPU: 8, "cpu": "96", "memory": "1000Gi"},
            )
        )
    for team in ("vision", "nlp"):
        objects.append(
            ClusterQueue.model_validate(
                {
                    "name": f"{team}-cq",
                    "cohortName": "research",
                    "resourceGroups": [
                        {
                            "coveredResources": ["cpu", "memory", GPU],
                            "flavors": [
                                {
                                    "name": "h100",
                                    "resources": [
                                        {"name": "cpu", "nominalQuota": "192"},
                                        {"name": "memory", "nominalQuota": "2000Gi"},
                                        {"name": GPU, "nominalQuota": 16},
                                    ],
                                }
                            ],
                        }
                    ],
                }
            )
        )
        objects.append(LocalQueue(name="default", namespace=team, cluster_queue=f"{team}-cq"))
    return objects


def workload(rng: random.Random) -> list[tuple[Job, float]]:
    jobs: list[tuple[Job, float]] = []
    gang = Job(
        id=1,
        name="llama-finetune",
        tenant="vision",
        queue="default",
        submit_time=0.0,
        pod_sets=[
            PodSet(
                name="workers",
                count=2,
                requests={GPU: 8, "cpu": "64", "memory": "800Gi"},
                tasks_per_node=1,
            )
        ],
    )
    jobs.append((gang, 600.0))
    for i in range(2, 14):
        tenant = "nlp" if i % 3 else "vision"
        gpus = rng.choice([1, 1, 2, 4])
        job = Job(
            id=i,
            name=f"{tenant}-eval-{i}",
            tenant=tenant,
            queue="default",
            submit_time=float(i),
            pod_sets=[
                PodSet(requests={GPU: gpus, "cpu": str(8 * gpus), "memory": f"{64 * gpus}Gi"})
            ],
        )
        jobs.append((job, rng.uniform(60, 400)))
    return jobs


def main() -> None:
    console = Console()
    rng = random.Random(7)
    engine = Engine()
    for obj in cluster():
        engine.apply(Upsert(obj))  # type: ignore[arg-type]
    runtimes: dict[int, float] = {}
    names: dict[int, str] = {}
    for job, runtime in workload(rng):
        engine.apply(Submit(job))
        runtimes[job.id] = runtime
        names[job.id] = job.name

    table = Table(title="phalanx engine decisions (virtual clock)")
    for column in ("t (s)", "job", "decision", "where / why"):
        table.add_column(column)
    running: dict[int, float] = {}
    now = 20.0
    done = 0
    while done < len(runtimes):
        for decision in engine.cycle(now):
            if isinstance(decision, Admit):
                running[decision.job_id] = now + runtimes[decision.job_id]
                where = ", ".join(
                    f"{n.node} x{n.count}" for p in decision.pod_sets for n in p.nodes
                )
                table.add_row(f"{now:.0f}", names[decision.job_id], "[green]admit", where)
            elif isinstance(decision, Pending):
                table.add_row(
                    f"{now:.0f}", names[decision.job_id], "[yellow]pending", decision.reason.message
                )
        if not running:
            break
        job_id, now = min(running.items(), key=lambda item: (item[1], item[0]))
        del running[job_id]
        engine.apply(Finish(job_id))
        table.add_row(f"{now:.0f}", names[job_id], "[blue]finished", "")
        done += 1
    console.print(table)
    console.print(
        f"[bold]{done} of {len(runtimes)} jobs finished[/bold]; "
        f"{engine.pending_count()} pending, {engine.admitted_count()} admitted."
    )
    console.print(
        "Run the test suite with [bold]make test[/bold]; the engine benchmark with "
        "[bold]make bench[/bold]."
    )


if __name__ == "__main__":
    main()
