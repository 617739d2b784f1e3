"""The discrete-event simulator: a trace through the engine's real ``cycle()``, on a virtual clock.

:class:`Simulator` keeps a heap of events (a job's submission, a job's end, a
wakeup) and, at each distinct time, in this order:

1. applies every event of that time, ends before submissions (ties among ends
   or among submissions in trace order): what ends at *t* frees its GPUs for
   what is submitted at *t*;
2. once per priority period (``priority_calc_period_s``), charges the tenants'
   usage with the live control plane's ledger
   (:class:`~phalanx.usage.ledger.UsageLedger`, in memory) and hands the engine
   the changed figures;
3. runs ``engine.cycle(now)`` (again at the same time while a one-head-per-cycle
   preset still admits, as the live loop does) and carries out its decisions:
   an Admit starts the job (it ends ``min(duration, time limit)`` later); an
   Evict stops it at once (no grace period in a simulation) and requeues it,
   where it later runs again from the start (no checkpoints), or ends it
   PREEMPTED in CANCEL mode; a Deactivate ends it FAILED.

With a :class:`~phalanx.sim.failures.FailureModel`, nodes also fail: at a
node's failure time it goes down (an Upsert of the Node with state ``down``, as
the live inventory reports a lost machine), every job running on it stops and
is requeued (a ``Requeue`` with reason ``NodeFail``, as the live control plane
does when a job ends NODE_FAIL) and later runs what its checkpoints did not
keep (everything, without checkpoints); the node is back up (state ``up``)
after the repair time. Failures are applied after the other events of their
time, and only while anything else is left to happen. Failure times, like the
traces' times, are whole seconds, so every step is on a whole second and the
periodic wakeups below fall on at most a period's seconds of phases.

Wakeups come from ``engine.next_wakeup()`` and, while jobs wait and others
run, every backfill interval and priority period, the times the live system's
cycles would have run at anyway. A job that fits nowhere in the cluster stays
pending: the run ends when nothing else is left to happen, with it unfinished.

The engine is the live system's, unchanged; nothing here reads a clock.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

from phalanx.engine import Admit, Engine, Finish, Requeue, Submit, Upsert
from phalanx.engine.decisions import Deactivate, Evict
from phalanx.engine.events import PodsReady
from phalanx.model import AdminState, JobState, Node, Tenant
from phalanx.sim.failures import FailureModel
from phalanx.sim.setup import Scenario
from phalanx.sim.trace import TraceJob
from phalanx.usage.ledger import MemoryBook, UsageLedger

__all__ = ["JobOutcome", "SimResult", "Simulator"]

_END, _SUBMIT, _WAKE, _UP = 0, 1, 2, 3


@dataclass(slots=True)
class JobOutcome:
    """What happened to one trace job."""

    job: TraceJob
    start: float | None = None
    """First start."""
    end: float | None = None
    state: str = JobState.PENDING.value
    preemptions: int = 0
    attempts: int = 0
    reserved_gpus: float = 0.0
    """GPUs its run holds (a share of one counted as its fraction)."""
    nodes: tuple[str, ...] = ()
    """Where its last run ran."""
    held: tuple[tuple[str, float], ...] = ()
    """The GPUs its run holds on each node."""
    run_s: float = 0.0
    """Seconds it ran, every attempt together."""
    progress_s: float = 0.0
    """Seconds of its work its checkpoints keep (what a new attempt need not run)."""
    lost_to_failures_s: float = 0.0
    """Seconds of its runs lost when a node it ran on failed."""
    lost_to_evictions_s: float = 0.0
    """Seconds of its runs lost when the engine evicted it (preemption, a stopped queue)."""
    failures: int = 0
    """Times a node failure stopped it."""
    attempt_start: float | None = None
    """When its current attempt started."""

    @property
    def queue_delay(self) -> float | None:
        return None if self.start is None else self.start - self.job.submit

    @property
    def jct(self) -> float | None:
        return None if self.end is None else self.end - self.job.submit


@dataclass(slots=True)
class SimResult:
    """A run: every job's outcome and the cluster over time."""

    policy: str
    gpus: int
    outcomes: list[JobOutcome]
    busy: list[tuple[float, float]] = field(default_factory=list)
    """(time, GPUs running jobs use) at each change."""
    queued: list[tuple[float, int]] = field(default_factory=list)
    """(time, jobs waiting) at each change."""
    fragmented: list[tuple[float, float]] = field(default_factory=list)
    """(time, free GPUs on nodes that are partly allocated) at each change."""
    events: int = 0
    cycles: int = 0
    node_failures: list[tuple[float, str]] = field(default_factory=list)
    """(time, node) of each node failure applied."""
    failures: dict[str, float | int | None] | None = None
    """The failure model's settings (None: no failures)."""


