"""Alibaba's openb trace (cluster-trace-gpu-v2023): a GPU cluster's nodes and pods.

The input of the FGD paper (Weng et al., USENIX ATC'23). Node lists are
``sn,cpu_milli,memory_mib,gpu,model``; pod lists
``name,cpu_milli,memory_mib,num_gpu,gpu_milli[,gpu_spec,qos,pod_phase,...]``.
A pod with ``num_gpu == 1`` and ``gpu_milli < 1000`` shares one GPU;
``gpu_spec`` lists the GPU models it may run on (``V100M16|V100M32``).

Nodes become :class:`~phalanx.model.Node` objects labelled with their GPU model
(``nvidia.com/gpu.product``); pods become one-pod-set jobs asking for
``nvidia.com/gpu`` (whole GPUs) or ``phalanx.io/gpu-milli`` (a share), with a
required node affinity on the GPU model when the pod names some.

:func:`load_jobs` reads a pod list as a time trace (for ``phalanx sim --trace
openb``): each pod that ran is a job submitted at ``creation_time`` that runs
for ``deletion_time - scheduled_time`` seconds (a pod still running when the
trace ends was deleted then: its run is cut there too). Pods never scheduled
(``Pending``) or without a positive run are left out. The trace has no tenants:
every job is the ``default`` tenant's.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

from phalanx.errors import Invalid
from phalanx.model import (
    CPU,
    GPU,
    GPU_MILLI,
    GPU_PRODUCT_LABEL,
    HOSTNAME_LABEL,
    MEMORY,
    Node,
    PodSet,
)
from phalanx.sim.trace import TraceJob, rebase

__all__ = ["OpenbPod", "load_jobs", "load_nodes", "load_pods"]

NODE_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
POD_COLUMNS = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli")
MIB = 1 << 20


@dataclass(frozen=True, slots=True)
class OpenbPod:
    """One pod of the trace: per-pod CPU (thousandths), memory (MiB), GPUs."""

    name: str
    cpu_milli: int
    memory_mib: int
    num_gpu: int
    gpu_milli: int
    """Thousandths of each GPU: below 1000 only for a pod sharing one GPU."""
    gpu_spec: tuple[str, ...] = ()

    @property
    def gpu_total_milli(self) -> int:
        """The GPU the pod asks for, in thousandths."""
        return self.num_gpu * self.gpu_milli

    def pod_set(self) -> PodSet:
        """The pod as a pod set of one task."""
        requests: dict[str, int] = {CPU: self.cpu_milli, MEMORY: self.memory_mib * MIB}
        if self.num_gpu and self.gpu_milli < 1000:
            requests[GPU_MILLI] = self.gpu_milli
        elif self.num_gpu:
            requests[GPU] = self.num_gpu
        affinity = None
        if self.num_gpu and self.gpu_spec:
            affinity = [
                {
                    "matchExpressions": [
                        {
                            "key": GPU_PRODUCT_LABEL,
                            "operator": "In",
                            "values": list(self.gpu_spec),
                        }
                    ]
                }
            ]
        return PodSet.model_validate(
            {
                "name": "main",
                "count": 1,
                "requests": _quantities(requests),
                "nodeAffinity": affinity,
            }
        )


def _quantities(requests: dict[str, int]) -> dict[str, str | int]:
    # CPU in the model is parsed from a quantity: thousandths are "NNNm".
    return {r: (f"{a}m" if r == CPU else a) for r, a in requests.items()}


def _rows(path: Path, required: tuple[str, ...]) -> list[tuple[int, dict[str, str]]]:
    try:
        with path.open(newline="") as fh:
            reader = csv.DictReader(fh)
            header = reader.fieldnames or []
            missing = [c for c in required if c not in header]
            if missing:
                raise Invalid(
                    f"{path}:1: expected the columns {', '.join(required)}; "
                    f"missing {', '.join(missing)}"
                )
            return [(i + 2, row) for i, row in enumerate(reader)]
    except OSError as exc:
        raise Invalid(f"{path}: {exc.strerror or exc}") from None


def _int(path: Path, line: int, row: dict[str, str], column: str) -> int:
    text = (row.get(column) or "").strip()
    try:
        value = int(float(text))
    except ValueError:
        raise Invalid(f"{path}:{line}: {column}: expected a number, got {text!r}") from None
    if value < 0:
        raise Invalid(f"{path}:{line}: {column}: expected a non-negative number, got {value}")
    return value


def load_nodes(path: Path, gpu_only: bool = True) -> list[Node]:
    """The nodes of an openb node list (only those with GPUs, by default, as the FGD
    authors' experiments use)."""
    nodes: list[Node] = []
    for line, row in _rows(path, NODE_COLUMNS):
        gpus = _int(path, line, row, "gpu")
        if gpu_only and gpus == 0:
            continue
        name = (row.get("sn") or "").strip()
        if not name:
            raise Invalid(f"{path}:{line}: sn: expected a node name")
        labels = {HOSTNAME_LABEL: name}
        model = (row.get("model") or "").strip()
        if gpus and model and model != "nan":
            labels[GPU_PRODUCT_LABEL] = model
        capacity: dict[str, str | int] = {
            CPU: f"{_int(path, line, row, 'cpu_milli')}m",
            MEMORY: f"{_int(path, line, row, 'memory_mib')}Mi",
        }
        if gpus:
            capacity[GPU] = gpus
        nodes.append(Node(name=name, labels=labels, capacity=capacity))
    return nodes


def _pod(path: Path, line: int, row: dict[str, str]) -> OpenbPod:
    num_gpu = _int(path, line, row, "num_gpu")
    milli = _int(path, line, row, "gpu_milli") if num_gpu else 0
    if num_gpu and milli == 0:
        num_gpu = 0  # asks for no GPU in effect (the authors' simulator reads it so)
    milli = min(milli, 1000)
    if num_gpu > 1 and milli < 1000:
        raise Invalid(
            f"{path}:{line}: gpu_milli: a pod of {num_gpu} GPUs takes them whole, got {milli}"
        )
    spec = (row.get("gpu_spec") or "").strip()
    models = tuple(m for m in spec.split("|") if m and m != "nan")
    return OpenbPod(
        name=(row.get("name") or "").strip() or f"pod-{line}",
        cpu_milli=_int(path, line, row, "cpu_milli"),
        memory_mib=_int(path, line, row, "memory_mib"),
        num_gpu=num_gpu,
        gpu_milli=milli,
        gpu_spec=models,
    )


def load_pods(path: Path) -> list[OpenbPod]:
    """The pods of an openb pod list, in file order."""
    return [_pod(path, line, row) for line, row in _rows(path, POD_COLUMNS)]


TIME_COLUMNS = ("creation_time", "deletion_time", "scheduled_time")


def load_jobs(path: Path) -> list[TraceJob]:
    """The pods of an openb pod list that ran, as a time trace (see the module docstring)."""
    jobs: list[TraceJob] = []
    for line, row in _rows(path, POD_COLUMNS + TIME_COLUMNS):
        pod = _pod(path, line, row)
        if not (row.get("scheduled_time") or "").strip():
            continue  # never scheduled
        if not (row.get("deletion_time") or "").strip():
            continue
        created = _int(path, line, row, "creation_time")
        run = _int(path, line, row, "deletion_time") - _int(path, line, row, "scheduled_time")
        if run <= 0:
            continue
        jobs.append(
            TraceJob(
                id=line - 1,
                submit=float(created),
                duration=float(run),
                gpus=pod.num_gpu,
                cpus=pod.cpu_milli / 1000,
                memory_mib=pod.memory_mib,
                gpu_milli=pod.gpu_milli if pod.num_gpu else 1000,
                gpu_models=pod.gpu_spec,
            )
        )
    return rebase(jobs)
