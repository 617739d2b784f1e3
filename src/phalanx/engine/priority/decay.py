"""Usage accounting for Slurm's priority/multifactor: half-life decay, charging
new usage up the association tree, and ``PriorityUsageResetPeriod``.

Follows ``_init_decay_vars`` (the per-second factor ``1 - 0.693 / half_life``,
a first-order stand-in for ``e^(ln(1/2) / half_life)``), ``_apply_decay`` and
``_apply_new_usage`` (new usage is ``run_seconds * D^run_seconds`` times the
billable TRES and the QOS ``UsageFactor``, added to the association and every
ancestor) and the reset handling of ``_decay_thread`` in
``src/plugins/priority/multifactor/priority_multifactor.c``. Everything is a
pure function of its arguments: elapsed times and instants are passed in.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import datetime, timedelta
from enum import StrEnum

from phalanx.engine.priority.tree import AssociationTree
from phalanx.model.scheduling import LN2_APPROX

DEFAULT_HALF_LIFE_S: float = 7 * 86400.0
DEFAULT_CALC_PERIOD_S: float = 300.0
_LN2_APPROX = LN2_APPROX


def decay_factor(half_life_s: float) -> float:
    """The per-second decay factor ``D``; a half-life of 0 means no decay."""
    if half_life_s == 0:
        return 1.0
    if half_life_s <= _LN2_APPROX:
        raise ValueError("half-life must be 0 (no decay) or longer than 0.693 s")
    return 1.0 - _LN2_APPROX / half_life_s


def decay_multiplier(half_life_s: float, elapsed_s: float) -> float:
    """``D^elapsed``: what stored usage is multiplied by after ``elapsed_s``."""
    if elapsed_s < 0:
        raise ValueError("elapsed time must be >= 0")
    return math.pow(decay_factor(half_life_s), elapsed_s)


def decay_usage(
    usage: Mapping[str, float], half_life_s: float, elapsed_s: float
) -> dict[str, float]:
    """Every association's usage after ``elapsed_s`` seconds of decay."""
    factor = decay_multiplier(half_life_s, elapsed_s)
    return {name: value * factor for name, value in usage.items()}


def new_usage(
    run_seconds: float, billable_tres: float, half_life_s: float, usage_factor: float = 1.0
) -> float:
    """Usage a job adds for ``run_seconds`` of running in one calc period."""
    if run_seconds < 0:
        raise ValueError("run time must be >= 0")
    run_decay = run_seconds * math.pow(decay_factor(half_life_s), run_seconds)
    return run_decay * billable_tres * usage_factor


def charge_usage(
    tree: AssociationTree, usage: Mapping[str, float], assoc: str, amount: float
) -> dict[str, float]:
    """``usage`` with ``amount`` added to ``assoc`` and each of its ancestors."""
    out = dict(usage)
    for name in tree.path_to_root(assoc):
        out[name] = out.get(name, 0.0) + amount
    return out


def normalized_usage(tree: AssociationTree, usage_raw: Mapping[str, float]) -> dict[str, float]:
    """Classic ``usage_norm``: each association's raw usage over the root's."""
    root_usage = usage_raw.get(tree.root, 0.0)
    if root_usage <= 0:
        return dict.fromkeys(tree.names(), 0.0)
    return {name: usage_raw.get(name, 0.0) / root_usage for name in tree.names()}


class ResetPeriod(StrEnum):
    """``PriorityUsageResetPeriod`` values."""

    NONE = "NONE"
    NOW = "NOW"
    DAILY = "DAILY"
    WEEKLY = "WEEKLY"
    MONTHLY = "MONTHLY"
    QUARTERLY = "QUARTERLY"
    YEARLY = "YEARLY"


def last_reset_boundary(period: ResetPeriod, now: datetime) -> datetime | None:
    """The most recent reset instant at or before ``now`` for a calendar period.

    Boundaries are at 00:00 in ``now``'s own time zone (Slurm uses the
    controller's local time): every day, every Sunday, the first of every
    month, of January/April/July/October, or of January. ``NONE`` and ``NOW``
    have no calendar boundary.
    """
    midnight = now.replace(hour=0, minute=0, second=0, microsecond=0)
    if period is ResetPeriod.DAILY:
        return midnight
    if period is ResetPeriod.WEEKLY:
        return midnight - timedelta(days=(now.weekday() + 1) % 7)
    if period is ResetPeriod.MONTHLY:
        return midnight.replace(day=1)
    if period is ResetPeriod.QUARTERLY:
        return midnight.replace(month=(now.month - 1) // 3 * 3 + 1, day=1)
    if period is ResetPeriod.YEARLY:
        return midnight.replace(month=1, day=1)
    return None


def resets_at_start(period: ResetPeriod) -> bool:
    """``NOW`` clears all usage once, when the controller starts."""
    return period is ResetPeriod.NOW


def usage_reset_due(period: ResetPeriod, last_reset: datetime, now: datetime) -> bool:
    """Whether a calendar boundary has passed since ``last_reset``."""
    boundary = last_reset_boundary(period, now)
    return boundary is not None and last_reset < boundary


def apply_reset(
    period: ResetPeriod, usage: Mapping[str, float], last_reset: datetime, now: datetime
) -> tuple[dict[str, float], datetime]:
    """Usage and last-reset instant after checking for a due reset at ``now``."""
    if usage_reset_due(period, last_reset, now):
        return dict.fromkeys(usage, 0.0), now
    return dict(usage), last_reset
