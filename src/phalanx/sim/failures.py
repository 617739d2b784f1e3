"""Node failures for the simulator: when each node goes down and comes back.

A :class:`FailureModel` gives every node an independent stream of failures: the
time from the node's start (the trace's first submission) or its last repair
to its next failure is exponential with mean ``1 / rate`` hours (a Poisson
process of ``rate`` failures per node-hour of uptime), and a failed node is
back ``repair_s`` seconds later. A node's stream depends on the seed and its
name alone (:meth:`FailureModel.stream`), never on what runs on it, so the same
seed fails the same nodes at the same times under every policy.

Failure times are rounded up to a whole second, and the repair time and the
checkpoint interval to whole seconds: the resolution of the traces' times. So
every event of a run stays on a whole second and the simulator's periodic
wakeups (one a priority period after each step) fall on at most a period's
seconds of distinct phases however many nodes fail. With a fraction of a second
each failure started new phases, and under a long queue the steps per hour,
and the records of each step, grew without bound.

The jobs running on a node when it fails are lost and requeued; with a
checkpoint interval, a job keeps the work done up to its last checkpoint
(whole intervals of its run) and runs only the rest when it starts again.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator
from dataclasses import dataclass

from phalanx.errors import Invalid

__all__ = ["DEFAULT_REPAIR_H", "FailureModel"]

HOUR = 3600.0
DEFAULT_REPAIR_H = 4.0
"""Hours a failed node stays down unless ``--node-repair`` says otherwise."""


@dataclass(frozen=True, slots=True)
class FailureModel:
    """Failures at ``rate`` per node-hour, each node down ``repair_s`` seconds after
    one; jobs checkpoint every ``checkpoint_s`` seconds of their run (None: never)."""

    rate: float
    """Failures per node-hour of uptime."""
    repair_s: float = DEFAULT_REPAIR_H * HOUR
    seed: int = 0
    checkpoint_s: float | None = None

    def __post_init__(self) -> None:
        if not self.rate > 0:
            raise Invalid(f"--node-failure-rate: expected a rate > 0, got {self.rate}")
        if not self.repair_s >= 0:
            raise Invalid(f"--node-repair: expected hours >= 0, got {self.repair_s / HOUR}")
        if self.checkpoint_s is not None and not self.checkpoint_s > 0:
            raise Invalid(
                f"--checkpoint-interval: expected hours > 0, got {self.checkpoint_s / HOUR}"
            )
        # Whole seconds, as the failure times (see the module docstring).
        object.__setattr__(self, "repair_s", float(round(self.repair_s)))
        if self.checkpoint_s is not None:
            object.__setattr__(self, "checkpoint_s", float(max(1, round(self.checkpoint_s))))

    @classmethod
    def from_options(
        cls,
        rate: float | None = None,
        mtbf_h: float | None = None,
        repair_h: float = DEFAULT_REPAIR_H,
        seed: int = 0,
        checkpoint_h: float | None = None,
    ) -> FailureModel | None:
        """The model the command-line options ask for: a rate per node-hour or a mean
        time between failures per node in hours (not both); None when neither is given
        (no failures)."""
        if rate is not None and mtbf_h is not None:
            raise Invalid("give --node-failure-rate or --node-mtbf, not both")
        if mtbf_h is not None:
            if not mtbf_h > 0:
                raise Invalid(f"--node-mtbf: expected hours > 0, got {mtbf_h}")
            rate = 1.0 / mtbf_h
        if rate is None:
            if checkpoint_h is not None:
                raise Invalid("--checkpoint-interval needs --node-failure-rate or --node-mtbf")
            return None
        return cls(
            rate=rate,
            repair_s=repair_h * HOUR,
            seed=seed,
            checkpoint_s=None if checkpoint_h is None else checkpoint_h * HOUR,
        )

    def stream(self, node: str, start: float) -> Iterator[float]:
        """The times ``node`` fails, from ``start`` on, forever (each one a repair
        time after the last plus an exponential uptime, rounded up to a whole second)."""
        rng = random.Random(f"{self.seed}/{node}")
        per_second = self.rate / HOUR
        at = start
        while True:
            at = float(math.ceil(at + rng.expovariate(per_second)))
            yield at
            at += self.repair_s

    def saved(self, ran_s: float) -> float:
        """Of a run of ``ran_s`` seconds, what its checkpoints keep."""
        if self.checkpoint_s is None or ran_s <= 0:
            return 0.0
        return (ran_s // self.checkpoint_s) * self.checkpoint_s

    def describe(self) -> dict[str, float | int | None]:
        return {
            "rate_per_node_hour": self.rate,
            "mtbf_h": round(1.0 / self.rate, 1),
            "repair_h": self.repair_s / HOUR,
            "seed": self.seed,
            "checkpoint_interval_h": None
            if self.checkpoint_s is None
            else self.checkpoint_s / HOUR,
        }
