"""The server's side of a heterogeneous job's submission: one partition for the job, the
default partition for a component without one, and the partition's defaults for each
component (DefMemPerCPU, DefaultTime)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from phalanx.auth import Principal
from phalanx.control.launch import Site
from phalanx.control.registry import Registry
from phalanx.control.submissions import (
    DEF_MEM_PER_CPU,
    DEFAULT_PARTITION,
    DEFAULT_TIME,
    resolve_submissions,
)
from phalanx.control.validation import Validator
from phalanx.dialects.slurm.sbatch import build_request, to_submission
from phalanx.errors import Invalid
from phalanx.model import ClusterQueue, JobSubmission

ADMIN = Principal(user="admin", tenants=frozenset({"ml"}), admin=True)


def _registry(default: str | None = "gpu") -> Registry:
    registry = Registry()
    for name in ("gpu", "cpu"):
        annotations = {DEF_MEM_PER_CPU: "100", DEFAULT_TIME: "600"}
        if name == default:
            annotations[DEFAULT_PARTITION] = "true"
        registry.put("ClusterQueue", name, ClusterQueue(name=name, annotations=annotations))
    return registry


def _submission(argv: list[str]) -> JobSubmission:
    request = build_request(
        [*argv, "--wrap", "true"],
        script_text=None,
        script_path=None,
        env={},
        cwd="/tmp",
        now=0.0,
        user="u",
    )
    return to_submission(request, env={})


@pytest.mark.parametrize(
    "argv",
    [
        ["-A", "ml", "-N1", ":", "-N2"],
        ["-A", "ml", "-p", "gpu", "-N1", ":", "-N2"],
        ["-A", "ml", "-N1", ":", "-p", "gpu", "-N2"],
    ],
)
def test_components_go_to_one_partition(argv: list[str]) -> None:
    [job] = resolve_submissions(ADMIN, [_submission(argv)], _registry())
    assert job.cluster_queue == "gpu"
    assert [p.name for p in job.pod_sets] == ["het-group-0", "het-group-1"]


@pytest.mark.parametrize(
    ("argv", "default", "message"),
    [
        (
            ["-A", "ml", "-p", "cpu", "-N1", ":", "-N2"],
            "gpu",
            "heterogeneous job components in different partitions are not supported by "
            "phalanx yet (component 0: cpu, component 1: gpu (default))",
        ),
        (
            ["-A", "ml", "-N1", ":", "-p", "cpu", "-N2"],
            "gpu",
            "(component 0: gpu (default), component 1: cpu)",
        ),
        (
            ["-A", "ml", "-p", "cpu", "-N1", ":", "-N2"],
            None,
            "heterogeneous job component 1 has no --partition and there is no default partition",
        ),
    ],
)
def test_components_in_other_partitions_are_refused(
    argv: list[str], default: str | None, message: str
) -> None:
    with pytest.raises(Invalid) as info:
        resolve_submissions(ADMIN, [_submission(argv)], _registry(default))
    assert message in info.value.detail


def _validator(registry: Registry) -> Validator:
    state: Any = SimpleNamespace(registry=registry)
    return Validator(state, store=None, site=Site())  # type: ignore[arg-type]


def test_each_component_gets_the_partitions_defaults() -> None:
    registry = _registry()
    sub = _submission(["-A", "ml", "-N1", "-c2", ":", "-N2", "-c3", "--mem=1000"])
    [job] = resolve_submissions(ADMIN, [sub], registry)
    job, sub = _validator(registry).partition_defaults(job, sub)
    assert sub.run.time_limit == 600
    # Component 0 asked for no memory: DefMemPerCPU (100 MB) x its 2 CPUs; component 1
    # keeps its --mem.
    assert [p.requests.get("memory") for p in sub.pod_sets] == [200 << 20, 1000 << 20]
    assert [p.requests.get("memory") for p in job.pod_sets] == [200 << 20, 1000 << 20]
    assert sub.slurm is not None and sub.slurm.components is not None
    assert [c.mem_per_cpu_mb for c in sub.slurm.components] == [100, None]
    assert sub.slurm.mem_per_cpu_mb == 100  # the leader's, at the top level too
