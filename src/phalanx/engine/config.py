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

__all__ = [
    "PRESETS",
    "EngineConfig",
    "FairSharingConfig",
    "Policies",
    "WaitForPodsReadyConfig",
]

PRESETS = ("phalanx", "kueue")

FAIR_SHARING_STRATEGIES = ("LessThanOrEqualToFinalShare", "LessThanInitialShare")


@dataclass(frozen=True, slots=True)
class FairSharingConfig:
    """Kueue's ``fairSharing``: the DRS tournament and fair-sharing preemption."""

    preemption_strategies: tuple[str, ...] = FAIR_SHARING_STRATEGIES

    def __post_init__(self) -> None:
        for strategy in self.preemption_strategies:
            if strategy not in FAIR_SHARING_STRATEGIES:
                raise ValueError(
                    f"fairSharing.preemptionStrategies: {strategy!r} is not one of "
                    f"{', '.join(FAIR_SHARING_STRATEGIES)}"
                )


@dataclass(frozen=True, slots=True)
class WaitForPodsReadyConfig:
    """Kueue's ``waitForPodsReady``: evict admitted jobs whose pods are not ready in time."""

    timeout_s: float = 1800.0
    recovery_timeout_s: float | None = None
    block_admission: bool = False
    requeuing_timestamp: str = "Eviction"
    """``Eviction``: a requeued job queues from its eviction time; ``Creation``: from its
    submit time (keeps its place in line)."""
    backoff_limit_count: int | None = None
    """Requeues allowed before the job is deactivated (None: unlimited)."""
    backoff_base_s: float = 60.0
    backoff_max_s: float = 3600.0

    def __post_init__(self) -> None:
        if self.timeout_s <= 0:
            raise ValueError("waitForPodsReady.timeout must be positive")
        if self.requeuing_timestamp not in ("Eviction", "Creation"):
            raise ValueError(
                "waitForPodsReady.requeuingStrategy.timestamp must be Eviction or Creation, "
                f"got {self.requeuing_timestamp!r}"
            )
        if self.backoff_limit_count is not None and self.backoff_limit_count < 0:
            raise ValueError("waitForPodsReady.requeuingStrategy.backoffLimitCount must be >= 0")


@dataclass(frozen=True, slots=True)
class EngineConfig:
    preset: str = "phalanx"
    weights: FairShareWeights = field(default_factory=FairShareWeights)
    priority_calc_period_s: float = 300.0
    """How often time-dependent priorities are recomputed (Slurm's PriorityCalcPeriod)."""
    ignore_undeclared_resources: bool = False
    """Kueue's ``quotaCheckStrategy: IgnoreUndeclared``: resources without quota are not checked."""
    heads_per_cycle: int | None = None
    """Heads taken per ClusterQueue per cycle: None runs rounds until nothing more fits
    (phalanx); 1 is Kueue's cycle (one head per ClusterQueue, then the cycle ends)."""
    fair_sharing: FairSharingConfig | None = None
    wait_for_pods_ready: WaitForPodsReadyConfig | None = None
    missing_namespace_selector_matches_all: bool = True
    """What a ClusterQueue without ``namespaceSelector`` admits: every namespace (phalanx's
    dialects create such queues for everyone), or none (Kueue's nil selector; the
    ``kueue`` preset)."""

    def __post_init__(self) -> None:
        if self.preset not in PRESETS:
            raise ValueError(f"preset must be one of {', '.join(PRESETS)}, got {self.preset!r}")
        if self.priority_calc_period_s <= 0:
            raise ValueError("priority_calc_period_s must be positive")
        if self.heads_per_cycle is not None and self.heads_per_cycle < 1:
            raise ValueError("heads_per_cycle must be at least 1 (or None)")

    @classmethod
    def for_preset(cls, preset: str, **overrides: object) -> EngineConfig:
        """The preset's defaults.

        ``kueue`` is Kueue's: one head per ClusterQueue per cycle, a missing
        namespaceSelector matches nothing, and waitForPodsReady is on with its
        defaults (as in Kueue since v0.19).
        """
        values: dict[str, object] = {"preset": preset}
        if preset == "kueue":
            values["heads_per_cycle"] = 1
            values["missing_namespace_selector_matches_all"] = False
            values["wait_for_pods_ready"] = WaitForPodsReadyConfig()
        values.update(overrides)
        return cls(**values)  # type: ignore[arg-type]


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
