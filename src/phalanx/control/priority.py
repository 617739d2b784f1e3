"""Pending jobs' priority factors as the API answers them (``GET /api/v1/priority``).

Reads the engine only (the caller holds the control plane's lock): the
weights of the presets and, per pending job the principal may see, its
priority and :meth:`phalanx.engine.Engine.priority_factors`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from phalanx.auth import Principal
from phalanx.engine import Engine

__all__ = ["priority_answer", "weights_of"]


def _preset_of(factors: dict[str, float]) -> str:
    if "fairshare" in factors or not factors:
        return "slurm"
    if "share" in factors:
        return "phalanx"
    return "kueue"


def weights_of(engine: Engine) -> dict[str, Any]:
    """The cluster-wide preset and each preset's weights (sprio ``-w``)."""
    slurm = engine.config.slurm_priority
    return {
        "preset": engine.config.preset,
        "slurm": {
            "priority_type": slurm.priority_type,
            "age": slurm.weight_age,
            "assoc": slurm.weight_assoc,
            "fairshare": slurm.weight_fairshare,
            "jobsize": slurm.weight_job_size,
            "partition": slurm.weight_partition,
            "qos": slurm.weight_qos,
            "tres": slurm.weight_tres,
            "flags": list(slurm.flags),
        },
        "phalanx": asdict(engine.config.weights),
    }


def priority_answer(
    engine: Engine,
    principal: Principal,
    job_ids: Sequence[int] | None,
    users: Sequence[str] | None,
) -> dict[str, Any]:
    wanted = set(users) if users else None
    ids = sorted(job_ids) if job_ids is not None else sorted(engine.jobs)
    jobs: list[dict[str, Any]] = []
    for job_id in ids:
        rec = engine.jobs.get(job_id)
        if rec is None or not principal.may_act_for(rec.job.tenant):
            continue
        if wanted is not None and rec.job.user not in wanted:
            continue
        factors = engine.priority_factors(job_id)
        if factors is None:
            continue
        jobs.append(
            {
                "id": job_id,
                "partition": rec.cluster_queue or rec.job.cluster_queue or "",
                "user": rec.job.user,
                "tenant": rec.job.tenant,
                "priority": rec.priority,
                "preset": _preset_of(factors),
                "factors": factors,
            }
        )
    return {"weights": weights_of(engine), "jobs": jobs}
