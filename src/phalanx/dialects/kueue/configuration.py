"""Kueue's own ``Configuration`` (``config.kueue.x-k8s.io`` v1beta2 and v1beta1).

Kueue reads this file at start; phalanx accepts it from ``phalanx up --config``
and ``phalanx apply``. The fields that change admission become the engine's
configuration (:class:`~phalanx.model.scheduling.FairSharingConfig`,
:class:`~phalanx.model.scheduling.WaitForPodsReadyConfig`); the fields that only
configure Kueue's controller deployment (webhook, metrics, leader election,
client connection, ...) are accepted and have no effect; the features phalanx
does not implement are refused with "not supported" and the reason.

As in Kueue since v0.19, ``waitForPodsReady`` is on with its defaults when the
block is absent (v1beta1's ``enable: false`` turns it off); ``fairSharing`` is
on when its block is present (and, in v1beta1, not ``enable: false``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from phalanx.dialects.kueue.validation import (
    LABEL_SELECTOR,
    Field,
    Problem,
    check,
    list_of,
    object_of,
    parse_duration,
    string,
    unsupported,
)
from phalanx.model.scheduling import (
    FAIR_SHARING_STRATEGIES,
    AdmissionFairSharingConfig,
    FairSharingConfig,
    WaitForPodsReadyConfig,
)

__all__ = [
    "CONFIG_API_VERSIONS",
    "AdmissionFairSharingConfig",
    "KueueConfiguration",
    "convert_configuration",
]

CONFIG_API_VERSIONS = ("config.kueue.x-k8s.io/v1beta2", "config.kueue.x-k8s.io/v1beta1")

_NO_EFFECT = Field("any", ignored=True)
"""Settings of Kueue's controller deployment; phalanx has no such component."""

_DURATION = Field("duration")
_INT32_MIN0 = Field("integer", minimum=0, maximum=2**31 - 1)


def _schema(v1beta1: bool) -> Field:
    requeuing = object_of(
        {
            "timestamp": string(enum=("Eviction", "Creation")),
            "backoffLimitCount": _INT32_MIN0,
            "backoffBaseSeconds": _INT32_MIN0,
            "backoffMaxSeconds": _INT32_MIN0,
        }
    )
    wait: dict[str, Field] = {
        "timeout": _DURATION,
        "blockAdmission": Field("boolean"),
        "requeuingStrategy": requeuing,
        "recoveryTimeout": _DURATION,
        "maxTimeoutOnWorkload": unsupported(
            "per-workload waitForPodsReady timeouts are not implemented; remove the field"
        ),
    }
    fair: dict[str, Field] = {
        "preemptionStrategies": list_of(string(enum=FAIR_SHARING_STRATEGIES), max_items=2),
    }
    if v1beta1:
        wait["enable"] = Field("boolean")
        fair["enable"] = Field("boolean")
    props: dict[str, Field] = {
        "apiVersion": string(),
        "kind": string(),
        "metadata": _NO_EFFECT,
        "waitForPodsReady": object_of(wait),
        "fairSharing": object_of(fair),
        "admissionFairSharing": object_of(
            {
                "usageHalfLifeTime": _DURATION,
                "usageSamplingInterval": _DURATION,
                "resourceWeights": Field("any"),
            },
            "usageHalfLifeTime",
        ),
        "manageJobsWithoutQueueName": Field("boolean"),
        "integrations": object_of(
            {
                "frameworks": list_of(string()),
                "externalFrameworks": unsupported(
                    "phalanx runs only batch/v1 Job, JobSet, PyTorchJob, RayJob and Workload"
                ),
                "labelKeysToCopy": list_of(string()),
            }
        ),
        "featureGates": Field("any"),
        "managedJobsNamespaceSelector": LABEL_SELECTOR,
        "multiKueue": unsupported("phalanx has no MultiKueue (one cluster); remove the field"),
        "resources": unsupported(
            "resource exclusions, transformations and device-class mappings are not "
            "implemented; remove the field"
        ),
        "objectRetentionPolicies": unsupported(
            "phalanx keeps finished jobs in its store; remove the field"
        ),
        **{
            key: _NO_EFFECT
            for key in (
                "namespace",
                "webhook",
                "leaderElection",
                "metrics",
                "health",
                "pprofBindAddress",
                "controller",
                "tls",
                "internalCertManagement",
                "clientConnection",
                "visibilityServer",
            )
        },
    }
    if v1beta1:
        props["queueVisibility"] = _NO_EFFECT
    return object_of(props)


_SCHEMAS = {CONFIG_API_VERSIONS[0]: _schema(False), CONFIG_API_VERSIONS[1]: _schema(True)}


@dataclass(frozen=True, slots=True)
class KueueConfiguration:
    """The admission-related part of a Kueue ``Configuration``."""

    name: str = "kueue-config"
    fair_sharing: FairSharingConfig | None = None
    wait_for_pods_ready: WaitForPodsReadyConfig | None = field(
        default_factory=WaitForPodsReadyConfig
    )
    admission_fair_sharing: AdmissionFairSharingConfig | None = None
    frameworks: tuple[str, ...] = ("batch/job",)
    manifest: dict[str, Any] = field(default_factory=dict, compare=False)

    def engine_overrides(self) -> dict[str, object]:
        """Keyword arguments for :meth:`phalanx.engine.EngineConfig.for_preset`."""
        return {
            "fair_sharing": self.fair_sharing,
            "wait_for_pods_ready": self.wait_for_pods_ready,
            "admission_fair_sharing": self.admission_fair_sharing,
        }


