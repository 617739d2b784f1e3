"""Benchmark of the pure admission engine (``phalanx.engine.Engine``); prints one JSON object.

The engine never reads a clock: this script drives it with ``apply(event)`` and
``cycle(now)`` on a virtual timeline and times every call with
:func:`time.perf_counter`. Nothing else runs in the process, so the numbers are the
engine's own CPU cost on one core (plus the interpreter).

Setup
    ``--nodes`` nodes of 8 GPUs, 96 cpu and 1000Gi memory, dealt round-robin over
    ``--flavors`` ResourceFlavors by the label ``gpu.example/type: f<i>``;
    ``--cluster-queues`` ClusterQueues dealt round-robin over ``--cohorts`` Cohorts, each
    covering cpu, memory and nvidia.com/gpu with every flavor (in the same order), with a
    nominal quota of 1/Q of each flavor's capacity (remainders go to the first queues, so
    the quotas add up to the cluster exactly) and no borrowingLimit, so a queue may
    borrow whatever its cohort does not use. ``--pending`` jobs, generated from
    ``--seed``: 45% 1 GPU, 20% 2, 15% 4, 15% 8 (one task, 8 cpu and 64Gi memory per GPU)
    and 5% gangs of 2-64 nodes x 8 GPUs (powers of two, smaller ones more likely;
    half written ``tasksPerNode: 1``, half as plain ``count`` tasks of 8 GPUs), each in a
    random tenant of 20 and a random ClusterQueue, submitted over the hour before
    the first cycle. ``--topology``: a Topology block > rack > hostname on every flavor
    (racks of 32 consecutive nodes of a flavor, 4 racks a block), so every pod set is
    placed in the tightest domain that holds it (docs/engine.md, topology-aware
    placement).

Metrics (times in seconds ``_s`` or milliseconds ``_ms``)
    ``generate_s``
        Building the pydantic ``Job`` objects of the initial backlog (not engine time).
    ``setup_s``, ``upsert_s``, ``submit_s``, ``submit_per_s``
        Phase 1, *build*: applying every object ``Upsert`` and the ``--pending``
        ``Submit`` events; ``submit_per_s`` is Submits applied per second.
    ``full_cycle_ms``, ``fill_admitted``, ``fill_gpu_utilisation``
        Phase 2, *fill*: the one ``cycle(now)`` that admits from the full backlog onto an
        empty cluster until nothing more fits; its duration, the jobs it admitted and
        the share of the cluster's GPUs they hold. The fill's admissions are then
        replaced by as many new Submits (untimed), so the backlog is back to
        ``--pending``.
    ``p50_decision_ms``, ``p99_decision_ms``, ``max_decision_ms``, ``decisions_measured``
        Phase 3, *steady state*, ``--steady-cycles`` iterations, ``now`` advancing one
        second each: Finish one random admitted job, Submit one new job, run one
        ``cycle(now, probe)``. A decision is one head of a ClusterQueue assigned flavors
        and nodes and then admitted or parked with its reason; the ``probe`` hook of
        ``Engine.cycle`` marks each step, and a decision's time is its share of assigning
        the round's heads plus its own processing. Percentiles are over all decisions.
    ``p50_cycle_ms``, ``p99_cycle_ms``, ``max_cycle_ms``, ``mean_cycle_ms``
        The same iterations' whole ``cycle(now)`` calls: from a completion that frees
        capacity to every admission it allows (and the re-parking of whatever it woke
        that still does not fit), including any priority recalculation that falls due.
        ``admissions_per_cycle_mean`` is Admits per iteration and
        ``steady_event_apply_mean_ms`` the time to apply the two events.
    ``decisions_per_s``, ``admissions_per_s_including_events``, ``decisions_per_cpu_s``
        Phase 4, *throughput*, 20 batches: Finish 200 random admitted jobs, Submit 200 new
        ones, run one cycle. ``decisions_per_s`` is Admits over the time spent inside
        ``cycle()``; ``admissions_per_s_including_events`` also counts the time spent
        applying the batch's Finish and Submit events; ``decisions_per_cpu_s`` is Admits
        over the process's CPU time inside ``cycle()`` (:func:`time.process_time`), which
        time spent waiting for a core on a loaded machine does not inflate.
    ``steady_backfill_passes``, ``p50_backfill_pass_ms``, ``max_backfill_pass_ms``
        With ``--backfill``: the backfill passes that fell in phase 3 (one every
        ``bf_interval``, 30 s of virtual time) and how long they took. A pass runs at the
        end of its cycle, between the ``probe`` stages ``backfill`` and
        ``backfill_done``, and is timed as a whole: its time is in its cycle's, not in
        any decision's (as Slurm's backfill loop is apart from its main scheduler).
    ``backfill_pass_ms``, ``backfill_pass_cycle_ms``, ``backfill_pass_tested``, ...
        Phase 5, *full pass*: ``Engine.replan()`` gives up every reservation and
        estimate and wakes every queue; the next cycle tries every head again, then
        runs a pass that tests ``bf_max_job_test`` (500) jobs. The pass's time, the
        whole cycle's, the jobs tested, and the reservations and estimates it left.
    ``*_rounds``, ``*_heads``
        The engine's own counters over the phase: rounds (one head per ClusterQueue each)
        and heads assigned; heads per admission shows how much work failed attempts cost.
    ``peak_rss_mb``
        Peak resident set size of the whole process (``ru_maxrss``), including the
        generated jobs and the interpreter.
    ``targets``, ``meets_targets``
        The goals (p99 decision latency, decisions per second, peak RSS; with
        ``--backfill`` the full pass under 100 ms) and whether each is met.

Garbage collection: after start-up (and after the fill's top-up) long-lived objects
are frozen (``gc.freeze``) and the young-generation threshold is raised, as a
long-running service hosting the engine does; see docs/engine.md. Then the events
and the cycle of each iteration run with the collector paused, and what survives
them is frozen (:class:`Housekeeping`; both O(1)). Without it, the young
generation's count goes down whenever a frozen object is freed, so in a steady state
(a job finishes, a job arrives; a priority recalculation replaces every pending
job's key and heap entry) it stays low while young objects pile up, and the
collection that finally comes walks hundreds of thousands of them (0.1-0.26 s, in
whatever decision it lands); with backfill a cycle's own survivors (reasons,
decisions, plans) set off several such collections per cycle. None of them finds
garbage: ``gc_garbage_at_end`` is what a full collection of everything finds after
the last phase (0: the engine makes no reference cycles to collect).

``--profile FILE`` writes a cProfile dump of phases 3 and 4 (``python -m pstats FILE``);
profiling slows the engine down severalfold, so the times reported with it are not
comparable with a run without it.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import json
import math
import platform
import random
import resource
import sys
import time
from collections.abc import Sequence
from typing import Any

from phalanx.engine import (
    PRESETS,
    Admit,
    Decision,
    Engine,
    EngineConfig,
    Finish,
    Submit,
    TenantUsage,
    Upsert,
)
from phalanx.engine.config import BackfillConfig
from phalanx.engine.placement import check_placement
from phalanx.model import (
    CPU,
    GPU,
    MEMORY,
    ClusterQueue,
    Cohort,
    Job,
    Node,
    PodSet,
    ResourceFlavor,
    Tenant,
    Topology,
    TopologyLevel,
    format_quantity,
    parse_quantity,
)

FLAVOR_LABEL = "gpu.example/type"
HOSTNAME = "kubernetes.io/hostname"
RACK, BLOCK = "network.example/rack", "network.example/block"
RACK_NODES, BLOCK_RACKS = 32, 4
"""With ``--topology``: 32-node racks, 4 racks a block (in each flavor)."""
NODE_GPUS = 8
NODE_CAPACITY: dict[str, str | int] = {GPU: NODE_GPUS, CPU: "96", MEMORY: "1000Gi"}
CPU_PER_GPU = 8
MEMORY_PER_GPU_GI = 64
TENANTS = 20
SUBMIT_WINDOW_S = 3600.0
START_TIME = 1_750_000_000.0
"""The virtual time of the fill cycle (seconds since the epoch)."""
THROUGHPUT_BATCH = 200
THROUGHPUT_BATCHES = 20

SINGLE_TASK_MIX: tuple[tuple[float, int], ...] = ((0.45, 1), (0.20, 2), (0.15, 4), (0.15, 8))
"""``(share, GPUs)`` of the one-task jobs; the remaining 5% are gangs."""
GANG_NODES: tuple[int, ...] = (2, 4, 8, 16, 32, 64)
GANG_WEIGHTS: tuple[float, ...] = (35, 25, 18, 12, 7, 3)

TIME_LIMITS_S = (3600.0, 7200.0, 14400.0, 28800.0, 86400.0)
USAGE_PERIOD_S = 300.0
"""With ``--fair-share``: every tenant's usage is sent this often (PriorityCalcPeriod)."""

