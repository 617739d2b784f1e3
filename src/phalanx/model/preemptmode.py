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

A Kubernetes *job* may ask for a notice before it is stopped when preempted,
``phalanx.io/preemption-notice: SIG@SECONDS`` (Slurm's ``--signal`` at preemption),
parsed by :func:`parse_preemption_notice`.
"""

from __future__ import annotations

import math
import re
import signal
from collections.abc import Mapping

__all__ = [
    "GRACE_TIME_ANNOTATION",
    "MIN_RUNTIME_ANNOTATION",
    "PREEMPTION_NOTICE_ANNOTATION",
    "PREEMPT_MODES",
    "PREEMPT_MODE_ANNOTATION",
    "parse_preemption_notice",
    "preemption_overrides",
]

PREEMPTION_NOTICE_ANNOTATION = "phalanx.io/preemption-notice"

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


_NOTICE = re.compile(r"^(?:SIG)?([A-Z0-9]+)@([0-9]+)$")


def parse_preemption_notice(value: str) -> tuple[int, int]:
    """``SIG@SECONDS`` (a signal by name, with or without ``SIG``, or by number 1..64;
    seconds 0..65535, as Slurm's ``--signal``) as ``(signal number, seconds)``;
    ValueError names the annotation."""
    match = _NOTICE.match(value.strip().upper())
    number: int | None = None
    seconds = -1
    if match is not None:
        name, secs = match.groups()
        seconds = int(secs) if len(secs) <= 5 else -1
        if name.isascii() and name.isdigit():
            number = int(name)
        else:
            found = getattr(signal.Signals, "SIG" + name, None)
            number = int(found) if found is not None else None
    if number is None or not 1 <= number <= 64 or not 0 <= seconds <= 65535:
        raise ValueError(
            f"metadata.annotations[{PREEMPTION_NOTICE_ANNOTATION}]: expected SIG@SECONDS "
            f"(a signal name or number 1..64, seconds 0..65535, e.g. USR1@60), got {value!r}"
        )
    return number, seconds
