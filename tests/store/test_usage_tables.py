"""The usage ledger's tables on SQLite and PostgreSQL: upserts, reads, and the job's cascade."""

from __future__ import annotations

from collections.abc import Callable

from sqlalchemy import delete

from phalanx.store import JobChargeRow, NewJob, Store, UsageRow
from phalanx.store.schema import jobs


def test_usage_rows_are_created_then_replaced(store: Store) -> None:
    first = [
        UsageRow("", "", 10.0, 20.0, 100.0, 0.0),
        UsageRow("team-a", "", 10.0, 20.0, 100.0, 0.0),
        UsageRow("team-a", "alice", 10.0, 20.0, 100.0, 0.0),
    ]
    with store.begin() as tx:
        tx.put_usage(first)
    assert store.usage() == first
    again = [
        UsageRow("", "", 5.0, 10.0, 200.0, 150.0),
        UsageRow("team-b", "", 1.0, 2.0, 200.0, 150.0),
    ]
    with store.begin() as tx:
        tx.put_usage(again)
    rows = {(r.tenant, r.user): r for r in store.usage()}
    assert rows[("", "")] == again[0] and rows[("team-b", "")] == again[1]
    assert rows[("team-a", "alice")] == first[2]


def test_job_charges_round_trip_and_go_with_their_job(
    store: Store, new_job: Callable[..., NewJob]
) -> None:
    with store.begin() as tx:
        a, b = tx.insert_jobs([new_job(0), new_job(1)])
    alloc = {"cpu": 4, "mem": 16384, "gres/gpu": 2, "node": 1}
    with store.begin() as tx:
        tx.put_job_charges(
            [
                JobChargeRow(a, "team-a", "alice", 2, 12.0, alloc, 0.0, 0.0, 50.0),
                JobChargeRow(b, "team-a", "alice", 2, 12.0, alloc, 0.0, 0.0, 50.0),
            ],
            new=True,
        )
    with store.begin() as tx:
        tx.put_job_charges(
            [JobChargeRow(a, "team-a", "alice", 2, 12.0, alloc, 200.0, 1200.0, None)], new=False
        )
        assert tx.get_job_charge(a) is not None and tx.get_job_charge(999) is None
    [charge] = store.job_charges([a])
    assert (charge.gpu_seconds, charge.billing_seconds, charge.charged_until) == (
        200.0,
        1200.0,
        None,
    )
    assert charge.alloc_tres == alloc
    assert [c.job_id for c in store.job_charges(running=True)] == [b]
    assert [c.job_id for c in store.job_charges()] == [a, b]
    with store.begin() as tx:
        tx.connection.execute(delete(jobs).where(jobs.c.id == b))
    assert [c.job_id for c in store.job_charges()] == [a]
