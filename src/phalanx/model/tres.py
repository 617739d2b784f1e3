"""TRES weight strings in Slurm's syntax (``PriorityWeightTRES``, ``TRESBillingWeights``)."""

from __future__ import annotations

__all__ = ["parse_billing_weights", "parse_tres_weights"]


def parse_tres_weights(spec: str) -> dict[str, float]:
    """``PriorityWeightTRES`` (``CPU=1000,Mem=2000,GRES/gpu=3000``) keyed by
    lower-cased TRES name; weights are floats and may be negative."""
    weights: dict[str, float] = {}
    for item in filter(None, (part.strip() for part in spec.split(","))):
        name, sep, raw = item.partition("=")
        if not sep:
            raise ValueError(f"bad PriorityWeightTRES entry {item!r}")
        weights[name.strip().lower()] = float(raw)
    return weights


_MEM_UNITS_MB: dict[str, float] = {
    "K": 1.0 / 1024,
    "M": 1.0,
    "G": 1024.0,
    "T": 1024.0**2,
    "P": 1024.0**3,
}


def parse_billing_weights(spec: str) -> dict[str, float]:
    """``TRESBillingWeights`` (``CPU=1.0,Mem=0.25G,GRES/gpu=2``) as weights per
    base unit, TRES names lower-cased; memory weights are per megabyte, so a
    ``G`` suffix means per gibibyte of memory."""
    weights: dict[str, float] = {}
    for item in filter(None, (part.strip() for part in spec.split(","))):
        name, sep, raw = item.partition("=")
        if not sep:
            raise ValueError(f"bad TRESBillingWeights entry {item!r}")
        name = name.strip().lower()
        raw = raw.strip()
        unit = 1.0
        if name == "mem" and raw and raw[-1].upper() in _MEM_UNITS_MB:
            unit = _MEM_UNITS_MB[raw[-1].upper()]
            raw = raw[:-1]
        weights[name] = float(raw) / unit
    return weights
