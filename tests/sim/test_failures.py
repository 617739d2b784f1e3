"""Node failures in the simulator: reproducible from the seed, lost jobs requeued and run
again, goodput that adds up, and nothing changed when failures are off."""

from __future__ import annotations

import itertools
import math
import random

import pytest

from phalanx.errors import Invalid
from phalanx.sim.failures import FailureModel
from phalanx.sim.metrics import goodput, summarize
from phalanx.sim.setup import Cluster, scenario
from phalanx.sim.simulator import SimResult, Simulator
from phalanx.sim.trace import TimeLimitRule, TraceJob

HOUR = 3600.0


def _trace(seed: int, count: int) -> list[TraceJob]:
    rng = random.Random(seed)
    t = 0.0
    jobs = []
    for i in range(1, count + 1):
        t += rng.expovariate(1 / 600)
        gpus = rng.choice((1, 1, 2, 4, 8, 16))
        duration = float(rng.randint(600, 6 * 3600))
        jobs.append(TraceJob(i, round(t), duration, gpus, rng.choice(("a", "b"))))
    return TimeLimitRule().apply(jobs)


def _run(policy: str, jobs: list[TraceJob], model: FailureModel | None) -> SimResult:
    cluster = Cluster.shared_pool(4, {"a": 1.0, "b": 1.0})
    return Simulator(scenario(cluster, policy), jobs, failures=model).run()


def _outcomes(result: SimResult) -> list[tuple[object, ...]]:
    return [
        (o.job.id, o.start, o.end, o.state, o.attempts, o.nodes, o.run_s) for o in result.outcomes
    ]


# About one failure a node-day of uptime, repaired in an hour: a few dozen failures.
MODEL = FailureModel(rate=1 / 24, repair_s=HOUR, seed=11)


@pytest.mark.parametrize("policy", ["phalanx", "fifo"])
def test_failures_are_reproducible_from_the_seed(policy: str) -> None:
    jobs = _trace(5, 150)
    first, again = _run(policy, jobs, MODEL), _run(policy, jobs, MODEL)
    assert first.node_failures and first.node_failures == again.node_failures
    assert _outcomes(first) == _outcomes(again)
    other = _run(policy, jobs, FailureModel(rate=1 / 24, repair_s=HOUR, seed=12))
    assert other.node_failures != first.node_failures


def test_a_nodes_failures_depend_on_the_seed_and_its_name_alone() -> None:
    stream = MODEL.stream("node-1", 100.0)
    times = [next(stream) for _ in range(5)]
    assert times == [t for t, _ in zip(MODEL.stream("node-1", 100.0), range(5), strict=False)]
    assert times != [t for t, _ in zip(MODEL.stream("node-2", 100.0), range(5), strict=False)]
    # Each failure comes at least a repair time after the one before.
    assert all(b - a >= MODEL.repair_s for a, b in itertools.pairwise(times))
    # The same nodes fail at the same times under every policy (while jobs remain).
    jobs = _trace(5, 150)
    fifo, sjf = _run("fifo", jobs, MODEL), _run("sjf", jobs, MODEL)
    common = min(len(fifo.node_failures), len(sjf.node_failures))
    assert common and fifo.node_failures[:common] == sjf.node_failures[:common]


def test_a_job_on_a_failed_node_is_requeued_and_finishes_later() -> None:
    # One node; a job of 10 h; the node fails at about 2 h in (exponential uptime drawn
    # from the seed: the test reads where it fell) and is repaired an hour later.
    jobs = [TraceJob(1, 0.0, 10 * HOUR, 8, "a", time_limit=10 * HOUR)]
    cluster = Cluster.shared_pool(1, {"a": 1.0})
    model = FailureModel(rate=1 / 5, repair_s=HOUR, seed=3)
    result = Simulator(scenario(cluster, "phalanx"), jobs, failures=model).run()
    (out,) = result.outcomes
    first_failure = result.node_failures[0][0]
    assert first_failure < 10 * HOUR  # it failed while the job ran
    assert out.state == "COMPLETED" and out.failures >= 1
    assert out.attempts == out.failures + 1
    # It restarted from scratch each time: the last attempt ran the whole 10 h, after
    # the last failure's repair.
    last_failure = result.node_failures[out.failures - 1][0]
    assert out.end is not None and out.end >= last_failure + HOUR + 10 * HOUR
    assert out.lost_to_failures_s > 0
    assert out.run_s == pytest.approx(10 * HOUR + out.lost_to_failures_s)

    # With a checkpoint every hour, it keeps whole hours and ends sooner.
    saved = FailureModel(rate=1 / 5, repair_s=HOUR, seed=3, checkpoint_s=HOUR)
    again = Simulator(scenario(cluster, "phalanx"), jobs, failures=saved).run()
    (kept,) = again.outcomes
    assert again.node_failures[0] == result.node_failures[0]
    assert kept.state == "COMPLETED" and kept.failures >= 1
    assert kept.end is not None and kept.end < out.end
    assert kept.lost_to_failures_s < out.lost_to_failures_s
    assert kept.run_s == pytest.approx(10 * HOUR + kept.lost_to_failures_s)
    # What each failure lost is less than one checkpoint interval.
    assert kept.lost_to_failures_s < kept.failures * HOUR


