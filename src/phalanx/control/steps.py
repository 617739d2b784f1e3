"""Job steps (Slurm's ``srun`` steps) as the store keeps them: ``Step`` events.

The runtime reports each step when it starts and when it ends
(:class:`~phalanx.runtime.spec.StepsReported`); every change is a ``Step`` event
in the job's history whose data is the step's record. A step's current record is
its latest event of the job's current attempt.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from phalanx.store.records import JobEventRow

__all__ = ["STEP_EVENT", "latest_steps"]

STEP_EVENT = "Step"


def latest_steps(events: Iterable[JobEventRow], attempt: int) -> list[dict[str, Any]]:
    """Each step of ``attempt``, as last reported, in step order."""
    latest: dict[int, dict[str, Any]] = {}
    for event in events:
        if event.kind != STEP_EVENT or event.data.get("attempt") != attempt:
            continue
        step = event.data.get("step")
        if isinstance(step, int):
            latest[step] = dict(event.data)
    return [latest[key] for key in sorted(latest)]
