"""A runtime that runs nothing: timers stand in for jobs (``phalanx up --runtime noop``).

It exists to measure the scheduler and the control plane alone, the way Kueue's
scheduler-performance harness does: a launched attempt is Started at once and
Exited COMPLETED after its *runtime*; a cancelled (or evicted) one is Exited
CANCELLED (a preempted one PREEMPTED) at once.

An attempt's runtime is, in this order:

- ``PHALANX_NOOP_RUNTIME_MS`` in the job's environment (milliseconds);
- the job's command when it is ``sleep ARG...`` or ``sh -c 'sleep ARG...'``
  (GNU sleep's arguments: numbers with an optional ``s``/``m``/``h``/``d``
  suffix, summed), so a workload behaves the same here and on the local runtime;
- for a Kubernetes job, the longest task, a task being its pods one after the
  other and a pod its longest ``sleep`` container;
- otherwise 0: it completes at the next poll.

A time limit shorter than the runtime ends the attempt as TIMEOUT at the limit.

There are no threads: :meth:`NoopRuntime.poll` fires the timers that are due.
The control loop polls the runtime on every iteration and waits at most its
poll interval (20 ms by default) for a command, so a timer fires at most that
late; :meth:`NoopRuntime.next_event_time` says when the next one is due.
Nothing is durable: after a restart no attempt can be adopted.
"""

from __future__ import annotations

import heapq
import math
import re
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from phalanx.model import JobState
from phalanx.runtime.spec import AlreadyLaunched, Exited, LaunchSpec, RuntimeEvent, Started

__all__ = ["RUNTIME_MS_ENV", "NoopRuntime", "runtime_ms"]

RUNTIME_MS_ENV = "PHALANX_NOOP_RUNTIME_MS"
"""The job environment variable that sets a noop attempt's runtime in milliseconds."""

_SLEEP_ARG = re.compile(r"^(\d+(?:\.\d*)?|\.\d+)([smhd]?)$")
_UNIT_S = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_SHELLS = frozenset({"sh", "bash", "dash"})


def _sleep_ms(argv: Sequence[str]) -> float | None:
    """Milliseconds ``argv`` sleeps, if it is a plain ``sleep`` (directly or via ``sh -c``)."""
    words = list(argv)
    if len(words) == 3 and words[0].rsplit("/", 1)[-1] in _SHELLS and words[1] == "-c":
        words = words[2].split()
    if len(words) < 2 or words[0].rsplit("/", 1)[-1] != "sleep":
        return None
    total = 0.0
    for arg in words[1:]:
        match = _SLEEP_ARG.match(arg)
        if match is None:
            return None
        total += float(match.group(1)) * _UNIT_S[match.group(2)]
    return total * 1000.0


def _pod_ms(pod: Mapping[str, Any]) -> float:
    longest = 0.0
    for container in pod.get("containers") or ():
        if not isinstance(container, Mapping):
            continue
        argv = [*(container.get("command") or ()), *(container.get("args") or ())]
        longest = max(longest, _sleep_ms([str(a) for a in argv]) or 0.0)
    return longest


def runtime_ms(spec: LaunchSpec) -> float:
    """How long ``spec``'s attempt runs under the noop runtime (see the module docstring)."""
    override = spec.env.get(RUNTIME_MS_ENV)
    if override is not None:
        try:
            value = float(override)
        except ValueError:
            value = math.nan
        if math.isfinite(value) and value >= 0:
            return value
    if spec.kube is not None:
        tasks = spec.kube.get("tasks") or ()
        return max(
            (
                sum(_pod_ms(p) for p in task if isinstance(p, Mapping))
                for task in tasks
                if isinstance(task, Sequence)
            ),
            default=0.0,
        )
    if spec.script is None:
        return _sleep_ms(spec.command) or 0.0
    return 0.0


@dataclass(slots=True)
class _Timer:
    job_id: int
    attempt: int
    start_time: float
    natural_end: float
    """When the attempt completes by itself."""
    limit_s: float | None
    cancelled_at: float | None = None
    preempted: bool = False
    exited: bool = False

    @property
    def due(self) -> float:
        if self.cancelled_at is not None:
            return self.cancelled_at
        if self.limit_s is not None:
            return min(self.natural_end, self.start_time + self.limit_s)
        return self.natural_end

    @property
    def state(self) -> str:
        if self.cancelled_at is not None:
            return JobState.PREEMPTED.value if self.preempted else JobState.CANCELLED.value
        if self.limit_s is not None and self.start_time + self.limit_s < self.natural_end:
            return JobState.TIMEOUT.value
        return JobState.COMPLETED.value