TARGETS: dict[str, float] = {"p99_decision_ms": 1.0, "decisions_per_s": 5000, "peak_rss_mb": 1024}
HIGHER_IS_BETTER = {"decisions_per_s"}


# --------------------------------------------------------------------- cluster


GC_THRESHOLDS = (50_000, 50, 100)
"""Young-generation collections every 50k allocations instead of 700: fewer, cheap ones."""


class Housekeeping:
    """The host's garbage-collector policy around an iteration (see the module docstring)."""

    def before(self) -> None:
        gc.disable()

    def after(self) -> None:
        # O(1): the young and middle generations join the permanent one as they are.
        gc.freeze()
        gc.enable()


def flavor_name(i: int) -> str:
    return f"f{i}"


def cluster_objects(
    nodes: int, flavors: int, cluster_queues: int, cohorts: int, topology: bool = False
) -> list[ResourceFlavor | Node | Cohort | ClusterQueue | Tenant | Topology]:
    """Every configuration object, in the order they are upserted."""
    objects: list[ResourceFlavor | Node | Cohort | ClusterQueue | Tenant | Topology] = []
    if topology:
        objects.append(
            Topology(
                name="fabric",
                levels=[TopologyLevel(node_label=label) for label in (BLOCK, RACK, HOSTNAME)],
            )
        )
    objects.extend(
        ResourceFlavor(
            name=flavor_name(f),
            node_labels={FLAVOR_LABEL: flavor_name(f)},
            topology_name="fabric" if topology else None,
        )
        for f in range(flavors)
    )
    nodes_in = [0] * flavors
    for i in range(nodes):
        f = i % flavors
        labels = {FLAVOR_LABEL: flavor_name(f), HOSTNAME: f"node-{i:05d}"}
        if topology:
            # Racks of RACK_NODES consecutive nodes of a flavor, BLOCK_RACKS racks a block.
            rack = nodes_in[f] // RACK_NODES
            labels[RACK] = f"{flavor_name(f)}-rack-{rack:03d}"
            labels[BLOCK] = f"{flavor_name(f)}-block-{rack // BLOCK_RACKS:02d}"
        nodes_in[f] += 1
        objects.append(Node(name=f"node-{i:05d}", labels=labels, capacity=NODE_CAPACITY))
    objects.extend(Cohort(name=f"cohort-{c:02d}") for c in range(cohorts))
    per_node = {r: parse_quantity(q, r) for r, q in NODE_CAPACITY.items()}
    covered = [CPU, MEMORY, GPU]
    for q in range(cluster_queues):
        fl = []
        for f in range(flavors):
            quotas = []
            for r in covered:
                capacity = per_node[r] * nodes_in[f]
                # Shares that add up to the capacity exactly: floor((q+1)C/Q) - floor(qC/Q).
                share = capacity * (q + 1) // cluster_queues - capacity * q // cluster_queues
                quotas.append({"name": r, "nominalQuota": format_quantity(share, r)})
            fl.append({"name": flavor_name(f), "resources": quotas})
        objects.append(
            ClusterQueue.model_validate(
                {
                    "name": f"cq-{q:03d}",
                    "cohortName": f"cohort-{q % cohorts:02d}",
                    "resourceGroups": [{"coveredResources": covered, "flavors": fl}],
                }
            )
        )
    objects.extend(Tenant(name=f"tenant-{t:02d}") for t in range(TENANTS))
    return objects


