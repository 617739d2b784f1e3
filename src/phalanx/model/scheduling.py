"""Scheduling settings: what a configuration says about how to schedule.

Kueue's Configuration (``fairSharing``, ``waitForPodsReady``,
``admissionFairSharing``) and slurm.conf's scheduling keys (``Priority*``,
``PriorityDecayHalfLife``/``PriorityUsageResetPeriod``/``TRESBillingWeights``,
``SchedulerParameters=bf_*``, ``PreemptMode``) become these frozen values. The
dialects produce them; the composition root hands them to the engine's
:class:`~phalanx.engine.config.EngineConfig`. Each checks its own ranges, so a
bad value fails where it is read.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from phalanx.model.preemptmode import PREEMPT_MODES, preemption_overrides
from phalanx.model.tres import parse_billing_weights, parse_tres_weights

__all__ = [
    "DEFAULT_MAX_AGE_S",
    "FAIR_SHARING_STRATEGIES",
    "LN2_APPROX",
    "RESET_PERIODS",
    "SLURM_PRIORITY_FLAGS",
    "AdmissionFairSharingConfig",
    "BackfillConfig",
    "FairSharingConfig",
    "PreemptionConfig",
    "SlurmPriorityConfig",
    "UsageConfig",
    "WaitForPodsReadyConfig",
]

FAIR_SHARING_STRATEGIES = ("LessThanOrEqualToFinalShare", "LessThanInitialShare")

RESET_PERIODS = ("NONE", "NOW", "DAILY", "WEEKLY", "MONTHLY", "QUARTERLY", "YEARLY")
"""``PriorityUsageResetPeriod`` values."""

DEFAULT_MAX_AGE_S: float = 7 * 86400.0
"""``PriorityMaxAge``'s default: the age factor is full after a week."""

LN2_APPROX: float = 0.693
"""Slurm's stand-in for ln 2 in its decay factor ``1 - 0.693 / half_life``."""


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
class UsageConfig:
    """How tenants' usage is charged and decayed (Slurm's ``PriorityDecayHalfLife``,
    ``PriorityUsageResetPeriod`` and ``TRESBillingWeights``)."""

    half_life_s: float = 7 * 86400.0
    """Usage halves every this many seconds; 0 turns decay off."""
    reset_period: str = "NONE"
    """``NONE``, ``NOW``, ``DAILY``, ``WEEKLY``, ``MONTHLY``, ``QUARTERLY`` or ``YEARLY``."""
    tres_billing_weights: str = ""
    """Slurm's syntax (``CPU=1.0,Mem=0.25G,GRES/gpu=2.0``); empty bills CPUs, as Slurm does."""
    fair_tree: bool = True
    """Fair Tree fair-share factors (Slurm's default); False is ``PriorityFlags=NO_FAIR_TREE``
    (classic ``2^(-UE/S)``)."""

    def __post_init__(self) -> None:
        if self.half_life_s < 0:
            raise ValueError("usage half-life must be >= 0 (0: no decay)")
        if 0 < self.half_life_s <= LN2_APPROX:
            raise ValueError("half-life must be 0 (no decay) or longer than 0.693 s")
        if self.reset_period not in RESET_PERIODS:
            raise ValueError(
                f"usage reset period must be one of {', '.join(RESET_PERIODS)}, "
                f"got {self.reset_period!r}"
            )
        parse_billing_weights(self.tres_billing_weights)


