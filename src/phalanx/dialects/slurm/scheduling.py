"""``slurm.conf``'s scheduling keys -> the engine's configuration (``phalanx up --config``).

:func:`read_slurm_conf` turns nodes and partitions into objects; this module
reads the cluster-wide keys that are engine settings, not objects, and
returns them as keyword arguments of
:meth:`phalanx.engine.EngineConfig.for_preset`:

* ``PriorityType``, ``PriorityWeightAge``/``Assoc``/``Fairshare``/``JobSize``/
  ``Partition``/``QOS``/``TRES``, ``PriorityMaxAge``, ``PriorityFavorSmall``,
  ``PriorityFlags`` and ``FairShareDampeningFactor`` -> ``slurm_priority``
  (:class:`~phalanx.model.scheduling.SlurmPriorityConfig`). When any of them is
  present the others take slurm.conf's defaults (every weight 0), as Slurm
  does; a file without them leaves the ``slurm`` preset's defaults.
* ``PriorityDecayHalfLife``, ``PriorityUsageResetPeriod`` and ``NO_FAIR_TREE`` ->
  ``usage`` (:class:`~phalanx.model.scheduling.UsageConfig`); ``PriorityCalcPeriod``
  (minutes) -> ``priority_calc_period_s``.
* ``SchedulerType=sched/backfill`` with ``SchedulerParameters`` ``bf_interval``
  (seconds), ``bf_window`` (minutes), ``bf_resolution`` (seconds), ``bf_max_job_test`` and
  ``bf_job_part_count_reserve`` -> ``backfill``
  (:class:`~phalanx.model.scheduling.BackfillConfig`); ``sched/builtin`` turns
  backfill off. Without ``SchedulerType`` backfill stays as the preset has it
  (``SchedulerParameters`` alone implies ``sched/backfill``).
* ``MaxArraySize`` (0 to 4000001; 0 disables job arrays) -> ``max_array_size``:
  the control plane refuses a job array with an index at or above it (Slurm's
  default is 1001).

Partition ``PriorityJobFactor`` and ``TRESBillingWeights`` are ClusterQueue
annotations, written by :func:`read_slurm_conf`. Every bad value is one error
naming ``file:line`` and the key.
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path
from typing import Any

from phalanx.dialects.slurm.arrays import MAX_ARRAY_SIZE_LIMIT
from phalanx.dialects.slurm.slurmconf import _logical_lines, _pairs
from phalanx.errors import Invalid
from phalanx.model.scheduling import (
    BackfillConfig,
    SlurmPriorityConfig,
    UsageConfig,
)
from phalanx.timefmt import parse_time_limit

__all__ = ["SCHEDULING_KEYS", "is_slurm_conf", "read_health_check", "read_scheduling"]

_WEIGHTS = {
    "priorityweightage": "weight_age",
    "priorityweightassoc": "weight_assoc",
    "priorityweightfairshare": "weight_fairshare",
    "priorityweightjobsize": "weight_job_size",
    "priorityweightpartition": "weight_partition",
    "priorityweightqos": "weight_qos",
}
_PRIORITY_KEYS = (
    *_WEIGHTS,
    "prioritytype",
    "priorityweighttres",
    "prioritymaxage",
    "priorityfavorsmall",
    "priorityflags",
    "fairsharedampeningfactor",
)
_USAGE_KEYS = ("prioritydecayhalflife", "priorityusageresetperiod")
_SCHED_KEYS = ("schedulertype", "schedulerparameters")

SCHEDULING_KEYS = (
    *_PRIORITY_KEYS,
    *_USAGE_KEYS,
    "prioritycalcperiod",
    *_SCHED_KEYS,
    "maxarraysize",
)
"""The cluster-wide keys (lower-cased) this module reads."""

_SCHEDULERS = ("sched/backfill", "sched/builtin")


def is_slurm_conf(path: Path) -> bool:
    """A ``--config`` file read as slurm.conf rather than as manifests: ``*.conf``."""
    return path.is_file() and path.suffix.lower() == ".conf"


def _minutes(source: str, number: int, key: str, value: str) -> float:
    """Slurm's time_str2mins formats (``5``, ``7-0``, ``1:30:00``) as seconds; 0 is 0."""
    if value.strip() in ("0", "0:00"):
        return 0.0
    try:
        seconds = parse_time_limit(value)
    except Invalid as exc:
        raise Invalid(f"{source}:{number}: {key}={value}: {exc.detail}") from None
    if seconds is None:
        raise Invalid(f"{source}:{number}: {key}={value}: expected a time, not unlimited")
    return float(seconds)