# --------------------------------------------------------------------- workload


class Workload:
    """Deterministic random jobs; pod sets are shared between jobs of the same size."""

    def __init__(self, rng: random.Random, cluster_queues: int, limits: bool = False) -> None:
        self.rng = rng
        self.limits = limits
        """Give every job a time limit (for backfill): 1 to 24 hours."""
        self.queues = [f"cq-{q:03d}" for q in range(cluster_queues)]
        self.tenants = [f"tenant-{t:02d}" for t in range(TENANTS)]
        self.next_id = 1
        self.gpus: dict[int, int] = {}
        """GPUs of every job generated and not yet finished, by id."""
        self._pod_sets: dict[tuple[int, int, bool], PodSet] = {}

    def _pod_set(self, gpus: int, count: int, tasks_per_node: bool) -> PodSet:
        key = (gpus, count, tasks_per_node)
        pod_set = self._pod_sets.get(key)
        if pod_set is None:
            pod_set = self._pod_sets[key] = PodSet(
                count=count,
                tasks_per_node=1 if tasks_per_node else None,
                requests={
                    GPU: gpus,
                    CPU: str(CPU_PER_GPU * gpus),
                    MEMORY: f"{MEMORY_PER_GPU_GI * gpus}Gi",
                },
            )
        return pod_set

    def job(self, submit_time: float) -> Job:
        rng = self.rng
        x = rng.random()
        pod_set: PodSet | None = None
        for share, gpus in SINGLE_TASK_MIX:
            if x < share:
                pod_set = self._pod_set(gpus, 1, False)
                break
            x -= share
        if pod_set is None:
            nodes = rng.choices(GANG_NODES, GANG_WEIGHTS)[0]
            pod_set = self._pod_set(NODE_GPUS, nodes, rng.random() < 0.5)
        job_id = self.next_id
        self.next_id += 1
        job = Job(
            id=job_id,
            name=f"job-{job_id}",
            tenant=rng.choice(self.tenants),
            cluster_queue=rng.choice(self.queues),
            submit_time=submit_time,
            pod_sets=[pod_set],
            time_limit=rng.choice(TIME_LIMITS_S) if self.limits else None,
        )
        self.gpus[job_id] = pod_set.total(GPU)
        return job


