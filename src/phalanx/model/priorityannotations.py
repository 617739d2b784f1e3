"""How a ClusterQueue's jobs are ordered: the annotations of the ClusterQueue.

* ``phalanx.io/preset``: ``phalanx``, ``kueue`` or ``slurm``: the ordering of
  the jobs queued in this ClusterQueue (the cluster-wide ``--preset`` otherwise).
  Only the ordering changes per queue; the cycle, quotas and preemption follow
  the cluster-wide preset.
* ``slurm.phalanx.io/priority-job-factor``: Slurm's partition
  ``PriorityJobFactor`` (0 to 65533, default 1), the partition factor of the
  ``slurm`` ordering over the largest of all ClusterQueues.
* ``slurm.phalanx.io/tres-billing-weights``: Slurm's partition
  ``TRESBillingWeights`` (``CPU=1.0,Mem=0.25G,GRES/gpu=2``) for the usage its
  jobs are charged.
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = [
    "PARTITION_FACTOR_ANNOTATION",
    "PRESET_ANNOTATION",
    "PRESET_NAMES",
    "TRES_BILLING_ANNOTATION",
    "check_priority_annotations",
]

PRESET_ANNOTATION = "phalanx.io/preset"
PARTITION_FACTOR_ANNOTATION = "slurm.phalanx.io/priority-job-factor"
TRES_BILLING_ANNOTATION = "slurm.phalanx.io/tres-billing-weights"

PRESET_NAMES = ("phalanx", "kueue", "slurm")

_MAX_JOB_FACTOR = 65533


def check_priority_annotations(annotations: Mapping[str, str]) -> None:
    """ValueError naming the first bad ordering annotation."""
    preset = annotations.get(PRESET_ANNOTATION)
    if preset is not None and preset not in PRESET_NAMES:
        raise ValueError(
            f"metadata.annotations[{PRESET_ANNOTATION}]: expected one of "
            f"{', '.join(PRESET_NAMES)}, got {preset!r}"
        )
    factor = annotations.get(PARTITION_FACTOR_ANNOTATION)
    digits = factor.strip() if factor is not None else ""
    if factor is not None and not (
        digits.isascii()
        and digits.isdigit()
        and len(digits) <= 10
        and 0 <= int(digits) <= _MAX_JOB_FACTOR
    ):
        raise ValueError(
            f"metadata.annotations[{PARTITION_FACTOR_ANNOTATION}]: expected an integer "
            f"from 0 to {_MAX_JOB_FACTOR}, got {factor!r}"
        )
    weights = annotations.get(TRES_BILLING_ANNOTATION)
    if weights is not None:
        for item in filter(None, (part.strip() for part in weights.split(","))):
            name, sep, raw = item.partition("=")
            value = raw.strip()
            if name.strip().lower() == "mem" and value[-1:].upper() in "KMGTP":
                value = value[:-1]
            try:
                ok = bool(sep and name.strip()) and float(value) >= 0
            except ValueError:
                ok = False
            if not ok:
                raise ValueError(
                    f"metadata.annotations[{TRES_BILLING_ANNOTATION}]: bad entry {item!r}, "
                    "expected TRES=weight (e.g. CPU=1.0,Mem=0.25G,GRES/gpu=2)"
                )
