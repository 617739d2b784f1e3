"""What the control plane needs from a runtime: the methods it calls, as a protocol.

:class:`~phalanx.runtime.local.LocalRuntime` (real processes) and
:class:`~phalanx.runtime.noop.NoopRuntime` (timers only, for benchmarks of the
scheduler) both satisfy it.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Protocol

from phalanx.runtime.spec import LaunchSpec, RuntimeEvent

__all__ = ["Runtime"]


class Runtime(Protocol):
    """Launches job attempts and reports their Started and Exited events through :meth:`poll`."""

    def default_output(self, job_id: int) -> Path: ...

    def launch(self, spec: LaunchSpec) -> None: ...

    def set_node_names(self, names: Iterable[str]) -> None: ...

    def cancel(self, job_id: int, *, preempt_grace_s: float | None = None) -> None:
        """Stop the current attempt: SIGTERM, the job's kill wait, SIGKILL. With
        ``preempt_grace_s`` it is a preemption: the attempt ends PREEMPTED and, when
        it is above 0, SIGKILL comes that many seconds after SIGTERM."""
        ...

    def signal(self, job_id: int, signum: int, *, batch_only: bool = False) -> None: ...

    def set_time_limit(self, job_id: int, seconds: float | None) -> None: ...

    def adopt(self, job_id: int, attempt: int) -> bool: ...

    def forget(self, job_id: int, attempt: int | None = None) -> None: ...

    def poll(self) -> list[RuntimeEvent]: ...

    def next_event_time(self) -> float | None:
        """When :meth:`poll` will next have an event (clock time), if the runtime knows;
        the control loop then polls no later than that."""
        ...

    def close(self) -> None: ...
