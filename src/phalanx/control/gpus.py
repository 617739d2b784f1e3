"""Which GPU indices of a node each task gets: lowest free first, like Slurm's gres plugin.

The engine decides how many GPUs a task takes on which node; the control plane
picks the device indices, so that two jobs on one node never see the same GPU
in ``CUDA_VISIBLE_DEVICES``.
"""

from __future__ import annotations

__all__ = ["GpuAllocator"]


class GpuAllocator:
    """Free and taken GPU indices per node."""

    def __init__(self) -> None:
        self._capacity: dict[str, int] = {}
        self._taken: dict[str, dict[int, int]] = {}
        """node -> {index: job id}"""

    def set_capacity(self, node: str, gpus: int) -> None:
        self._capacity[node] = gpus

    def remove_node(self, node: str) -> None:
        self._capacity.pop(node, None)

    def take(self, node: str, count: int, job_id: int) -> list[int]:
        """The ``count`` lowest free indices of ``node``, now held by ``job_id``.

        The engine has already checked that the node has ``count`` GPUs free; if
        the indices disagree (a node shrank under running jobs) the job gets
        indices past the capacity rather than sharing a device.
        """
        taken = self._taken.setdefault(node, {})
        chosen: list[int] = []
        index = 0
        while len(chosen) < count:
            if index not in taken:
                chosen.append(index)
            index += 1
        for i in chosen:
            taken[i] = job_id
        return chosen

    def hold(self, node: str, indices: list[int], job_id: int) -> None:
        """Record indices a job already holds (recovery)."""
        taken = self._taken.setdefault(node, {})
        for i in indices:
            taken[i] = job_id

    def release(self, job_id: int, nodes: list[str]) -> None:
        for node in nodes:
            taken = self._taken.get(node)
            if taken:
                for i in [i for i, j in taken.items() if j == job_id]:
                    del taken[i]

    def taken(self, node: str) -> list[int]:
        return sorted(self._taken.get(node, {}))