@dataclass(frozen=True, slots=True)
class AdmissionFairSharingConfig:
    """Kueue's ``admissionFairSharing``: ClusterQueues with ``admissionScope.admissionMode:
    UsageBasedAdmissionFairSharing`` order their jobs by LocalQueue usage first
    (the engine's admission fair sharing)."""

    usage_half_life_s: float
    usage_sampling_interval_s: float = 300.0
    resource_weights: Mapping[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.usage_half_life_s < 0:
            raise ValueError("admissionFairSharing.usageHalfLifeTime must be >= 0")
        if self.usage_sampling_interval_s <= 0:
            raise ValueError("admissionFairSharing.usageSamplingInterval must be positive")
        for name, weight in self.resource_weights.items():
            if not math.isfinite(weight) or weight < 0:
                raise ValueError(
                    f"admissionFairSharing.resourceWeights[{name}]: expected a number >= 0"
                )


SLURM_PRIORITY_FLAGS = (
    "ACCRUE_ALWAYS",
    "CALCULATE_RUNNING",
    "MAX_TRES",
    "MAX_TRES_GRES",
    "NO_FAIR_TREE",
    "NO_NORMAL_ALL",
    "NO_NORMAL_ASSOC",
    "NO_NORMAL_PART",
    "NO_NORMAL_QOS",
    "NO_NORMAL_TRES",
    "SMALL_RELATIVE_TO_TIME",
)
"""``PriorityFlags`` phalanx accepts. ``ACCRUE_ALWAYS`` and ``CALCULATE_RUNNING`` change
nothing (age accrues from submission; running jobs are not re-ordered); ``MAX_TRES`` and
``MAX_TRES_GRES`` apply where usage is billed."""

_WEIGHT_MAX = 2**32 - 1


@dataclass(frozen=True, slots=True)
class SlurmPriorityConfig:
    """The ``slurm`` preset's priority/multifactor settings (slurm.conf's ``Priority*``).

    The defaults give every factor a say (Slurm's own defaults are 0 for every
    weight, which makes every job's priority 1): :meth:`slurm_conf_defaults` is
    what a ``slurm.conf`` starts from.
    """

    priority_type: str = "priority/multifactor"
    """``priority/multifactor`` or ``priority/basic`` (FIFO: every job priority 1)."""
    weight_age: int = 1000
    weight_assoc: int = 0
    weight_fairshare: int = 10000
    weight_job_size: int = 1000
    weight_partition: int = 1000
    weight_qos: int = 2000
    weight_tres: str = ""
    """``PriorityWeightTRES`` in Slurm's syntax (``CPU=1000,Mem=2000,GRES/gpu=3000``)."""
    max_age_s: float = DEFAULT_MAX_AGE_S
    favor_small: bool = False
    flags: tuple[str, ...] = ()
    fairshare_dampening: float = 1.0
    """``FairShareDampeningFactor`` (classic fair-share only)."""

    def __post_init__(self) -> None:
        if self.priority_type not in ("priority/multifactor", "priority/basic"):
            raise ValueError(
                "PriorityType must be priority/multifactor or priority/basic, "
                f"got {self.priority_type!r}"
            )
        for name in ("age", "assoc", "fairshare", "job_size", "partition", "qos"):
            value = getattr(self, f"weight_{name}")
            if not 0 <= value <= _WEIGHT_MAX:
                raise ValueError(f"priority weight {name} must be in [0, {_WEIGHT_MAX}]")
        parse_tres_weights(self.weight_tres)
        if self.max_age_s <= 0:
            raise ValueError("PriorityMaxAge must be positive")
        if self.fairshare_dampening <= 0:
            raise ValueError("FairShareDampeningFactor must be positive")
        for flag in self.flags:
            if flag not in SLURM_PRIORITY_FLAGS:
                raise ValueError(
                    f"PriorityFlags: {flag!r} is not supported (supported: "
                    f"{', '.join(SLURM_PRIORITY_FLAGS)})"
                )

    @property
    def fair_tree(self) -> bool:
        return "NO_FAIR_TREE" not in self.flags

    @classmethod
    def slurm_conf_defaults(cls) -> SlurmPriorityConfig:
        """slurm.conf's defaults: every weight 0."""
        return cls(
            weight_age=0,
            weight_fairshare=0,
            weight_job_size=0,
            weight_partition=0,
            weight_qos=0,
        )


@dataclass(frozen=True, slots=True)
class BackfillConfig:
    """Reservations for blocked jobs and backfill around them (Slurm's ``sched/backfill``)."""

    window_s: float = 86400.0
    """``bf_window``: no reservation starts further out than this."""
    resolution_s: float = 60.0
    """``bf_resolution``: end times are rounded up to this grain."""
    max_job_test: int = 500
    """``bf_max_job_test``: jobs examined per backfill pass, in priority order."""
    reservations_per_queue: int = 1
    """``bf_job_part_count_reserve``: blocked jobs of one ClusterQueue that get a
    reservation (the top ones); 0 reserves for every blocked job tested."""
    interval_s: float = 30.0
    """``bf_interval``: plans are made in a backfill pass at most this often (0: in
    every cycle); between passes reservations stand and jobs only backfill onto them."""

    def __post_init__(self) -> None:
        if self.interval_s < 0:
            raise ValueError("backfill interval must be >= 0")
        if self.window_s <= 0 or self.resolution_s <= 0:
            raise ValueError("backfill window and resolution must be positive")
        if self.max_job_test < 1 or self.reservations_per_queue < 0:
            raise ValueError("backfill max_job_test must be >= 1, reservations_per_queue >= 0")


@dataclass(frozen=True, slots=True)
class PreemptionConfig:
    """What happens to a preempted job (Slurm's ``PreemptMode``, ``GraceTime`` and
    ``PreemptExemptTime``); a victim's ClusterQueue may override each setting with
    its annotations (:mod:`phalanx.model.preemptmode`)."""

    mode: str = "REQUEUE"
    """``REQUEUE``: back to pending, keeping its id; ``CANCEL``: it ends PREEMPTED;
    ``OFF``: never preempted."""
    grace_period_s: float = 0.0
    """Seconds between SIGTERM and SIGKILL (0: the job's usual kill wait)."""
    min_runtime_s: float = 0.0
    """A job admitted less than this many seconds ago is never preempted."""

    def __post_init__(self) -> None:
        if self.mode not in PREEMPT_MODES:
            raise ValueError(
                f"preemption mode must be one of {', '.join(PREEMPT_MODES)}, got {self.mode!r}"
            )
        if self.grace_period_s < 0 or self.min_runtime_s < 0:
            raise ValueError("preemption grace period and minimum runtime must be >= 0")

    def for_queue(self, annotations: Mapping[str, str]) -> PreemptionConfig:
        """These settings with a ClusterQueue's annotation overrides applied."""
        overrides = preemption_overrides(annotations)
        return replace(self, **overrides) if overrides else self  # type: ignore[arg-type]
