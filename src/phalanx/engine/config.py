"""Engine configuration and the policy presets it is composed from."""

from __future__ import annotations

from dataclasses import dataclass, field

from phalanx.engine.ordering import (
    FairShareOrdering,
    FairShareWeights,
    KueueOrdering,
    OrderingPolicy,
)
from phalanx.engine.placement import BestFit, PlacementPolicy

__all__ = ["PRESETS", "EngineConfig", "Policies"]

PRESETS = ("phalanx", "kueue")


@dataclass(frozen=True, slots=True)
class EngineConfig:
    preset: str = "phalanx"
    weights: FairShareWeights = field(default_factory=FairShareWeights)
    priority_calc_period_s: float = 300.0
    """How often time-dependent priorities are recomputed (Slurm's PriorityCalcPeriod)."""
    ignore_undeclared_resources: bool = False
    """Kueue's ``quotaCheckStrategy: IgnoreUndeclared``: resources without quota are not checked."""

    def __post_init__(self) -> None:
        if self.preset not in PRESETS:
            raise ValueError(f"preset must be one of {', '.join(PRESETS)}, got {self.preset!r}")
        if self.priority_calc_period_s <= 0:
            raise ValueError("priority_calc_period_s must be positive")


@dataclass(frozen=True, slots=True)
class Policies:
    """The policy objects a preset composes."""

    ordering: OrderingPolicy
    placement: PlacementPolicy

    @classmethod
    def for_config(cls, config: EngineConfig) -> Policies:
        ordering: OrderingPolicy
        if config.preset == "kueue":
            ordering = KueueOrdering()
        else:
            ordering = FairShareOrdering(config.weights)
        return cls(ordering=ordering, placement=BestFit())
