"""Kueue's Admission Fair Sharing: each LocalQueue's decayed consumption and its score.

With a Kueue ``Configuration`` ``admissionFairSharing`` and a ClusterQueue whose
``admissionScope.admissionMode`` is ``UsageBasedAdmissionFairSharing``, the
ClusterQueue orders its jobs by their LocalQueue's score, ascending, before
priority and creation time (Kueue KEP 4136):

* every ``usageSamplingInterval`` (at the first cycle at or after it) each
  LocalQueue's consumption becomes ``(1 - a) * consumed + a * current`` with
  ``a = 1 - 0.5^(elapsed / usageHalfLifeTime)`` and ``current`` the resources its
  admitted jobs hold (``a = 1`` without a half-life);
* an admission adds an entry penalty of ``a(usageSamplingInterval)`` times what
  the job was admitted with, until the next sample counts the job itself;
* the score is ``sum_r weight_r * (consumed_r + penalty_r) / lq_weight`` with
  ``resourceWeights`` (1 for a resource not listed) and the LocalQueue's
  ``fairSharing.weight`` (1 by default; a weight <= 0 scores +inf).

Amounts are in Kubernetes base units: ``cpu`` in cores, ``memory`` in bytes,
anything else as a count. Pure: time is the cycle's ``now``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING

from phalanx.model.quantity import CPU

if TYPE_CHECKING:
    from phalanx.engine.config import AdmissionFairSharingConfig

__all__ = ["LocalQueueUsage", "base_units"]


def base_units(amounts: Mapping[tuple[str, str], int]) -> dict[str, float]:
    """Per resource, over every flavor, in Kubernetes base units (cpu cores)."""
    out: dict[str, float] = {}
    for (_flavor, resource), amount in amounts.items():
        value = amount / 1000.0 if resource == CPU else float(amount)
        out[resource] = out.get(resource, 0.0) + value
    return out


class LocalQueueUsage:
    """Decayed consumption, entry penalties and scores of LocalQueues (``namespace/name``)."""

    def __init__(self, config: AdmissionFairSharingConfig) -> None:
        self.config = config
        self.consumed: dict[str, dict[str, float]] = {}
        self.penalties: dict[str, dict[str, float]] = {}
        self.last_sample: float | None = None

    def alpha(self, elapsed_s: float) -> float:
        half_life = self.config.usage_half_life_s
        if half_life <= 0:
            return 1.0
        return 1.0 - float(0.5 ** (max(0.0, elapsed_s) / half_life))

    def due(self, now: float) -> bool:
        last = self.last_sample
        return last is None or now - last >= self.config.usage_sampling_interval_s

    def sample(self, now: float, current: Mapping[str, Mapping[str, float]]) -> None:
        """Fold ``current`` (what each LocalQueue's admitted jobs hold) into the
        consumption; the penalties are then counted by the sample and dropped."""
        last = self.last_sample
        elapsed = self.config.usage_sampling_interval_s if last is None else now - last
        a = self.alpha(elapsed)
        for lq in set(self.consumed) | set(current):
            old = self.consumed.get(lq, {})
            new = current.get(lq, {})
            merged = {
                r: (1.0 - a) * old.get(r, 0.0) + a * new.get(r, 0.0) for r in set(old) | set(new)
            }
            self.consumed[lq] = {r: v for r, v in merged.items() if v > 1e-12}
        self.consumed = {lq: c for lq, c in self.consumed.items() if c}
        self.penalties = {}
        self.last_sample = now

    def penalize(self, lq: str, admitted: Mapping[str, float]) -> None:
        """The entry penalty of one admission: ``a(samplingInterval) x admitted``."""
        a = self.alpha(self.config.usage_sampling_interval_s)
        penalty = self.penalties.setdefault(lq, {})
        for resource, amount in admitted.items():
            penalty[resource] = penalty.get(resource, 0.0) + a * amount

    def score(self, lq: str, lq_weight: float = 1.0) -> float:
        if lq_weight <= 0:
            return math.inf
        weights = self.config.resource_weights
        consumed = self.consumed.get(lq, {})
        penalty = self.penalties.get(lq, {})
        total = 0.0
        for resource in set(consumed) | set(penalty):
            amount = consumed.get(resource, 0.0) + penalty.get(resource, 0.0)
            total += weights.get(resource, 1.0) * amount
        return total / lq_weight

    def export(self) -> dict[str, object]:
        return {
            "consumed": self.consumed,
            "penalties": self.penalties,
            "last_sample": self.last_sample,
        }

    def load(self, data: Mapping[str, object]) -> None:
        consumed = data.get("consumed") or {}
        penalties = data.get("penalties") or {}
        assert isinstance(consumed, dict) and isinstance(penalties, dict)
        self.consumed = {k: dict(v) for k, v in consumed.items()}
        self.penalties = {k: dict(v) for k, v in penalties.items()}
        last = data.get("last_sample")
        self.last_sample = float(last) if isinstance(last, int | float) else None
