"""The simulator: trace files, the FIFO/SJF fidelity rules against an independent
implementation, presets end to end, and ``phalanx sim``'s outputs and errors."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest
from tests.shared import needs_shared, shared_path
from tests.sim.fifo_reference import simulate as reference

from phalanx.errors import Invalid
from phalanx.sim.metrics import jain, percentile
from phalanx.sim.setup import Cluster, scenario
from phalanx.sim.simulator import Simulator
from phalanx.sim.trace import TimeLimitRule, TraceJob, load_generic

PHILLY = shared_path("traces", "philly")
BIN = Path(sys.executable).parent


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_the_generic_format_reads_csv_and_jsonl(tmp_path: Path) -> None:
    csv_trace = _write(
        tmp_path,
        "t.csv",
        "submit,duration,gpus,tenant,time_limit\n"
        "2017-10-01 00:00:10,60,8,a,\n2017-10-01 00:00:00,30,1,b,120\n",
    )
    jobs = load_generic(csv_trace)
    assert [(j.id, j.submit, j.duration, j.gpus, j.tenant, j.time_limit) for j in jobs] == [
        (2, 0.0, 30.0, 1, "b", 120.0),
        (1, 10.0, 60.0, 8, "a", None),
    ]
    lines = (
        '{"id": 7, "submit": 100, "duration": 5, "gpus": 2}\n\n'
        '{"id": 9, "submit": 90, "duration": 1, "gpus": 0}\n'
    )
    jsonl = load_generic(_write(tmp_path, "t.jsonl", lines))
    assert [(j.id, j.submit, j.tenant) for j in jsonl] == [
        (9, 0.0, "default"),
        (7, 10.0, "default"),
    ]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("submit,gpus\n1,1\n", r"t\.csv:1: the header lacks the column\(s\) duration"),
        ("submit,duration,gpus\n1,0,1\n", r"t\.csv:2: duration: expected a number of seconds > 0"),
        ("submit,duration,gpus\n1,5,-1\n", r"t\.csv:2: gpus: expected an integer >= 0, got '-1'"),
        ("submit,duration,gpus\nsoon,5,1\n", r"t\.csv:2: submit: expected seconds or an ISO"),
        ("id,submit,duration,gpus\n3,1,5,1\n3,2,5,1\n", r"t\.csv:3: id: 3 was used on line 2"),
    ],
)
def test_a_bad_row_is_one_error_naming_file_line_and_field(
    tmp_path: Path, text: str, message: str
) -> None:
    with pytest.raises(Invalid, match=message):
        load_generic(_write(tmp_path, "t.csv", text))


def test_time_limit_rules() -> None:
    assert TimeLimitRule.parse("ceil:3600").limit(1.0) == 3600
    assert TimeLimitRule.parse("ceil:3600").limit(3601.0) == 7200
    assert TimeLimitRule.parse("scale:2").limit(50.0) == 100.0
    assert TimeLimitRule.parse("exact").limit(50.0) == 50.0
    job = TraceJob(1, 0.0, 10.0, 1, time_limit=5.0)
    assert TimeLimitRule().apply([job]) == [job]  # a trace's own limit stays
    with pytest.raises(Invalid, match="--time-limit: expected ceil:SECONDS"):
        TimeLimitRule.parse("ceil:0")


def test_percentiles_and_jain() -> None:
    assert percentile([5, 1, 3, 2, 4], 50) == 3
    assert percentile([5, 1, 3, 2, 4], 99) == 5
    assert percentile(list(range(1, 101)), 95) == 95
    assert jain([1.0, 1.0, 1.0]) == 1.0
    assert jain([1.0, 0.0, 0.0, 0.0]) == 0.25


def _random_trace(seed: int, count: int, tenants: tuple[str, ...]) -> list[TraceJob]:
    rng = random.Random(seed)
    t = 0.0
    jobs = []
    for i in range(1, count + 1):
        t += rng.choice((0.0, 0.0, rng.expovariate(1 / 40)))  # ties on purpose
        gpus = rng.choice((1, 1, 1, 2, 4, 8, 12, 16, 32))
        jobs.append(TraceJob(i, round(t), float(rng.randint(1, 600)), gpus, rng.choice(tenants)))
    return jobs


@pytest.mark.parametrize("policy", ["fifo", "sjf"])
def test_fifo_and_sjf_agree_with_an_independent_implementation(policy: str) -> None:
    pools = {"a": 6, "b": 4}  # every job fits its pool (32 GPUs at most)
    jobs = TimeLimitRule().apply(_random_trace(7, 1500, tuple(pools)))
    result = Simulator(scenario(Cluster.isolated_pools(pools), policy), jobs).run()
    engine = {o.job.id: (o.start, o.end) for o in result.outcomes}
    expected: dict[int, tuple[float, float]] = {}
    for pool, nodes in pools.items():
        mine = [(j.id, j.submit, j.duration, j.gpus) for j in jobs if j.tenant == pool]
        expected.update(reference(mine, nodes, sjf=policy == "sjf"))
    assert engine == expected
    waits = [s - j.submit for j in jobs for s in [engine[j.id][0]]]
    assert max(waits) > 0  # the trace queues: the rules are exercised


@needs_shared("traces", "philly")
def test_fifo_on_the_first_20000_helios_jobs_agrees_with_the_independent_implementation() -> None:
    from phalanx.sim.traces.philly import HELIOS_WINDOW, load_jobs, load_vc_nodes

    vcs = load_vc_nodes(PHILLY / "philly_vc_nodes.csv")
    jobs = load_jobs(PHILLY / "philly_jobs_pollux.csv", window=HELIOS_WINDOW, vcs=vcs)[:20000]
    jobs = TimeLimitRule().apply(jobs)
    result = Simulator(scenario(Cluster.isolated_pools(vcs), "fifo"), jobs).run()
    engine = {o.job.id: o.start for o in result.outcomes}
    for vc, nodes in vcs.items():
        mine = [(j.id, j.submit, j.duration, j.gpus) for j in jobs if j.tenant == vc]
        for job_id, (start, _) in reference(mine, nodes).items():
            assert engine[job_id] == start, (vc, job_id)


@pytest.mark.parametrize("policy", ["phalanx", "slurm", "kueue"])
def test_every_preset_runs_a_shared_cluster_to_the_end(policy: str) -> None:
    jobs = TimeLimitRule().apply(_random_trace(3, 400, ("a", "b", "c")))
    cluster = Cluster.shared_pool(4, {"a": 2.0, "b": 1.0, "c": 1.0})
    result = Simulator(scenario(cluster, policy), jobs).run()
    assert all(o.end is not None and o.state == "COMPLETED" for o in result.outcomes)
    for o in result.outcomes:
        assert o.start is not None and o.start >= o.job.submit
    # Never more GPUs in use than the cluster has.
    assert max(used for _, used in result.busy) <= cluster.gpus


def test_phalanx_sim_writes_a_summary_and_a_job_table(tmp_path: Path) -> None:
    trace = _write(
        tmp_path,
        "t.csv",
        "submit,duration,gpus,tenant\n0,100,8,a\n0,100,8,b\n10,50,4,a\n20,10,1,b\n",
    )
    out = tmp_path / "out"
    done = subprocess.run(
        [
            *(str(BIN / "phalanx"), "sim", "--trace", str(trace), "--cluster", "shared:1"),
            *("--policy", "fifo,phalanx", "--out", str(out)),
        ],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    summary = json.loads((out / "summary.json").read_text())
    fifo = summary["policies"]["fifo"]
    # One node: a runs 0-100, b 100-200, then 4 GPUs 200-250 and 1 GPU 200-210.
    assert fifo["jct_s"]["mean"] == pytest.approx((100 + 200 + 240 + 190) / 4)
    assert fifo["queueing_delay_s"]["p99"] == 190.0
    rows = (out / "jobs-fifo.csv").read_text().splitlines()
    assert rows[0].startswith("id,tenant,gpus,submit") and len(rows) == 5
    assert "phalanx" in summary["policies"] and "mean JCT" in done.stdout
    for plot in ("utilization.png", "queue.png", "waits.png", "shares.png"):
        assert (out / plot).read_bytes().startswith(b"\x89PNG"), plot
    page = (out / "report.html").read_text()
    assert page.count("data:image/png;base64,") == 4 and "<td>fifo</td>" in page


def test_phalanx_sim_names_a_bad_argument(tmp_path: Path) -> None:
    done = subprocess.run(
        [
            *(str(BIN / "phalanx"), "sim", "--trace", "nowhere", "--cluster", "shared:1"),
            *("--out", str(tmp_path)),
        ],
        capture_output=True,
        text=True,
    )
    assert done.returncode != 0
    assert "--trace: 'nowhere' is not known" in done.stderr
    assert "Traceback" not in done.stderr


def test_fairness_is_taken_hour_by_hour_among_the_tenants_with_jobs() -> None:
    from phalanx.sim.metrics import hourly_jain
    from phalanx.sim.simulator import JobOutcome

    def ran(job_id: int, tenant: str, submit: float, start: float, hours: float) -> JobOutcome:
        job = TraceJob(job_id, submit, hours * 3600, 8, tenant)
        return JobOutcome(job, start=start, end=start + hours * 3600, state="COMPLETED")

    shares = {"a": 1.0, "b": 1.0}
    # Both wait from 0; a runs first hour, b the second: each hour only one is served.
    unfair = [ran(1, "a", 0, 0, 1), ran(2, "b", 0, 3600, 1)]
    assert hourly_jain(unfair, shares) == pytest.approx(0.5)
    # Both served side by side: equal shares every hour.
    fair = [ran(1, "a", 0, 0, 2), ran(2, "b", 0, 0, 2)]
    assert hourly_jain(fair, shares) == pytest.approx(1.0)
    # A tenant alone in an hour does not count.
    assert hourly_jain([ran(1, "a", 0, 0, 3)], shares) == 1.0


def test_fairness_entitlements_are_capped_by_what_tenants_asked_for() -> None:
    from phalanx.sim.metrics import hourly_jain
    from phalanx.sim.simulator import JobOutcome

    def ran(job_id: int, tenant: str, gpus: int, start: float) -> JobOutcome:
        job = TraceJob(job_id, 0.0, 3600.0, gpus, tenant)
        return JobOutcome(job, start=start, end=start + 3600.0, state="COMPLETED")

    shares = {"a": 1.0, "b": 1.0}
    # b asked for one GPU and got it; a used the other 15 of 16: fair given demand.
    modest = [ran(1, "a", 15, 0), ran(2, "b", 1, 0)]
    assert hourly_jain(modest, shares, gpus=16) == pytest.approx(1.0)
    assert hourly_jain(modest, shares) < 0.6  # plain shares count b as short-changed
    # Both wanted the 8 GPUs for the first hour; a got them all, b waited an hour.
    starved = [ran(1, "a", 8, 0), ran(2, "b", 8, 3600)]
    assert hourly_jain(starved, shares, gpus=8) == pytest.approx(0.5)
    # Weighted: a is entitled to three quarters of 8 GPUs, and got them.
    weighted = [ran(1, "a", 6, 0), ran(2, "b", 2, 0), ran(3, "b", 8, 3600)]
    assert hourly_jain(weighted, {"a": 3.0, "b": 1.0}, gpus=8) == pytest.approx(1.0)


def test_fragmentation_counts_free_gpus_on_partly_used_nodes_while_jobs_wait() -> None:
    from phalanx.sim.metrics import summarize

    cluster = Cluster.shared_pool(2, {"a": 1.0})
    # 4 GPUs on one node for 100 s; a 2-node job waits for both whole nodes meanwhile.
    jobs = [TraceJob(1, 0.0, 100.0, 4, "a"), TraceJob(2, 1.0, 50.0, 16, "a")]
    result = Simulator(scenario(cluster, "fifo"), jobs).run()
    assert [o.start for o in result.outcomes] == [0.0, 100.0]
    numbers = summarize(result, cluster.shares)
    # From 1 to 100: 4 of 16 GPUs free on the partly used node, 12 of 16 free in all.
    assert numbers["fragmentation"] == 0.25
    assert numbers["idle_while_waiting"] == 0.75
