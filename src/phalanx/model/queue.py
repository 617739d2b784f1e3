"""Cohorts, ClusterQueues and LocalQueues: where quota lives and how jobs reach it."""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from pydantic import Field, model_validator

from phalanx.model.base import PhalanxModel
from phalanx.model.preemptmode import preemption_overrides
from phalanx.model.priorityannotations import check_priority_annotations
from phalanx.model.resources import ResourceGroup

__all__ = [
    "BorrowWithinCohort",
    "ClusterQueue",
    "ClusterQueuePreemption",
    "Cohort",
    "FairSharing",
    "FlavorFungibility",
    "FungibilityPreference",
    "LocalQueue",
    "QueueingStrategy",
    "StopPolicy",
    "WhenCanBorrow",
    "WhenCanPreempt",
]


class QueueingStrategy(StrEnum):
    STRICT_FIFO = "StrictFIFO"
    BEST_EFFORT_FIFO = "BestEffortFIFO"


class StopPolicy(StrEnum):
    NONE = "None"
    HOLD = "Hold"
    HOLD_AND_DRAIN = "HoldAndDrain"


class WhenCanBorrow(StrEnum):
    MAY_STOP_SEARCH = "MayStopSearch"
    TRY_NEXT_FLAVOR = "TryNextFlavor"


class WhenCanPreempt(StrEnum):
    MAY_STOP_SEARCH = "MayStopSearch"
    TRY_NEXT_FLAVOR = "TryNextFlavor"


class FungibilityPreference(StrEnum):
    BORROWING_OVER_PREEMPTION = "BorrowingOverPreemption"
    PREEMPTION_OVER_BORROWING = "PreemptionOverBorrowing"


class FlavorFungibility(PhalanxModel):
    """How the flavor search proceeds when a flavor needs borrowing or preemption."""

    when_can_borrow: WhenCanBorrow = WhenCanBorrow.MAY_STOP_SEARCH
    when_can_preempt: WhenCanPreempt = WhenCanPreempt.TRY_NEXT_FLAVOR
    preference: FungibilityPreference | None = None

    @model_validator(mode="after")
    def _preference_needs_try_next(self) -> FlavorFungibility:
        if self.preference is not None and not (
            self.when_can_borrow is WhenCanBorrow.TRY_NEXT_FLAVOR
            and self.when_can_preempt is WhenCanPreempt.TRY_NEXT_FLAVOR
        ):
            raise ValueError(
                "preference can only be set when both whenCanBorrow and whenCanPreempt "
                "are TryNextFlavor"
            )
        return self


class BorrowWithinCohort(PhalanxModel):
    policy: Literal["Never", "LowerPriority"] = "Never"
    max_priority_threshold: int | None = None


class ClusterQueuePreemption(PhalanxModel):
    within_cluster_queue: Literal["Never", "LowerPriority", "LowerOrNewerEqualPriority"] = "Never"
    reclaim_within_cohort: Literal["Never", "LowerPriority", "Any"] = "Never"
    borrow_within_cohort: BorrowWithinCohort | None = None

    @model_validator(mode="after")
    def _borrow_needs_reclaim(self) -> ClusterQueuePreemption:
        if (
            self.reclaim_within_cohort == "Never"
            and self.borrow_within_cohort is not None
            and self.borrow_within_cohort.policy != "Never"
        ):
            raise ValueError("reclaimWithinCohort=Never and borrowWithinCohort.Policy!=Never")
        return self


class FairSharing(PhalanxModel):
    weight: float = Field(default=1.0, ge=0)