_MAX_WHOLE = 2**32 - 1
"""Slurm keeps these numbers in 32 bits."""


def _whole(source: str, number: int, key: str, value: str) -> int:
    digits = value.strip()
    if not re.fullmatch(r"[0-9]+", digits):
        raise Invalid(f"{source}:{number}: {key}={value}: expected a whole number")
    if len(digits.lstrip("0")) > 10 or int(digits) > _MAX_WHOLE:
        raise Invalid(f"{source}:{number}: {key}={digits[:24]}: too large (at most {_MAX_WHOLE})")
    return int(digits)


_FIELDS = {
    **_WEIGHTS,
    "prioritytype": "priority_type",
    "priorityweighttres": "weight_tres",
    "prioritymaxage": "max_age_s",
    "priorityfavorsmall": "favor_small",
    "priorityflags": "flags",
    "fairsharedampeningfactor": "fairshare_dampening",
}
"""slurm.conf key -> :class:`SlurmPriorityConfig` field."""


def _priority_value(source: str, number: int, key: str, name: str, value: str) -> Any:
    if key in _WEIGHTS or key == "fairsharedampeningfactor":
        whole = _whole(source, number, name, value)
        return float(whole) if key == "fairsharedampeningfactor" else whole
    if key == "prioritytype":
        return value.strip().lower()
    if key == "priorityweighttres":
        return value.strip()
    if key == "prioritymaxage":
        return _minutes(source, number, name, value)
    if key == "priorityfavorsmall":
        if value.strip().upper() not in ("YES", "NO"):
            raise Invalid(f"{source}:{number}: {name}={value}: expected YES or NO")
        return value.strip().upper() == "YES"
    return tuple(f.strip().upper() for f in value.split(",") if f.strip())


def _priority(keys: dict[str, tuple[int, str, str]], source: str) -> SlurmPriorityConfig:
    config = SlurmPriorityConfig.slurm_conf_defaults()
    for key, field in _FIELDS.items():
        if key not in keys:
            continue
        number, name, value = keys[key]
        parsed = _priority_value(source, number, key, name, value)
        try:
            config = replace(config, **{field: parsed})
        except ValueError as exc:
            raise Invalid(f"{source}:{number}: {name}={value}: {exc}") from None
    return config


def _backfill(
    keys: dict[str, tuple[int, str, str]], source: str
) -> tuple[bool, BackfillConfig | None]:
    """``(set, config)``: whether the file says anything about backfill, and what."""
    scheduler = keys.get("schedulertype")
    if scheduler is not None:
        number, name, value = scheduler
        if value.strip().lower() not in _SCHEDULERS:
            raise Invalid(
                f"{source}:{number}: {name}={value}: expected one of {', '.join(_SCHEDULERS)}"
            )
        if value.strip().lower() == "sched/builtin":
            return True, None
    params = keys.get("schedulerparameters")
    if scheduler is None and params is None:
        return False, None
    config = BackfillConfig()
    if params is not None:
        number, name, value = params
        fields: dict[str, object] = {}
        for item in filter(None, (p.strip() for p in value.split(","))):
            option, _, raw = item.partition("=")
            option = option.strip().lower()
            if option == "bf_window":
                fields["window_s"] = 60.0 * _whole(source, number, f"{name} bf_window", raw)
            elif option == "bf_resolution":
                fields["resolution_s"] = float(_whole(source, number, f"{name} bf_resolution", raw))
            elif option == "bf_max_job_test":
                fields["max_job_test"] = _whole(source, number, f"{name} bf_max_job_test", raw)
            elif option == "bf_interval":
                fields["interval_s"] = float(_whole(source, number, f"{name} bf_interval", raw))
            elif option == "bf_job_part_count_reserve":
                fields["reservations_per_queue"] = _whole(
                    source, number, f"{name} bf_job_part_count_reserve", raw
                )
            # Other SchedulerParameters tune Slurm's daemons: nothing to do here.
        try:
            config = replace(config, **fields)  # type: ignore[arg-type]
        except ValueError as exc:
            raise Invalid(f"{source}:{number}: {name}={value}: {exc}") from None
    return True, config


