"""An independent FIFO / SJF simulator with consolidated placement, for checking the engine's.

Written from the rules in docs/simulator.md alone, sharing no code with phalanx:

- per pool, 8-GPU nodes in a fixed order;
- at each time, first the jobs that end (in the order they started), then the
  submissions (in trace order); then the queue's head starts while it fits, and a
  head that does not fit blocks the queue (strict);
- FIFO orders the queue by submission (trace order on ties), SJF by duration
  (then by submission);
- a job of up to 8 GPUs goes on the node with the fewest free GPUs that holds
  it; a larger one on ``ceil(gpus / 8)`` wholly free nodes; among nodes with the
  same number of free GPUs, the one that has had that number the longest comes
  first (at the start: node order);
- a job releases its nodes in the order it took them.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence


def simulate(
    jobs: Sequence[tuple[int, float, float, int]], nodes: int, *, sjf: bool = False
) -> dict[int, tuple[float, float]]:
    """``jobs``: (id, submit, duration, gpus) in trace order; returns id -> (start, end)."""
    free = [8] * nodes
    since = list(range(nodes))  # when each node got its current number of free GPUs
    clock = nodes
    events: list[tuple[float, int, int, int]] = []  # (time, 0 end / 1 submit, order, index)
    for order in range(len(jobs)):
        heapq.heappush(events, (jobs[order][1], 1, order, order))
    queue: list[tuple[float, float, int]] = []
    held: dict[int, list[tuple[int, int]]] = {}
    out: dict[int, tuple[float, float]] = {}
    started = 0

    def change(node: int, delta: int) -> None:
        nonlocal clock
        free[node] += delta
        since[node] = clock
        clock += 1

    while events:
        now = events[0][0]
        while events and events[0][0] == now:
            _, kind, _, index = heapq.heappop(events)
            if kind == 0:
                for node, gpus in held.pop(index):
                    change(node, gpus)
            else:
                _, submit, duration, _ = jobs[index]
                heapq.heappush(queue, ((duration if sjf else submit), submit, index))
        while queue:
            _, _, index = queue[0]
            job_id, _, duration, gpus = jobs[index]
            if gpus <= 8:
                fits = [(free[n], since[n], n) for n in range(nodes) if free[n] >= gpus]
                if not fits:
                    break
                take = [(min(fits)[2], gpus)]
            else:
                count = -(-gpus // 8)
                whole = sorted((since[n], n) for n in range(nodes) if free[n] == 8)[:count]
                if len(whole) < count:
                    break
                take = [(n, 8) for _, n in whole]
            heapq.heappop(queue)
            for node, amount in take:
                change(node, -amount)
            held[index] = take
            out[job_id] = (now, now + duration)
            heapq.heappush(events, (now + duration, 0, started, index))
            started += 1
    return out