def _check_groups(
    groups: list[ResourceGroup],
    has_parent: bool,
    parent_field: str,
    lending_within_nominal: bool = False,
) -> None:
    seen_resources: set[str] = set()
    seen_flavors: set[str] = set()
    for g, group in enumerate(groups):
        for resource in group.covered_resources:
            if resource in seen_resources:
                raise ValueError(
                    f"resourceGroups[{g}]: resource {resource!r} is covered by more than one group"
                )
            seen_resources.add(resource)
        for f, flavor in enumerate(group.flavors):
            if flavor.name in seen_flavors:
                raise ValueError(
                    f"resourceGroups[{g}].flavors[{f}]: flavor {flavor.name!r} "
                    "appears in more than one group"
                )
            seen_flavors.add(flavor.name)
            for r, quota in enumerate(flavor.resources):
                if has_parent:
                    if (
                        lending_within_nominal
                        and quota.lending_limit is not None
                        and quota.lending_limit > quota.nominal_quota
                    ):
                        raise ValueError(
                            f"resourceGroups[{g}].flavors[{f}].resources[{r}].lendingLimit: "
                            "must be less than or equal to the nominalQuota"
                        )
                    continue
                for attr, wire in (
                    ("borrowing_limit", "borrowingLimit"),
                    ("lending_limit", "lendingLimit"),
                ):
                    if getattr(quota, attr) is not None:
                        raise ValueError(
                            f"resourceGroups[{g}].flavors[{f}].resources[{r}].{wire}: "
                            f"only allowed when {parent_field} is set"
                        )


class Cohort(PhalanxModel):
    """A node of the quota-sharing tree; may hold quota of its own."""

    name: str = Field(min_length=1)
    parent_name: str | None = None
    resource_groups: list[ResourceGroup] = Field(default_factory=list, max_length=16)
    fair_sharing: FairSharing | None = None

    @model_validator(mode="after")
    def _valid(self) -> Cohort:
        if self.parent_name == self.name:
            raise ValueError("parentName: a Cohort cannot be its own parent")
        _check_groups(self.resource_groups, bool(self.parent_name), "parentName")
        return self


class ClusterQueue(PhalanxModel):
    """Quotas per flavor, a queueing strategy, and membership of a Cohort."""

    name: str = Field(min_length=1)
    cohort_name: str | None = None
    queueing_strategy: QueueingStrategy = QueueingStrategy.BEST_EFFORT_FIFO
    resource_groups: list[ResourceGroup] = Field(default_factory=list, max_length=16)
    flavor_fungibility: FlavorFungibility = Field(default_factory=FlavorFungibility)
    preemption: ClusterQueuePreemption = Field(default_factory=ClusterQueuePreemption)
    stop_policy: StopPolicy = StopPolicy.NONE
    namespace_selector: dict[str, object] | None = None
    fair_sharing: FairSharing | None = None
    annotations: dict[str, str] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _valid(self) -> ClusterQueue:
        _check_groups(
            self.resource_groups, bool(self.cohort_name), "cohortName", lending_within_nominal=True
        )
        preemption_overrides(self.annotations)
        check_priority_annotations(self.annotations)
        _check_whole_annotations(self.annotations)
        return self

    def flavor_names(self) -> list[str]:
        """Every flavor named by the queue's resource groups, in group then preference order."""
        return [f.name for g in self.resource_groups for f in g.flavors]


WHOLE_ANNOTATIONS = (
    "slurm.phalanx.io/default-time",
    "slurm.phalanx.io/max-time",
    "slurm.phalanx.io/def-mem-per-cpu",
)
"""ClusterQueue annotations that hold a whole number (seconds, MB), read at submission."""


def _check_whole_annotations(annotations: dict[str, str]) -> None:
    for key in WHOLE_ANNOTATIONS:
        value = annotations.get(key)
        if value is not None and not (value.isascii() and value.isdigit() and len(value) <= 18):
            raise ValueError(
                f"metadata.annotations[{key}]: expected a whole number (at most 18 digits), "
                f"got {value[:40]!r}"
            )


class LocalQueue(PhalanxModel):
    """A tenant's (namespace's) door into a ClusterQueue."""

    name: str = Field(min_length=1)
    namespace: str = Field(default="default", min_length=1)
    cluster_queue: str = Field(min_length=1)
    stop_policy: StopPolicy = StopPolicy.NONE
    fair_sharing: FairSharing | None = None
