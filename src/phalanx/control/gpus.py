"""Which GPU indices of a node each task sees, for ``CUDA_VISIBLE_DEVICES``.

The engine picks the devices (whole GPUs on the lowest-numbered free devices,
like Slurm's gres plugin; GPU shares on the device placement scored) and
sends them with each admission. The control plane records which jobs hold
which devices, for the node views and for admissions that carry no devices
(older records), which get the lowest free indices here.
"""

from __future__ import annotations

__all__ = ["GpuAllocator"]


class GpuAllocator:
    """The jobs holding each GPU index of each node (several for a shared device)."""

    def __init__(self) -> None:
        self._capacity: dict[str, int] = {}
        self._taken: dict[str, dict[int, dict[int, None]]] = {}
        """node -> {index: {job id: None}}"""

    def set_capacity(self, node: str, gpus: int) -> None:
        self._capacity[node] = gpus

    def remove_node(self, node: str) -> None:
        self._capacity.pop(node, None)

    def take(self, node: str, count: int, job_id: int) -> list[int]:
        """The ``count`` lowest indices of ``node`` nobody holds, now held by ``job_id``.

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
        self.hold(node, chosen, job_id)
        return chosen

    def hold(self, node: str, indices: list[int], job_id: int) -> None:
        """Record indices a job holds (the engine's choice, or recovery)."""
        taken = self._taken.setdefault(node, {})
        for i in indices:
            taken.setdefault(i, {})[job_id] = None

    def release(self, job_id: int, nodes: list[str]) -> None:
        for node in nodes:
            taken = self._taken.get(node)
            if not taken:
                continue
            for i in [i for i, jobs in taken.items() if job_id in jobs]:
                del taken[i][job_id]
                if not taken[i]:
                    del taken[i]

    def taken(self, node: str) -> list[int]:
        """The indices anything holds on ``node``."""
        return sorted(self._taken.get(node, {}))
