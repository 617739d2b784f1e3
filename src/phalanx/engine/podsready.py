"""Kueue's waitForPodsReady.

An admitted job whose pods are not all ready within ``timeout`` is evicted (and
requeued with backoff, or deactivated past its backoff limit); with
``blockAdmission`` nothing else is admitted while an admitted job is not ready.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from phalanx.engine.decisions import (
    Decision,
    Evict,
)

if TYPE_CHECKING:
    from phalanx.engine.engine import Engine


def _seconds(s: float) -> str:
    return f"{s:g}s"


class WaitForPodsReady:
    """The admitted jobs that are not ready yet, with their deadlines."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self.unready: dict[int, float] = {}
        """Admitted jobs not yet PodsReady, with their waitForPodsReady deadline."""

    def export(self) -> dict[str, Any]:
        """This part of an engine snapshot (:mod:`phalanx.engine.snapshot`)."""
        return {"unready": [[j, t] for j, t in self.unready.items()]}

    def load(self, data: Mapping[str, Any]) -> None:
        self.unready = {int(j): float(t) for j, t in data.get("unready", [])}

    def evict_timed_out(self, now: float, out: list[Decision]) -> None:
        ready = self._engine.config.wait_for_pods_ready
        assert ready is not None
        for job_id, deadline in sorted(self.unready.items(), key=lambda item: item[1]):
            if deadline > now:
                continue
            del self.unready[job_id]
            rec = self._engine.jobs.get(job_id)
            if rec is None or rec.admission is None or rec.admission.evicting:
                continue
            rec.admission.evicting = True
            self._engine.ends.changed()
            rec.evicted_for = "PodsReadyTimeout"
            rec.evicted_at = now
            count = rec.requeue_count + 1
            if ready.backoff_limit_count is not None and count > ready.backoff_limit_count:
                rec.deactivate = True
            else:
                rec.requeue_count = count
                delay = min(ready.backoff_base_s * 2 ** (count - 1), ready.backoff_max_s)
                rec.requeue_at = now + delay
            out.append(
                Evict(
                    job_id,
                    "PodsReadyTimeout",
                    f"Exceeded the PodsReady timeout {_seconds(ready.timeout_s)}",
                )
            )

    def blocks_admission(self) -> bool:
        ready = self._engine.config.wait_for_pods_ready
        return ready is not None and ready.block_admission and bool(self.unready)