@pytest.mark.parametrize("policy", ["phalanx", "slurm", "kueue", "fifo", "sjf"])
def test_goodput_adds_up(policy: str) -> None:
    jobs = _trace(8, 150)
    result = _run(policy, jobs, MODEL)
    assert result.node_failures
    numbers = goodput(result.outcomes)
    assert numbers["lost_to_failures_gpu_hours"] > 0
    assert numbers["useful_gpu_hours"] + numbers["lost_gpu_hours"] == pytest.approx(
        numbers["gpu_hours_run"]
    )
    assert numbers["lost_gpu_hours"] == pytest.approx(
        numbers["lost_to_failures_gpu_hours"] + numbers["lost_to_evictions_gpu_hours"]
    )
    # Every job completed here: the useful work is exactly the jobs' own.
    assert all(o.state == "COMPLETED" for o in result.outcomes)
    asked = sum(j.duration * j.gpu_equivalents for j in jobs) / HOUR
    assert numbers["useful_gpu_hours"] == pytest.approx(asked)
    assert 0 < numbers["goodput"] < 1
    assert numbers["goodput"] == pytest.approx(
        numbers["useful_gpu_hours"] / numbers["gpu_hours_run"]
    )
    # The GPU-hours run are the GPU time busy (at the GPUs the jobs asked for).
    busy = sum(o.run_s * o.job.gpu_equivalents for o in result.outcomes) / HOUR
    assert numbers["gpu_hours_run"] == pytest.approx(busy)
    summary = summarize(result, {"a": 1.0, "b": 1.0})
    assert summary["node_failures"] == len(result.node_failures)
    assert summary["failure_model"]["mtbf_h"] == 24.0
    assert summary["goodput"] == round(numbers["goodput"], 4)


@pytest.mark.parametrize("policy", ["phalanx", "slurm", "kueue", "fifo", "sjf"])
def test_failures_off_changes_nothing(policy: str) -> None:
    jobs = _trace(9, 150)
    cluster = Cluster.shared_pool(4, {"a": 1.0, "b": 1.0})
    plain = Simulator(scenario(cluster, policy), jobs).run()
    off = Simulator(scenario(cluster, policy), jobs, failures=None).run()
    assert _outcomes(plain) == _outcomes(off)
    assert (plain.busy, plain.queued, plain.events, plain.cycles) == (
        off.busy,
        off.queued,
        off.events,
        off.cycles,
    )
    assert plain.node_failures == [] and plain.failures is None
    # Failures so rare that none comes before the run ends: the same run, event for event.
    rare = Simulator(scenario(cluster, policy), jobs, failures=FailureModel(rate=1e-12)).run()
    assert rare.node_failures == []
    assert _outcomes(rare) == _outcomes(plain)
    assert (rare.busy, rare.events, rare.cycles) == (plain.busy, plain.events, plain.cycles)
    numbers = goodput(plain.outcomes)
    assert numbers["lost_to_failures_gpu_hours"] == 0
    if all(o.preemptions == 0 for o in plain.outcomes):
        assert numbers["goodput"] == 1.0


def test_options_and_their_errors() -> None:
    assert FailureModel.from_options() is None
    model = FailureModel.from_options(mtbf_h=100.0, repair_h=2.0, seed=4, checkpoint_h=0.5)
    assert model == FailureModel(rate=0.01, repair_s=7200.0, seed=4, checkpoint_s=1800.0)
    assert model.saved(4000.0) == 3600.0 and model.saved(1000.0) == 0.0
    assert math.isclose(FailureModel.from_options(rate=0.001).rate, 0.001)  # type: ignore[union-attr]
    with pytest.raises(Invalid, match="not both"):
        FailureModel.from_options(rate=0.1, mtbf_h=10.0)
    with pytest.raises(Invalid, match="--node-failure-rate: expected a rate > 0"):
        FailureModel.from_options(rate=0.0)
    with pytest.raises(Invalid, match="--checkpoint-interval needs"):
        FailureModel.from_options(checkpoint_h=1.0)
    with pytest.raises(Invalid, match="--node-repair"):
        FailureModel.from_options(rate=0.1, repair_h=-1.0)


def test_failures_keep_the_steps_on_whole_seconds_and_bounded() -> None:
    # A long queue behind FIFO's blocked head while other jobs run: the simulator wakes
    # a priority period after every step. Failure times of a whole second keep those
    # wakeups on at most a period's seconds of phases; with a failure's fraction of a
    # second, every failure started new ones and the steps per hour grew without bound.
    jobs = _trace(21, 200)
    model = FailureModel(rate=1 / 6, repair_s=HOUR, seed=2)
    result = _run("fifo", jobs, model)
    assert len(result.node_failures) > 50
    assert all(t == math.floor(t) for t, _ in result.node_failures)
    steps = [t for t, _ in result.busy]
    assert all(t == math.floor(t) for t in steps)
    period = scenario(
        Cluster.shared_pool(4, {"a": 1.0, "b": 1.0}), "fifo"
    ).config.priority_calc_period_s
    phases = {t % period for t in steps}
    assert len(phases) <= period  # 804 with fractional failure times