class NoopRuntime:
    """Attempts are timers: Started at launch, Exited after their runtime, or at once on cancel."""

    def __init__(self, state_dir: Path, *, clock: Callable[[], float] = time.time) -> None:
        self.state_dir = Path(state_dir)
        self.clock = clock
        self._attempts: dict[tuple[int, int], _Timer] = {}
        self._current: dict[int, int] = {}
        """Job id -> its latest launched attempt."""
        self._heap: list[tuple[float, int, int]] = []
        """(due, job id, attempt); entries of forgotten or re-timed attempts are skipped."""
        self._unreported: list[_Timer] = []
        """Launched attempts whose Started event the next poll reports."""
        self._launched: set[tuple[int, int]] = set()
        """Every attempt ever launched: launching one twice is refused, as locally."""

    def default_output(self, job_id: int) -> Path:
        """Where a job's output would go (nothing is written)."""
        return self.state_dir / "runtime" / "logs" / f"{job_id}.out"

    def launch(self, spec: LaunchSpec) -> None:
        key = (spec.job_id, spec.attempt)
        if key in self._launched:
            raise AlreadyLaunched(f"job {spec.job_id} attempt {spec.attempt} was launched already")
        self._launched.add(key)
        now = self.clock()
        timer = _Timer(
            spec.job_id, spec.attempt, now, now + runtime_ms(spec) / 1000.0, spec.time_limit_s
        )
        self._attempts[key] = timer
        self._current[spec.job_id] = spec.attempt
        self._unreported.append(timer)
        heapq.heappush(self._heap, (timer.due, spec.job_id, spec.attempt))

    def set_node_names(self, names: Iterable[str]) -> None:
        """Nothing runs, so nothing needs to resolve node names."""

    def cancel(self, job_id: int, *, preempt_grace_s: float | None = None) -> None:
        """End the current attempt now, as CANCELLED, or PREEMPTED for a preemption
        (evictions finish immediately: no process needs a grace period)."""
        timer = self._timer(job_id)
        if timer is None or timer.exited or timer.cancelled_at is not None:
            return
        timer.cancelled_at = max(self.clock(), timer.start_time)
        timer.preempted = preempt_grace_s is not None
        heapq.heappush(self._heap, (timer.due, timer.job_id, timer.attempt))

    def signal(self, job_id: int, signum: int, *, batch_only: bool = False) -> None:
        """No process receives it; the attempt runs on to its end."""

    def set_time_limit(self, job_id: int, seconds: float | None) -> None:
        """A new limit (seconds from the start, ``None``: none) re-times the running attempt."""
        timer = self._timer(job_id)
        if timer is None or timer.exited:
            return
        timer.limit_s = seconds
        heapq.heappush(self._heap, (timer.due, timer.job_id, timer.attempt))

    def adopt(self, job_id: int, attempt: int) -> bool:
        """Only attempts launched by this process are known (nothing survives a restart)."""
        return (job_id, attempt) in self._attempts

    def forget(self, job_id: int, attempt: int | None = None) -> None:
        if attempt is not None:
            self._attempts.pop((job_id, attempt), None)
        else:
            for key in [k for k in self._attempts if k[0] == job_id]:
                del self._attempts[key]
        if self._unreported:
            self._unreported = [
                t
                for t in self._unreported
                if not (t.job_id == job_id and attempt in (None, t.attempt))
            ]
        if self._current.get(job_id) is not None and (
            attempt is None or self._current[job_id] == attempt
        ):
            del self._current[job_id]

    def next_event_time(self) -> float | None:
        """When the next event is due (clock time), or ``None`` when nothing is running."""
        if self._unreported:
            return self.clock()
        while self._heap:
            due, job_id, attempt = self._heap[0]
            timer = self._attempts.get((job_id, attempt))
            if timer is not None and not timer.exited and timer.due == due:
                return due
            heapq.heappop(self._heap)
        return None

    def poll(self) -> list[RuntimeEvent]:
        """Started for new attempts, then Exited for those whose timer is due."""
        now = self.clock()
        events: list[RuntimeEvent] = [
            Started(t.job_id, t.attempt, t.start_time) for t in self._unreported
        ]
        self._unreported.clear()
        while self._heap and self._heap[0][0] <= now:
            due, job_id, attempt = heapq.heappop(self._heap)
            timer = self._attempts.get((job_id, attempt))
            if timer is None or timer.exited or timer.due != due:
                continue
            timer.exited = True
            state = timer.state
            events.append(
                Exited(
                    job_id=job_id,
                    attempt=attempt,
                    state=state,
                    exit_code=0 if state == JobState.COMPLETED.value else None,
                    signal=None,
                    start_time=timer.start_time,
                    end_time=due,
                    message="time limit reached" if state == JobState.TIMEOUT.value else "",
                )
            )
        return events

    def close(self) -> None:
        self._unreported.clear()
        self._attempts.clear()
        self._current.clear()
        self._heap.clear()

    def _timer(self, job_id: int) -> _Timer | None:
        attempt = self._current.get(job_id)
        return None if attempt is None else self._attempts.get((job_id, attempt))
