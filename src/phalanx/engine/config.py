"""Engine configuration and the policy presets it is composed from.

The settings a configuration file carries (Kueue's fairSharing and
waitForPodsReady, slurm.conf's priority, usage and backfill keys, preemption)
are model data (:mod:`phalanx.model.scheduling`), re-exported here: the
dialects read them, the composition root hands them to :class:`EngineConfig`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from phalanx.engine.placement import (
    PlacementPolicy,
    WorkloadProfile,
    check_placement,
    placement_policy,
)
from phalanx.engine.priority.ordering import (
    FairShareOrdering,
    FairShareWeights,
    KueueOrdering,
    OrderingPolicy,
    PerQueueOrdering,
    SlurmOrdering,
)
from phalanx.model.scheduling import (
    FAIR_SHARING_STRATEGIES,
    AdmissionFairSharingConfig,
    BackfillConfig,
    FairSharingConfig,
    PreemptionConfig,
    SlurmPriorityConfig,
    UsageConfig,
    WaitForPodsReadyConfig,
)

TOPOLOGY_POLICIES = ("phalanx", "slurm-tree")

__all__ = [
    "FAIR_SHARING_STRATEGIES",
    "PRESETS",
    "TOPOLOGY_POLICIES",
    "AdmissionFairSharingConfig",
    "BackfillConfig",
    "EngineConfig",
    "FairSharingConfig",
    "Policies",
    "PreemptionConfig",
    "SlurmPriorityConfig",
    "UsageConfig",
    "WaitForPodsReadyConfig",
]

PRESETS = ("phalanx", "kueue", "slurm")


@dataclass(frozen=True, slots=True)
class EngineConfig:
    preset: str = "phalanx"
    weights: FairShareWeights = field(default_factory=FairShareWeights)
    slurm_priority: SlurmPriorityConfig = field(default_factory=SlurmPriorityConfig)
    """The ``slurm`` preset's weights and flags (also used by ClusterQueues that select it)."""
    priority_calc_period_s: float = 300.0
    """How often time-dependent priorities are recomputed (Slurm's PriorityCalcPeriod)."""
    ignore_undeclared_resources: bool = False
    """Kueue's ``quotaCheckStrategy: IgnoreUndeclared``: resources without quota are not checked."""
    heads_per_cycle: int | None = None
    """Heads taken per ClusterQueue per cycle: None runs rounds until nothing more fits
    (phalanx); 1 is Kueue's cycle (one head per ClusterQueue, then the cycle ends)."""
    fair_sharing: FairSharingConfig | None = None
    wait_for_pods_ready: WaitForPodsReadyConfig | None = None
    usage: UsageConfig = field(default_factory=UsageConfig)
    backfill: BackfillConfig | None = None
    admission_fair_sharing: AdmissionFairSharingConfig | None = None
    """Kueue's Admission Fair Sharing, for the ClusterQueues that ask for it."""
    """Reservations and backfill; ``None`` admits whatever fits in priority order."""
    preemption: PreemptionConfig = field(default_factory=PreemptionConfig)
    """What happens to preempted jobs, unless their ClusterQueue says otherwise."""
    topology_policy: str = "phalanx"
    """How flavors with a Topology place pod sets without a request: ``phalanx`` (a
    multi-node gang in the lowest domain that holds it, a pod set one node holds on the
    tightest node anywhere) or ``slurm-tree`` (Slurm's topology/tree: every job on the
    lowest switch that holds it, best fit, single-node jobs too)."""
    placement: str = "phalanx"
    """How pod sets get nodes (:mod:`phalanx.engine.placement`): ``phalanx`` (node
    scoring against fragmentation), ``tight``, ``fgd``, ``best-fit``, ``dot-product``,
    ``random``, or a comma-separated chain of scorers."""
    placement_seed: int = 0
    """Seeds the ``random`` placement (its choices are a function of it and the events)."""
    missing_namespace_selector_matches_all: bool = True
    """What a ClusterQueue without ``namespaceSelector`` admits: every namespace (phalanx's
    dialects create such queues for everyone), or none (Kueue's nil selector; the
    ``kueue`` preset)."""
    max_array_size: int = 1001
    """slurm.conf's ``MaxArraySize``: a job array's indices must be below it (0: no job
    arrays). Not the engine's: the control plane checks submissions against it."""

    def __post_init__(self) -> None:
        if self.preset not in PRESETS:
            raise ValueError(f"preset must be one of {', '.join(PRESETS)}, got {self.preset!r}")
        if self.priority_calc_period_s <= 0:
            raise ValueError("priority_calc_period_s must be positive")
        if self.heads_per_cycle is not None and self.heads_per_cycle < 1:
            raise ValueError("heads_per_cycle must be at least 1 (or None)")
        if self.topology_policy not in TOPOLOGY_POLICIES:
            raise ValueError(
                f"topology_policy must be one of {', '.join(TOPOLOGY_POLICIES)}, "
                f"got {self.topology_policy!r}"
            )
        check_placement(self.placement)
        if not 0 <= self.max_array_size <= 4_000_001:
            raise ValueError("max_array_size (MaxArraySize) must be between 0 and 4000001")

    @classmethod
    def for_preset(cls, preset: str, **overrides: object) -> EngineConfig:
        """The preset's defaults.

        ``kueue`` is Kueue's: one head per ClusterQueue per cycle, a missing
        namespaceSelector matches nothing, and waitForPodsReady is on with its
        defaults (as in Kueue since v0.19). ``slurm`` backfills, as Slurm's default
        ``sched/backfill`` does; so does ``phalanx``, so that no gang starves behind
        a stream of smaller jobs (``kueue`` stays Kueue's: BestEffortFIFO lets them).
        """
        values: dict[str, object] = {"preset": preset}
        if preset == "kueue":
            values["heads_per_cycle"] = 1
            values["missing_namespace_selector_matches_all"] = False
            values["wait_for_pods_ready"] = WaitForPodsReadyConfig()
        else:
            values["backfill"] = BackfillConfig()  # Slurm's default sched/backfill
        values.update(overrides)
        return cls(**values)  # type: ignore[arg-type]


@dataclass(frozen=True, slots=True)
class Policies:
    """The policy objects a preset composes."""

    ordering: PerQueueOrdering
    placement: PlacementPolicy

    @classmethod
    def for_config(cls, config: EngineConfig, workload: WorkloadProfile) -> Policies:
        """Every preset's ordering, so that each ClusterQueue may pick its own, and the
        placement reading ``workload``."""
        by_preset: dict[str, OrderingPolicy] = {
            "phalanx": FairShareOrdering(config.weights),
            "kueue": KueueOrdering(),
            "slurm": SlurmOrdering(config.slurm_priority),
        }
        ordering = PerQueueOrdering(config.preset, by_preset)
        placement = placement_policy(config.placement, workload, config.placement_seed)
        return cls(ordering=ordering, placement=placement)
