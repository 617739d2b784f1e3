"""The local runtime: detached per-job supervisors on this machine, and GPU detection.

:class:`LocalRuntime` launches, cancels, polls and re-adopts job attempts;
the supervisor (:mod:`phalanx.runtime.supervisor`) is standard library only.
:func:`detect_gpus` (NVML, optional ``nvidia`` extra) and :class:`LocalRuntime`
are imported on first use so that importing this package stays cheap (the
supervisor is started as ``-m phalanx.runtime.supervisor``, which imports it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from phalanx.runtime.spec import (
    AlreadyLaunched,
    Checkpointed,
    Exited,
    LaunchSpec,
    RuntimeEvent,
    Started,
    StepsReported,
    TaskSpec,
)

if TYPE_CHECKING:
    from phalanx.runtime.detect import detect_gpus
    from phalanx.runtime.local import LocalRuntime

__all__ = [
    "AlreadyLaunched",
    "Checkpointed",
    "Exited",
    "LaunchSpec",
    "LocalRuntime",
    "RuntimeEvent",
    "Started",
    "StepsReported",
    "TaskSpec",
    "detect_gpus",
]


def __getattr__(name: str) -> Any:
    if name == "LocalRuntime":
        from phalanx.runtime.local import LocalRuntime

        return LocalRuntime
    if name == "detect_gpus":
        from phalanx.runtime.detect import detect_gpus

        return detect_gpus
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