class Admitted:
    """The admitted jobs, with O(1) random removal and a running GPU count."""

    def __init__(self, workload: Workload, rng: random.Random) -> None:
        self.workload = workload
        self.rng = rng
        self.ids: list[int] = []
        self._pos: dict[int, int] = {}
        self.gpus = 0

    def __len__(self) -> int:
        return len(self.ids)

    def record(self, decisions: Sequence[Decision]) -> int:
        """Take in a cycle's decisions; returns the number of Admits."""
        n = 0
        for d in decisions:
            if isinstance(d, Admit):
                self._pos[d.job_id] = len(self.ids)
                self.ids.append(d.job_id)
                self.gpus += self.workload.gpus[d.job_id]
                n += 1
        return n

    def pop_random(self) -> int:
        ids = self.ids
        i = self.rng.randrange(len(ids))
        job_id = ids[i]
        last = ids.pop()
        if last != job_id:
            ids[i] = last
            self._pos[last] = i
        del self._pos[job_id]
        self.gpus -= self.workload.gpus.pop(job_id)
        return job_id


# --------------------------------------------------------------------- helpers


def percentile(values: Sequence[float], p: float) -> float:
    """Linear-interpolated percentile ``p`` (0-100) of ``values``; NaN when empty."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = (len(ordered) - 1) * p / 100.0
    lo = math.floor(rank)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (rank - lo)


def stats_delta(engine: Engine, before: dict[str, int], prefix: str) -> dict[str, int]:
    keys = ("rounds", "heads", "backfill_tests")
    return {f"{prefix}_{k}": engine.stats[k] - before.get(k, 0) for k in keys}


def rounded(value: float, digits: int = 3) -> float | None:
    return None if math.isnan(value) else round(value, digits)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Benchmark the phalanx admission engine; prints a JSON object."
    )
    parser.add_argument("--nodes", type=int, default=10_000, help="nodes of 8 GPUs")
    parser.add_argument("--pending", type=int, default=100_000, help="pending jobs")
    parser.add_argument("--cluster-queues", type=int, default=100, help="ClusterQueues")
    parser.add_argument("--cohorts", type=int, default=10, help="Cohorts")
    parser.add_argument("--flavors", type=int, default=4, help="ResourceFlavors")
    parser.add_argument("--seed", type=int, default=1, help="workload random seed")
    parser.add_argument("--steady-cycles", type=int, default=2000, help="phase 3 iterations")
    parser.add_argument("--preset", choices=PRESETS, default="phalanx", help="engine preset")
    parser.add_argument(
        "--backfill",
        action="store_true",
        help="time limits on every job, reservations and backfill on (bf_max_job_test 500)",
    )
    parser.add_argument(
        "--fair-share",
        action="store_true",
        help=f"send every tenant's decayed usage every {USAGE_PERIOD_S:g} s of virtual time",
    )
    parser.add_argument(
        "--topology",
        action="store_true",
        help=f"a Topology block > rack > hostname ({RACK_NODES}-node racks, {BLOCK_RACKS} a "
        "block) on every flavor: every gang placed in the tightest domain",
    )
    parser.add_argument(
        "--placement", default="phalanx", help="placement policy (EngineConfig.placement)"
    )
    parser.add_argument("--json", action="store_true", help="print only the JSON object")
    parser.add_argument("--profile", metavar="FILE", help="write a cProfile dump of phases 3+4")
    args = parser.parse_args(argv)
    try:
        check_placement(args.placement)
    except ValueError as exc:
        parser.error(str(exc))
    for name in ("nodes", "pending", "cluster_queues", "cohorts", "flavors"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.steady_cycles < 0:
        parser.error("--steady-cycles must not be negative")
    if args.cohorts > args.cluster_queues:
        parser.error("--cohorts must not exceed --cluster-queues")
    if args.nodes < args.flavors:
        parser.error("--nodes must be at least --flavors")
    if args.nodes // args.flavors * NODE_GPUS < args.cluster_queues:
        parser.error("too few nodes per flavor to give every ClusterQueue a GPU")
    return args


def log(quiet: bool, message: str) -> None:
    if not quiet:
        print(message, file=sys.stderr, flush=True)


# --------------------------------------------------------------------- benchmark


def run(args: argparse.Namespace) -> dict[str, Any]:
    quiet: bool = args.json
    rng = random.Random(args.seed)
    workload = Workload(random.Random(rng.getrandbits(64)), args.cluster_queues, args.backfill)
    admitted = Admitted(workload, random.Random(rng.getrandbits(64)))
    total_gpus = args.nodes * NODE_GPUS
    engine = Engine(
        EngineConfig(
            preset=args.preset,
            backfill=BackfillConfig() if args.backfill else None,
            placement=args.placement,
        )
    )
    usage_rng = random.Random(rng.getrandbits(64))

    def send_usage() -> None:
        # Decayed GPU-hours of the order of a tenant's share of a week's capacity.
        for tenant in workload.tenants:
            used = usage_rng.random() * total_gpus * 24 * 7 / TENANTS
            engine.apply(TenantUsage(tenant, used, billing=used * 3600))

    result: dict[str, Any] = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "preset": args.preset,
        "placement": args.placement,
        "seed": args.seed,
        "nodes": args.nodes,
        "gpus": total_gpus,
        "flavors": args.flavors,
        "pending": args.pending,
        "cluster_queues": args.cluster_queues,
        "cohorts": args.cohorts,
        "steady_cycles": args.steady_cycles,
        "backfill": args.backfill,
        "fair_share": args.fair_share,
        "topology": args.topology,
    }

    # Phase 1: build ------------------------------------------------------
    log(quiet, f"generating {args.nodes} nodes, {args.pending} jobs ...")
    t0 = time.perf_counter()
    objects = cluster_objects(
        args.nodes, args.flavors, args.cluster_queues, args.cohorts, args.topology
    )
    backlog = [
        workload.job(START_TIME - SUBMIT_WINDOW_S * (1.0 - (i + rng.random()) / args.pending))
        for i in range(args.pending)
    ]
    generate_s = time.perf_counter() - t0

    t0 = time.perf_counter()
    for obj in objects:
        engine.apply(Upsert(obj))
    t1 = time.perf_counter()
    for job in backlog:
        engine.apply(Submit(job))
    t2 = time.perf_counter()
    del backlog, objects
    # Long-lived state goes to the permanent generation, as the service does after
    # start-up: otherwise every full collection walks 100k job records (~100 ms).
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)
    result.update(
        generate_s=round(generate_s, 3),
        upsert_s=round(t1 - t0, 3),
        submit_s=round(t2 - t1, 3),
        setup_s=round(t2 - t0, 3),
        submit_per_s=round(args.pending / (t2 - t1)),
    )
    log(quiet, f"build: {t2 - t0:.2f}s ({args.pending / (t2 - t1):,.0f} submits/s)")

    # Phase 2: fill -------------------------------------------------------
    now = START_TIME
    before = dict(engine.stats)
    t0 = time.perf_counter()
    decisions = engine.cycle(now)
    fill_s = time.perf_counter() - t0
    fill_admitted = admitted.record(decisions)
    result.update(
        full_cycle_ms=round(fill_s * 1000, 3),
        fill_admitted=fill_admitted,
        fill_decisions=len(decisions),
        fill_gpu_utilisation=round(admitted.gpus / total_gpus, 4),
        **stats_delta(engine, before, "fill"),
    )
    log(
        quiet,
        f"fill: {fill_s * 1000:.1f} ms, {fill_admitted} admitted, "
        f"{admitted.gpus / total_gpus:.1%} of GPUs",
    )
    # Top the backlog back up to --pending (untimed).
    for _ in range(fill_admitted):
        engine.apply(Submit(workload.job(now)))
    gc.collect()
    gc.freeze()
    housekeeping = Housekeeping()

    profiler = cProfile.Profile() if args.profile else None
    if profiler is not None:
        profiler.enable()

    # Phase 3: steady state -----------------------------------------------
    log(quiet, f"steady state: {args.steady_cycles} cycles ...")
    before = dict(engine.stats)
    cycle_ms: list[float] = []
    event_ms: list[float] = []
    decision_ms: list[float] = []
    steady_admits = 0
    perf = time.perf_counter
    spent: dict[int, float] = {}
    mark = [0.0]

    pass_ms: list[float] = []

    def probe(stage: str, job_id: int) -> None:
        # A decision's time: its share of assigning the round's heads plus its processing.
        # A backfill pass is timed as a whole, apart from the decisions.
        t = perf()
        if stage == "backfill_done":
            pass_ms.append((t - mark[0]) * 1000)
        elif stage not in ("round", "backfill"):
            spent[job_id] = spent.get(job_id, 0.0) + (t - mark[0])
        mark[0] = t

    usage_ms: list[float] = []
    for i in range(args.steady_cycles):
        now += 1.0
        new_job = workload.job(now)
        if args.fair_share and i % int(USAGE_PERIOD_S) == 0:
            t0 = perf()
            send_usage()
            usage_ms.append((perf() - t0) * 1000)
        housekeeping.before()
        t0 = perf()
        if len(admitted):
            engine.apply(Finish(admitted.pop_random()))
        engine.apply(Submit(new_job))
        t1 = perf()
        spent.clear()
        decisions = engine.cycle(now, probe)
        t2 = perf()
        housekeeping.after()
        decision_ms.extend(v * 1000 for v in spent.values())
        steady_admits += admitted.record(decisions)
        event_ms.append((t1 - t0) * 1000)
        cycle_ms.append((t2 - t1) * 1000)
    n = max(1, len(cycle_ms))
    result.update(
        p50_decision_ms=rounded(percentile(decision_ms, 50), 4),
        p99_decision_ms=rounded(percentile(decision_ms, 99), 4),
        max_decision_ms=rounded(max(decision_ms, default=math.nan), 4),
        decisions_measured=len(decision_ms),
        p50_cycle_ms=rounded(percentile(cycle_ms, 50), 4),
        p99_cycle_ms=rounded(percentile(cycle_ms, 99), 4),
        max_cycle_ms=rounded(max(cycle_ms, default=math.nan), 4),
        mean_cycle_ms=round(sum(cycle_ms) / n, 4),
        admissions_per_cycle_mean=round(steady_admits / n, 3),
        steady_event_apply_mean_ms=round(sum(event_ms) / n, 4),
        steady_gpu_utilisation=round(admitted.gpus / total_gpus, 4),
        usage_update_ms_max=rounded(max(usage_ms, default=math.nan), 3),
        steady_backfill_passes=len(pass_ms),
        p50_backfill_pass_ms=rounded(percentile(pass_ms, 50), 3) if pass_ms else None,
        max_backfill_pass_ms=rounded(max(pass_ms), 3) if pass_ms else None,
        **stats_delta(engine, before, "steady"),
    )
    log(
        quiet,
        f"steady: p50 {result['p50_decision_ms']} ms, p99 {result['p99_decision_ms']} ms, "
        f"max {result['max_decision_ms']} ms",
    )

    # Phase 4: throughput -------------------------------------------------
    log(quiet, f"throughput: {THROUGHPUT_BATCHES} batches of {THROUGHPUT_BATCH} ...")
    before = dict(engine.stats)
    cycle_s = 0.0
    cycle_cpu_s = 0.0
    events_s = 0.0
    tp_admits = 0
    for _ in range(THROUGHPUT_BATCHES):
        now += 1.0
        new_jobs = [workload.job(now) for _ in range(THROUGHPUT_BATCH)]
        finishing = [admitted.pop_random() for _ in range(min(THROUGHPUT_BATCH, len(admitted)))]
        housekeeping.before()
        t0 = perf()
        for job_id in finishing:
            engine.apply(Finish(job_id))
        for job in new_jobs:
            engine.apply(Submit(job))
        t1 = perf()
        c1 = time.process_time()
        decisions = engine.cycle(now)
        t2 = perf()
        cycle_cpu_s += time.process_time() - c1
        housekeeping.after()
        tp_admits += admitted.record(decisions)
        events_s += t1 - t0
        cycle_s += t2 - t1
    result.update(
        throughput_admissions=tp_admits,
        throughput_cycle_s=round(cycle_s, 4),
        throughput_events_s=round(events_s, 4),
        decisions_per_s=round(tp_admits / cycle_s) if cycle_s > 0 else None,
        decisions_per_cpu_s=round(tp_admits / cycle_cpu_s) if cycle_cpu_s > 0 else None,
        admissions_per_s_including_events=(
            round(tp_admits / (cycle_s + events_s)) if cycle_s + events_s > 0 else None
        ),
        final_gpu_utilisation=round(admitted.gpus / total_gpus, 4),
        final_pending=engine.pending_count(),
        final_admitted=engine.admitted_count(),
        **stats_delta(engine, before, "throughput"),
    )
    if args.backfill:
        # Phase 5: one full backfill pass: every reservation and estimate given up and
        # every queue tried again, so the cycle plans from scratch up to bf_max_job_test.
        before = dict(engine.stats)
        now += 1.0
        engine.replan()
        pass_ms.clear()
        housekeeping.before()
        t0 = perf()
        decisions = engine.cycle(now, probe)
        cycle_s = perf() - t0
        housekeeping.after()
        admitted.record(decisions)
        delta = stats_delta(engine, before, "backfill_pass")
        result.update(
            backfill_pass_ms=round(pass_ms[0], 3),
            backfill_pass_cycle_ms=round(cycle_s * 1000, 3),
            backfill_pass_tested=delta["backfill_pass_backfill_tests"],
            backfill_pass_reservations=len(engine.reservations()),
            backfill_pass_estimates=sum(
                1 for j in engine.jobs if engine.estimated_start(j) is not None
            ),
            **delta,
        )
        log(
            quiet,
            f"backfill pass: {result['backfill_pass_ms']} ms, "
            f"{result['backfill_pass_tested']} jobs tested",
        )
    if profiler is not None:
        profiler.disable()
        profiler.dump_stats(args.profile)
        result["profile"] = args.profile
    log(
        quiet,
        f"throughput: {result['decisions_per_s']} admissions/s in cycle(), "
        f"{result['admissions_per_s_including_events']} with events",
    )

    result["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    gc.unfreeze()
    result["gc_garbage_at_end"] = gc.collect()
    result["targets"] = dict(TARGETS)
    if args.backfill:
        result["targets"]["backfill_pass_ms"] = 100.0
    meets: dict[str, bool] = {}
    for key, target in result["targets"].items():
        value = result.get(key)
        if value is None:
            meets[key] = False
        elif key in HIGHER_IS_BETTER:
            meets[key] = value >= target
        else:
            meets[key] = value <= target
    result["meets_targets"] = meets
    return result


def summary(result: dict[str, Any]) -> str:
    meets = result["meets_targets"]

    def mark(key: str) -> str:
        return "ok" if meets[key] else "MISSED"

    return "\n".join(
        [
            f"phalanx engine bench ({result['preset']}): {result['nodes']} nodes / "
            f"{result['gpus']} GPUs, {result['pending']} pending, "
            f"{result['cluster_queues']} ClusterQueues in {result['cohorts']} cohorts",
            f"  build     {result['setup_s']} s, {result['submit_per_s']:,} submits/s",
            f"  fill      {result['full_cycle_ms']} ms, {result['fill_admitted']} admitted, "
            f"{result['fill_gpu_utilisation']:.1%} GPUs in use",
            f"  decision  p50 {result['p50_decision_ms']} ms, p99 {result['p99_decision_ms']} ms "
            f"[{mark('p99_decision_ms')}], max {result['max_decision_ms']} ms, "
            f"{result['admissions_per_cycle_mean']} admits/cycle",
            f"  through   {result['decisions_per_s']} admissions/s [{mark('decisions_per_s')}], "
            f"{result['admissions_per_s_including_events']} with events",
            f"  memory    {result['peak_rss_mb']} MB peak RSS [{mark('peak_rss_mb')}]",
        ]
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    result = run(args)
    print(json.dumps(result, indent=None if args.json else 2))
    if not args.json:
        print(summary(result), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