def _finite(value: float) -> bool:
    """``value`` is a float, or an int a float can hold, and neither infinite nor NaN."""
    try:
        return math.isfinite(float(value))
    except OverflowError:
        return False


def _seconds(value: Any) -> float | None:
    return parse_duration(value) if isinstance(value, str) else None


def convert_configuration(
    api_version: str, data: Mapping[str, Any]
) -> tuple[KueueConfiguration | None, list[Problem]]:
    """The :class:`KueueConfiguration` of a ``Configuration`` document, or its problems."""
    problems: list[Problem] = []
    checked = check(_SCHEMAS[api_version], data, (), problems)
    if problems or not isinstance(checked, Mapping):
        return None, problems
    v1beta1 = api_version == CONFIG_API_VERSIONS[1]

    wait_for_pods_ready: WaitForPodsReadyConfig | None = WaitForPodsReadyConfig()
    wait = checked.get("waitForPodsReady")
    if isinstance(wait, Mapping):
        if v1beta1 and wait.get("enable") is False:
            wait_for_pods_ready = None
        else:
            timeout = _seconds(wait.get("timeout")) or 1800.0
            requeue = wait.get("requeuingStrategy") or {}
            recovery = _seconds(wait.get("recoveryTimeout"))
            try:
                wait_for_pods_ready = WaitForPodsReadyConfig(
                    timeout_s=timeout,
                    recovery_timeout_s=timeout if recovery is None else (recovery or None),
                    block_admission=bool(wait.get("blockAdmission", False)),
                    requeuing_timestamp=requeue.get("timestamp", "Eviction"),
                    backoff_limit_count=requeue.get("backoffLimitCount"),
                    backoff_base_s=float(requeue.get("backoffBaseSeconds") or 60),
                    backoff_max_s=float(requeue.get("backoffMaxSeconds") or 3600),
                )
            except ValueError as exc:
                problems.append((("waitForPodsReady",), str(exc).split(": ", 1)[-1]))
    elif v1beta1:
        # v1beta1 spelled the switch out; without the block Kueue's conversion
        # still turns it on (the v1beta2 default).
        wait_for_pods_ready = WaitForPodsReadyConfig()

    fair_sharing: FairSharingConfig | None = None
    fair = checked.get("fairSharing")
    if isinstance(fair, Mapping) and not (v1beta1 and fair.get("enable") is False):
        strategies = tuple(fair.get("preemptionStrategies") or FAIR_SHARING_STRATEGIES)
        allowed = (
            FAIR_SHARING_STRATEGIES,
            FAIR_SHARING_STRATEGIES[:1],
            FAIR_SHARING_STRATEGIES[1:],
        )
        if strategies not in allowed:
            problems.append(
                (
                    ("fairSharing", "preemptionStrategies"),
                    f"expected [{FAIR_SHARING_STRATEGIES[0]}], [{FAIR_SHARING_STRATEGIES[1]}] "
                    f"or both in that order, got [{', '.join(strategies)}]",
                )
            )
        else:
            fair_sharing = FairSharingConfig(preemption_strategies=strategies)

    admission: AdmissionFairSharingConfig | None = None
    afs = checked.get("admissionFairSharing")
    if isinstance(afs, Mapping):
        weights = afs.get("resourceWeights") or {}
        if not isinstance(weights, Mapping) or not all(
            isinstance(v, int | float) and not isinstance(v, bool) and _finite(v)
            for v in weights.values()
        ):
            problems.append(
                (
                    ("admissionFairSharing", "resourceWeights"),
                    "expected a mapping of resource name to number",
                )
            )
        else:
            try:
                admission = AdmissionFairSharingConfig(
                    usage_half_life_s=_seconds(afs.get("usageHalfLifeTime")) or 0.0,
                    usage_sampling_interval_s=_seconds(afs.get("usageSamplingInterval")) or 300.0,
                    resource_weights={str(k): float(v) for k, v in weights.items()},
                )
            except ValueError as exc:
                problems.append((("admissionFairSharing",), str(exc).split(": ", 1)[-1]))

    if checked.get("manageJobsWithoutQueueName"):
        problems.append(
            (
                ("manageJobsWithoutQueueName",),
                "not supported: phalanx manages only the jobs it is given; remove the field "
                "or set it to false",
            )
        )
    if problems:
        return None, problems
    metadata = checked.get("metadata")
    name = metadata.get("name") if isinstance(metadata, Mapping) else None
    frameworks = (checked.get("integrations") or {}).get("frameworks") or ["batch/job"]
    return (
        KueueConfiguration(
            name=name if isinstance(name, str) and name else "kueue-config",
            fair_sharing=fair_sharing,
            wait_for_pods_ready=wait_for_pods_ready,
            admission_fair_sharing=admission,
            frameworks=tuple(frameworks),
            manifest=dict(data),
        ),
        [],
    )
