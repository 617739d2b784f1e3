"""What happens to a job that is preempted: the annotations of its ClusterQueue.

A ClusterQueue (a Slurm partition) may override the cluster-wide preemption
settings for the jobs it admits, the *victims*:

* ``slurm.phalanx.io/preempt-mode``: ``REQUEUE`` (the job goes back to pending,
  keeping its id), ``CANCEL`` (it ends, PREEMPTED) or ``OFF`` (never preempted);
  Slurm's partition ``PreemptMode``;
* ``slurm.phalanx.io/grace-time``: seconds between SIGTERM and SIGKILL when the
  job is preempted; Slurm's ``GraceTime``;
* ``phalanx.io/min-runtime``: seconds after its admission during which the job
  is never preempted; Slurm's ``PreemptExemptTime``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

__all__ = [
    "GRACE_TIME_ANNOTATION",
    "MIN_RUNTIME_ANNOTATION",
    "PREEMPT_MODES",
    "PREEMPT_MODE_ANNOTATION",
    "preemption_overrides",
]

PREEMPT_MODE_ANNOTATION = "slurm.phalanx.io/preempt-mode"
GRACE_TIME_ANNOTATION = "slurm.phalanx.io/grace-time"
MIN_RUNTIME_ANNOTATION = "phalanx.io/min-runtime"

PREEMPT_MODES = ("REQUEUE", "CANCEL", "OFF")


def _seconds(key: str, value: str) -> float:
    try:
        seconds = float(value)
    except ValueError:
        seconds = math.nan
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(
            f"metadata.annotations[{key}]: expected seconds (a number >= 0), got {value!r}"
        )
    return seconds


def preemption_overrides(annotations: Mapping[str, str]) -> dict[str, str | float]:
    """The settings a ClusterQueue's annotations override, as keyword arguments of
    :class:`~phalanx.model.scheduling.PreemptionConfig`; ValueError names a bad one."""
    out: dict[str, str | float] = {}
    mode = annotations.get(PREEMPT_MODE_ANNOTATION)
    if mode is not None:
        if mode.upper() not in PREEMPT_MODES:
            raise ValueError(
                f"metadata.annotations[{PREEMPT_MODE_ANNOTATION}]: expected one of "
                f"{', '.join(PREEMPT_MODES)}, got {mode!r}"
            )
        out["mode"] = mode.upper()
    grace = annotations.get(GRACE_TIME_ANNOTATION)
    if grace is not None:
        out["grace_period_s"] = _seconds(GRACE_TIME_ANNOTATION, grace)
    exempt = annotations.get(MIN_RUNTIME_ANNOTATION)
    if exempt is not None:
        out["min_runtime_s"] = _seconds(MIN_RUNTIME_ANNOTATION, exempt)
    return out
