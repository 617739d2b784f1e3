"""The usage ledger: decay, charging up the tenant tree, billing weights, resets, and a
real control plane that restarts without losing or double-charging usage."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest

from phalanx.auth import ADMIN
from phalanx.control.plane import ControlPlane
from phalanx.control.share_report import share_report
from phalanx.engine import EngineConfig, TenantUsage
from phalanx.engine.config import UsageConfig
from phalanx.engine.snapshot import export_state
from phalanx.model import ClusterQueue, JobSubmission, PodSet, RunSpec, Tenant
from phalanx.runtime.local import LocalRuntime
from phalanx.store import NewJob, Store
from phalanx.usage.ledger import ROOT, UsageLedger, allocated_tres
from tests.control.test_plane import ALICE, cluster, job, wait_for

HOUR = 3600.0
DAY = 86400.0


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    s = Store.open(None, state_dir=tmp_path / "state")
    yield s
    s.close()


def _jobs(store: Store, n: int, tenant: str = "nlp", user: str = "alice") -> list[int]:
    rows = [
        NewJob(
            name=f"j{i}",
            tenant=tenant,
            user=user,
            queue="default",
            cluster_queue="cq",
            priority_class=None,
            priority=None,
            gpus=1,
            submission={},
            submit_time=0.0,
        )
        for i in range(n)
    ]
    with store.begin() as tx:
        return tx.insert_jobs(rows)


def _ledger(**usage: object) -> UsageLedger:
    return UsageLedger(EngineConfig(usage=UsageConfig(**usage)))  # type: ignore[arg-type]


TREE = {
    "org": Tenant(name="org", allocation=1),
    "team-a": Tenant(name="team-a", parent="org", allocation=3),
    "nlp": Tenant(name="nlp", parent="team-a", allocation=1, users=["alice", "bob"]),
    "team-b": Tenant(name="team-b", parent="org", allocation=1),
}


def _start(
    ledger: UsageLedger, store: Store, job_id: int, gpus: int, since: float, cpus: int = 1
) -> None:
    with store.begin() as tx:
        ledger.start(
            tx,
            job_id,
            tenant="nlp",
            user="alice",
            alloc_tres={"cpu": cpus, "gres/gpu": gpus, "node": 1},
            weights=None,
            since=since,
        )


def _tick(ledger: UsageLedger, store: Store, now: float) -> list[TenantUsage]:
    with store.begin() as tx:
        return ledger.tick(tx, now, TREE)


def test_usage_is_charged_to_the_user_its_tenant_every_ancestor_and_the_root(
    store: Store,
) -> None:
    ledger = _ledger(half_life_s=0)
    [job_id] = _jobs(store, 1)
    _tick(ledger, store, 1000.0)
    _start(ledger, store, job_id, gpus=2, since=1000.0, cpus=4)
    events = _tick(ledger, store, 1000.0 + 1800)
    usage = ledger.usage()
    for key in [("nlp", "alice"), ("nlp", ""), ("team-a", ""), ("org", ""), ROOT]:
        assert usage[key] == (3600.0, 4 * 1800.0), key  # 2 GPUs x 1800 s; 4 CPUs billed
    assert ("team-b", "") not in usage
    assert {e.tenant: (e.usage, e.billing) for e in events} == {
        t: (1.0, 7200.0) for t in ("nlp", "team-a", "org")
    }
    # Stored in the same transactions: the rows and the job's charges.
    stored = {(r.tenant, r.user): r.gpu_seconds for r in store.usage()}
    assert stored[("org", "")] == 3600.0 and stored[ROOT] == 3600.0
    [charge] = store.job_charges([job_id])
    assert (charge.gpu_seconds, charge.billing_seconds) == (3600.0, 7200.0)
    assert charge.charged_until == 2800.0
    # Nothing changed: no events.
    assert _tick(ledger, store, 2800.0 + 1) == []


def test_decay_over_one_half_life_halves_usage(store: Store) -> None:
    ledger = _ledger(half_life_s=7 * DAY)
    [job_id] = _jobs(store, 1)
    _tick(ledger, store, 0.0)
    _start(ledger, store, job_id, gpus=1, since=0.0)
    ledger.stop(job_id, 300.0)
    _tick(ledger, store, 300.0)
    charged = ledger.usage()[("nlp", "")][0]
    assert charged == pytest.approx(300.0, rel=1e-3)
    _tick(ledger, store, 300.0 + 7 * DAY)
    after = ledger.usage()[("nlp", "")][0]
    # Slurm's 1 - 0.693/half-life per second: 0.50007 after one half-life (slurm.md 4.4).
    assert after / charged == pytest.approx(0.50007, abs=1e-5)
    _tick(ledger, store, 300.0 + 14 * DAY)
    assert ledger.usage()[("nlp", "")][0] / charged == pytest.approx(0.25007, abs=1e-5)
    # The job's own charge is not decayed.
    assert store.job_charges([job_id])[0].gpu_seconds == 300.0


def test_a_stopped_job_is_charged_up_to_its_end_and_then_no_more(store: Store) -> None:
    ledger = _ledger(half_life_s=0)
    [a, b] = _jobs(store, 2)
    _tick(ledger, store, 0.0)
    _start(ledger, store, a, gpus=1, since=0.0)
    _start(ledger, store, b, gpus=1, since=0.0)
    ledger.stop(a, 100.0)
    assert ledger.due(150.0)  # a stopped job is charged before the period is over
    _tick(ledger, store, 150.0)
    # Only the stopped job's stretch is charged off-period; b waits for the period.
    assert ledger.usage()[("nlp", "alice")][0] == 100.0
    _tick(ledger, store, 300.0)
    assert ledger.usage()[("nlp", "alice")][0] == 400.0
    assert [c.job_id for c in store.job_charges(running=True)] == [b]
    assert store.job_charges([a])[0].charged_until is None


def test_billing_weights_from_the_cluster_queue_annotation(store: Store) -> None:
    ledger = _ledger(half_life_s=0, tres_billing_weights="GRES/gpu=10")
    submission = JobSubmission(
        name="w",
        tenant="nlp",
        pod_sets=[
            PodSet(count=2, requests={"cpu": 2, "memory": "8Gi", "nvidia.com/gpu": 1}),
        ],
        run=RunSpec(command=["true"]),
    )
    tasks = [{"node": "n1", "podSet": "main"}, {"node": "n2", "podSet": "main"}]
    alloc = allocated_tres(submission, tasks)
    assert alloc == {"cpu": 4, "mem": 16384, "gres/gpu": 2, "node": 2}
    cq = ClusterQueue.model_validate(
        {
            "name": "cq",
            "annotations": {
                "slurm.phalanx.io/tres-billing-weights": "CPU=1.0,Mem=0.25G,GRES/gpu=2"
            },
            "resourceGroups": [],
        }
    )
    [with_cq, without] = _jobs(store, 2)
    for job_id, queue in ((with_cq, cq), (without, None)):
        row = store.get_job(job_id)
        assert row is not None
        row = type(row)(
            **{
                **{f: getattr(row, f) for f in row.__dataclass_fields__},
                "submission": submission.to_dict(),
                "assignment": {"tasks": tasks},
            }
        )
        with store.begin() as tx:
            ledger.start_job(tx, row, queue, 0.0)
    charges = {c.job_id: c for c in store.job_charges()}
    # 4 CPUs x 1 + 16 GiB x 0.25 + 2 GPUs x 2, per second; the default weights bill GPUs x 10.
    assert charges[with_cq].billing == 12.0
    assert charges[without].billing == 20.0
    assert charges[with_cq].alloc_tres == alloc


def test_empty_billing_weights_bill_cpus_and_bad_ones_are_refused() -> None:
    from phalanx.usage.ledger import billing_weights

    assert billing_weights("") == {"cpu": 1.0}
    with pytest.raises(ValueError, match=r"metadata.annotations\[slurm.phalanx.io/tres-billing"):
        ClusterQueue.model_validate(
            {
                "name": "gpu",
                "annotations": {"slurm.phalanx.io/tres-billing-weights": "CPU"},
                "resourceGroups": [],
            }
        )
    with pytest.raises(ValueError, match="TRESBillingWeights"):
        UsageConfig(tres_billing_weights="gpu")
    with pytest.raises(ValueError, match="reset period"):
        UsageConfig(reset_period="HOURLY")


def test_daily_reset_clears_usage_at_midnight(store: Store) -> None:
    ledger = _ledger(half_life_s=0, reset_period="DAILY")
    [job_id] = _jobs(store, 1)
    evening = datetime(2026, 12, 3, 22, 0).timestamp()
    _tick(ledger, store, evening)
    _start(ledger, store, job_id, gpus=1, since=evening)
    _tick(ledger, store, evening + HOUR)
    assert ledger.usage()[ROOT][0] == HOUR
    # Past midnight: cleared first, then the new stretch is charged.
    events = _tick(ledger, store, evening + 3 * HOUR)
    assert ledger.usage()[ROOT][0] == 2 * HOUR
    assert [(e.tenant, e.usage) for e in events if e.tenant == "nlp"] == [("nlp", 2.0)]
    assert store.job_charges([job_id])[0].gpu_seconds == 3 * HOUR  # the job's record stays


def test_reset_now_clears_usage_when_the_ledger_is_loaded(store: Store) -> None:
    ledger = _ledger(half_life_s=0)
    [job_id] = _jobs(store, 1)
    _tick(ledger, store, 0.0)
    _start(ledger, store, job_id, gpus=1, since=0.0)
    _tick(ledger, store, 600.0)
    again = _ledger(half_life_s=0, reset_period="NOW")
    again.load(store.usage(), store.job_charges(running=True), 700.0)
    assert again.usage()[ROOT] == (0.0, 0.0)
    assert again.running() == {job_id}


def test_share_report_fair_tree_and_classic() -> None:
    usage = {
        ("nlp", "alice"): (HOUR, 100.0),
        ("nlp", ""): (HOUR, 100.0),
        ("team-a", ""): (HOUR, 100.0),
        ("org", ""): (HOUR, 100.0),
        ROOT: (HOUR, 100.0),
    }
    rows = share_report(TREE, usage)
    order = [(r["account"], r["user"], r["depth"]) for r in rows]
    assert order == [
        ("root", None, 0),
        ("org", None, 1),
        ("team-a", None, 2),
        ("nlp", None, 3),
        ("nlp", "alice", 4),
        ("nlp", "bob", 4),
        ("team-b", None, 2),
    ]
    by = {(r["account"], r["user"]): r for r in rows}
    assert by[("team-a", None)]["norm_shares"] == 0.75 and by[("team-a", None)]["raw_shares"] == 3
    assert by[("nlp", "alice")]["raw_usage"] == 100.0
    assert by[("nlp", "alice")]["gpu_hours"] == 1.0
    assert by[("nlp", "alice")]["effective_usage"] == 1.0  # all of its parent's
    # Fair Tree: bob has shares and no usage (level fair-share inf) and ranks first.
    assert by[("nlp", "bob")]["level_fs"] == "inf"
    assert by[("nlp", "bob")]["fair_share"] == 1.0 and by[("nlp", "alice")]["fair_share"] == 0.5
    assert by[("team-a", None)]["fair_share"] is None
    classic = {
        (r["account"], r["user"]): r for r in share_report(TREE, usage, fair_tree_mode=False)
    }
    # alice: S = 1 * 0.75 * 1 * 0.5 = 0.375; UE = 1 (all usage is hers): 2^(-1/0.375).
    assert classic[("nlp", "alice")]["norm_shares"] == pytest.approx(0.375)
    assert classic[("nlp", "alice")]["fair_share"] == pytest.approx(2 ** (-1 / 0.375))
    assert classic[("nlp", "alice")]["level_fs"] is None


# ---------------------------------------------------------------------- a real control plane


class _Clock:
    """Wall time plus an offset the test moves forward (the local supervisors use wall time)."""

    def __init__(self) -> None:
        self.offset = 0.0

    def __call__(self) -> float:
        return time.time() + self.offset


def _plane(state: Path, clock: _Clock, database: str | None) -> ControlPlane:
    store = Store.open(database, state_dir=state)
    config = EngineConfig(usage=UsageConfig(half_life_s=0), priority_calc_period_s=300.0)
    return ControlPlane(
        store,
        LocalRuntime(state),
        state_dir=state,
        config=config,
        clock=clock,
        poll_interval_s=0.01,
    )


def _charged(plane: ControlPlane, job_id: int) -> float:
    [charge] = plane.store.job_charges([job_id])
    return charge.gpu_seconds


def _wait_charged(plane: ControlPlane, job_id: int, at_least: float) -> float:
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        charges = plane.store.job_charges([job_id])
        if charges and charges[0].gpu_seconds >= at_least:
            return charges[0].gpu_seconds
        time.sleep(0.02)
    raise AssertionError(f"job {job_id} was not charged {at_least} GPU-seconds")


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_restart_keeps_the_ledger_and_charges_nothing_twice(
    tmp_path: Path, backend: str, database: str | None
) -> None:
    state = tmp_path / "state"
    clock = _Clock()
    first = _plane(state, clock, database)
    first.start()
    first.apply(ADMIN, [*cluster(), Tenant(name="team-a", allocation=2, users=["alice"])])
    [job_id] = first.submit(ALICE, [job(["sleep", "60"], gpus=2, tmp=tmp_path)])
    wait_for(first, job_id, "RUNNING")
    clock.offset += 600
    charged = _wait_charged(first, job_id, 2 * 600)
    assert charged == pytest.approx(2 * 600, abs=2 * 5)
    # The plane goes away (the job keeps running) and comes back.
    first.stop()
    first.store.close()
    second = _plane(state, clock, database)
    second.start()
    try:
        assert second.usage.running() == {job_id}
        assert second.usage.usage()[("team-a", "")][0] == pytest.approx(charged)
        # The rebuilt engine has the tenant's figures: GPU-hours and billing-seconds.
        usage, _allocation, billing = export_state(second.engine)["shares"]["team-a"]
        assert usage == pytest.approx(charged / HOUR) and billing == pytest.approx(charged / 2)
        clock.offset += 600
        total = _wait_charged(second, job_id, charged + 2 * 600 - 2 * 5)
        # One more period charged, not the stretch before the restart again.
        assert total == pytest.approx(charged + 2 * 600, abs=2 * 5)
        ledger = second.usage.usage()
        assert ledger[("team-a", "alice")][0] == pytest.approx(total)
        assert ledger[ROOT][0] == pytest.approx(total)
        second.cancel(ADMIN, job_id)
        wait_for(second, job_id, "CANCELLED")
        deadline = time.monotonic() + 10
        while second.store.job_charges(running=True) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert second.store.job_charges(running=True) == []
        report = {(r["account"], r["user"]): r for r in second.usage_report()["associations"]}
        assert report[("team-a", "alice")]["gpu_hours"] == pytest.approx(
            _charged(second, job_id) / HOUR
        )
    finally:
        second.stop()
        second.runtime.close()
        second.store.close()


def test_a_job_that_stops_and_starts_again_before_a_tick_loses_no_stretch(store: Store) -> None:
    ledger = _ledger(half_life_s=0)
    [job_id] = _jobs(store, 1)
    _tick(ledger, store, 0.0)
    _start(ledger, store, job_id, gpus=1, since=0.0)
    ledger.stop(job_id, 100.0)  # requeued ...
    _start(ledger, store, job_id, gpus=1, since=120.0)  # ... and running again
    _tick(ledger, store, 300.0)
    assert ledger.usage()[ROOT][0] == 100.0 + 180.0
    [charge] = store.job_charges([job_id])
    assert (charge.gpu_seconds, charge.charged_until) == (280.0, 300.0)


def test_a_gpu_share_is_charged_its_fraction_of_a_gpu(store: Store) -> None:
    submission = JobSubmission(
        name="share",
        tenant="nlp",
        pod_sets=[PodSet(count=2, requests={"nvidia.com/gpu": "0.25", "cpu": 1})],
        run=RunSpec(command=["true"]),
    )
    alloc = allocated_tres(submission, [{"podSet": "main", "node": "n"}] * 2)
    assert alloc["gres/gpu-milli"] == 500 and "gres/gpu" not in alloc
    ledger = _ledger(half_life_s=0)
    [job_id] = _jobs(store, 1)
    _tick(ledger, store, 0.0)
    with store.begin() as tx:
        ledger.start(
            tx, job_id, tenant="nlp", user="alice", alloc_tres=alloc, weights=None, since=0.0
        )
    _tick(ledger, store, 300.0)
    assert ledger.usage()[("nlp", "alice")][0] == 150.0  # half a GPU for 300 s