class Simulator:
    """Replays ``jobs`` under ``scenario`` (see the module docstring)."""

    def __init__(
        self,
        scenario: Scenario,
        jobs: Sequence[TraceJob],
        *,
        progress: Callable[[float, int], None] | None = None,
        failures: FailureModel | None = None,
    ) -> None:
        self.scenario = scenario
        self.jobs = list(jobs)
        self.progress = progress
        self.failures = failures

    def run(self) -> SimResult:
        scenario = self.scenario
        config = scenario.config
        engine = Engine(config)
        for obj in scenario.objects:
            engine.apply(Upsert(obj))
        tenants = {o.name: o for o in scenario.objects if isinstance(o, Tenant)}
        capacity = {
            o.name: float(o.capacity.get("nvidia.com/gpu", 0))
            for o in scenario.objects
            if isinstance(o, Node)
        }
        gpus = int(sum(capacity.values()))
        node_used = dict.fromkeys(capacity, 0.0)
        fragmented = 0.0
        ledger = UsageLedger(config)
        book = MemoryBook()
        outcomes = {job.id: JobOutcome(job) for job in self.jobs}
        if len(outcomes) != len(self.jobs):
            raise ValueError("trace job ids must be unique")
        heap: list[tuple[float, int, int, int, int]] = []
        for seq, job in enumerate(self.jobs):
            heap.append((job.submit, _SUBMIT, seq, job.id, 0))
        heapq.heapify(heap)
        seq = len(self.jobs)
        result = SimResult(scenario.policy, gpus, list(outcomes.values()))
        busy = 0.0
        waiting = 0
        running: dict[int, int] = {}
        """job id -> the attempt that runs now."""
        period = config.priority_calc_period_s
        interval = config.backfill.interval_s if config.backfill is not None else None
        wake_at: set[float] = set()
        last_tick: float | None = None
        done = 0
        model = self.failures
        nodes = {o.name: o for o in scenario.objects if isinstance(o, Node)}
        downs: list[tuple[float, int, str]] = []
        """A heap of (time, node order, node): each node's next failure."""
        names = list(nodes)
        streams: dict[str, Iterator[float]] = {}
        if model is not None:
            result.failures = model.describe()
            start = min((job.submit for job in self.jobs), default=0.0)
            for order, name in enumerate(names):
                if nodes[name].state is AdminState.UP:
                    streams[name] = model.stream(name, start)
                    downs.append((next(streams[name]), order, name))
            heapq.heapify(downs)

        def wake(at: float) -> None:
            nonlocal seq
            if at not in wake_at:
                wake_at.add(at)
                seq += 1
                heapq.heappush(heap, (at, _WAKE, seq, -1, 0))

        def hold(node: str, amount: float) -> None:
            """Change a node's allocation, keeping the free GPUs on partly used nodes."""
            nonlocal fragmented
            cap, used = capacity.get(node, 0.0), node_used.get(node, 0.0)
            if 0 < used < cap:
                fragmented -= cap - used
            used = node_used[node] = max(0.0, used + amount)
            if 0 < used < cap:
                fragmented += cap - used

        def stop(job_id: int, now: float, lost: str | None = None) -> None:
            """Stop a job's run; ``lost``: ``failure`` or ``eviction`` when the run's
            work beyond its last checkpoint is lost, None when it ended."""
            nonlocal busy
            del running[job_id]
            out = outcomes[job_id]
            if out.attempt_start is not None:
                ran = now - out.attempt_start
                out.run_s += ran
                out.attempt_start = None
                if lost is not None:
                    saved = model.saved(ran) if model is not None else 0.0
                    out.progress_s += saved
                    if lost == "failure":
                        out.lost_to_failures_s += ran - saved
                    else:
                        out.lost_to_evictions_s += ran - saved
            ledger.stop(job_id, now)
            busy -= outcomes[job_id].reserved_gpus
            for node, amount in outcomes[job_id].held:
                hold(node, -amount)

        while heap:
            now = heap[0][0]
            if downs and downs[0][0] < now:
                now = downs[0][0]
            while heap and heap[0][0] == now:
                _, kind, _, job_id, attempt = heapq.heappop(heap)
                result.events += 1
                if kind == _END:
                    if running.get(job_id) != attempt:
                        continue  # that attempt was evicted
                    out = outcomes[job_id]
                    limit = out.job.time_limit
                    out.state = (
                        JobState.TIMEOUT.value
                        if limit is not None and out.job.duration > limit
                        else JobState.COMPLETED.value
                    )
                    out.end = now
                    stop(job_id, now)
                    engine.apply(Finish(job_id, JobState(out.state)))
                    done += 1
                elif kind == _SUBMIT:
                    engine.apply(Submit(scenario.make_job(outcomes[job_id].job)))
                    waiting += 1
                elif kind == _UP:
                    engine.apply(Upsert(nodes[names[attempt]]))
                else:
                    wake_at.discard(now)
            while downs and downs[0][0] == now:
                _, order, name = heapq.heappop(downs)
                result.events += 1
                result.node_failures.append((now, name))
                engine.apply(
                    Upsert(
                        nodes[name].model_copy(
                            update={"state": AdminState.DOWN, "reason": "NodeFail"}
                        )
                    )
                )
                for lost_id in [j for j in running if name in outcomes[j].nodes]:
                    stop(lost_id, now, "failure")
                    outcomes[lost_id].failures += 1
                    outcomes[lost_id].state = JobState.PENDING.value
                    engine.apply(Requeue(lost_id, "NodeFail"))
                    waiting += 1
                assert model is not None
                seq += 1
                heapq.heappush(heap, (now + model.repair_s, _UP, seq, -1, order))
                heapq.heappush(downs, (next(streams[name]), order, name))
            if last_tick is None or now - last_tick >= period:
                # Once per priority period, as Slurm recalculates (a job's last stretch
                # is charged then too): usage between periods does not move priorities.
                last_tick = now
                for usage in ledger.tick(book, now, tenants):
                    engine.apply(usage)
            while True:
                decisions = engine.cycle(now)
                result.cycles += 1
                admitted = False
                for decision in decisions:
                    if isinstance(decision, Admit):
                        admitted = True
                        out = outcomes[decision.job_id]
                        out.attempts += 1
                        out.state = JobState.RUNNING.value
                        if out.start is None:
                            out.start = now
                        out.attempt_start = now
                        tasks = sum(n.count for p in decision.pod_sets for n in p.nodes)
                        out.nodes = tuple(n.node for p in decision.pod_sets for n in p.nodes)
                        per_task = _task_gpus(out.job, scenario.node_gpus)
                        reserved = tasks * per_task
                        out.held = tuple(
                            (n.node, n.count * per_task) for p in decision.pod_sets for n in p.nodes
                        )
                        for node, amount in out.held:
                            hold(node, amount)
                        out.reserved_gpus = reserved
                        busy += reserved
                        waiting -= 1
                        running[decision.job_id] = out.attempts
                        length = out.job.duration
                        if out.job.time_limit is not None:
                            length = min(length, out.job.time_limit)
                        length -= out.progress_s
                        seq += 1
                        heapq.heappush(heap, (now + length, _END, seq, out.job.id, out.attempts))
                        if config.wait_for_pods_ready is not None:
                            engine.apply(PodsReady(decision.job_id, now))
                        ledger.start(
                            book,
                            decision.job_id,
                            tenant=out.job.tenant,
                            user="",
                            # A GPU share is charged as the whole GPU (Slurm's gres/gpu).
                            alloc_tres={"gres/gpu": math.ceil(reserved)},
                            weights=None,
                            since=now,
                        )
                    elif isinstance(decision, Evict):
                        out = outcomes[decision.job_id]
                        if decision.job_id in running:
                            stop(decision.job_id, now, "eviction")
                        out.preemptions += 1
                        if decision.mode == "REQUEUE":
                            engine.apply(Requeue(decision.job_id, decision.reason))
                            out.state = JobState.PENDING.value
                            waiting += 1
                        else:
                            engine.apply(Finish(decision.job_id, JobState.PREEMPTED))
                            out.state, out.end = JobState.PREEMPTED.value, now
                            done += 1
                    elif isinstance(decision, Deactivate):
                        out = outcomes[decision.job_id]
                        if decision.job_id in running:
                            stop(decision.job_id, now)
                        else:
                            waiting -= 1
                        engine.apply(Finish(decision.job_id, JobState.FAILED))
                        out.state, out.end = JobState.FAILED.value, now
                        done += 1
                if not (admitted and config.heads_per_cycle is not None):
                    break
            result.busy.append((now, busy))
            result.queued.append((now, waiting))
            result.fragmented.append((now, fragmented))
            nxt = engine.next_wakeup()
            if nxt is not None and nxt > now:
                wake(nxt)
            if waiting and running:
                # The live loop's cycles would run then anyway: priorities age, usage
                # is recharged, backfill passes come round. With nothing running and
                # nothing due, what still waits fits nowhere: the run ends there.
                if interval is not None:
                    wake(now + interval)
                wake(now + period)
            if self.progress is not None:
                self.progress(now, done)
        return result


def _task_gpus(job: TraceJob, node_gpus: int) -> float:
    """GPUs per task of the consolidated pod set (a whole node for a multi-node job, a
    share of one as its fraction)."""
    if job.gpus > node_gpus:
        return float(node_gpus)
    return job.gpu_equivalents