def read_scheduling(text: str, source: str = "slurm.conf") -> dict[str, object]:
    """The engine settings a slurm.conf sets, as ``EngineConfig.for_preset`` overrides."""
    keys: dict[str, tuple[int, str, str]] = {}
    for number, line in _logical_lines(text):
        pairs = _pairs(source, number, line)
        if not pairs:
            continue
        key, value = pairs[0]
        if key in SCHEDULING_KEYS:
            name = line.split("=", 1)[0].strip()
            keys[key] = (number, name, value)
    out: dict[str, object] = {}
    if any(k in keys for k in _PRIORITY_KEYS):
        out["slurm_priority"] = _priority(keys, source)
    usage = UsageConfig()
    for key, field in (
        ("prioritydecayhalflife", "half_life_s"),
        ("priorityusageresetperiod", "reset_period"),
    ):
        if key not in keys:
            continue
        number, name, value = keys[key]
        parsed: Any = (
            _minutes(source, number, name, value)
            if field == "half_life_s"
            else value.strip().upper()
        )
        try:
            usage = replace(usage, **{field: parsed})
        except ValueError as exc:
            raise Invalid(f"{source}:{number}: {name}={value}: {exc}") from None
    priority = out.get("slurm_priority")
    if isinstance(priority, SlurmPriorityConfig) and not priority.fair_tree:
        usage = replace(usage, fair_tree=False)
    if usage != UsageConfig():
        out["usage"] = usage
    if "prioritycalcperiod" in keys:
        number, name, value = keys["prioritycalcperiod"]
        seconds = _minutes(source, number, name, value)
        if seconds <= 0:
            raise Invalid(f"{source}:{number}: {name}={value}: expected a positive time")
        out["priority_calc_period_s"] = seconds
    said, backfill = _backfill(keys, source)
    if said:
        out["backfill"] = backfill
    if "maxarraysize" in keys:
        number, name, value = keys["maxarraysize"]
        size = _whole(source, number, name, value)
        if size > MAX_ARRAY_SIZE_LIMIT:
            raise Invalid(
                f"{source}:{number}: {name}={value.strip()}: too large "
                f"(at most {MAX_ARRAY_SIZE_LIMIT}, as in Slurm)"
            )
        out["max_array_size"] = size
    return out


def read_health_check(text: str, source: str = "slurm.conf") -> dict[str, object]:
    """``HealthCheckProgram`` (``program``) and ``HealthCheckInterval`` (``interval_s``,
    seconds; 0, Slurm's default: only when the node starts) of a slurm.conf, and its
    node ``Epilog`` (``epilog``), the other program run on the nodes."""
    out: dict[str, object] = {}
    for number, line in _logical_lines(text):
        pairs = _pairs(source, number, line)
        if not pairs:
            continue
        key, value = pairs[0]
        name = line.split("=", 1)[0].strip()
        if key == "healthcheckprogram" and value.strip():
            out["program"] = value.strip()
        elif key == "healthcheckinterval":
            out["interval_s"] = float(_whole(source, number, name, value))
        elif key == "epilog" and value.strip():
            out["epilog"] = value.strip()
    return out
