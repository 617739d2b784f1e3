"""The workload a cluster expects: how often each task shape is submitted.

Fragmentation is only meaningful against what will ask for room next: a node
with 3 free GPUs is fragmented for 4-GPU tasks and not for 1-GPU ones. The
engine learns the mix from its own Submit events (each task of each pod set
counts once, older submissions fading by halving once the window is full), so
the live service and the simulator see the same profile; a replay may instead
fix the profile up front, as the FGD authors' simulator does with the trace's
pod list.

A :class:`TaskShape` is what fragmentation is measured in: a task's CPU, its
GPUs (whole devices, or one share of ``milli`` thousandths) and the GPU models
it may run on (memory is left out, as in the FGD paper: it is checked when a
task is placed, not counted as stranding GPUs). The profile is re-read at most
every ``refresh`` observations, so that scores computed against it can be kept
until then.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from phalanx.engine.cache.capacity import MILLI
from phalanx.engine.queueing.shapes import PodSetShape
from phalanx.model import CPU, GPU, GPU_MILLI, GPU_MODEL_LABELS, NodeSelectorOperator

__all__ = ["TaskShape", "WorkloadProfile", "gpu_models", "task_shape"]


@dataclass(frozen=True, slots=True)
class TaskShape:
    """One task: ``gpus`` devices of ``milli`` thousandths each (1000: whole GPUs; a
    share is one device with less), and the GPU ``models`` allowed (None: any)."""

    cpu: int
    gpus: int
    milli: int
    models: frozenset[str] | None = None

    @property
    def gpu_milli(self) -> int:
        """Thousandths of GPU the task takes in all."""
        return self.gpus * self.milli

    def to_list(self) -> list[Any]:
        return [self.cpu, self.gpus, self.milli, sorted(self.models or ()) or None]

    @classmethod
    def from_list(cls, data: list[Any]) -> TaskShape:
        cpu, gpus, milli, models = data
        return cls(cpu, gpus, milli, frozenset(models) if models else None)


def gpu_models(pod_set: PodSetShape) -> frozenset[str] | None:
    """The GPU models a pod set's node selector or required affinity allow, read from
    the GPU model labels (None: any model)."""
    for key, value in pod_set.node_selector:
        if key in GPU_MODEL_LABELS:
            return frozenset((value,))
    terms = pod_set.node_affinity
    if not terms:
        return None
    allowed: set[str] = set()
    for term in terms:
        found = [
            e.values
            for e in term.match_expressions
            if e.key in GPU_MODEL_LABELS and e.operator is NodeSelectorOperator.IN
        ]
        if not found:
            return None  # one term allows any model
        allowed.update(found[0])
    return frozenset(allowed)


def task_shape(pod_set: PodSetShape) -> TaskShape:
    """What one task of ``pod_set`` asks for."""
    whole = pod_set.request(GPU)
    share = pod_set.request(GPU_MILLI)
    gpus, milli = (whole, MILLI) if whole else ((1, share) if share else (0, 0))
    return TaskShape(
        pod_set.request(CPU),
        gpus,
        milli,
        gpu_models(pod_set) if gpus else None,
    )


class WorkloadProfile:
    """Counts of task shapes, learned from submissions or fixed."""

    def __init__(
        self,
        fixed: Mapping[TaskShape, float] | None = None,
        window: float = 20_000.0,
        refresh: int = 256,
    ) -> None:
        self.fixed = fixed is not None
        self.window = window
        self.refresh = refresh
        self.weights: dict[TaskShape, float] = dict(fixed or {})
        self._pending: dict[TaskShape, float] = {}
        self._pending_total = 0.0
        self._total = sum(self.weights.values())
        self.generation = 0
        """Bumped whenever :attr:`weights` change: scores computed before are stale."""
        self._shapes: dict[PodSetShape, TaskShape] = {}

    def set_fixed(self, weights: Mapping[TaskShape, float]) -> None:
        """Use ``weights`` from now on and stop learning (a replay that knows its trace)."""
        self.fixed = True
        self.weights = dict(weights)
        self._total = sum(self.weights.values())
        self._pending.clear()
        self._pending_total = 0.0
        self.generation += 1

    def observe(self, pod_sets: Iterable[PodSetShape]) -> None:
        """Count the tasks of a submitted job."""
        if self.fixed:
            return
        shapes = self._shapes
        for pod_set in pod_sets:
            shape = shapes.get(pod_set)
            if shape is None:
                shape = shapes[pod_set] = task_shape(pod_set)
            self._pending[shape] = self._pending.get(shape, 0.0) + pod_set.count
            self._pending_total += pod_set.count
        # Early on the profile is re-read often (it is all there is); later every
        # ``refresh`` tasks, so scores computed against it live that long.
        if self._pending_total >= max(1.0, min(self.refresh, self._total / 8)):
            self._merge()

    def _merge(self) -> None:
        weights = self.weights
        for shape, count in self._pending.items():
            weights[shape] = weights.get(shape, 0.0) + count
        self._total += self._pending_total
        self._pending.clear()
        self._pending_total = 0.0
        if self._total > self.window:
            for shape in list(weights):
                weights[shape] /= 2
                if weights[shape] < 0.5:
                    del weights[shape]
            self._total = sum(weights.values())
        self.generation += 1

    def typical(self, threshold: float = 0.95) -> list[tuple[TaskShape, float]]:
        """The most frequent shapes that together make ``threshold`` of all tasks, with
        their frequencies renormalised to sum to 1 (the FGD authors' "typical pods":
        most frequent first, ties by shape)."""
        ranked = sorted(self.weights.items(), key=lambda kv: (-kv[1], _order(kv[0])))
        total = sum(w for _, w in ranked)
        if total <= 0:
            return []
        out: list[tuple[TaskShape, float]] = []
        cumulative = 0.0
        for shape, weight in ranked:
            if cumulative >= threshold * total - 1e-9:
                break
            out.append((shape, weight))
            cumulative += weight
        return [(shape, weight / cumulative) for shape, weight in out]

    def export(self) -> dict[str, Any]:
        return {
            "weights": [[s.to_list(), w] for s, w in self.weights.items()],
            "pending": [[s.to_list(), w] for s, w in self._pending.items()],
        }

    def load(self, data: Mapping[str, Any]) -> None:
        self.weights = {TaskShape.from_list(s): float(w) for s, w in data.get("weights", [])}
        self._total = sum(self.weights.values())
        self._pending = {TaskShape.from_list(s): float(w) for s, w in data.get("pending", [])}
        self._pending_total = sum(self._pending.values())
        self.generation += 1


def _order(shape: TaskShape) -> tuple[int, int, int, tuple[str, ...]]:
    """The FGD authors' tie order between equally frequent shapes, largest first."""
    return (-shape.cpu, -shape.milli, -shape.gpus, tuple(sorted(shape.models or ())))
