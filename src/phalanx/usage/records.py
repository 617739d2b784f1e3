"""The usage ledger's rows: what the store keeps of fair-share usage.

Frozen records, as the store's others (:mod:`phalanx.store.records` re-exports
them); here so that the ledger, and the simulator that runs it in memory, need
no database.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["JobChargeRow", "UsageRow"]


@dataclass(frozen=True, slots=True)
class UsageRow:
    """One association of the usage ledger: decayed usage, its descendants' included.

    ``user`` is empty for a tenant's own row; the root's row has both empty.
    """

    tenant: str
    user: str
    gpu_seconds: float
    billing_seconds: float
    """Billable TRES-seconds (Slurm's RawUsage)."""
    last_decay: float
    """When the figures were last decayed (and charged)."""
    last_reset: float
    """When ``PriorityUsageResetPeriod`` last cleared them."""


@dataclass(frozen=True, slots=True)
class JobChargeRow:
    """What the usage ledger charged one job, undecayed, over all its runs."""

    job_id: int
    tenant: str
    user: str
    gpus: int
    billing: float
    """Billable TRES of its allocation (per second of running)."""
    alloc_tres: dict[str, Any]
    """Allocated TRES: ``cpu``, ``mem`` (megabytes), ``node``, ``gres/gpu``, ..."""
    gpu_seconds: float
    billing_seconds: float
    charged_until: float | None
    """Charged up to this instant while it runs; ``None`` once it stopped."""
