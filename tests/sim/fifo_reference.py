"""An independent FIFO / SJF simulator with consolidated placement, for checking the engine's.

Written from the rules in docs/simulator.md alone, sharing no code with phalanx:
per pool, 8-GPU nodes in a fixed order; at each time, ends first, then
submissions in trace order; then the queue's head starts while it fits: up to 8
GPUs on the node with the fewest free GPUs that holds it (the first such node
in order on a tie), more on the first ``ceil(gpus / 8)`` wholly free nodes; a
head that does not fit blocks the queue. FIFO orders the queue by submission,
SJF by duration (then submission).
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence


def simulate(
    jobs: Sequence[tuple[int, float, float, int]], nodes: int, *, sjf: bool = False
) -> dict[int, tuple[float, float]]:
    """``jobs``: (id, submit, duration, gpus) in trace order; returns id -> (start, end)."""
    free = [8] * nodes
    events: list[tuple[float, int, int, int]] = []  # (time, 0 end / 1 submit, order, index)
    for order, (_, submit, _, _) in enumerate(jobs):
        heapq.heappush(events, (submit, 1, order, order))
    queue: list[tuple[float, float, int]] = []
    held: dict[int, list[tuple[int, int]]] = {}
    out: dict[int, tuple[float, float]] = {}
    while events:
        now = events[0][0]
        while events and events[0][0] == now:
            _, kind, _, index = heapq.heappop(events)
            if kind == 0:
                for node, gpus in held.pop(index):
                    free[node] += gpus
            else:
                _, submit, duration, _ = jobs[index]
                heapq.heappush(queue, ((duration if sjf else submit), submit, index))
        while queue:
            _, _, index = queue[0]
            job_id, _, duration, gpus = jobs[index]
            if gpus <= 8:
                fits = [(free[n], n) for n in range(nodes) if free[n] >= gpus]
                if not fits:
                    break
                _, node = min(fits)
                take = [(node, gpus)]
            else:
                whole = [n for n in range(nodes) if free[n] == 8][: -(-gpus // 8)]
                if len(whole) < -(-gpus // 8):
                    break
                take = [(n, 8) for n in whole]
            heapq.heappop(queue)
            for node, amount in take:
                free[node] -= amount
            held[index] = take
            out[job_id] = (now, now + duration)
            heapq.heappush(events, (now + duration, 0, index, index))
    return out
